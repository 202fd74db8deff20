"""roles/progress.py: the progress wrapper run for real by dash (Debian's and Ubuntu's /bin/sh, what pyinfra runs a
command with) and bash, around real CMake builds (Makefile and Ninja generators, the tools on this machine) and a
command that prints uv's non-interactive lines as uv's pull request 11165 shows them; and `Streamed` through
pyinfra's own @local connector. Progress lines come out; the command's exit status is kept."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from roles.progress import BUILD_STEPS, UV_STEPS, Streamed, watched

SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
LINE = re.compile(r"^(?P<label>[^:]+): (?P<text>.*), (?P<min>\d+) min (?P<s>\d+) s$")


def run(shell: str, snippet: str) -> subprocess.CompletedProcess:
    """`snippet` under `set -e`, as the roles' commands run it, then a marker line that only a success reaches."""
    return subprocess.run([shell, "-c", f"set -e; {snippet}; echo reached-after"], capture_output=True, text=True,
                          timeout=120)


def project(root: Path, broken: bool = False) -> Path:
    """A real CMake project with a target llama-server of four C files, one broken on request."""
    src = root / "src"
    src.mkdir(parents=True)
    names = ["a", "b", "c", "main"]
    for n in names[:-1]:
        (src / f"{n}.c").write_text(f"int {n}(void) {{ return 1; }}\n")
    (src / "main.c").write_text("int a(void); int main(void) { return a() - 1; }\n" if not broken else
                                "int main(void) { return undeclared_name; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(p C)\n"
        f"add_executable(llama-server {' '.join(f'{n}.c' for n in names)})\n")
    return src


def configure(tmp_path: Path, generator: str, broken: bool = False) -> Path:
    src = project(tmp_path, broken)
    build = tmp_path / "build"
    subprocess.run(["cmake", "-G", generator, "-S", src, "-B", build], check=True, capture_output=True)
    return build


needs_cmake = pytest.mark.skipif(not shutil.which("cmake"), reason="cmake is not installed")


@needs_cmake
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("generator", ["Unix Makefiles", "Ninja"])
def test_a_real_build_reports_its_own_progress_and_ends_done(tmp_path, shell, generator):
    if generator == "Ninja" and not shutil.which("ninja"):
        pytest.skip("ninja is not installed")
    build = configure(tmp_path, generator)
    log = tmp_path / "build.log"
    r = run(shell, watched(f"cmake --build {build} -j 1 --target llama-server", str(log), "build b1", BUILD_STEPS,
                           "{ tail -5 " + str(log) + " >&2; exit 1; }", poll_s=0.05))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "reached-after"
    assert re.fullmatch(rf"build b1: done \(log: {re.escape(str(log))}\), 0 min \d+ s", lines[-2]), lines
    # every progress line names a state the build's own log went through
    text = log.read_text()
    marks = re.findall(r"^\[ *(\d+)%\]", text, re.M) if generator == "Unix Makefiles" else \
        re.findall(r"^\[(\d+/\d+)\]", text, re.M)
    assert marks, text  # the generator prints the progress marks the measure reads
    for line in lines[:-2]:
        m = LINE.match(line)
        assert m and m["label"] == "build b1", line
        shown = m["text"].removesuffix(" %").removesuffix(" steps").replace(" of ", "/")
        assert shown == "starting" or shown in marks, (line, marks)


@needs_cmake
@pytest.mark.parametrize("shell", SHELLS)
def test_a_failing_build_fails_the_snippet_with_the_compilers_error(tmp_path, shell):
    build = configure(tmp_path, "Unix Makefiles", broken=True)
    log = tmp_path / "build.log"
    r = run(shell, watched(f"cmake --build {build} -j 1 --target llama-server", str(log), "build b1", BUILD_STEPS,
                           "{ tail -20 " + str(log) + " >&2; exit 1; }", poll_s=0.05))
    assert r.returncode == 1
    assert "undeclared_name" in r.stderr  # gcc's error, from the log's tail
    assert "reached-after" not in r.stdout and "done" not in r.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_the_exit_status_is_the_commands_when_fail_passes_it_on(tmp_path, shell):
    log = tmp_path / "x.log"
    r = run(shell, watched("sh -c 'exit 7'", str(log), "x", BUILD_STEPS, "{ rc=$?; exit $rc; }", poll_s=0.05))
    assert r.returncode == 7 and "reached-after" not in r.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_lines_are_throttled_to_each_tenth_and_to_the_time_given(tmp_path, shell):
    log = tmp_path / "make.log"
    steps = " ".join(str(p) for p in range(1, 101))  # one percent at a time: 100 lines in the log
    fast = f"sh -c 'for p in {steps}; do echo \"[ $p%] Building\"; sleep 0.01; done'"
    r = run(shell, watched(fast, str(log), "b", BUILD_STEPS, "{ exit 1; }", every_s=3600, poll_s=0.02))
    assert r.returncode == 0
    shown = [int(LINE.match(x)["text"].removesuffix(" %")) for x in r.stdout.splitlines()[:-2]]
    assert len(shown) <= 10 and shown == sorted(shown) and len({p // 10 for p in shown}) == len(shown), shown
    assert len(log.read_text().splitlines()) == 100
    # nothing to measure, but the time: one line per every_s
    quiet = run(shell, watched("sleep 2.5", str(tmp_path / "q.log"), "q", BUILD_STEPS, "{ exit 1; }", every_s=1,
                               poll_s=0.1))
    lines = quiet.stdout.splitlines()[:-2]
    assert 1 <= len(lines) <= 3 and all(LINE.match(x)["text"] == "starting" for x in lines), lines


#: uv's non-interactive lines for `uv pip install torch --no-cache`, as astral-sh/uv pull request 11165 (merged
#: 2025-02-05, "Show messages for slow tasks in non-interactive mode") pastes them in its test plan
UV_PR_11165 = """\
  Resolved 24 packages in 648ms
  Downloading setuptools (1.2MiB)
  Downloading nvidia-cuda-cupti-cu12 (13.2MiB)
  Downloading torch (731.1MiB)
  Downloading nvidia-nvjitlink-cu12 (20.1MiB)
  Downloading nvidia-cufft-cu12 (201.7MiB)
  Downloading nvidia-cuda-nvrtc-cu12 (23.5MiB)
  Downloading nvidia-curand-cu12 (53.7MiB)
  Downloading nvidia-nccl-cu12 (179.9MiB)
  Downloading nvidia-cudnn-cu12 (634.0MiB)
  Downloading nvidia-cublas-cu12 (346.6MiB)
  Downloading sympy (5.9MiB)
  Downloading nvidia-cusparse-cu12 (197.8MiB)
  Downloading nvidia-cusparselt-cu12 (143.1MiB)
  Downloading networkx (1.6MiB)
  Downloading nvidia-cusolver-cu12 (122.0MiB)
  Downloading triton (241.4MiB)
   Downloaded setuptools
   Downloaded networkx
   Downloaded sympy
   Downloaded nvidia-cuda-cupti-cu12
   Downloaded nvidia-nvjitlink-cu12
   Downloaded nvidia-cuda-nvrtc-cu12
   Downloaded nvidia-curand-cu12
"""


def test_uv_measure_reads_uvs_own_lines(tmp_path):
    log = tmp_path / "uv.log"
    log.write_text(UV_PR_11165)
    out = subprocess.run(["sh", "-c", f"{UV_STEPS} {log}"], capture_output=True, text=True, check=True).stdout
    # by hand from the PR's lines: 7 of 16 done, 1.2+1.6+5.9+13.2+20.1+23.5+53.7 = 119.2 of 2916.8 MiB, 4 %
    assert out == "4 7 of 16 large wheels downloaded (119 of 2917 MiB), 24 packages in the lock\n"
    log.write_text(UV_PR_11165 + "Prepared 24 packages in 1m 02s\n")
    out = subprocess.run(["sh", "-c", f"{UV_STEPS} {log}"], capture_output=True, text=True, check=True).stdout
    assert out.endswith("24 packages in the lock; all prepared, installing and compiling to bytecode\n")


@pytest.mark.parametrize("shell", SHELLS)
def test_uv_lines_as_they_come_give_progress_lines(tmp_path, shell):
    uv = tmp_path / "uv"
    lines = UV_PR_11165.splitlines()
    uv.write_text("#!/bin/sh\n" + "".join(f"echo '{x}' >&2; sleep 0.1\n" for x in lines) + "exit ${UV_RC:-0}\n")
    uv.chmod(0o755)
    log = tmp_path / "install.log"
    r = run(shell, watched(str(uv), str(log), "venv v1", UV_STEPS, "{ tail -3 " + str(log) + " >&2; exit 1; }",
                           every_s=1, poll_s=0.05))
    assert r.returncode == 0, r.stderr
    # 7 of the 16 downloads end (4 % of their MiB): no tenth is crossed, so the lines are the time's (every_s)
    shown = [LINE.match(x)["text"] for x in r.stdout.splitlines()[:-2]]
    assert shown and all(re.fullmatch(r"\d+ of \d+ large wheels downloaded \(\d+ of \d+ MiB\), 24 packages in the lock", t)
                         for t in shown), shown
    failing = run(shell, "export UV_RC=2; " + watched(str(uv), str(tmp_path / "f.log"), "venv v1", UV_STEPS,
                                                       "{ tail -1 " + str(tmp_path / "f.log") + " >&2; exit 1; }",
                                                       poll_s=0.02))
    assert failing.returncode == 1 and "Downloaded nvidia-curand-cu12" in failing.stderr


def test_streamed_prints_its_lines_through_pyinfra_at_default_verbosity():
    """pyinfra's @local connector, a real shell: the lines reach pyinfra's echo (the CLI's click.echo to stderr)
    with the host's prefix though state.print_output is off; a failure returns no output (already printed)."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api import output
    from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
    from pyinfra.api.connect import connect_all
    from pyinfra.context import ctx_host, ctx_state

    inventory = Inventory((["@local"], {}))
    state = State(inventory, Config())
    state.init(inventory, Config())
    assert not state.print_output
    said: list[str] = []
    before = output._echo
    output.set_echo(lambda message=None, **_: said.append(str(message)))
    try:
        with ctx_state.use(state):
            connect_all(state)
            host = inventory.get_host("@local")
            with ctx_host.use(host):
                args, _ = pop_global_arguments(state, host, {})
                conn = {k: v for k, v in args.items() if k in CONNECTOR_ARGUMENT_KEYS}
                ok, out = Streamed("echo one; echo two").execute(state, host, dict(conn))
                bad, none = Streamed("echo three; exit 3").execute(state, host, dict(conn))
    finally:
        output.set_echo(before)
    assert ok and out.stdout_lines == ["one", "two"]
    assert not bad and none.output_lines == []
    assert said == [f"{host.print_prefix}one", f"{host.print_prefix}two", f"{host.print_prefix}three"]
