"""Read-only commands over an inventory (doctor, plan): connect, run the preflight, call a function per host."""

from __future__ import annotations

import os
from fnmatch import fnmatch
from pathlib import Path

from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import NoGroupError, PyinfraError
from pyinfra.context import ctx_host, ctx_state
from pyinfra_cli.inventory import make_inventory

from roles.preflight import preflight
from roles.ssh import tcp_nodelay

ROOT = Path(__file__).resolve().parents[1]


class UnknownHost(ValueError):
    """A --limit item that selects no host of the inventory, or an inventory file that does not exist or fails to run."""


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
    """(pyinfra's Inventory of `inventory_file`, the hosts `limit` selects in inventory order: all without one),
    `inventory_file` a path from inventory_path or host names, read as pyinfra's CLI reads it: from the project
    root, where group_data/ is (the process moves there). A `limit` item selects as pyinfra's --limit does: a group
    name, else host names matching it as a glob (fnmatch). Raises UnknownHost for an item that selects nothing (a
    typo must not read as "no host, nothing wrong") and for an inventory file that fails to run."""
    os.chdir(ROOT)  # group_data/ is found relative to the project, as for pyinfra's CLI
    tcp_nodelay()  # as config.py does for pyinfra's CLI
    try:
        with ctx_state.use(State()):  # inventory files are executed in a pyinfra context
            inventory = make_inventory(inventory_file, cwd=str(ROOT))
    except Exception as e:  # the user's Python (pyinfra wraps its errors, and its wrapper's str() can fail)
        cause = getattr(e, "exception", e)
        raise UnknownHost(f"inventory {inventory_file}: {type(cause).__name__}: {cause}: fix the file "
                          "(`python3 FILE` shows where)") from None
    hosts = list(inventory)
    selected = set()
    for pattern in limit or ():  # pyinfra_cli.cli._get_inventory_pattern_matches's rule; that one is private and
        # logs its own warning where this raises
        try:
            matches = inventory.get_group(pattern)
        except NoGroupError:
            matches = [h for h in hosts if fnmatch(h.name, pattern)]
        if not matches:
            groups = sorted(g for g in inventory.groups if inventory.groups[g])
            raise UnknownHost(f"--limit {pattern}: no such host in {inventory_file}, nor a group "
                              f"(its hosts: {', '.join(h.name for h in hosts) or 'none'}; "
                              f"its groups: {', '.join(groups) or 'none'})")
        selected.update(matches)
    return inventory, [h for h in hosts if not limit or h in selected]


def for_each_host(inventory_file: str, limit: list[str] | None, fn, diagnosing: bool = False) -> dict:
    """{host name: fn(host, preflight(host, diagnosing, deploying=False)), or the error string when the host cannot be reached or
    refused}. Read-only: only facts are gathered. Raises UnknownHost for a `limit` name the inventory lacks (a typo
    must not read as "every host healthy")."""
    inventory, selected = load_inventory(inventory_path(inventory_file, Path.cwd()), limit)
    state = State(inventory, Config())
    state.init(inventory, Config())
    results: dict = {}
    with ctx_state.use(state):
        try:
            connect_all(state)
        except PyinfraError:  # pyinfra gives up when no host at all answers: each is then "cannot connect"
            pass
        for host in selected:
            if host not in state.activated_hosts:
                results[host.name] = "cannot connect"
                continue
            with ctx_host.use(host):
                try:
                    results[host.name] = fn(host, preflight(host, diagnosing, deploying=False))
                except PyinfraError as e:
                    results[host.name] = str(e)
    return results
