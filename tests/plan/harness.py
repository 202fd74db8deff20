"""Plan-level test harness: pyinfra's own @fake connector, facts in, commands out.

For paths that cannot run here (Ubuntu's archive, NVIDIA's repository, a real GPU), a fake host answers the
fact commands with canned output (`responses`: substring or re.Pattern of the command -> stdout lines) and
records every command that the real deploy.py would run on it. Nothing is executed anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
from pathlib import Path

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.context import ctx_host, ctx_state
from pyinfra_cli.util import load_deploy_file

ROOT = Path(__file__).resolve().parents[2]

UBUNTU_2204 = ["NAME=\"Ubuntu\"", "VERSION_ID=\"22.04\"", "ID=ubuntu", "ID_LIKE=debian",
               "PRETTY_NAME=\"Ubuntu 22.04.5 LTS\"", "VERSION_CODENAME=jammy"]
UBUNTU_2404 = ["NAME=\"Ubuntu\"", "VERSION_ID=\"24.04\"", "ID=ubuntu", "ID_LIKE=debian",
               "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"", "VERSION_CODENAME=noble"]
DEBIAN_13 = ["PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"", "VERSION_ID=\"13\"", "ID=debian",
             "VERSION_CODENAME=trixie"]
DEBIAN_12 = ["PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"", "VERSION_ID=\"12\"", "ID=debian",
             "VERSION_CODENAME=bookworm"]

#: A bare-metal Ubuntu box with a kernel metapackage installed and nothing of NVIDIA yet.
BARE_METAL = {
    "systemd-detect-virt": ["virt=none", "kernel=6.8.0-45-generic", "sysctl_writable=1", "thp_writable=1",
                            "modules_dir=1", "nouveau_loaded=0", "thp_mode=always"],
    "dpkg -l": ["ii  linux-image-generic  6.8.0.45.45  amd64  Generic Linux kernel image"],
    "--showformat='${db:Status-Abbrev}|": ["ii |linux-image-generic|linux-image-6.8.0-45-generic, linux-firmware"],
    "uname -s": ["Linux"],
    # pyinfra's Cpus and Memory facts (the llama.cpp build's compile jobs): 16 CPUs, 64 GiB. Memory's command runs
    # behind `command -v vmstat`, so its answer must come before that one
    "getconf NPROCESSORS_ONLN": ["16"],
    "vmstat -s": [f"{64 << 20} K total memory", "0 K used memory"],
    "command -v": ["/usr/bin/found"],  # every tool the operations look for is installed
    "sysctl ": ["vm.swappiness = 60", "vm.nr_hugepages = 0", "vm.max_map_count = 65530", "net.core.somaxconn = 4096"],
}


def _fake_state(os_release: list[str], data: dict | None, responses: dict | None):
    fake = dict(responses or {})
    fake.setdefault("cat /etc/os-release", os_release)
    for k, v in BARE_METAL.items():
        fake.setdefault(k, v)
    inventory = Inventory(([("@fake/box", {"fake_responses": fake, "fake_delay": 0, "fake_delay_jitter": 0,
                                           **(data or {})})], {}))
    state = State(inventory, Config())
    state.init(inventory, Config())
    return state, inventory.get_host("@fake/box")


def doctor_rows(os_release: list[str], data: dict | None = None, responses: dict | None = None) -> dict:
    """Run the doctor's checks against one fake host answering with recorded outputs: {check: Row}."""
    from roles.doctor import diagnose
    from roles.preflight import preflight

    state, host = _fake_state(os_release, data, responses)
    with ctx_state.use(state):
        connect_all(state)
        with ctx_host.use(host):
            return {r.check: r for r in diagnose(host, preflight(host, diagnosing=True))}


def _record_uploads(host, uploads: dict[str, bytes]) -> None:
    """Make the fake connector keep what each upload would write: {remote path: content}. pyinfra's @fake
    connector only logs uploads; the plan tests also assert on rendered units, pins and configuration."""
    connector = host.connector

    def put_file(filename_or_io, remote_filename, remote_temp_filename=None, **_kw) -> bool:
        if hasattr(filename_or_io, "read"):
            pos = filename_or_io.tell() if hasattr(filename_or_io, "tell") else None
            data = filename_or_io.read()
            if pos is not None:
                filename_or_io.seek(pos)
        else:
            data = Path(filename_or_io).read_bytes()
        uploads[remote_filename] = data.encode() if isinstance(data, str) else data
        return True

    connector.put_file = put_file


def plan_uploads(os_release: list[str], data: dict | None = None, responses: dict | None = None,
                 stops_early: bool = False) -> tuple[list[str], dict[str, str]]:
    """Like plan_commands, and also what every upload would write: (commands, {remote path: text})."""
    uploads: dict[str, bytes] = {}
    cmds = plan_commands(os_release, data, responses, stops_early, _uploads=uploads)
    return cmds, {k: v.decode(errors="replace") for k, v in uploads.items()}


def plan_uploads_raw(os_release: list[str], data: dict | None = None, responses: dict | None = None,
                     stops_early: bool = False) -> tuple[list[str], dict[str, bytes]]:
    """Like plan_uploads, with each upload's content as bytes (a model file is binary)."""
    uploads: dict[str, bytes] = {}
    cmds = plan_commands(os_release, data, responses, stops_early, _uploads=uploads)
    return cmds, uploads


def _rwx(mode: int) -> str:
    return "".join(c if mode >> (8 - i) & 1 else "-" for i, c in enumerate("rwxrwxrwx"))


def converged(cmds: list[str], uploads: dict[str, bytes]) -> dict:
    """fake_responses of a host on which `cmds` ran and `uploads` landed: what a second run of the same plan finds.

    The host is simulated from the plan's own effects, not from the role's code: each uploaded file is there with
    its content (answering pyinfra's File, Sha1File and Sha256File facts from those bytes) and with the mode and
    owner that the plan's `chmod MODE PATH` / `chown USER:GROUP PATH` commands gave it (root:root otherwise),
    `mv [-f] SRC DEST` moves an uploaded file, `ln -sfn TARGET LINK.new && mv -T LINK.new LINK` leaves LINK a
    symlink to TARGET (pyinfra's Link fact), and each directory of `mkdir -p DIR` or holding a file is there
    (pyinfra's Directory fact; 0755 root unless chmod/chown said otherwise)."""
    content = dict(uploads)
    meta = {path: ["root", "root", 0o644] for path in content}
    dirs: dict[str, list] = {}
    links: dict[str, str] = {}

    def add_dir(path: str) -> None:
        while path not in ("", "/") and path not in dirs:
            dirs[path] = ["root", "root", 0o755]
            path = path.rsplit("/", 1)[0]

    for cmd in cmds:
        for part in re.split(r"\s*(?:&&|;|\|\|)\s*", str(cmd)):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            if words[:2] == ["mkdir", "-p"]:
                for d in words[2:]:
                    add_dir(d.rstrip("/"))
            elif len(words) == 3 and words[0] == "chmod" and re.fullmatch(r"[0-7]{3,4}", words[1]) and \
                    (words[2] in meta or words[2] in dirs):
                (meta.get(words[2]) or dirs[words[2]])[2] = int(words[1], 8)
            elif len(words) == 3 and words[0] == "chown" and ":" in words[1] and (words[2] in meta or words[2] in dirs):
                (meta.get(words[2]) or dirs[words[2]])[:2] = words[1].split(":", 1)
            elif words[:1] == ["mv"] and len(words) in (3, 4) and words[-2] in content:
                content[words[-1]] = content.pop(words[-2])
                meta[words[-1]] = meta.pop(words[-2])
            elif words[:2] == ["ln", "-sfn"] and len(words) == 4 and words[3].endswith(".new"):
                links[words[3].removesuffix(".new")] = words[2]
    for path in content:
        add_dir(path.rsplit("/", 1)[0])
    fake: dict = {}
    for path, (user, group, mode) in dirs.items():
        fake[re.compile(rf"test -e {re.escape(path)} \|\|")] = [
            f"user={user} group={group} mode=d{_rwx(mode)} atime=0 mtime=0 ctime=0 size=4096 '{path}'"]
    for path, data in content.items():
        user, group, mode = meta[path]
        p = re.escape(path)
        fake[re.compile(rf"test -e {p} \|\|")] = [
            f"user={user} group={group} mode=-{_rwx(mode)} atime=0 mtime=0 ctime=0 size={len(data)} '{path}'"]
        fake[re.compile(rf"sha1sum {p} 2>")] = [f"{hashlib.sha1(data).hexdigest()}  {path}"]
        fake[re.compile(rf"sha256sum {p} 2>")] = [f"{hashlib.sha256(data).hexdigest()}  {path}"]
    for link, target in links.items():
        fake[re.compile(rf"test -e {re.escape(link)} \|\|")] = [
            f"user=root group=root mode=lrwxrwxrwx atime=0 mtime=0 ctime=0 size={len(target)} '{link}' -> '{target}'"]
    return fake


def plan_commands(os_release: list[str], data: dict | None = None, responses: dict | None = None,
                  stops_early: bool = False, deploys: tuple[str, ...] = ("deploy.py",),
                  _uploads: dict | None = None) -> list[str]:
    """Run deploy.py against one fake host; return the commands it would execute, in order.

    Raises what deploy.py raises (SettingsError for refused settings) before any command is recorded.
    `stops_early`: the plan is expected to end in a failed operation (a fake host cannot come back from a
    reboot); return the commands recorded up to there instead of raising.
    """
    state, host = _fake_state(os_release, data, responses)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with ctx_state.use(state):
            connect_all(state)
            if _uploads is not None:
                _record_uploads(host, _uploads)
            for name in deploys:
                load_deploy_file(state, str(ROOT / name))
            try:
                run_ops(state)
            except PyinfraError:
                if not stops_early:
                    raise
    finally:
        os.chdir(cwd)
    with ctx_host.use(host):
        return list(host.connector.executed_commands)


@contextlib.contextmanager
def _connected_in_repo(state):
    """In the repository root (pyinfra reads group_data/ from there) and `state`'s context, its hosts connected."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with ctx_state.use(state):
            connect_all(state)
            yield
    finally:
        os.chdir(cwd)


def _cluster_state(hosts: dict[str, tuple[list[str], dict, dict]], groups: dict[str, tuple[list[str], dict]]):
    names = []
    for name, (os_release, data, responses) in hosts.items():
        fake = dict(responses or {})
        fake.setdefault("cat /etc/os-release", os_release)
        for k, v in BARE_METAL.items():
            fake.setdefault(k, v)
        names.append((f"@fake/{name}", {"fake_responses": fake, "fake_delay": 0, "fake_delay_jitter": 0, **data}))
    inventory = Inventory((names, {}), **{g: ([f"@fake/{n}" for n in members], gdata)
                                          for g, (members, gdata) in groups.items()})
    state = State(inventory, Config())
    state.init(inventory, Config())
    return state, inventory


def preflight_cluster(hosts: dict[str, tuple[list[str], dict, dict]], groups: dict[str, tuple[list[str], dict]],
                      name: str, limit: list[str] | None = None, deploying: bool = False):
    """The read-only commands' preflight (plan, doctor: deploying False) of host `name` among the fake `hosts`
    (as plan_cluster takes them): (its pyinfra Host, its HostPlan). `limit`: the hosts in the run (pyinfra's
    --limit; the others are not connected)."""
    from roles.preflight import preflight

    state, inventory = _cluster_state(hosts, groups)
    if limit is not None:
        state.limit_hosts = [inventory.get_host(h) for h in limit]
    with _connected_in_repo(state):
        host = inventory.get_host(f"@fake/{name}")
        with ctx_host.use(host):
            return host, preflight(host, deploying=deploying)


def plan_cluster(hosts: dict[str, tuple[list[str], dict, dict]], groups: dict[str, tuple[list[str], dict]],
                 uploads: dict[str, dict[str, bytes]] | None = None) -> dict[str, list[str]]:
    """Run deploy.py against several fake hosts at once, as pyinfra runs an inventory: `hosts` is
    {name: (os_release, host data, fake responses)}, `groups` {group: ([host names], group data)}. Returns
    {name: the commands it would execute}; raises what deploy.py raises for any host (SettingsError) before any
    command is recorded. `uploads` (optional, filled in): {name: {remote path: content}}."""
    state, inventory = _cluster_state(hosts, groups)
    with _connected_in_repo(state):
        for name in hosts:
            if uploads is not None:
                uploads[name] = {}
                _record_uploads(inventory.get_host(f"@fake/{name}"), uploads[name])
        load_deploy_file(state, str(ROOT / "deploy.py"))
        run_ops(state)
    out = {}
    for name in hosts:
        host = inventory.get_host(f"@fake/{name}")
        with ctx_host.use(host):
            out[name] = [str(c) for c in host.connector.executed_commands]
    return out
