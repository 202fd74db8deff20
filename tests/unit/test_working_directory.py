"""pyinfra reads group_data/ and config.py from the directory it runs in: a deploy started elsewhere would run with
every group setting at its default and without TCP_NODELAY, silently. The preflight refuses it before any change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from roles.preflight import ROOT, working_directory_problems

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))


def test_the_repository_root_passes_and_anywhere_else_is_named_with_the_fix(tmp_path):
    assert working_directory_problems(ROOT) == []
    assert working_directory_problems(ROOT / "inventory" / "..") == []
    assert working_directory_problems(tmp_path) == [
        f"working directory = {str(tmp_path)!r}: pyinfra reads group_data/ and config.py from the directory it runs "
        f"in, and {ROOT} holds them. Fix: run pyinfra from {ROOT}, or pass --chdir {ROOT}"]


def test_a_dry_deploy_from_another_directory_is_refused_before_any_change(tmp_path):
    """pyinfra's own CLI on this machine (@local), --dry: refused in the preflight, naming the directory."""
    res = subprocess.run([PYINFRA, "-y", "--dry", "@local", str(ROOT / "deploy.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"working directory = {str(tmp_path)!r}" in out and f"--chdir {ROOT}" in out
