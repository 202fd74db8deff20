"""v100kit verify INVENTORY [--limit HOST ...] [--junitxml FILE] [--expect-driver-version V] [-- PYTEST ARGS]:
run the host suite (pytest-testinfra, v100kit/verify/suite) against every host of a pyinfra inventory, read-only.

Each host's expectations come from its settings through the deploy's own preflight (driver pin, compute capability,
CUDA toolkits, service user, instances and ports). GPU checks run where a GPU is visible and skip, saying why,
elsewhere; checks that need systemd or dpkg/apt skip, saying so, on a host without them. Nothing on a host changes:
only read-only facts are gathered, and every command the checks send passes v100kit/verify/readonly.py.
Exit status: 0 every check passed or skipped, 1 a check failed or a host's settings refused, 2 a host not reached
or not checked, or the run itself could not proceed (a bad argument, pytest's usage and internal errors), 130
interrupted, 143 terminated (SIGTERM) (v100kit/cli.py: the convention every command shares).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

SUITE = Path(__file__).resolve().parent / "suite"


def pytest_args(args: argparse.Namespace) -> list[str]:
    """The pytest command line for `args` (the inventory made absolute: the run changes to the project root)."""
    inventory = args.inventory if os.path.isabs(args.inventory) or not Path(args.inventory).exists() \
        else str(Path(args.inventory).resolve())
    out = [str(SUITE), "--inventory", inventory, "-p", "no:cacheprovider", "--import-mode=importlib", "-rfEs",
           "-o", "addopts=", "-o", "testpaths=", "--no-header",
           "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    for h in args.limit or []:
        out += ["--limit", h]
    if args.expect_driver_version:
        out += ["--expect-driver-version", args.expect_driver_version]
    if args.junitxml:
        out += [f"--junitxml={Path(args.junitxml).resolve()}"]
    return out + list(args.passthrough or [])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inventory", help="pyinfra inventory file, e.g. inventory/lab.py")
    p.add_argument("--limit", action="append", metavar="HOST", help="only this host (repeatable)")
    p.add_argument("--junitxml", metavar="FILE", help="also write every check's result as JUnit XML")
    p.add_argument("--expect-driver-version", metavar="VERSION",
                   help="a machine whose driver did not come from v100kit: the driver version it must run (its "
                        "packages are then not checked against the pin)")
    p.set_defaults(passthrough=[])  # what follows `--` on the command line (v100kit/cli.py main), e.g. -- -v -k gpu


def run(args: argparse.Namespace) -> int:
    """Run the suite in this process; returns the exit status (the module's docstring) from pytest's and the hosts
    the suite could not reach. Raises UnknownHost for an inventory that does not exist or fails to run and a --limit
    that selects no host (before pytest runs); KeyboardInterrupt when pytest was interrupted (pytest returns 2),
    v100kit/cli.py Terminated when by SIGTERM."""
    import pytest

    from v100kit.hosts import FINDING, NOT_CHECKED, OK, HostFailure, exit_status, inventory_path, load_inventory

    class Outcome:
        """The hosts without a Target (the suite's `target` parameters) and whether the run was interrupted."""

        def __init__(self) -> None:
            self.failures: list[HostFailure] = []
            self.interrupted: BaseException | None = None

        @pytest.hookimpl(tryfirst=True)  # before -k or -m deselect items: a host not reached counts still
        def pytest_collection_modifyitems(self, items) -> None:
            params = (getattr(item, "callspec", None) for item in items)
            self.failures = list(dict.fromkeys(t for c in params if c is not None
                                               for t in [c.params.get("target")] if isinstance(t, HostFailure)))

        def pytest_keyboard_interrupt(self, excinfo) -> None:  # pytest.exit() too
            # not pytest's own Interrupted: "N errors during collection" (a collection error is exit 2 below)
            if not isinstance(excinfo.value, pytest.Session.Interrupted):
                self.interrupted = excinfo.value

    argv = pytest_args(args)  # before load_inventory moves to the project root: the inventory is read from here
    # a missing inventory or a --limit that selects nothing raises UnknownHost here (v100kit/cli.py: exit 2, one
    # line), as in plan and doctor, rather than as a collection error inside the suite
    load_inventory(inventory_path(args.inventory, Path.cwd()), args.limit)
    outcome = Outcome()
    status = int(pytest.main(argv, plugins=[outcome]))
    if outcome.interrupted is not None:
        from v100kit.cli import Terminated

        raise Terminated if isinstance(outcome.interrupted, Terminated) else KeyboardInterrupt
    if status not in (OK, FINDING):  # pytest's 2-5: interrupted by errors, internal or usage error, nothing to run
        return NOT_CHECKED
    # a host not reached is 2 (its checks failed: pytest's 1), a refused one 1, as for the other commands
    return exit_status({**{str(i): f for i, f in enumerate(outcome.failures)}, "checks": status},
                       lambda pytest_status: pytest_status == FINDING)
