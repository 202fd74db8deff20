"""Lab hosts: Debian root filesystems booted with systemd as PID 1 under systemd-nspawn.

What works on this kind of machine (docs/lab.md §Machine): the host is not booted with systemd, so
`machinectl` is unavailable and the harness tracks the nspawn process by the PID it started. Containers share
the host network, so each lab host's sshd listens on its own loopback port with key-only root login; the key
and the host keys are generated at run time under the lab state directory, never in the repository.

Layout (both directories live outside the repository and survive between runs):
    $V100KIT_LAB_CACHE (/var/cache/v100kit-lab): images/<suite>-<key>-<ISO week>.tar, apt/<suite>/ (shared .deb cache),
                                                 uv/ (shared wheel cache), ccache/ (shared compiler cache)
    $V100KIT_LAB_STATE (/var/lib/v100kit-lab):   id_ed25519, known_hosts, ssh_config, hosts/<name>/{rootfs,pid,console.log}

Either directory may be missing or empty: everything is created on demand. What hosts booted in parallel share
(the client key, known_hosts, ssh_config, images, cached files) is created under a lock (threads and other
processes alike) and written atomically (a temporary file renamed into place), and a half-written file from an
interrupted run is detected and replaced; nothing depends on an earlier run having finished.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import paramiko

from roles.ssh import tcp_nodelay

tcp_nodelay()  # the lab's own SSH client and testinfra's paramiko backend: ~40 ms less per command (roles/ssh.py)

LAB_STATE = Path(os.environ.get("V100KIT_LAB_STATE", "/var/lib/v100kit-lab"))
LAB_CACHE = Path(os.environ.get("V100KIT_LAB_CACHE", "/var/cache/v100kit-lab"))
MIRROR = os.environ.get("V100KIT_LAB_MIRROR", "http://deb.debian.org/debian")
#: Debian's security archive, as a fresh install (and the base role) has it in its sources
SECURITY_MIRROR = os.environ.get("V100KIT_LAB_SECURITY_MIRROR", "http://security.debian.org/debian-security")

# A stock minimal Debian server as users have it: only the `main` component (the base role must add
# contrib/non-free), a real kernel package with initramfs-tools (so DKMS builds and initramfs checks are real),
# and unattended-upgrades installed (the field case that upgrades libnvidia-* under a loaded module).
IMAGE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "ca-certificates", "sudo",
    "kmod", "procps", "linux-image-amd64", "initramfs-tools", "unattended-upgrades", "ccache",
)
#: C compiler names that resolve to ccache on the lab hosts (ccache's masquerade: a symlink named like the compiler,
#: earlier in PATH). DKMS compiles the NVIDIA module with the kernel's plain `gcc` for every installed kernel, about
#: 2.5 min each on the lab's two cores; through the lab cache's ccache a rebuild of the same module takes seconds.
#: The module is still built and checked the same way; only the compiler's work is cached. Lab hosts only.
CCACHE_MASQUERADE = ("cc", "gcc", "gcc-12", "gcc-13", "gcc-14", "x86_64-linux-gnu-gcc-12", "x86_64-linux-gnu-gcc-13",
                     "x86_64-linux-gnu-gcc-14")

BOOT_TIMEOUT_S = 180
STOP_TIMEOUT_S = 90


class LabError(RuntimeError):
    """A lab host could not be built, booted, reached, rebooted or stopped."""


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock named by `path` (the file `path`.lock): against other threads of this process
    (flock is per open file, not per thread) and against other processes. Creates the parent directory."""
    lock_path = Path(str(path) + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _THREAD_LOCKS_GUARD:
        tlock = _THREAD_LOCKS.setdefault(str(lock_path), threading.Lock())
    with tlock, open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` through a temporary file in the same directory, renamed into place: readers see the
    old content or the new, never a part. Creates the parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def image_sources(suite: str) -> list[str]:
    """The one-line apt sources a lab image is built from: `suite`, `suite`-updates and `suite`-security (main)."""
    return [f"deb {MIRROR} {suite} main", f"deb {MIRROR} {suite}-updates main",
            f"deb {SECURITY_MIRROR} {suite}-security main"]


@dataclass(frozen=True)
class HostSpec:
    """One lab host: its Debian suite, its sshd port and extra pyinfra host data. With `address` (an IPv4 address
    in the lab network) the host gets its own network namespace: sshd and its services listen there; it reaches
    the other namespaced hosts and the control machine's end of the lab bridge, and the package registries only
    through the lab's registry proxy (lab/proxy.py). Without, it shares the machine's network (sshd on the
    loopback)."""

    name: str
    suite: str
    ssh_port: int
    group: str
    data: dict = field(default_factory=dict)
    address: str | None = None
    #: with `address`: no registry proxy and no shared apt or wheel cache: a host that reaches nothing but the
    #: control machine's end of the lab bridge (v100kit offline serves it from there)
    offline: bool = False

    @property
    def ssh_address(self) -> str:
        """Where its sshd listens: its namespace address, else the loopback."""
        return self.address or "127.0.0.1"

    @property
    def netns(self) -> str:
        """Its network namespace's name (/run/netns/NAME)."""
        return f"v100kit-{self.name}"


#: The lab network of namespaced hosts: a bridge on the control machine with LAB_BRIDGE_ADDRESS, one veth pair per
#: host (the inner end LAB_INTERFACE), and the registry proxy on the bridge address. 10.231.0.0/24: a private range
#: nothing else here uses; no route leaves it (the machine forwards nothing).
LAB_NET_PREFIX = 24
LAB_BRIDGE = "v100kit-br0"
LAB_BRIDGE_ADDRESS = "10.231.0.1"
LAB_INTERFACE = "lab0"
PROXY_PORT = 3128
#: Names the registry proxy forwards besides the Debian archives of MIRROR and SECURITY_MIRROR: PyPI and its files.
PROXY_ALLOWED = ("pypi.org", "files.pythonhosted.org")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run iproute2's `ip` with `args`; raises LabError with its message when it fails and `check` is set."""
    res = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


def _link_debs(src: Path, dest: Path) -> None:
    """Hard-link every complete .deb of `src` into `dest` that `dest` lacks (a copy across file systems)."""
    for deb in src.glob("*.deb"):
        target = dest / deb.name
        if not target.exists():
            try:
                os.link(deb, target)
            except OSError:
                shutil.copy2(deb, target)


def _outer(s: "HostSpec") -> str:
    """The control machine's end of the host's veth pair (interface names have at most 15 characters)."""
    return "vk-" + hashlib.sha256(s.name.encode()).hexdigest()[:8]


# Lab settings that differ from the defaults: a small swapfile, and an open-file limit under the ceiling that
# containers here inherit (hard 20000, no CAP_SYS_RESOURCE to raise it), so the limit is checked live.
LAB_DATA = {"tuning_swap_size_gib": 1, "tuning_nofile_limit": 16384}
#: The development machine reaches PyPI through a TLS-inspecting proxy whose CA is in its own bundle: the lab hosts
#: share its network, so they trust the same bundle (base_ca_certificates). Elsewhere this adds nothing new.
MACHINE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
if Path(MACHINE_CA_BUNDLE).is_file():
    LAB_DATA["base_ca_certificates"] = [MACHINE_CA_BUNDLE]

# The bundled lab hosts. Services inside share the host network, so each host gets its own ports.
HOSTS: tuple[HostSpec, ...] = (
    HostSpec("lab-bookworm", "bookworm", 2201, "debian12", dict(LAB_DATA)),
    HostSpec("lab-trixie", "trixie", 2202, "debian13", dict(LAB_DATA)),
)


def spec(name: str) -> HostSpec:
    """Return the bundled host spec called `name`; raises LabError naming the known hosts otherwise."""
    for s in HOSTS:
        if s.name == name:
            return s
    raise LabError(f"unknown lab host {name!r}; known: {', '.join(s.name for s in HOSTS)}")


#: disk one lab host takes once a deploy gave it the whole stack (root filesystem with the driver and its DKMS
#: build, a CUDA toolkit, the llama.cpp build, the vLLM venv): about 13 GB (docs/lab.md; `du -sh` of a host
#: directory: 8.2 GB for lab-bookworm before its vLLM venv), and a little room; what a cold lab cache adds (the
#: wheels of a lock: about 4 GB) is not counted, so that a warm CI run is never refused for it
HOST_DISK_GIB = 14


class Lab:
    """Builds, boots, reboots, stops and destroys the bundled lab hosts."""

    def __init__(self, state: Path = LAB_STATE, cache: Path = LAB_CACHE, hosts: tuple[HostSpec, ...] = HOSTS,
                 private_apt: bool = False) -> None:
        """`state` and `cache` need not exist (they are made on first use); `hosts` are the specs this lab
        manages (its ssh_config, known_hosts and inventory list those). `private_apt`: each host gets its own apt
        archive directory, seeded with hard links to the suite's shared .debs and giving its new ones back when it
        is destroyed, so that hosts of one suite do not queue on one apt archive lock (a real fleet has one per
        box); otherwise the hosts of a suite share one directory."""
        self.state = state
        self.cache = cache
        self.hosts = hosts
        self.private_apt = private_apt
        self.key = state / "id_ed25519"
        self.known_hosts = state / "known_hosts"
        self.ssh_config = state / "ssh_config"

    # -- paths ------------------------------------------------------------------------------------------
    def host_dir(self, s: HostSpec) -> Path:
        return self.state / "hosts" / s.name

    def rootfs(self, s: HostSpec) -> Path:
        return self.host_dir(s) / "rootfs"

    # -- images -----------------------------------------------------------------------------------------
    def image(self, suite: str) -> Path:
        """Return the cached root filesystem tarball for `suite`, building it with mmdebstrap if missing.

        The image is a server installed this week: the suite with its -updates and -security suites, as Debian's
        installer leaves it, so its kernel is the one the archive's headers metapackage follows. A stale image's
        older kernel made every lab host build the NVIDIA module twice (measured: 166 s of the first deploy).
        Images are rebuilt once per ISO week; the build replaces the earlier weeks' tarballs of the same image."""
        sources = image_sources(suite)
        week = time.strftime("%G-W%V", time.gmtime())
        key = hashlib.sha256(json.dumps([suite, IMAGE_PACKAGES, sources]).encode()).hexdigest()[:12]
        path = self.cache / "images" / f"{suite}-{key}-{week}.tar"
        with locked(path):  # one build per image, whoever asks first; the others wait and reuse it
            if path.exists():  # only ever written whole: built as a .part file, then renamed
                return path
            part = path.with_name(f"{path.name}.{os.getpid()}.part")
            part.unlink(missing_ok=True)
            cmd = ["mmdebstrap", "--format=tar", "--variant=minbase", "--components=main",
                   "--include=" + ",".join(IMAGE_PACKAGES), suite, str(part), *sources]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                part.unlink(missing_ok=True)
                raise LabError(f"mmdebstrap {suite} failed:\n{res.stderr[-3000:]}")
            os.replace(part, path)  # atomic: an interrupted build never leaves a half image under the final name
            for older in path.parent.glob(f"{suite}-{key}-*.tar"):  # earlier weeks' builds of this image
                if older != path:
                    older.unlink(missing_ok=True)
            return path

    # -- keys -------------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Create the state and cache directories and the client key pair, once, before hosts start in parallel.

        Safe to call from several threads or processes (it takes the state lock). A key pair that does not match
        (a half-written pair from an interrupted run) is replaced."""
        with locked(self.state / "client"):
            for d in (self.state, self.state / "hosts", self.cache):
                d.mkdir(parents=True, exist_ok=True)
            if not self._key_pair_ok():
                with tempfile.TemporaryDirectory(dir=self.state, prefix=".keygen.") as tmp:
                    new = Path(tmp) / "id_ed25519"
                    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "v100kit-lab", "-f",
                                    str(new)], check=True, stdin=subprocess.DEVNULL)
                    os.replace(str(new) + ".pub", str(self.key) + ".pub")  # public first: a key without its .pub
                    os.replace(new, self.key)  # is caught by _key_pair_ok next time and made again
            if not self.known_hosts.exists() or not self.ssh_config.exists():
                self._write_client_config_locked()

    def _key_pair_ok(self) -> bool:
        """The private key loads and its public half is the .pub beside it."""
        pub = Path(str(self.key) + ".pub")
        if not (self.key.is_file() and pub.is_file()):
            return False
        res = subprocess.run(["ssh-keygen", "-y", "-f", str(self.key)], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        return res.returncode == 0 and res.stdout.split()[:2] == pub.read_text().split()[:2]

    def _write_client_config(self) -> None:
        """Rewrite known_hosts and ssh_config from the hosts' keys (under the lock, atomically)."""
        with locked(self.state / "client"):
            self._write_client_config_locked()

    def _write_client_config_locked(self) -> None:
        known, config = [], []
        for s in self.hosts:
            pub = self.rootfs(s) / "etc/ssh/ssh_host_ed25519_key.pub"
            if not pub.exists():
                continue
            kt, kb = pub.read_text().split()[:2]
            # OpenSSH's and paramiko's known_hosts name: host alone on port 22, [host]:port otherwise
            name = s.ssh_address if s.ssh_port == 22 else f"[{s.ssh_address}]:{s.ssh_port}"
            known.append(f"{name} {kt} {kb}")
            config.append(f"Host {s.name}\n  HostName {s.ssh_address}\n  Port {s.ssh_port}\n  User root\n"
                          f"  IdentityFile {self.key}\n  UserKnownHostsFile {self.known_hosts}\n"
                          f"  StrictHostKeyChecking yes\n")
        atomic_write(self.known_hosts, "\n".join(known) + "\n")
        atomic_write(self.ssh_config, "\n".join(config))

    # -- lifecycle --------------------------------------------------------------------------------------
    def create(self, s: HostSpec) -> None:
        """Lay out the host's root filesystem from the image and configure SSH (once per host)."""
        self.prepare()
        hdir, root = self.host_dir(s), self.rootfs(s)
        if (hdir / "created").exists():
            return
        if root.exists():  # a create that was interrupted: start again from the image
            shutil.rmtree(root)
        root.mkdir(parents=True)
        subprocess.run(["tar", "--numeric-owner", "--xattrs", "-xpf", str(self.image(s.suite)), "-C", str(root)],
                       check=True)
        (root / "etc/hostname").write_text(s.name + "\n")
        (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {s.name}\n")
        (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
        for old in (root / "etc/ssh").glob("ssh_host_*"):
            old.unlink()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", s.name,
                        "-f", str(root / "etc/ssh/ssh_host_ed25519_key")], check=True, stdin=subprocess.DEVNULL)
        (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
        (root / "etc/ssh/sshd_config.d/10-lab.conf").write_text(
            f"Port {s.ssh_port}\nListenAddress {s.ssh_address}\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n")
        ssh_dir = root / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(Path(str(self.key) + ".pub").read_text())
        os.chmod(ssh_dir / "authorized_keys", 0o600)
        (root / "etc/ccache.conf").write_text("cache_dir = /var/cache/v100kit/ccache\n")  # the bound lab cache
        # apt runs dpkg (and so the driver package's DKMS build) with its own PATH, /usr/sbin:/usr/bin:/sbin:/bin
        # (APT's DPkg::Path default), which skips the masquerade links: measured, 0 ccache calls without this line
        (root / "etc/apt/apt.conf.d/99lab-ccache").write_text(
            'DPkg::Path "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";\n')
        for name in CCACHE_MASQUERADE:
            link = root / "usr/local/bin" / name
            link.unlink(missing_ok=True)
            link.symlink_to("/usr/bin/ccache")
        # No background apt runs racing the deploy or the tests; the deploy itself waits for dpkg locks.
        for timer in ("apt-daily.timer", "apt-daily-upgrade.timer"):
            link = root / "etc/systemd/system" / timer
            link.unlink(missing_ok=True)
            link.symlink_to("/dev/null")
        if s.address and not s.offline:
            self._behind_proxy(root)
        atomic_write(hdir / "created", time.strftime("%FT%T") + "\n")
        self._write_client_config()

    def _behind_proxy(self, root: Path) -> None:
        """A namespaced host reaches the registries through the lab's proxy, as a host behind a site proxy does:
        for its login sessions (pam_env reads /etc/environment: pyinfra's commands, uv, curl) and for apt. The lab
        addresses bypass it. No name server: names resolve at the proxy, and a lookup here fails at once."""
        proxy = f"http://{LAB_BRIDGE_ADDRESS}:{PROXY_PORT}"
        lab = ",".join(["localhost", "127.0.0.1", LAB_BRIDGE_ADDRESS] + [h.address for h in self.hosts if h.address])
        (root / "etc/environment").write_text(f"http_proxy={proxy}\nhttps_proxy={proxy}\nHTTP_PROXY={proxy}\n"
                                              f"HTTPS_PROXY={proxy}\nno_proxy={lab}\nNO_PROXY={lab}\n")
        (root / "etc/apt/apt.conf.d/99lab-proxy").write_text(
            f'Acquire::http::Proxy "{proxy}";\nAcquire::https::Proxy "{proxy}";\n'
            'Acquire::http::Pipeline-Depth "0";\n')  # the proxy forwards one request per connection
        resolv = root / "etc/resolv.conf"
        resolv.unlink(missing_ok=True)
        resolv.write_text("options timeout:1 attempts:1\n")

    # -- network of namespaced hosts --------------------------------------------------------------------
    def network_up(self, s: HostSpec) -> None:
        """The lab bridge (once), the host's namespace with its veth pair (once), and the registry proxy (once, not
        for an offline host);
        each step is skipped when already there, so that a host booted again or an interrupted setup converges."""
        with locked(self.state / "network"):
            if _ip("link", "show", LAB_BRIDGE, check=False).returncode != 0:
                _ip("link", "add", LAB_BRIDGE, "type", "bridge")
                _ip("addr", "add", f"{LAB_BRIDGE_ADDRESS}/{LAB_NET_PREFIX}", "dev", LAB_BRIDGE)
            _ip("link", "set", LAB_BRIDGE, "up")
            outer = _outer(s)
            if not Path(f"/run/netns/{s.netns}").exists():
                _ip("netns", "add", s.netns)
            if _ip("-n", s.netns, "link", "show", LAB_INTERFACE, check=False).returncode != 0:
                _ip("link", "del", outer, check=False)  # the half of a pair whose namespace is gone
                _ip("link", "add", outer, "type", "veth", "peer", "name", LAB_INTERFACE, "netns", s.netns)
                _ip("-n", s.netns, "addr", "add", f"{s.address}/{LAB_NET_PREFIX}", "dev", LAB_INTERFACE)
            _ip("link", "set", outer, "master", LAB_BRIDGE, "up")
            _ip("-n", s.netns, "link", "set", LAB_INTERFACE, "up")
            _ip("-n", s.netns, "link", "set", "lo", "up")
            if not s.offline:  # an offline host gets no way to the registries, not even a proxy
                self._proxy_up()

    def _proxy_pid(self) -> int | None:
        try:
            pid = int((self.state / "proxy.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        return pid if b"lab.proxy" in cmdline else None

    def _proxy_up(self) -> None:
        if self._proxy_pid() is not None:
            return
        allowed = sorted({urlsplit(MIRROR).hostname, urlsplit(SECURITY_MIRROR).hostname, *PROXY_ALLOWED})
        log = open(self.state / "proxy.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "lab.proxy", LAB_BRIDGE_ADDRESS, str(PROXY_PORT), *allowed],
                                cwd=Path(__file__).resolve().parents[1], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        atomic_write(self.state / "proxy.pid", f"{proc.pid}\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until it listens
            with contextlib.suppress(OSError), socket.create_connection((LAB_BRIDGE_ADDRESS, PROXY_PORT), 1):
                return
            time.sleep(0.1)
        raise LabError(f"the lab's registry proxy did not start; see {self.state / 'proxy.log'}")

    def network_down(self, s: HostSpec) -> None:
        """Delete the host's namespace (its veth pair goes with it); the bridge and the proxy stop with the last
        namespaced host of this lab."""
        with locked(self.state / "network"):
            if Path(f"/run/netns/{s.netns}").exists():
                _ip("netns", "del", s.netns, check=False)
            _ip("link", "del", _outer(s), check=False)
            if not any(Path(f"/run/netns/{h.netns}").exists() for h in self.hosts if h.address):
                if (pid := self._proxy_pid()) is not None:
                    os.kill(pid, signal.SIGTERM)
                _ip("link", "del", LAB_BRIDGE, check=False)

    def pid(self, s: HostSpec) -> int | None:
        """The PID of this host's running systemd-nspawn process, or None (checked against /proc, not trusted)."""
        try:
            pid = int((self.host_dir(s) / "pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        if cmdline and cmdline[0].endswith(b"systemd-nspawn") and str(self.rootfs(s)).encode() in cmdline:
            return pid
        return None

    def boot(self, s: HostSpec) -> str:
        """Boot the host (if not running) and wait until systemd finished booting; returns its boot_id."""
        if self.pid(s) is None:
            apt_cache = self.cache / "apt" / s.suite
            (apt_cache / "partial").mkdir(parents=True, exist_ok=True)
            if self.private_apt:
                apt_cache = self._private_apt(s, apt_cache)
            uv_cache = self.cache / "uv"  # wheels (vLLM, torch: GBs); uv checks every hash, venvs copy out of it
            if s.offline:  # every .deb and wheel must come from the offline directory: nothing cached beforehand
                apt_cache, uv_cache = self.host_dir(s) / "apt-archives", self.host_dir(s) / "uv"
                (apt_cache / "partial").mkdir(parents=True, exist_ok=True)
            # the llama.cpp role's compiler cache (CCACHE_DIR): a warm one turns the ~12 min CUDA build into
            # seconds; ccache keys on the compiler and its inputs, so hosts of different suites share it safely
            ccache = self.cache / "ccache"
            for d in (uv_cache, ccache):
                d.mkdir(parents=True, exist_ok=True)
            network = []
            if s.address:
                self.network_up(s)
                network = [f"--network-namespace-path=/run/netns/{s.netns}", "--resolv-conf=off"]
            log = open(self.host_dir(s) / "console.log", "ab")
            proc = subprocess.Popen(
                ["systemd-nspawn", "-D", str(self.rootfs(s)), "-b", "--register=no", "--keep-unit",
                 "-M", s.name, f"--bind={apt_cache}:/var/cache/apt/archives", f"--bind={uv_cache}:/var/cache/v100kit/uv",
                 f"--bind={ccache}:/var/cache/v100kit/ccache", *network],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            atomic_write(self.host_dir(s) / "pid", f"{proc.pid}\n")
            for _ in range(100):  # until the child has exec'd nspawn (its cmdline identifies it)
                if self.pid(s) is not None or proc.poll() is not None:
                    break
                time.sleep(0.05)
        return self.wait_ready(s)

    def _private_apt(self, s: HostSpec, shared: Path) -> Path:
        """The host's own apt archive directory, holding every .deb of `shared` (hard links: no copy)."""
        own = self.host_dir(s) / "apt-archives"
        (own / "partial").mkdir(parents=True, exist_ok=True)
        _link_debs(shared, own)
        return own

    def check_disk(self, specs: tuple[HostSpec, ...] | list[HostSpec], per_host_gib: float = HOST_DISK_GIB) -> None:
        """Refuse to start hosts the disk cannot hold: each of `specs` needs about `per_host_gib` GiB free where the
        state directory is, less what its host directory already holds (`du`: a host provisioned earlier needs
        little more, one created but never deployed almost all of it). A full disk halfway through a lab run fails
        every later test that writes a file, far from the cause; this fails first and says so. Raises LabError
        naming the free and needed GiB and what to remove."""
        held = {s.name: self.disk_used(self.host_dir(s)) / 2**30 for s in specs}
        short = [s for s in specs if held[s.name] < per_host_gib]
        where = next(p for p in (self.state, *self.state.parents) if p.exists())
        free = shutil.disk_usage(where).free / 2**30
        need = sum(per_host_gib - held[s.name] for s in short)
        if free < need:
            cache = self.disk_used(self.cache) / 2**30
            raise LabError(f"{free:.1f} GiB free on the disk of {where}; starting {', '.join(s.name for s in short)} "
                           f"needs about {need:.1f} GiB more ({per_host_gib:.1f} GiB per fully provisioned host, "
                           f"less what each holds already). Fix: "
                           f"`v100kit lab destroy` the hosts of an earlier run, remove old files of the lab cache "
                           f"{self.cache} ({cache:.1f} GiB; it is refilled on demand), or point V100KIT_LAB_STATE and "
                           "V100KIT_LAB_CACHE at a larger disk")

    @staticmethod
    def disk_used(path: Path) -> int:
        """Bytes of disk the files under `path` take (`du -s -x`, this file system only; 0 if it does not exist)."""
        if not path.exists():
            return 0
        out = subprocess.run(["du", "-s", "-x", "--block-size=1", str(path)], capture_output=True, text=True)
        return int(out.stdout.split()[0]) if out.stdout else 0

    def up(self, s: HostSpec) -> str:
        """Create (if needed) and boot one host; returns its boot_id."""
        self.create(s)
        return self.boot(s)

    def client(self, s: HostSpec, timeout: float = 10) -> paramiko.SSHClient:
        c = paramiko.SSHClient()
        c.load_host_keys(str(self.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        c.connect(s.ssh_address, port=s.ssh_port, username="root", key_filename=str(self.key), timeout=timeout,
                  allow_agent=False, look_for_keys=False)
        return c

    def run(self, s: HostSpec, command: str, timeout: float = 600) -> tuple[int, str]:
        """Run `command` on the host as root over SSH; returns (exit status, stdout+stderr)."""
        with self.client(s) as c:
            _, out, err = c.exec_command(command, timeout=timeout)
            text = out.read().decode() + err.read().decode()
            return out.channel.recv_exit_status(), text

    def wait_ready(self, s: HostSpec, timeout: float = BOOT_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.pid(s) is None:
                raise LabError(f"{s.name}: systemd-nspawn exited; see {self.host_dir(s) / 'console.log'}")
            try:
                rc, out = self.run(s, "systemctl is-system-running --wait; cat /proc/sys/kernel/random/boot_id",
                                   timeout=timeout)
                lines = out.split()
                if lines and lines[0] in ("running", "degraded"):
                    return lines[-1]
                last = out
            except (OSError, paramiko.SSHException, EOFError) as e:
                last = repr(e)
            time.sleep(1)
        raise LabError(f"{s.name}: not ready after {timeout:.0f} s (last: {last.strip()[:300]})")

    def boot_id(self, s: HostSpec) -> str:
        return self.run(s, "cat /proc/sys/kernel/random/boot_id")[1].strip()

    def reboot(self, s: HostSpec) -> tuple[str, str]:
        """Reboot the host from inside (systemctl reboot ends the nspawn process), boot it again.

        Returns (old boot_id, new boot_id); raises LabError if the boot_id did not change.
        """
        old = self.boot_id(s)
        pid = self.pid(s)
        try:
            self.run(s, "systemctl reboot", timeout=30)
        except (OSError, paramiko.SSHException, EOFError):
            pass  # the connection may drop while the host goes down
        self._wait_exit(s, pid, STOP_TIMEOUT_S)
        new = self.boot(s)
        if new == old:
            raise LabError(f"{s.name}: boot_id unchanged after reboot ({old})")
        return old, new

    def _wait_exit(self, s: HostSpec, pid: int | None, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while pid is not None and self.pid(s) == pid and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.pid(s) is None

    def stop(self, s: HostSpec) -> None:
        """Power the host off: SIGTERM to our nspawn PID (orderly shutdown), SIGKILL after a timeout."""
        pid = self.pid(s)
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(s, pid, STOP_TIMEOUT_S):
            os.killpg(pid, signal.SIGKILL)
            self._wait_exit(s, pid, 10)

    def destroy(self, s: HostSpec) -> None:
        """Stop the host and delete its root filesystem (images and download caches are kept)."""
        self.stop(s)
        if s.address:
            self.network_down(s)
        if (own := self.host_dir(s) / "apt-archives").is_dir():  # its downloads stay in the suite's cache
            with contextlib.suppress(OSError):
                _link_debs(own, self.cache / "apt" / s.suite)
        shutil.rmtree(self.host_dir(s), ignore_errors=True)
        if self.state.exists():  # nothing to rewrite in a lab that was never started
            self._write_client_config()

    def status(self) -> list[dict]:
        """One dict per bundled host: name, suite, ssh_port, created, running, pid."""
        return [{"name": s.name, "suite": s.suite, "ssh_port": s.ssh_port, "address": s.ssh_address,
                 "created": (self.host_dir(s) / "created").exists(), "running": self.pid(s) is not None,
                 "pid": self.pid(s)} for s in self.hosts]

    def pyinfra_hosts(self) -> dict[str, list[tuple[str, dict]]]:
        """Running hosts as pyinfra inventory groups: {group: [(name, host data), ...]}."""
        from lab.data import host_data  # the lab's settings need the toolkit's own modules
        groups: dict[str, list[tuple[str, dict]]] = {}
        for s in self.hosts:
            if self.pid(s) is None:
                continue
            data = {
                "ssh_hostname": s.ssh_address, "ssh_port": s.ssh_port, "ssh_user": "root",
                "ssh_key": str(self.key), "ssh_known_hosts_file": str(self.known_hosts),
                "ssh_strict_host_key_checking": "yes", "ssh_allow_agent": False, "ssh_look_for_keys": False,
                **host_data(s),
            }
            groups.setdefault(s.group, []).append((s.name, data))
        return groups

    def testinfra_url(self, s: HostSpec) -> str:
        return f"paramiko://{s.name}?ssh_config={self.ssh_config}"
