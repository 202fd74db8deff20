"""The `v100kit` command: `v100kit plan|doctor|bench INVENTORY [--json] [--limit HOST]`, `v100kit verify INVENTORY`,
`v100kit offline fill|serve|deploy DIR ...`, `v100kit monitoring scrape-config INVENTORY`, `v100kit lab ACTION` and
`v100kit --version`.

Exit status, the same for every subcommand:
  0    all good: every host reached and nothing found
  1    a finding: a check failed or is broken, an instance flagged, a host's settings refused
  2    a host could not be reached, planned, diagnosed, benched or checked (unreachable, connection refused, a
       command failing on it), or bad command-line input (an option, an inventory, a --limit name)
  130  interrupted (Ctrl-C, SIGINT): one line, "interrupted", on stderr; no traceback
  143  terminated (SIGTERM: `timeout`, `kill`, systemd stopping a unit): one line, "terminated"; the same cleanups
  141  stdout closed by its reader (`v100kit plan INV --json | head`): no traceback; the shell's status for SIGPIPE
A host not reached outranks a finding on another: 2. `offline deploy` exits with pyinfra's own status, and
`offline serve`, which serves until Ctrl-C or SIGTERM, exits 0 then.

Every subcommand is a module with `add_arguments(parser)` and `run(args) -> exit status`; the skeleton here gives
the commands that read an inventory the same arguments and the same error handling (v100kit/hosts.py exit_status
maps the hosts' results to the status; a host without a result is a HostFailure, in --json
{"error": "unreachable"|"refused"|"failed", "cause": "...", "problems": [...]}).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys

from v100kit.hosts import INTERRUPTED, NOT_CHECKED, UnknownHost

#: exit status after SIGTERM (128 + 15, the shell's convention)
TERMINATED = 143
#: exit status when the reader of stdout went away (128 + SIGPIPE 13, what a C tool killed by SIGPIPE returns)
PIPE_CLOSED = 141


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the signal lands. A KeyboardInterrupt, so that every cleanup Ctrl-C runs runs for it
    too: on 2026-12-03 `timeout 530 v100kit bench --sweep` (tools/gpu/bench/go.sh) killed the bench with SIGTERM's
    default action, and the llama-server it had started by hand for an alternative kept the port and the GPU while
    the service stayed stopped."""


def _terminated(signum, frame):
    _raise_in_main(Terminated())


def _interrupted(signum, frame):
    _raise_in_main(KeyboardInterrupt())


def _raise_in_main(exc: KeyboardInterrupt) -> None:
    """Raise `exc` in the main greenlet. A signal's handler runs in whichever greenlet runs then, and gevent's
    patched threads are greenlets: raised in one of loadgen's request streams, ThreadPoolExecutor took it for that
    request's exception (the bench went on with one stream fewer, the signal lost). gevent's own way for a
    KeyboardInterrupt in its hub: thrown into the main greenlet, this one switched back to later."""
    gevent = sys.modules.get("gevent")
    if gevent is not None:
        import greenlet

        hub = gevent.get_hub()
        if greenlet.getcurrent() not in (hub, hub.parent):
            hub.handle_system_error(type(exc), exc)
            return
    raise exc

#: subcommand -> (module, one-line help)
COMMANDS = {
    "plan": ("v100kit.plan", "what each host would get (driver, CUDA, builds, memory plans); changes nothing"),
    "doctor": ("v100kit.doctor", "diagnose hosts against their pinned state; changes nothing"),
    "bench": ("v100kit.bench", "measure what each instance serves (residency, TTFT, tokens/s, roofline); "
                               "--sweep stops services"),
    "verify": ("v100kit.verify", "run the host checks (pytest-testinfra) against every host; changes nothing"),
    "offline": ("v100kit.offline", "fill a directory with everything the hosts download, then deploy hosts that "
                                   "reach no registry from it"),
    "monitoring": ("v100kit.monitoring", "print a Prometheus scrape configuration for the inventory (scrape-config); "
                                         "changes nothing"),
    "lab": ("lab.cli", "build, boot, reboot, stop or destroy the bundled lab hosts"),
}


def inventory_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of every command that reads an inventory: INVENTORY, --json, --limit HOST (repeatable)."""
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventory/lab.py")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--limit", action="append", metavar="HOST", help="only this host (repeatable)")


def version() -> str:
    """The installed package's version (importlib.metadata), else v100kit/__init__.py's (a checkout run as
    `python -m v100kit.cli` without installing)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("v100kit")
    except PackageNotFoundError:
        from v100kit import __version__
        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="v100kit", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n")[1],  # the exit statuses
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"v100kit {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_) in COMMANDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_, description=mod.__doc__,  # the docstrings' lists kept as written
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]) and run the subcommand; returns its exit status (the module's
    docstring). What follows `--` goes to the subcommand unparsed (verify: pytest arguments; offline deploy: pyinfra
    arguments). Ctrl-C anywhere is INTERRUPTED (130) with one line on stderr, SIGTERM TERMINATED (143); cleanups run
    on the way (bench --sweep stops its hand-run llama-server and starts the services it stopped again, in
    roles/bench/sweep.py's finally)."""
    # not where the caller (a test, an embedder) set its own, nor SIGINT where it is ignored (a background job);
    # the caller's handlers are back when main returns
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    if before[signal.SIGTERM] is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    if before[signal.SIGINT] is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)
    try:
        status = _main(argv)
        sys.stdout.flush()  # a reader gone is found here, inside the handler, not in Python's flush at exit
        return status
    except KeyboardInterrupt as e:
        if sys.stderr.isatty():  # the bench's progress line, updated in place, is cleared first
            sys.stderr.write("\r\033[K")
        terminated = isinstance(e, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr, flush=True)
        return TERMINATED if terminated else INTERRUPTED
    except BrokenPipeError:
        # `| head` closed the pipe: what was wanted was read. Python's own advice (signal module docs, "Note on
        # SIGPIPE"): point stdout at /dev/null so that the flush at exit does not raise again
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return PIPE_CLOSED
    finally:
        for sig, handler in before.items():
            if handler is not None:  # None: set outside Python; left as it is
                signal.signal(sig, handler)


def quiet_interrupts() -> None:
    """gevent (pyinfra's; its CLI patches time and sockets with it) prints a KeyboardInterrupt that arrives while
    its loop runs ("KeyboardInterrupt" and a timestamp) before raising it here: one line is said, by main."""
    gevent = sys.modules.get("gevent")
    if gevent is not None:
        hub = gevent.get_hub()  # the main thread's, where SIGINT lands
        hub.NOT_ERROR = (*hub.NOT_ERROR, KeyboardInterrupt)  # still raised in this greenlet (hub.SYSTEM_ERROR)


def _main(argv: list[str] | None) -> int:
    # paramiko's transport thread logs a failed handshake as an ERROR traceback, line by line ("Exception (client):
    # Error reading SSH protocol banner", then the traceback), also when Ctrl-C closes its socket mid-handshake; the
    # host's result (or "interrupted") already says it in a line
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else None  # passed through (verify: to pytest)
    parser = build_parser()  # imports every command, pyinfra and gevent with them
    quiet_interrupts()
    args = parser.parse_args(argv[:argv.index("--")] if rest is not None else argv)
    if rest is not None:
        if not hasattr(args, "passthrough"):
            parser.error(f"{args.command} takes no arguments after --")
        args.passthrough = rest
    try:
        return args.run(args)
    except UnknownHost as e:  # a --limit typo: a usage error, never an empty (healthy-looking) report
        print(f"v100kit {args.command}: {e}", file=sys.stderr)
        return NOT_CHECKED


if __name__ == "__main__":
    sys.exit(main())
