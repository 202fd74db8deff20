"""tools/sweep_lab_state.sh, which .ci/run calls first: a lab state directory an earlier run left behind is removed,
this run's and one a live process still uses are kept (a CI run was once refused by the lab's disk check because a
killed run's two hosts, about 28 GB, were still on the disk)."""
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "sweep_lab_state.sh"


def _state(tmp: Path, name: str) -> Path:
    d = tmp / f"v100kit-lab-state.{name}"
    (d / "hosts" / "lab-trixie").mkdir(parents=True)
    (d / "hosts" / "lab-trixie" / "root.img").write_bytes(b"\0" * 4096)
    return d


def test_a_left_state_directory_goes_and_ones_in_use_stay(tmp_path):
    stale, mine, by_env, by_argv = (_state(tmp_path, n) for n in ("stale1", "mine11", "pytest", "nspawn"))
    # another run's pytest: the state directory only in its environment
    env_user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                env={**os.environ, "V100KIT_LAB_STATE": str(by_env)})
    # a host's systemd-nspawn: the directory in its command line
    argv_user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"-D{by_argv}/hosts/x"])
    try:
        out = subprocess.run([str(SCRIPT), str(mine), str(tmp_path)], capture_output=True, text=True, check=True)
    finally:
        env_user.kill()
        argv_user.kill()
    assert not stale.exists(), out.stdout
    assert mine.exists() and by_env.exists() and by_argv.exists(), out.stdout
    assert f"removing a lab state directory an earlier run left: {stale}" in out.stdout
    assert f"left alone: {by_env}" in out.stdout and f"left alone: {by_argv}" in out.stdout


def test_nothing_to_sweep_is_no_error(tmp_path):
    out = subprocess.run([str(SCRIPT), str(tmp_path / "v100kit-lab-state.x"), str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == ""


def test_ci_run_sweeps_before_its_tests():
    ci = (SCRIPT.parents[1] / ".ci" / "run").read_text()
    assert ci.index('tools/sweep_lab_state.sh "$V100KIT_LAB_STATE"') < ci.index("make test")
