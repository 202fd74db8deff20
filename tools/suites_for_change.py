#!/usr/bin/env python3
"""Print the suites of the full tier (make test-all, tests/tiers.toml) that a change touched, one per line.

    .venv/bin/python tools/suites_for_change.py BASE       # changes from BASE to the working tree
    .venv/bin/python tools/suites_for_change.py BASE --pytest   # the pytest command that runs them

A suite is touched when a changed file is one of its test files, a project module they import (directly or not),
a template beside such a module, or a file its `covers` names. Exit 2 when BASE is not a git revision."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tiers import ROOT, load, suites_touched  # noqa: E402


def changed_files(base: str) -> list[str]:
    """Repository-relative paths that differ between `base` and the working tree, untracked files included.
    Raises ValueError when `base` is not a revision."""
    rev = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], cwd=ROOT,
                         capture_output=True, text=True)
    if rev.returncode != 0:
        raise ValueError(f"{base!r} is not a git revision of {ROOT}")
    diff = subprocess.run(["git", "diff", "--name-only", base], cwd=ROOT, capture_output=True, text=True, check=True)
    new = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return sorted(set(diff.stdout.split()) | set(new.stdout.split()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the git revision the change starts from")
    p.add_argument("--pytest", action="store_true", help="print the pytest command that runs the touched suites")
    args = p.parse_args(argv)
    try:
        changed = changed_files(args.base)
    except ValueError as e:
        print(f"suites_for_change: {e}", file=sys.stderr)
        return 2
    touched = suites_touched(changed)
    if args.pytest:
        suites = load()[1]
        if touched:
            files = " ".join(t for name in touched for t in suites[name].tests)
            print(f".venv/bin/python -m pytest -rs {files}")
    else:
        for name in touched:
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
