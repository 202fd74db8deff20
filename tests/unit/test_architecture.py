"""The import contracts in pyproject.toml ([tool.importlinter]): decision modules reach no pyinfra operation and
no role's deploy module; the toolkit imports neither the lab, the command line nor the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " broken" in res.stdout and "0 broken" in res.stdout
