"""Read-only commands over an inventory (plan, doctor, bench, verify): connect, run the preflight, call a function
per host; a host that cannot be read is a HostFailure, and exit_status maps the hosts' results to the exit status
every command shares (v100kit/cli.py's docstring says it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import ConnectError, NoGroupError, PyinfraError
from pyinfra.api.state import BaseStateCallback
from pyinfra.context import ctx_host, ctx_state
from pyinfra_cli.inventory import make_inventory

from roles.preflight import preflight
from roles.settings import SettingsError
from roles.ssh import tcp_nodelay

ROOT = Path(__file__).resolve().parents[1]

#: The exit statuses of every subcommand (v100kit/cli.py's docstring and the README's "Exit status" say them).
OK, FINDING, NOT_CHECKED, INTERRUPTED = 0, 1, 2, 130
#: HostFailure.error: no connection; the host's settings refused by the preflight; a command or fact that failed
#: on a connected host (the host could not be planned, diagnosed, benched or checked)
UNREACHABLE, REFUSED, FAILED = "unreachable", "refused", "failed"


@dataclass(frozen=True)
class HostFailure:
    """Why one host has no result: `error` UNREACHABLE (`cause`: the connector's message, e.g. "Could not connect
    (... Unable to connect to port 22 on 10.0.0.5)"), REFUSED (`cause`: the preflight's message, `problems`: its
    lines, each naming the setting and the fix) or FAILED (`cause`: the error's message)."""

    error: str
    cause: str
    problems: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.error}: {self.cause}"

    def as_json(self) -> dict:
        """The one --json shape of a host without a result, in plan, doctor and bench: {"error", "cause"} and, for
        a refusal, "problems"."""
        problems = {"problems": list(self.problems)} if self.problems else {}
        return {"error": self.error, "cause": self.cause, **problems}


def exit_status(results: dict, finding=lambda result: False) -> int:
    """The exit status of a command over hosts ({host: its result or a HostFailure}): NOT_CHECKED (2) when any host
    was not reached or failed (it was not checked: nothing can be said of it), else FINDING (1) when any host's
    settings were refused or `finding(result)` holds for any host's result, else OK (0)."""
    failures = [r for r in results.values() if isinstance(r, HostFailure)]
    if any(f.error != REFUSED for f in failures):
        return NOT_CHECKED
    if failures or any(finding(r) for r in results.values() if not isinstance(r, HostFailure)):
        return FINDING
    return OK


def json_results(results: dict, as_json=lambda result: result) -> dict:
    """{host: as_json(its result), or its HostFailure's as_json()}: the hosts of a --json document."""
    return {h: r.as_json() if isinstance(r, HostFailure) else as_json(r) for h, r in results.items()}


class UnknownHost(ValueError):
    """A --limit item that selects no host of the inventory, or an inventory file that does not exist or fails to run."""


def inventory_path(inventory: str, cwd: Path) -> str:
    """`inventory` as pyinfra should read it once the command has moved to the project root: a file path (it ends in
    .py or names a directory) resolved against the caller's working directory `cwd`; host names (`@local`,
    `gpu-01,gpu-02`) as given. Raises UnknownHost for a file that does not exist (a wrong path must not read as
    "no host, nothing wrong")."""
    if not (inventory.endswith(".py") or "/" in inventory):
        return inventory
    path = (cwd / inventory).expanduser()
    if not path.is_file():
        raise UnknownHost(f"inventory {inventory}: no such file ({path})")
    return str(path.resolve())


def load_inventory(inventory_file: str, limit: list[str] | None):
    """(pyinfra's Inventory of `inventory_file`, the hosts `limit` selects in inventory order: all without one),
    `inventory_file` a path from inventory_path or host names, read as pyinfra's CLI reads it: from the project
    root, where group_data/ is (the process moves there). A `limit` item selects as pyinfra's --limit does: a group
    name, else host names matching it as a glob (fnmatch). Raises UnknownHost for an item that selects nothing (a
    typo must not read as "no host, nothing wrong") and for an inventory file that fails to run."""
    os.chdir(ROOT)  # group_data/ is found relative to the project, as for pyinfra's CLI
    tcp_nodelay()  # as config.py does for pyinfra's CLI
    try:
        with ctx_state.use(State()):  # inventory files are executed in a pyinfra context
            inventory = make_inventory(inventory_file, cwd=str(ROOT))
    except Exception as e:  # the user's Python (pyinfra wraps its errors, and its wrapper's str() can fail)
        cause = getattr(e, "exception", e)
        raise UnknownHost(f"inventory {inventory_file}: {type(cause).__name__}: {cause}: fix the file "
                          "(`python3 FILE` shows where)") from None
    hosts = list(inventory)
    selected = set()
    for pattern in limit or ():  # pyinfra_cli.cli._get_inventory_pattern_matches's rule; that one is private and
        # logs its own warning where this raises
        try:
            matches = inventory.get_group(pattern)
        except NoGroupError:
            matches = [h for h in hosts if fnmatch(h.name, pattern)]
        if not matches:
            groups = sorted(g for g in inventory.groups if inventory.groups[g])
            raise UnknownHost(f"--limit {pattern}: no such host in {inventory_file}, nor a group "
                              f"(its hosts: {', '.join(h.name for h in hosts) or 'none'}; "
                              f"its groups: {', '.join(groups) or 'none'})")
        selected.update(matches)
    return inventory, [h for h in hosts if not limit or h in selected]


class _ConnectErrors(BaseStateCallback):
    """pyinfra's host_connect_error callback: {host name: the connector's message} (pyinfra itself only logs it)."""

    def __init__(self) -> None:
        self.causes: dict[str, str] = {}

    def host_connect_error(self, state, host, error) -> None:  # called as handler.host_connect_error(state, ...)
        self.causes[host.name] = str(error.args[0] if error.args else error) or type(error).__name__


def failure(e: PyinfraError) -> HostFailure:
    """The HostFailure of an error raised while a connected host was read."""
    if isinstance(e, SettingsError):
        return HostFailure(REFUSED, str(e), tuple(e.problems))
    return HostFailure(UNREACHABLE if isinstance(e, ConnectError) else FAILED, str(e) or type(e).__name__)


def for_each_host(inventory_file: str, limit: list[str] | None, fn, diagnosing: bool = False) -> dict:
    """{host name: fn(host, preflight(host, diagnosing, deploying=False)), or a HostFailure when the host cannot be
    reached, is refused or fails}. Read-only: only facts are gathered. Raises UnknownHost for a `limit` name the
    inventory lacks (a typo must not read as "every host healthy")."""
    inventory, selected = load_inventory(inventory_path(inventory_file, Path.cwd()), limit)
    state = State(inventory, Config())
    state.init(inventory, Config())
    errors = _ConnectErrors()
    state.add_callback_handler(errors)
    results: dict = {}
    with ctx_state.use(state):
        try:
            connect_all(state)
        except PyinfraError:  # pyinfra gives up when no host at all answers: each is then unreachable
            pass
        for host in selected:
            if host not in state.activated_hosts:
                results[host.name] = HostFailure(UNREACHABLE, errors.causes.get(host.name, "cannot connect"))
                continue
            with ctx_host.use(host):
                try:
                    results[host.name] = fn(host, preflight(host, diagnosing, deploying=False))
                except PyinfraError as e:
                    results[host.name] = failure(e)
    return results
