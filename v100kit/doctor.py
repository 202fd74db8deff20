"""v100kit doctor INVENTORY [--json] [--limit HOST ...]: diagnose hosts, change nothing.

With --json a host without rows is {"error": "unreachable"|"refused"|"failed", "cause": ..., "problems": [...]}.

Exit status: 0 every check ok or skipped, 1 any broken or a host's settings refused, 2 a host not reached or not
diagnosed (or a bad argument), 130 interrupted, 143 terminated (SIGTERM) (v100kit/cli.py: the convention every command
shares)."""

from __future__ import annotations

import argparse
import json

from roles.doctor import diagnose
from roles.doctor.checks import Row, as_dict
from roles.doctor.gather import gather  # noqa: F401  (loaded before hosts are diagnosed: diagnose imports it)
from v100kit.hosts import HostFailure, exit_status, for_each_host, json_results


def diagnose_all(inventory_file: str, limit: list[str] | None = None) -> dict[str, list[Row] | HostFailure]:
    """{host name: doctor rows, or the HostFailure when the host could not be diagnosed}."""
    return for_each_host(inventory_file, limit, diagnose, diagnosing=True)


def table(results: dict[str, list[Row] | HostFailure]) -> str:
    lines = []
    for name, rows in results.items():
        lines.append(f"== {name}")
        if isinstance(rows, HostFailure):
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
    """Print the rows (table or JSON); exit 0 all ok or skipped, 1 any broken or refused, 2 a host not diagnosed."""
    results = diagnose_all(args.inventory, args.limit)
    print(json.dumps(json_results(results, as_dict), indent=2) if args.json else table(results))
    return exit_status(results, lambda rows: any(row.state == "broken" for row in rows))
