#!/usr/bin/env python3
"""Print the suites of the full tier (make test-all, tests/tiers.toml) that a change touched, one per line.

    .venv/bin/python tools/suites_for_change.py BASE       # changes from BASE to the working tree
    .venv/bin/python tools/suites_for_change.py BASE --pytest   # the pytest command that runs them

A suite is touched when a changed file (added, changed, deleted or renamed, from the merge base of BASE and HEAD
to the working tree) is one of its test files, a project module they import (directly or not), a template beside
such a module, a file its `covers` names, or one of tests/tiers.py EVERY_SUITE. Exit 2 when BASE is not a git
revision or tests/tiers.toml names a test file that does not exist."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tiers import ROOT, load, suites_touched  # noqa: E402


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def changed_files(base: str) -> list[str]:
    """Repository-relative paths that the change from `base` touches: from the merge base of `base` and HEAD to
    the working tree (commits that reached `base` since are not part of it), untracked files included, both
    sides of a rename, paths as git stores them (-z: no quoting of unusual names). Raises ValueError when `base`
    is not a revision."""
    if git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}").returncode != 0:
        raise ValueError(f"{base!r} is not a git revision of {ROOT}")
    fork = git("merge-base", base, "HEAD").stdout.strip() or base
    diff = git("diff", "--name-only", "--no-renames", "-z", fork)
    new = git("ls-files", "--others", "--exclude-standard", "-z")
    return sorted({p for out in (diff.stdout, new.stdout) for p in out.split("\0") if p})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the git revision the change starts from")
    p.add_argument("--pytest", action="store_true", help="print the pytest command that runs the touched suites")
    args = p.parse_args(argv)
    try:
        changed = changed_files(args.base)
        suites = load()[1]
        touched = suites_touched(changed)
    except ValueError as e:  # a bad revision, or tests/tiers.toml naming a test file that is gone
        print(f"suites_for_change: {e}", file=sys.stderr)
        return 2
    if args.pytest:
        if touched:
            files = " ".join(t for name in touched for t in suites[name].tests)
            print(f".venv/bin/python -m pytest -rs {files}")
    else:
        for name in touched:
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
