"""v100kit offline fill|serve|deploy: provision hosts that reach no registry, from a directory on the control
machine.

    v100kit offline fill DIR INVENTORY [--limit HOST]      # on the control machine, with internet
    v100kit offline deploy DIR INVENTORY --address ADDR [-- PYINFRA ARGS]   # serve DIR while pyinfra deploys
    v100kit offline serve DIR --address ADDR               # only serve (for your own pyinfra run); prints the data

`fill` reads each host over SSH (its facts, its dpkg status) and puts into DIR everything its deploy downloads:
- apt: each repository's signed InRelease, the indexes apt reads, and the .debs the host lacks for the packages
  the deploy installs (v100kit/offline_apt.py), in the archives' own layout;
- PyPI: every wheel of the host's vLLM lock and the pinned uv wheel, as a simple index (v100kit/offline_pypi.py);
- files: the llama.cpp source archive, NVIDIA's repository key where a host uses it, NVIDIA's pinned .run driver
  installer of a host with `nvidia_driver_source: runfile` (from the pin's URL, or nvidia_driver_runfile_url;
  served through nvidia_driver_runfile_url), and the models given as URLs (as models/SHA256/FILE, served through
  llama_cpp_model_mirror).
Every file is checked on the way in against the checksum the deploy checks it against (the InRelease and index
sha256, the lock's hashes, the pinned sha256s); the hosts check them again. Models from the control machine or a
Hugging Face commit are pushed by the deploy over SSH as always (a hub commit is fetched into the hub cache by
`fill`). DIR/settings.json records the data a deploy from DIR needs, with {base} for the server's URL. While it
runs, `fill` prints one line per file on stderr (`offline fill: downloaded|cached SIZE PATH`); stdout gets the
report at the end.

`deploy` serves DIR with a short-lived HTTP server bound to ADDR (an IPv4 address of the control machine that the
hosts reach, e.g. its end of a private network) and runs `pyinfra -y INVENTORY deploy.py` with that data; the server
stops when pyinfra does.

The .debs are those the hosts lack: fill from hosts as fresh as those the directory will provision. A refusal (a
--limit name the inventory lacks, a host that does not answer, hosts one deploy cannot serve together, a bad
--address, a download that fails or does not match) is one line and exit 2, before DIR is created where it can be.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import ipaddress
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

from pyinfra.api.exceptions import PyinfraError

from roles.engines import is_url, url_file_name
from roles.llama_cpp.decide import model_parts
from v100kit import offline_apt, offline_pypi
from v100kit.hosts import ROOT, inventory_path, load_inventory

DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    fill = sub.add_parser("fill", help="fill DIR with everything the inventory's hosts download")
    fill.add_argument("dir", help="the directory to fill (created; a directory filled before is completed)")
    fill.add_argument("inventory", help="pyinfra inventory of the hosts, e.g. inventory/site.py (read over SSH)")
    fill.add_argument("--limit", action="append", metavar="HOST",
                      help="only this host or group (repeatable; a glob matches host names)")
    for name, help_ in (("deploy", "serve DIR and deploy the inventory from it"), ("serve", "only serve DIR")):
        usage = "%(prog)s DIR INVENTORY --address ADDR [--port PORT] [--limit HOST] [-- PYINFRA ARGS]" \
            if name == "deploy" else None
        p = sub.add_parser(name, help=help_, usage=usage)
        p.add_argument("dir", help="a directory `v100kit offline fill` filled")
        if name == "deploy":
            p.add_argument("inventory", help="pyinfra inventory of the hosts to deploy")
            p.add_argument("--limit", action="append", metavar="HOST",
                           help="only this host or group (repeatable; a glob matches host names)")
            p.set_defaults(passthrough=[])  # what follows `--`: more pyinfra arguments (e.g. -- --json)
        p.add_argument("--address", required=True, help="IPv4 address of this machine that the hosts reach")
        p.add_argument("--port", type=port, default=DEFAULT_PORT,
                       help=f"TCP port to serve on (default {DEFAULT_PORT}; 0: any free one)")


def port(value: str) -> int:
    """--port: a TCP port number, 0 to 65535 (argparse type; raises ArgumentTypeError)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value}: a TCP port is 0 to 65535 (0: any free one)")
    return number


def run(args: argparse.Namespace) -> int:
    """Run `fill`, `serve` or `deploy`; returns the exit status: 2, with one line saying what and the fix, for a
    refusal (a bad argument, a host that does not answer, a download that fails its checksum), before DIR is
    created or a host changed where the cause is known that early."""
    try:
        return _run(args, Path(args.dir).expanduser().resolve())
    except (ValueError, OSError, PyinfraError) as e:  # offline_apt/offline_pypi/hub refusals, sockets, files
        print(f"v100kit offline {args.action}: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, directory: Path) -> int:
    if args.action == "fill":
        for line in fill(directory, inventory_path(args.inventory, Path.cwd()), args.limit):
            print(line)
        return 0
    address = listen_address(args.address)
    filled_settings(directory)  # refused here, before the server starts
    inventory = None
    if args.action == "deploy":  # a --limit typo is refused here, not by pyinfra with exit 0
        inventory = inventory_path(args.inventory, Path.cwd())
        load_inventory(inventory, args.limit)
    with serve(directory, address, args.port) as base:
        data = deploy_data(directory, base)
        if args.action == "serve":
            print(f"serving {directory} at {base}; pyinfra data for the deploy:")
            print(json.dumps(data, indent=2), flush=True)
            try:
                wait_until_interrupted()
            except KeyboardInterrupt:
                print(f"stopped serving {directory}")
            return 0
        limit = [a for h in args.limit or () for a in ("--limit", h)]
        cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", *limit, *data_args(data), *args.passthrough,
               inventory, "deploy.py"]
        return subprocess.run(cmd, cwd=ROOT).returncode


def wait_until_interrupted() -> None:
    """Block until the process is interrupted (`serve` serves until Ctrl-C or SIGTERM:
    v100kit/cli.py raises both as KeyboardInterrupt)."""
    threading.Event().wait()


def listen_address(address: str) -> str:
    """`address` (--address) as the server binds it: an IPv4 address of this machine that the hosts reach. Raises
    OfflineError for a name, an IPv6 address (the server is IPv4 only) or 0.0.0.0 (the hosts would be told to fetch
    from it); an address this machine does not have fails at the bind (OSError, errno 99)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise offline_apt.OfflineError(f"--address {address}: not an IP address; give the IPv4 address of this "
                                       "machine that the hosts reach (e.g. its end of their private network)") from None
    if ip.version != 4 or ip.is_unspecified or ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise offline_apt.OfflineError(f"--address {address}: the hosts fetch from this address, so it must be one "
                                       "IPv4 address of this machine that they reach (not 0.0.0.0, not IPv6, not "
                                       "multicast or broadcast)")
    return address


def data_args(data: dict) -> list[str]:
    """pyinfra --data overrides (JSON values)."""
    return [a for k, v in data.items() for a in ("--data", f"{k}={json.dumps(v)}")]


def not_a_file(directory: Path) -> None:
    """Raise OfflineError when DIR exists and is not a directory."""
    if directory.exists() and not directory.is_dir():
        raise offline_apt.OfflineError(f"{directory} is a file: give a directory (for fill a new one or one filled "
                                       "before, for serve and deploy one that fill filled)")


def filled_settings(directory: Path) -> dict[str, str]:
    """DIR/settings.json as `fill` wrote it: {setting: value with {base}}. Raises OfflineError naming the file and the
    fix when DIR is not a directory, or the file is missing, not JSON, or not what a completed fill writes (a JSON
    object of strings with base_apt_mirror: every fill gives each host's distribution archive)."""
    settings = directory / "settings.json"
    not_a_file(directory)
    if not settings.is_file():
        raise offline_apt.OfflineError(f"{directory} holds no settings.json: run `v100kit offline fill` first")
    fix = "no fill completed there; run `v100kit offline fill` again with the hosts to deploy"
    try:
        data = json.loads(settings.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise offline_apt.OfflineError(f"{settings} is not JSON ({e}): {fix}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise offline_apt.OfflineError(f"{settings} is not a JSON object of setting: string: {fix}")
    if "base_apt_mirror" not in data:
        raise offline_apt.OfflineError(f"{settings} names no apt mirror ({sorted(data) or 'empty'}): {fix}")
    return data


def deploy_data(directory: Path, base: str) -> dict:
    """The settings.json of DIR (filled_settings) with {base} replaced by the server's URL."""
    return {k: v.replace("{base}", base.rstrip("/")) for k, v in filled_settings(directory).items()}


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
    try:
        server = http.server.ThreadingHTTPServer((address, port), functools.partial(handler, directory=str(directory)))
    except OSError as e:
        raise OSError(f"cannot listen on {address}:{port} ({e.strerror}): give an address of this machine "
                      "(`ip -4 addr`) and a free --port") from None
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
    """Fill `directory` for the inventory's hosts (see the module doc). Returns report lines. Raises UnknownHost (a
    --limit name the inventory lacks), offline_apt.OfflineError (DIR is a file, a host does not answer over SSH,
    hosts that one deploy cannot serve together), SettingsError (a host's settings), all before DIR is created or
    anything downloaded; then offline_apt/offline_pypi errors naming a download that failed or did not match."""
    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all
    from pyinfra.context import ctx_host, ctx_state
    from pyinfra.facts.server import Command
    from pyinfra_cli.util import load_deploy_file

    from roles.preflight import preflight

    not_a_file(directory)
    inventory, wanted = load_inventory(inventory_file, limit)
    if not wanted:
        raise offline_apt.OfflineError(f"{inventory_file} has no hosts: give the inventory of the hosts to fill for")
    data: dict = {}
    if (directory / "settings.json").exists():  # filled before: the hosts filled then are deployed from it too
        data = filled_settings(directory)
    state = State(inventory, Config())
    state.init(inventory, Config())
    state.limit_hosts = wanted
    hosts = []
    with ctx_state.use(state):
        try:
            connect_all(state)
        except PyinfraError:  # no host answered: said below, by name
            pass
        if lost := [h.name for h in wanted if h not in state.activated_hosts]:
            raise offline_apt.OfflineError(f"{', '.join(lost)}: cannot connect over SSH (fill reads each host's "
                                           "facts and dpkg status): check the inventory's SSH settings, or --limit "
                                           "the hosts that answer")
        load_deploy_file(state, str(ROOT / "deploy.py"))  # runs each host's preflight: refusals stop here
        for host in wanted:
            with ctx_host.use(host):
                hosts.append((host.name, preflight(host), host_commands(state, host),
                              host.get_fact(Command, command="cat /var/lib/dpkg/status")))
    for name, plan, _, _ in hosts:  # every conflict, with these hosts and those filled before, before any download
        agree(data, name, host_settings(plan))
    directory.mkdir(parents=True, exist_ok=True)
    report = []
    for name, plan, commands, status in hosts:
        report += fill_host(directory, name, plan, commands, status, data)
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


def managed_repositories_of(plan) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(URI, suites, components) of each apt repository the deploy manages on the host of `plan`
    (roles/base/decide.py managed_repositories), NVIDIA's flat repository with no components."""
    from roles.base.decide import COMPONENTS, managed_repositories

    return [(uri, suites, () if suites == ("/",) else COMPONENTS[plan.platform.family])
            for uri, suites in managed_repositories(plan.settings, plan.platform)]


def host_settings(plan) -> dict:
    """The settings a deploy from the directory passes for the host of `plan` ({base} for the server's URL;
    llama_cpp_source None where the host's archive is pushed from the control machine: it keeps its own). Known
    before anything is downloaded: the files are stored under their URL's file name."""
    from roles.vllm.versions import UV_WHEEL_URL

    out = served_settings(managed_repositories_of(plan), plan.settings.cuda_nvidia_repo_url)
    if plan.vllm:
        out["vllm_index_url"] = "{base}/pypi/simple"
        out["vllm_uv_wheel_url"] = f"{{base}}/pypi/files/{url_file_name(UV_WHEEL_URL)}"
    if plan.llama_cpp and plan.llama_cpp.source_is_local:  # a served URL passed to all would replace it
        out["llama_cpp_source"] = None
    elif plan.llama_cpp:
        out["llama_cpp_source"] = f"{{base}}/files/{url_file_name(plan.llama_cpp.source.url)}"
        out["llama_cpp_source_sha256"] = plan.llama_cpp.source.sha256
    if any(is_url(i.settings.model_source or "") for i in (plan.llama_cpp.instances if plan.llama_cpp else ())):
        out["llama_cpp_model_mirror"] = "{base}/models"
    if plan.driver and plan.driver.runfile_url:  # nvidia_driver_source: runfile; the host checks the pinned sha256
        out["nvidia_driver_runfile_url"] = f"{{base}}/files/{url_file_name(plan.driver.runfile_url)}"
    return out


def agree(data: dict, name: str, settings: dict) -> None:
    """Add host `name`'s `settings` (host_settings) to `data`, the settings of the hosts filled before: one deploy
    passes one value of each to every host. Raises OfflineError naming the setting and both values."""
    own = "its own (a control-machine archive, pushed over SSH)"
    for key, value in settings.items():
        if data.setdefault(key, value) != value:
            raise offline_apt.OfflineError(
                f"{name}: {key} would be {own if value is None else value}, another host's is "
                f"{own if data[key] is None else data[key]}: fill and deploy hosts that differ there from separate "
                "directories (--limit, or one inventory per distribution family or llama.cpp source), or remove "
                "the directory's settings.json to fill it anew for other hosts")


def fill_host(directory: Path, name: str, plan, commands: list[str], dpkg_status: str, data: dict) -> list[str]:
    """Fill `directory` for one host: `plan` its preflight plan (roles.preflight), `commands` what its deploy would
    run now (host_commands), `dpkg_status` its /var/lib/dpkg/status. Adds the settings a deploy from the directory
    needs to `data` ({base} for the server's URL), refusing before any download a host whose settings differ from
    those filled before into the same `data` (agree). Returns report lines. Raises offline_apt.OfflineError,
    offline_pypi's errors."""
    from roles.cuda.versions import NVIDIA_REPO_KEY_FILE
    from roles.vllm.versions import UV_WHEEL_SHA256, UV_WHEEL_URL

    agree(data, name, host_settings(plan))
    report = []
    apt_root = directory / "apt"
    packages = offline_apt.apt_packages(commands)
    repos = managed_repositories_of(plan)
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
    if not packages:
        report.append(f"{name}: has every package its deploy installs, so no .deb was filled for it: a directory "
                      "filled from a provisioned host cannot provision a fresh one (fill from a fresh host)")
    if plan.vllm:
        wheels = offline_pypi.fill_wheels(plan.vllm.lock, plan.vllm.python, directory / "pypi")
        uv = offline_pypi.fill_file(UV_WHEEL_URL, UV_WHEEL_SHA256, directory / "pypi" / "files")
        report.append(f"{name}: PyPI: {len(wheels)} wheels of {plan.vllm.lock.name}, uv {uv.name}")
    if plan.driver and plan.driver.runfile_url:  # the pinned .run installer, checked against the pin's sha256
        path = offline_pypi.fill_file(plan.driver.runfile_url, plan.driver.pin.runfile.sha256, directory / "files")
        report.append(f"{name}: NVIDIA driver installer {path.name} ({path.stat().st_size / 2**20:.0f} MiB)")
    if plan.llama_cpp and not plan.llama_cpp.source_is_local:
        src = plan.llama_cpp.source
        path = offline_pypi.fill_file(src.url, src.sha256, directory / "files")
        report.append(f"{name}: llama.cpp source {path.name}")
    for inst in plan.llama_cpp.instances if plan.llama_cpp else ():
        if is_url(url := inst.settings.model_source or ""):  # served as MIRROR/SHA256/FILE
            sha = inst.settings.model_sha256
            path = offline_pypi.fill_file(url, sha, directory / "models" / sha)
            report.append(f"{name}: {inst.name}: model {path.name} ({path.stat().st_size / 2**30:.2f} GiB)")
            for part in model_parts(inst.settings, url, inst.model_path):  # the other parts of a split GGUF
                path = offline_pypi.fill_file(part.source, part.sha256, directory / "models" / part.sha256)
                report.append(f"{name}: {inst.name}: model part {path.name} ({path.stat().st_size / 2**30:.2f} GiB)")
    return report
