"""The `v100kit` command: `v100kit plan|doctor|bench INVENTORY [--json] [--limit HOST]`, `v100kit verify INVENTORY`,
`v100kit offline fill|serve|deploy DIR ...` and `v100kit lab ACTION`.

Every subcommand is a module with `add_arguments(parser)` and `run(args) -> exit status`; the skeleton here gives
the commands that read an inventory the same arguments and the same error handling.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from v100kit.hosts import UnknownHost

#: subcommand -> (module, one-line help)
COMMANDS = {
    "plan": ("v100kit.plan", "what each host would get (driver, CUDA, builds, memory plans); changes nothing"),
    "doctor": ("v100kit.doctor", "diagnose hosts against their pinned state; changes nothing"),
    "bench": ("v100kit.bench", "measure what each instance serves (residency, TTFT, tokens/s, roofline); "
                               "--sweep stops services"),
    "verify": ("v100kit.verify", "run the host checks (pytest-testinfra) against every host; changes nothing"),
    "offline": ("v100kit.offline", "fill a directory with everything the hosts download, then deploy hosts that "
                                   "reach no registry from it"),
    "lab": ("lab.cli", "build, boot, reboot, stop or destroy the bundled lab hosts"),
}


def inventory_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of every command that reads an inventory: INVENTORY, --json, --limit HOST (repeatable)."""
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventory/lab.py")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--limit", action="append", metavar="HOST", help="only this host (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="v100kit", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_) in COMMANDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_, description=mod.__doc__,  # the docstrings' lists kept as written
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]) and run the subcommand; returns its exit status. What follows `--` goes
    to the subcommand unparsed (verify: pytest arguments; offline deploy: pyinfra arguments)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else None  # passed through (verify: to pytest)
    parser = build_parser()
    args = parser.parse_args(argv[:argv.index("--")] if rest is not None else argv)
    if rest is not None:
        if not hasattr(args, "passthrough"):
            parser.error(f"{args.command} takes no arguments after --")
        args.passthrough = rest
    try:
        return args.run(args)
    except UnknownHost as e:  # a --limit typo: a usage error, never an empty (healthy-looking) report
        print(f"v100kit {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
