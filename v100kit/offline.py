"""v100kit offline fill|serve|deploy: provision hosts that reach no registry, from a directory on the control
machine.

    v100kit offline fill DIR INVENTORY [--limit HOST]      # on the control machine, with internet
    v100kit offline deploy DIR INVENTORY --address ADDR [-- PYINFRA ARGS]   # serve DIR while pyinfra deploys
    v100kit offline serve DIR --address ADDR               # only serve (for your own pyinfra run); prints the data

`fill` reads each host over SSH (its facts, its dpkg status) and puts into DIR everything its deploy downloads:
- apt: each repository's signed InRelease, the indexes apt reads, and the .debs the host lacks for the packages
  the deploy installs (v100kit/offline_apt.py), in the archives' own layout;
- PyPI: every wheel of the host's vLLM lock and the pinned uv wheel, as a simple index (v100kit/offline_pypi.py);
- files: the llama.cpp source archive, NVIDIA's repository key where a host uses it, and the models given as
  URLs (as models/SHA256/FILE, served through llama_cpp_model_mirror).
Every file is checked on the way in against the checksum the deploy checks it against (the InRelease and index
sha256, the lock's hashes, the pinned sha256s); the hosts check them again. Models from the control machine or a
Hugging Face commit are pushed by the deploy over SSH as always (a hub commit is fetched into the hub cache by
`fill`). DIR/settings.json records the data a deploy from DIR needs, with {base} for the server's URL.

`deploy` serves DIR with a short-lived HTTP server bound to ADDR (an address of the control machine that the hosts
reach, e.g. its end of a private network) and runs `pyinfra -y INVENTORY deploy.py` with that data; the server
stops when pyinfra does.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

from roles.engines import is_url
from v100kit import offline_apt, offline_pypi
from v100kit.hosts import ROOT, inventory_path

DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    fill = sub.add_parser("fill", help="fill DIR with everything the inventory's hosts download")
    fill.add_argument("dir")
    fill.add_argument("inventory")
    fill.add_argument("--limit", action="append", metavar="HOST", help="only this host (repeatable)")
    for name, help_ in (("deploy", "serve DIR and deploy the inventory from it"), ("serve", "only serve DIR")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("dir")
        if name == "deploy":
            p.add_argument("inventory")
            p.add_argument("--limit", action="append", metavar="HOST", help="only this host (repeatable)")
            p.set_defaults(passthrough=[])  # what follows `--`: more pyinfra arguments (e.g. -- --json)
        p.add_argument("--address", required=True, help="control-machine address the hosts reach")
        p.add_argument("--port", type=int, default=DEFAULT_PORT)


def run(args: argparse.Namespace) -> int:
    directory = Path(args.dir).expanduser().resolve()
    if args.action == "fill":
        for line in fill(directory, inventory_path(args.inventory, Path.cwd()), args.limit):
            print(line)
        return 0
    if not (directory / "settings.json").is_file():
        print(f"v100kit offline: {directory} holds no settings.json: run `v100kit offline fill` first", file=sys.stderr)
        return 2
    with serve(directory, args.address, args.port) as base:
        data = deploy_data(directory, base)
        if args.action == "serve":
            print(f"serving {directory} at {base}; pyinfra data for the deploy:")
            print(json.dumps(data, indent=2))
            threading.Event().wait()
        inventory = inventory_path(args.inventory, Path.cwd())
        limit = [a for h in args.limit or () for a in ("--limit", h)]
        cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", *limit, *data_args(data), *args.passthrough,
               inventory, "deploy.py"]
        return subprocess.run(cmd, cwd=ROOT).returncode


def data_args(data: dict) -> list[str]:
    """pyinfra --data overrides (JSON values)."""
    return [a for k, v in data.items() for a in ("--data", f"{k}={json.dumps(v)}")]


def deploy_data(directory: Path, base: str) -> dict:
    """The settings.json of DIR with {base} replaced by the server's URL."""
    return json.loads((directory / "settings.json").read_text().replace("{base}", base.rstrip("/")))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    record: list | None = None

    def log_message(self, *args):
        pass

    def send_head(self):
        if self.record is not None:
            self.record.append((self.client_address[0], self.path))
        return super().send_head()


@contextlib.contextmanager
def serve(directory: Path, address: str, port: int = 0, record: list | None = None):
    """A static HTTP server of `directory` on address:port (0: any free port) for the with-block; yields its base
    URL (http://ADDRESS:PORT). Read-only: GET and HEAD of the files under `directory` only. `record`: a list that
    gets (client address, path) of every request."""
    handler = type("Handler", (_Quiet,), {"record": record})
    server = http.server.ThreadingHTTPServer((address, port), functools.partial(handler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def host_commands(state, host) -> list[str]:
    """The commands deploy.py would run on `host` now (its facts read over SSH; nothing is executed)."""
    out = []
    for op_hash in state.get_op_order():
        try:
            op_data = state.get_op_data_for_host(host, op_hash)
        except KeyError:
            continue
        out += [str(c) for c in op_data.command_generator()]
    return out


def fill(directory: Path, inventory_file: str, limit: list[str] | None) -> list[str]:
    """Fill `directory` for the inventory's hosts (see the module doc). Returns report lines. Raises
    offline_apt.OfflineError / offline_pypi errors / SettingsError naming what failed."""
    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all
    from pyinfra.context import ctx_host, ctx_state
    from pyinfra.facts.server import Command
    from pyinfra_cli.inventory import make_inventory
    from pyinfra_cli.util import load_deploy_file

    from roles.preflight import preflight

    directory.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    with ctx_state.use(State()):
        inventory = make_inventory(inventory_file, cwd=str(ROOT))
    state = State(inventory, Config())
    state.init(inventory, Config())
    if limit:
        state.limit_hosts = [h for h in inventory if h.name in limit]
    report, data = [], {}
    with ctx_state.use(state):
        connect_all(state)
        load_deploy_file(state, str(ROOT / "deploy.py"))  # runs each host's preflight: refusals stop here
        for host in state.activated_hosts:
            if limit and host.name not in limit:
                continue
            with ctx_host.use(host):
                plan = preflight(host)
                commands = host_commands(state, host)
                status = host.get_fact(Command, command="cat /var/lib/dpkg/status")
            report += fill_host(directory, host.name, plan, commands, status, data)
    data = {k: v for k, v in data.items() if v is not None}  # None: each host keeps its own value
    (directory / "settings.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    report.append(f"{directory}/settings.json: {', '.join(sorted(data))}")
    return report


def served_settings(repositories: list[tuple[str, tuple[str, ...], tuple[str, ...]]],
                    cuda_nvidia_repo_url: str) -> dict[str, str]:
    """The settings that point a host at the directory's copies of `repositories` (roles/base/decide.py
    managed_repositories' (URI, suites, components), in its order: the distribution, its security archive, NVIDIA's
    flat repository), with {base} for the server's URL: base_apt_mirror, base_apt_security_mirror and, where the
    host uses NVIDIA's repository, cuda_nvidia_repo_url (the host's own root, which the cuda role appends the OS
    directory to, as served)."""
    out = {key: offline_apt.served_url("{base}/apt", uri).rstrip("/")
           for (uri, suites, _), key in zip(repositories, ("base_apt_mirror", "base_apt_security_mirror"))}
    if any(suites == ("/",) for _, suites, _ in repositories):
        out["cuda_nvidia_repo_url"] = offline_apt.served_url("{base}/apt", cuda_nvidia_repo_url)
    return out


def fill_host(directory: Path, name: str, plan, commands: list[str], dpkg_status: str, data: dict) -> list[str]:
    """Fill `directory` for one host: `plan` its preflight plan (roles.preflight), `commands` what its deploy would
    run now (host_commands), `dpkg_status` its /var/lib/dpkg/status. Adds the settings a deploy from the directory
    needs to `data` ({base} for the server's URL). Returns report lines. Raises offline_apt.OfflineError (also for
    a host whose distribution differs from one filled before into the same `data`), offline_pypi's errors."""
    from roles.base.decide import COMPONENTS, managed_repositories
    from roles.cuda.versions import NVIDIA_REPO_KEY_FILE
    from roles.vllm.versions import UV_WHEEL_SHA256, UV_WHEEL_URL

    report = []
    apt_root = directory / "apt"
    packages = offline_apt.apt_packages(commands)
    repos = [(uri, suites, () if suites == ("/",) else COMPONENTS[plan.platform.family])
             for uri, suites in managed_repositories(plan.settings, plan.platform)]
    for uri, suites, components in repos:
        for suite in suites:
            offline_apt.fill_repository(apt_root, uri, suite, components, "amd64")
        if suites == ("/",):  # NVIDIA's repository key, fetched by the cuda role from the same URI
            offline_apt._fetch(uri + NVIDIA_REPO_KEY_FILE, offline_apt.local_path(apt_root, uri + NVIDIA_REPO_KEY_FILE))
    with serve(apt_root, "127.0.0.1") as base:
        debs = offline_apt.resolve(apt_root, repos, packages, dpkg_status, "amd64", base)
    offline_apt.fill_debs(apt_root, debs, {urlparse(u).netloc: urlparse(u).scheme for u, _, _ in repos})
    report.append(f"{name}: apt: {len(packages)} packages asked for, {len(debs)} .debs "
                  f"({sum(d.size for d in debs) / 2**30:.2f} GiB)")
    def agree(key: str, value) -> None:  # one deploy passes one value of each setting to every host
        if data.setdefault(key, value) != value:  # None: the host keeps its own (not written to settings.json)
            own = "its own (a control-machine archive, pushed over SSH)"
            raise offline_apt.OfflineError(f"{name}: {key} would be {own if value is None else value}, another "
                                           f"host's is {own if data[key] is None else data[key]}: fill "
                                           "and deploy hosts that differ there from separate directories (--limit, "
                                           "or one inventory per distribution or llama.cpp source)")

    for key, value in served_settings(repos, plan.settings.cuda_nvidia_repo_url).items():
        agree(key, value)
    if plan.vllm:
        wheels = offline_pypi.fill_wheels(plan.vllm.lock, plan.vllm.python, directory / "pypi")
        uv = offline_pypi.fill_file(UV_WHEEL_URL, UV_WHEEL_SHA256, directory / "pypi" / "files")
        agree("vllm_index_url", "{base}/pypi/simple")
        agree("vllm_uv_wheel_url", f"{{base}}/pypi/files/{uv.name}")
        report.append(f"{name}: PyPI: {len(wheels)} wheels of {plan.vllm.lock.name}, uv {uv.name}")
    if plan.llama_cpp and plan.llama_cpp.source_is_local:  # a served URL passed to all would replace it
        agree("llama_cpp_source", None)
    elif plan.llama_cpp:
        src = plan.llama_cpp.source
        path = offline_pypi.fill_file(src.url, src.sha256, directory / "files")
        agree("llama_cpp_source", f"{{base}}/files/{path.name}")
        agree("llama_cpp_source_sha256", src.sha256)
        report.append(f"{name}: llama.cpp source {path.name}")
    for inst in plan.llama_cpp.instances if plan.llama_cpp else ():
        if is_url(url := inst.settings.model_source or ""):  # served as MIRROR/SHA256/FILE
            sha = inst.settings.model_sha256
            path = offline_pypi.fill_file(url, sha, directory / "models" / sha)
            agree("llama_cpp_model_mirror", "{base}/models")
            report.append(f"{name}: {inst.name}: model {path.name} ({path.stat().st_size / 2**30:.2f} GiB)")
    return report
