"""Per-module mutation score of the last `mutmut run` (tools/mutation.sh), read from mutmut 3's mutants/**/*.meta.

killed: the fast tests failed (or ran past mutmut's timeout) with the mutant on; survived: they passed; no tests:
no fast test reaches the mutated function; not run: a mutant this run did not try (a partial run by name).
Score = killed / (killed + survived + no tests). Prints a Markdown table; --survivors also lists the survivors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

KILLED = {1, 3, 24, -24, 36, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default="mutants", help="mutmut's working tree (default: mutants)")
    ap.add_argument("--survivors", action="store_true", help="list surviving and untested mutants too")
    args = ap.parse_args(argv)
    metas = sorted(Path(args.root).rglob("*.py.meta"))
    if not metas:
        print(f"no mutmut results under {args.root}/: run tools/mutation.sh first", file=sys.stderr)
        return 1
    print("| module | killed | survived | no tests | not run | score |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    totals: Counter = Counter()
    left: list[str] = []
    for meta in metas:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        c = Counter()
        for name, code in codes.items():
            kind = ("killed" if code in KILLED else "survived" if code in SURVIVED else
                    "no tests" if code in NO_TESTS else "not run" if code is None else "other")
            c[kind] += 1
            if kind in ("survived", "no tests"):
                left.append(f"{kind}: {name}")
        tried = c["killed"] + c["survived"] + c["no tests"]
        if not tried:
            continue
        totals += c
        module = str(meta.relative_to(args.root))[: -len(".meta")]
        print(f"| {module} | {c['killed']} | {c['survived']} | {c['no tests']} | {c['not run']} | "
              f"{c['killed'] / tried:.0%} |")
    tried = totals["killed"] + totals["survived"] + totals["no tests"]
    print(f"| **all** | {totals['killed']} | {totals['survived']} | {totals['no tests']} | {totals['not run']} | "
          f"{totals['killed'] / tried:.0%} |")
    if args.survivors:
        print("\n" + "\n".join(left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
