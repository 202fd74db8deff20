"""v100kit doctor INVENTORY [--json] [--limit HOST ...]: diagnose hosts, change nothing.

Exit status: 0 when every check is ok or skipped, 1 when any is broken, 2 when a host cannot be diagnosed."""

from __future__ import annotations

import argparse
import json

from roles.doctor import diagnose
from roles.doctor.checks import Row, as_dict
from roles.doctor.gather import gather  # noqa: F401  (loaded before hosts are diagnosed: diagnose imports it)
from v100kit.hosts import for_each_host


def diagnose_all(inventory_file: str, limit: list[str] | None = None) -> dict[str, list[Row] | str]:
    """{host name: doctor rows, or the error string when the host could not be diagnosed}."""
    return for_each_host(inventory_file, limit, diagnose, diagnosing=True)


def table(results: dict[str, list[Row] | str]) -> str:
    lines = []
    for name, rows in results.items():
        lines.append(f"== {name}")
        if isinstance(rows, str):
            lines.append(f"   cannot diagnose: {rows}")
            continue
        width = max(len(r.check) for r in rows)
        for r in rows:
            lines.append(f"   {r.state.upper():8} {r.check:{width}}  {r.evidence}")
            if r.fix:
                lines.append(f"   {'':8} {'':{width}}  fix: {r.fix}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from v100kit.cli import inventory_arguments
    inventory_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Print the rows (table or JSON); exit status 0 all ok or skipped, 1 any broken, 2 a host not diagnosed."""
    results = diagnose_all(args.inventory, args.limit)
    if args.json:
        print(json.dumps({h: r if isinstance(r, str) else as_dict(r) for h, r in results.items()}, indent=2))
    else:
        print(table(results))
    if any(isinstance(r, str) for r in results.values()):
        return 2
    return 1 if any(row.state == "broken" for rows in results.values() for row in rows) else 0
