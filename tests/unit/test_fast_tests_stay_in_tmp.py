"""The fast tests write nothing outside pytest's temporary directory: checked by running them with the lab's
state and cache directories pointed at paths that must still not exist afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.environ.get("V100KIT_INNER_FAST_RUN") == "1", reason="the inner run of this very check")
def test_fast_tests_leave_lab_state_and_cache_untouched(tmp_path):
    state, cache = tmp_path / "lab-state", tmp_path / "lab-cache"
    env = dict(os.environ, V100KIT_LAB_STATE=str(state), V100KIT_LAB_CACHE=str(cache), V100KIT_INNER_FAST_RUN="1")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not lab", "-p", "no:cacheprovider",
                          "--basetemp", str(tmp_path / "inner")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    assert not state.exists() and not cache.exists(), f"fast tests wrote {list(tmp_path.rglob('lab-*/**'))[:5]}"
