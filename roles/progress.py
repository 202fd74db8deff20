"""Progress of long commands in the deploy log: a shell wrapper that runs a command with its output to a log file on
the host and prints a throttled summary of that log while it runs, and a pyinfra command that shows those lines as
they come.

pyinfra 3 prints a command's output while it runs only with `-vvv` (pyinfra_cli/cli.py _set_verbosity sets
state.print_output, which StringCommand.execute passes to the connector; the SSH connector's read_output_buffers
then echoes each line as it arrives), and that for every command and fact at once. Without it a command's output is
printed only after it failed (pyinfra/api/operations.py, print_host_combined_output). `Streamed` is a StringCommand
that asks the connector to print its own lines as they arrive, whatever the verbosity: the wrapper keeps them few.
"""

from __future__ import annotations

import shlex

from pyinfra.api.command import StringCommand
from pyinfra.connectors.util import CommandOutput

#: awk program reading a build log: "PERCENT TEXT" from the last progress line of CMake's Makefile generator
#: (`[ 45%] Building CUDA object ...`, Modules/... cmake's progress marks) or of Ninja (`[123/456] ...`, its
#: NINJA_STATUS default "[%f/%t] "). Prints "0 starting" before the first one.
BUILD_STEPS = (
    "awk 'BEGIN { p = 0; t = \"starting\" } "
    "/^\\[ *[0-9]+%\\]/ { p = substr($0, 2, index($0, \"%\") - 2) + 0; t = p \" %\" } "
    "/^\\[[0-9]+\\/[0-9]+\\]/ { split(substr($0, 2, index($0, \"]\") - 2), f, \"/\"); "
    "p = int(100 * f[1] / f[2]); t = f[1] \" of \" f[2] \" steps\" } "
    "END { print p, t }'"
)

#: awk program reading `uv pip install`'s log: "PERCENT TEXT". uv writes, when its stderr is not a terminal, one
#: "Downloading NAME (SIZE)" line when a download over 1 MiB starts and " Downloaded NAME" when it ends
#: (astral-sh/uv pull request 11165, crates/uv/src/commands/reporters.rs), "Resolved N packages in ..." first and
#: "Prepared N packages in ..." once every wheel is unpacked in its cache (then it installs and compiles bytecode).
#: PERCENT is the MiB downloaded of those started; small wheels and cached ones are not counted.
UV_STEPS = (
    "awk 'function mib(s, v) { v = substr(s, 2) + 0; if (s ~ /GiB/) v *= 1024; if (s ~ /KiB/) v /= 1024; "
    "return v } "
    "BEGIN { n = 0; d = 0; all = 0; got = 0; r = \"?\"; prep = \"\" } "
    "$1 == \"Resolved\" { r = $2 } "
    "$1 == \"Downloading\" && !($2 in size) { n++; size[$2] = mib($3); all += size[$2] } "
    "$1 == \"Downloaded\" && ($2 in size) && !($2 in done) { d++; done[$2] = 1; got += size[$2] } "
    "$1 == \"Prepared\" { prep = \"; all prepared, installing and compiling to bytecode\" } "
    "END { printf \"%d %d of %d large wheels downloaded (%.0f of %.0f MiB), %s packages in the lock%s\\n\", "
    "(all > 0 ? int(100 * got / all) : 0), d, n, got, all, r, prep }'"
)


def watched(command: str, log: str, label: str, measure: str, fail: str, every_s: int = 60, step_pct: int = 10,
            poll_s: float = 2) -> str:
    """A POSIX sh snippet (dash and bash) that runs `command` (one simple command) in the background with stdout and stderr appended to
    `log` (a file on the host), and while it runs prints on its own stdout `label: TEXT, M min S s` each time the
    measured percentage crosses a multiple of `step_pct`, or `every_s` seconds after the last such line; then
    `label: done (log: LOG), M min S s`. `measure` is a shell command reading `log` from its last argument's position
    (`measure log`) that prints "PERCENT TEXT" and always exits 0 (BUILD_STEPS, UV_STEPS). The snippet's status is
    the command's: on its failure it runs `fail` (a compound command such as `{ tail -60 LOG >&2; exit 1; }`), so
    a failed command still fails the operation, also under `set -e`. `poll_s`: seconds between two reads of the log
    (a fraction needs GNU sleep)."""
    q, say = shlex.quote(log), f"printf '%s: %s, %s min %s s\\n' {shlex.quote(label)}"
    return (
        f"touch {q}; {command} >> {q} 2>&1 & pid=$!; t0=$(date +%s); seen=$t0; mark=0; "
        f"while kill -0 $pid 2>/dev/null; do sleep {poll_s:g}; now=$(date +%s); m=$({measure} {q}); "
        f"p=${{m%% *}}; if [ $((p / {step_pct})) -gt $mark ] || [ $((now - seen)) -ge {every_s} ]; then "
        f"{say} \"${{m#* }}\" $(((now - t0) / 60)) $(((now - t0) % 60)); seen=$now; mark=$((p / {step_pct})); fi; "
        f"done; wait $pid || {fail}; now=$(date +%s); "
        f"{say} {shlex.quote(f'done (log: {log})')} $(((now - t0) / 60)) $(((now - t0) % 60))"
    )


class Streamed(StringCommand):
    """A shell command whose output pyinfra prints while it runs, line by line with the host's prefix, at any
    verbosity (the connector's print_output for this command alone). Commands that print little use it: the
    watched() wrappers. After a failure pyinfra would print the output again (operations.py prints a failed
    command's output unless state.print_output): it gets none back, as it was shown already."""

    def execute(self, state, host, connector_arguments):
        connector_arguments.update(self.connector_arguments)
        status, output = host.run_shell_command(self, print_output=True, print_input=state.print_input,
                                                **connector_arguments)
        return status, output if status or state.print_output else CommandOutput([])
