"""v100kit monitoring scrape-config INVENTORY [--json] [--limit HOST ...] [--credentials-dir DIR]
[--write-credentials] [--rules FILE ...]: a Prometheus scrape configuration for the inventory's hosts.

Per host: its node exporter (where monitoring_enabled; the GPU exporter's and the doctor's metrics come through its
textfile collector) and each engine instance's /metrics (each registered engine's: llama-server with `metrics`, vLLM,
LMDeploy; Engine.scrape), labelled host, engine (the unit template) and instance_name. A keyed instance gets a job of its own whose `authorization` reads the key from
DIR/HOST_UNIT.key (monitoring_credentials_dir, or --credentials-dir): the key is never in the output, a URL or an
argument. --write-credentials writes those files here (0600, from each api_key_file; the directory 0700): run it on
the Prometheus server, or copy the directory there. Read from the inventory's settings alone: no host is connected.

Prints the configuration as YAML (notes, such as a target on the loopback, on stderr); with --json one object:
{"config": {...}, "hosts": {HOST: {"targets": [{"job", "address", "labels", "credentials_file"}], "notes": [...]}
or {"error": "refused", "cause", "problems"}}, "credentials": [{"file", "host", "unit"}]}.

Exit status: 0 every host's settings read, 1 a host's settings refused (its targets are left out), 2 a bad argument
or inventory (v100kit/cli.py: the convention every command shares)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from roles.engine_registry import by_unit
from roles.monitoring.decide import Target, scrape_config, targets
from roles.secrets import read_api_key
from roles.settings import SettingsError, load_settings
from v100kit.hosts import FINDING, REFUSED, HostFailure, exit_status, inventory_path, json_results, load_inventory


def host_address(host) -> str:
    """How a Prometheus server reaches the host: the inventory's ssh_hostname, else its name."""
    return host.data.get("ssh_hostname") or host.name


def collect(inventory_file: str, limit: list[str] | None, credentials_dir: str | None = None
            ) -> tuple[dict, dict]:
    """({host: [Target] or HostFailure}, {host: its Settings}) of the hosts `limit` selects."""
    inventory, selected = load_inventory(inventory_path(inventory_file, Path.cwd()), limit)
    results, settings = {}, {}
    for host in selected:
        try:
            s = load_settings(host.name, host.data.dict())
        except SettingsError as e:
            results[host.name] = HostFailure(REFUSED, str(e), tuple(e.problems))
            continue
        settings[host.name] = s
        results[host.name] = targets(host.name, host_address(host), s, credentials_dir)
    return results, settings


def write_credentials(results: dict, settings: dict) -> list[dict]:
    """Write each keyed instance's API key (its api_key_file on this machine) to its credentials file, 0600 in a
    0700 directory; returns [{"file", "host", "unit"}]. Every key is read before the first file is written, so a
    missing key file leaves no host half-written. Raises ValueError naming each host and setting whose key cannot be
    read (read_api_key's problems), OSError where a file cannot be written."""
    keys, problems = [], []
    for host, found in results.items():
        if isinstance(found, HostFailure):
            continue
        for t in found:
            if not t.credentials_file:
                continue
            name, unit = t.labels["instance_name"], f"{t.labels['engine']}@{t.labels['instance_name']}"
            engine = by_unit(unit)  # the target's engine label is its unit template (targets())
            table = getattr(settings[host], engine.key)
            key, found_problems = read_api_key(f"{engine.key}.{name}.api_key_file", table[name].api_key_file)
            problems += [f"{host}: {p}" for p in found_problems]
            keys.append((host, unit, Path(t.credentials_file), key))
    if problems:
        raise ValueError("; ".join(problems))
    written = []
    for host, unit, path, key in keys:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key)  # Prometheus reads the whole file as the credentials (trailing whitespace trimmed)
        os.chmod(path, 0o600)
        written.append({"file": str(path), "host": host, "unit": unit})
    return written


def _target_json(found: list[Target]) -> dict:
    return {"targets": [{"job": t.job, "address": t.address, "labels": t.labels,
                         "credentials_file": t.credentials_file} for t in found],
            "notes": [t.note for t in found if t.note]}


def _seconds(value: str) -> int:
    """--scrape-interval: a whole number of seconds >= 1 (Prometheus refuses a negative duration and reads 0s as
    its default)."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of seconds >= 1 (e.g. 30)")
    return n


def _rule_file(value: str) -> str:
    """--rules: an existing file on this machine, written as its absolute path: Prometheus reads a relative
    rule_files entry against the configuration file's own directory, not where this command ran (promtool check
    config fails on one that does not resolve there)."""
    path = Path(value).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file (give the rule file's path on this machine, e.g. "
                                         "files/monitoring/alerts.yml; copy it beside the configuration on the "
                                         "Prometheus server and point rule_files there if the paths differ)")
    return str(path.resolve())


def add_arguments(p: argparse.ArgumentParser) -> None:
    from v100kit.cli import inventory_arguments

    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("scrape-config", help="print a Prometheus scrape configuration for the inventory",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    inventory_arguments(s)
    s.add_argument("--credentials-dir", metavar="DIR", help="where the Prometheus server keeps the API keys "
                                                            "(default: each host's monitoring_credentials_dir)")
    s.add_argument("--write-credentials", action="store_true",
                   help="write each keyed instance's key there (0600), read from its api_key_file")
    s.add_argument("--rules", action="append", metavar="FILE", default=[], type=_rule_file,
                   help="rule files to list, written as absolute paths (e.g. files/monitoring/alerts.yml; "
                        "repeatable)")
    s.add_argument("--scrape-interval", type=_seconds, default=30, metavar="SECONDS")


def run(args: argparse.Namespace) -> int:
    """Print the configuration; exit 0, or 1 where a host's settings were refused (v100kit/cli.py's convention)."""
    if args.credentials_dir and not args.credentials_dir.startswith("/"):
        args.credentials_dir = str(Path(args.credentials_dir).resolve())
    results, settings = collect(args.inventory, args.limit, args.credentials_dir)
    found = {h: r for h, r in results.items() if not isinstance(r, HostFailure)}
    config = scrape_config(found, args.scrape_interval, tuple(args.rules))
    try:
        written = write_credentials(results, settings) if args.write_credentials else []
    except (OSError, ValueError) as e:  # an api_key_file that cannot be read, a directory that cannot be written
        print(f"v100kit monitoring: cannot write the credentials, none written: {e}", file=sys.stderr)
        if args.json:  # --json keeps its one-object contract on failure too, with the cause
            print(json.dumps({"config": None, "hosts": json_results(results, _target_json), "credentials": [],
                              "error": "credentials", "cause": str(e)}, indent=2))
        return FINDING
    if args.json:
        print(json.dumps({"config": config, "hosts": json_results(results, _target_json), "credentials": written},
                         indent=2))
    else:
        for host, r in results.items():
            if isinstance(r, HostFailure):
                print(f"v100kit monitoring: {host} left out: {r}", file=sys.stderr)
            else:
                for t in r:
                    if t.note:
                        print(f"v100kit monitoring: note: {t.note}", file=sys.stderr)
        for w in written:
            print(f"v100kit monitoring: wrote {w['file']} ({w['host']} {w['unit']}, 0600)", file=sys.stderr)
        # with end="" a long text into a pipe its reader closed mid-way lost the EPIPE (exit 0 after a partial
        # write, CPython 3.11); the newline print writes on its own raises it
        print(yaml.safe_dump(config, sort_keys=False, default_flow_style=False).rstrip("\n"))
    return exit_status(results)
