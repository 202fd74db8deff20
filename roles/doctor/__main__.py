"""python -m roles.doctor INVENTORY [--json] [--limit HOST ...]: diagnose hosts, change nothing.

Exit status: 0 when every check is ok or skipped, 1 when any is broken, 2 when a host cannot be diagnosed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host, ctx_state
from pyinfra_cli.inventory import make_inventory

from roles.doctor import Row, as_dict, diagnose
from roles.preflight import preflight

ROOT = Path(__file__).resolve().parents[2]


def for_each_host(inventory_file: str, limit: list[str] | None, fn) -> dict:
    """{host name: fn(host, preflight(host)), or the error string when the host cannot be reached or refused}.
    Read-only: only facts are gathered."""
    os.chdir(ROOT)  # group_data/ is found relative to the project, as for pyinfra's CLI
    with ctx_state.use(State()):  # inventory files are executed in a pyinfra context
        inventory = make_inventory(inventory_file, cwd=str(ROOT))
    state = State(inventory, Config())
    state.init(inventory, Config())
    results: dict[str, list[Row] | str] = {}
    with ctx_state.use(state):
        connect_all(state)
        for host in inventory:
            if limit and host.name not in limit:
                continue
            if host not in state.activated_hosts:
                results[host.name] = "cannot connect"
                continue
            with ctx_host.use(host):
                try:
                    results[host.name] = fn(host, preflight(host))
                except PyinfraError as e:
                    results[host.name] = str(e)
    return results


def run(inventory_file: str, limit: list[str] | None = None) -> dict[str, list[Row] | str]:
    """{host name: doctor rows, or the error string when the host could not be diagnosed}."""
    return for_each_host(inventory_file, limit, diagnose)


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m roles.doctor", description=__doc__)
    p.add_argument("inventory")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", action="append")
    args = p.parse_args(argv)
    results = run(args.inventory, args.limit)
    if args.json:
        print(json.dumps({h: r if isinstance(r, str) else as_dict(r) for h, r in results.items()}, indent=2))
    else:
        print(table(results))
    if any(isinstance(r, str) for r in results.values()):
        return 2
    return 1 if any(row.state == "broken" for rows in results.values() for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
