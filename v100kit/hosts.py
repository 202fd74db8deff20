"""Read-only commands over an inventory (doctor, plan): connect, run the preflight, call a function per host."""

from __future__ import annotations

import os
from pathlib import Path

from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host, ctx_state
from pyinfra_cli.inventory import make_inventory

from roles.preflight import preflight
from roles.ssh import tcp_nodelay

ROOT = Path(__file__).resolve().parents[1]


class UnknownHost(ValueError):
    """A --limit host name that is not in the inventory, or an inventory file that does not exist."""


def inventory_path(inventory: str, cwd: Path) -> str:
    """`inventory` as pyinfra should read it once the command has moved to the project root: a file path (it ends in
    .py or names a directory) resolved against the caller's working directory `cwd`; host names (`@local`,
    `gpu-01,gpu-02`) as given. Raises UnknownHost for a file that does not exist (a wrong path must not read as
    "no host, nothing wrong")."""
    if not (inventory.endswith(".py") or "/" in inventory):
        return inventory
    path = (cwd / inventory).expanduser()
    if not path.is_file():
        raise UnknownHost(f"inventory {inventory}: no such file ({path})")
    return str(path.resolve())


def load_inventory(inventory_file: str, limit: list[str] | None):
    """pyinfra's Inventory of `inventory_file` (a path from inventory_path, or host names), read as pyinfra's CLI
    reads it: from the project root, where group_data/ is (the process moves there). Raises UnknownHost for a
    `limit` name the inventory lacks (a typo must not read as "no host, nothing wrong")."""
    os.chdir(ROOT)  # group_data/ is found relative to the project, as for pyinfra's CLI
    tcp_nodelay()  # as config.py does for pyinfra's CLI
    with ctx_state.use(State()):  # inventory files are executed in a pyinfra context
        inventory = make_inventory(inventory_file, cwd=str(ROOT))
    names = [h.name for h in inventory]
    if unknown := sorted(set(limit or ()) - set(names)):
        raise UnknownHost(f"--limit {', '.join(unknown)}: no such host in {inventory_file} "
                          f"(its hosts: {', '.join(names) or 'none'})")
    return inventory


def for_each_host(inventory_file: str, limit: list[str] | None, fn, diagnosing: bool = False) -> dict:
    """{host name: fn(host, preflight(host, diagnosing, deploying=False)), or the error string when the host cannot be reached or
    refused}. Read-only: only facts are gathered. Raises UnknownHost for a `limit` name the inventory lacks (a typo
    must not read as "every host healthy")."""
    inventory = load_inventory(inventory_path(inventory_file, Path.cwd()), limit)
    state = State(inventory, Config())
    state.init(inventory, Config())
    results: dict = {}
    with ctx_state.use(state):
        try:
            connect_all(state)
        except PyinfraError:  # pyinfra gives up when no host at all answers: each is then "cannot connect"
            pass
        for host in inventory:
            if limit and host.name not in limit:
                continue
            if host not in state.activated_hosts:
                results[host.name] = "cannot connect"
                continue
            with ctx_host.use(host):
                try:
                    results[host.name] = fn(host, preflight(host, diagnosing, deploying=False))
                except PyinfraError as e:
                    results[host.name] = str(e)
    return results
