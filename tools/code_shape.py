"""Longest functions and largest modules of the toolkit's code at a git revision (issue 11's before/after table).

    .venv/bin/python tools/code_shape.py [REV]     # default HEAD; roles/, lab/ and v100kit/
"""

from __future__ import annotations

import ast
import subprocess
import sys


def main(rev: str = "HEAD") -> int:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in names if f.endswith(".py") and f.split("/")[0] in ("roles", "lab", "v100kit")]
    funcs, sizes = [], []
    for f in files:
        src = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True, check=True).stdout
        sizes.append((len(src.splitlines()), f))
        for n in ast.walk(ast.parse(src)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((n.end_lineno - n.lineno + 1, f"{f}:{n.name}"))
    print("longest functions (lines):", ", ".join(f"{name} {n}" for n, name in sorted(funcs, reverse=True)[:8]))
    print("largest modules (lines):", ", ".join(f"{name} {n}" for n, name in sorted(sizes, reverse=True)[:8]))
    print(f"functions over 50 lines: {sum(1 for n, _ in funcs if n > 50)} of {len(funcs)}; modules: {len(sizes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
