"""Plan-level tests (facts in, commands out, tests/plan/harness.py): the llama.cpp build and the vLLM venv install
carry the progress wrapper (roles/progress.py), and the wrapper as the plan writes it, cut out of the planned
command and run here by dash (the hosts' /bin/sh), reports and keeps the exit status: around a real CMake build of
a target named llama-server for the build, around a stand-in for uv printing uv's own non-interactive lines for the
install (astral-sh/uv pull request 11165; tests/unit/test_progress.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from roles.llama_cpp.decide import WORK as LLAMA_WORK
from roles.vllm.decide import UV, VENV_ROOT
from roles.vllm.decide import WORK as VLLM_WORK
from lab.data import tiny_hf_model
from tests.plan import test_vllm_plan
from tests.plan.harness import DEBIAN_13, UBUNTU_2404, plan_commands
from tests.plan.test_vllm_plan import TWO_V100
from tests.plan.test_vllm_plan import commands as vllm_commands
from tests.unit.test_progress import UV_PR_11165, configure

MODEL = {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64, "port": 8081}
SH = shutil.which("dash") or "sh"


@pytest.fixture(autouse=True)
def _model_cache(tmp_path_factory, monkeypatch):
    """test_vllm_plan's tiny model, written under pytest's temporary directory (never into the lab cache)."""
    monkeypatch.setattr(test_vllm_plan, "MODEL", tiny_hf_model(tmp_path_factory.getbasetemp() / "cache"),
                        raising=False)


def wrapper(command: str) -> str:
    """The progress wrapper in a planned command: from `touch LOG` to its closing `done` line."""
    m = re.search(r"touch \S+; .*?'done \(log: [^)]*\)' \$\(\(\(now - t0\) / 60\)\) \$\(\(\(now - t0\) % 60\)\)",
                  command)
    assert m, command
    return m.group(0)


def run_here(snippet: str) -> subprocess.CompletedProcess:
    return subprocess.run([SH, "-c", f"set -e; {snippet}; echo reached-after"], capture_output=True, text=True,
                          timeout=300)


def test_plan_llama_cpp_build_reports_progress_and_a_failed_build_still_fails(tmp_path):
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}})
    build = next(c for c in cmds if "cmake -S" in c)
    prefix = re.search(r"mv -T (\S+)\.new (\S+);", build).group(2)
    log = f"{LLAMA_WORK}/build-{Path(prefix).name}.log"
    snippet = wrapper(build)
    assert snippet.startswith(f"touch {log}; cmake --build {LLAMA_WORK}/build/tree/build -j ")
    # the wrapper sits where the bare build was: after the configure step, before the install into <prefix>.new
    assert build.index("cmake -S") < build.index(snippet) < build.index(f"mkdir -p {prefix}.new/bin")
    assert build.startswith("set -e;") and f"tail -60 {log} >&2; exit 1;" in snippet
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed: the wrapper is not run here")
    for broken in (False, True):
        work = tmp_path / ("broken" if broken else "ok")
        configure(work / "build" / "tree", "Unix Makefiles", broken)
        r = run_here(snippet.replace(LLAMA_WORK, str(work)))
        local_log = f"{work}/build-{Path(prefix).name}.log"
        if broken:
            assert r.returncode == 1 and "undeclared_name" in r.stderr and "reached-after" not in r.stdout
        else:
            assert r.returncode == 0, r.stderr
            assert re.search(rf"^build {re.escape(Path(prefix).name)}: done \(log: {re.escape(local_log)}\), "
                             r"\d+ min \d+ s$", r.stdout, re.M), r.stdout
            assert "[100%] Built target llama-server" in Path(local_log).read_text()


def test_plan_venv_install_reports_progress_and_a_failed_install_still_fails(tmp_path):
    cmds = vllm_commands({}, TWO_V100)
    install = next(c for c in cmds if "pip install --python" in c)
    venv = re.search(rf"{VENV_ROOT}/(\S+)/bin/python", install).group(1)
    snippet = wrapper(install)
    log = f"{VLLM_WORK}/install-{venv}.log"
    assert snippet.startswith(f"touch {log}; {UV} pip install --python {VENV_ROOT}/{venv}/bin/python ")
    assert install.index(f"{UV} venv ") < install.index(snippet) < install.index(f"{UV} pip check")
    assert f"rm -rf {VENV_ROOT}/{venv}; exit 1;" in snippet  # a failed install removes its half-made venv
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n" + "".join(f"echo '{x}' >&2\n" for x in UV_PR_11165.splitlines())
                  + "sleep 2.5; exit ${UV_RC:-0}\n")
    uv.chmod(0o755)
    local = snippet.replace(UV, str(uv)).replace(VLLM_WORK, str(tmp_path)).replace(VENV_ROOT, str(tmp_path / "opt"))
    (tmp_path / "opt" / venv).mkdir(parents=True)
    r = run_here(local)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^venv {re.escape(venv)}: done \(log: {re.escape(str(tmp_path))}/install-", r.stdout, re.M)
    failed = run_here(f"export UV_RC=2; {local}")
    assert failed.returncode == 1 and "Downloaded nvidia-curand-cu12" in failed.stderr
    assert not (tmp_path / "opt" / venv).exists()


def test_plan_second_deploy_of_a_stamped_build_and_venv_runs_no_wrapper():
    """Idempotence: the wrapper lives inside the build and venv operations, which do nothing once their stamp is
    there (pyinfra's File fact of the stamp answers)."""
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}})
    build = next(c for c in cmds if "cmake -S" in c)
    prefix = re.search(r"mv -T (\S+)\.new (\S+);", build).group(2)
    stamped = {re.compile(rf"test -e {re.escape(prefix)}/\.v100kit-build\.json \|\|"): [
        f"user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=10 '{prefix}/.v100kit-build.json'"]}
    again = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}}, responses=stamped)
    assert not [c for c in again if "kill -0 $pid" in c or "cmake --build" in c]
    install = next(c for c in vllm_commands({}, TWO_V100) if "pip install --python" in c)
    venv = re.search(rf"{VENV_ROOT}/(\S+)/bin/python", install).group(1)
    stamp = f"{VENV_ROOT}/{venv}/.v100kit-venv.json"
    responses = {**TWO_V100, re.compile(rf"test -e {re.escape(stamp)} \|\|"): [
        f"user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=10 '{stamp}'"]}
    again = [str(c) for c in plan_commands(UBUNTU_2404, {"vllm_instances": {"tiny": {
        "model_source": str(test_vllm_plan.MODEL)}}}, responses=responses)]
    assert not [c for c in again if "kill -0 $pid" in c or "pip install" in c]
