"""base decisions, pure: settings and facts in, refusals out. No operations are imported here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from roles.cuda.decide import source_for as cuda_source_for
from roles.cuda.decide import nvidia_repo_url
from roles.cuda.versions import NVIDIA_REPOS
from roles.platform import Platform
from roles.settings import Settings, problem

if TYPE_CHECKING:
    from roles.base.shapes import SourceEntry

MIRRORS = {
    "debian": ("http://deb.debian.org/debian", "http://security.debian.org/debian-security"),
    "ubuntu": ("http://archive.ubuntu.com/ubuntu", "http://security.ubuntu.com/ubuntu"),
}

#: The components of our sources file per distribution family: those NVIDIA's packages need (non-free / multiverse).
COMPONENTS = {
    "debian": ("main", "contrib", "non-free", "non-free-firmware"),
    "ubuntu": ("main", "restricted", "universe", "multiverse"),
}

#: Packages every later role relies on (download with checksums, PCI listing, module tools).
BASE_PACKAGES = ["ca-certificates", "curl", "gnupg", "pciutils", "kmod", "procps", "lsb-release"]

#: The distribution's own source files, replaced by ours. Renamed with `.disabled`, which apt ignores silently
#: (Dir::Ignore-Files-Silently), so the user's original content stays on the host.
DISTRO_SOURCE_FILES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources",
                       "/etc/apt/sources.list.d/ubuntu.sources")


def check(settings: Settings, users: dict) -> list[str]:
    """Refusals from host facts: `users` is pyinfra's Users fact ({name: {'uid', 'home', ...}}). Returns
    SettingsError lines, [] when none: see ca_files_not_pem and service_user_taken."""
    return ca_files_not_pem(settings) + service_user_taken(settings, users)


def ca_files_not_pem(settings: Settings) -> list[str]:
    """base_ca_certificates must be PEM certificate files on the control machine (read here, not on the host)."""
    return [problem("base_ca_certificates", path, "not a PEM certificate file on the control machine",
                    "give the path of the proxy's CA certificate (PEM)")
            for path in settings.base_ca_certificates if not _is_pem_file(Path(path).expanduser())]


def _is_pem_file(p: Path) -> bool:
    return p.is_file() and "-----BEGIN CERTIFICATE-----" in p.read_text(errors="replace")


def service_user_taken(settings: Settings, users: dict) -> list[str]:
    """The service user must be a system account of its own (1 <= uid < 1000, home = base_service_home), never
    root or a login user: the role sets its shell to nologin and its home. An absent account is fine."""
    u = users.get(settings.base_service_user)
    if u is None:
        return []
    uid = int(u.get("uid") or 0)
    if uid == 0 or uid >= 1000 or (u.get("home") or "").rstrip("/") != settings.base_service_home.rstrip("/"):
        return [problem("base_service_user", settings.base_service_user,
                        f"an existing account (uid {uid}, home {u.get('home')}) would get nologin and a "
                        "new home", "choose a name no account has yet, e.g. 'llm' (the default)")]
    return []


def our_source_file(platform: Platform) -> str:
    """The base role's own sources file."""
    return f"/etc/apt/sources.list.d/v100kit-{platform.family}.sources"


#: The cuda role's sources file for NVIDIA's repository.
NVIDIA_SOURCE_FILE = "/etc/apt/sources.list.d/v100kit-cuda.sources"


def managed_repositories(settings: Settings, platform: Platform) -> list[tuple[str, tuple[str, ...]]]:
    """The repositories this host's sources files hold, as (URI, suites): the distribution mirror and security
    archive with the suites of our sources file, and NVIDIA's CUDA repository ('/') where the driver or a toolkit
    comes from it (nvidia_driver_source / cuda_source)."""
    mirror, security = MIRRORS[platform.family]
    suites = (platform.codename, f"{platform.codename}-updates")  # as in templates/<family>.sources.j2
    repos = [(settings.base_apt_mirror or mirror, suites),
             (settings.base_apt_security_mirror or security, (f"{platform.codename}-security",))]
    uses_nvidia = settings.nvidia_driver_source == "nvidia" or cuda_source_for(settings, platform) == "nvidia"
    if uses_nvidia and platform.id in NVIDIA_REPOS:
        repos.append((nvidia_repo_url(settings, platform), ("/",)))
    return repos


def _same_uri(a: str, b: str) -> bool:
    """URIs of one repository: scheme (http/https) and a trailing slash do not matter, nor the host's case."""
    def norm(u: str) -> str:
        rest = re.sub(r"^[a-z+]+://", "", u.strip()).rstrip("/")
        host, _, path = rest.partition("/")
        return host.lower() + "/" + path
    return norm(a) == norm(b)


def stray_sources(entries: list[SourceEntry], managed: list[tuple[str, tuple[str, ...]]], ours: set[str]
                  ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Entries outside our own files (`ours`) for a repository the toolkit manages (`managed`, see
    managed_repositories): two entries for one repository conflict as soon as their Signed-By differ ("Conflicting
    values set for option Signed-By", NVIDIA cuda-repo-management issue 4).

    Returns (to_disable, mixed), each {file: ['URI SUITE', ...]}: to_disable are files holding only such entries
    (disabled whole, kept as FILE.disabled); mixed files also hold other entries (left alone: the fix names the
    lines to remove)."""
    to_disable: dict[str, list[str]] = {}
    mixed: dict[str, list[str]] = {}
    by_file: dict[str, list[SourceEntry]] = {}
    for e in entries:
        if e.file not in ours and e.file not in DISTRO_SOURCE_FILES:
            by_file.setdefault(e.file, []).append(e)
    for file, es in sorted(by_file.items()):
        hits = [f"{e.uri} {e.suite}" for e in es
                if any(_same_uri(e.uri, uri) and e.suite.rstrip("/") == s.rstrip("/") for uri, s_all in managed
                       for s in s_all)]
        if hits:
            (to_disable if len(hits) == len(es) else mixed)[file] = hits
    return to_disable, mixed
