"""base: apt sources with the components NVIDIA's packages need, essential packages, the service user."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, server

from roles.facts import SOURCES_GLOB, SOURCES_STAMP, AptSourcesChanged
from roles.platform import Platform
from roles.settings import Settings, problem

TEMPLATES = Path(__file__).parent / "templates"

MIRRORS = {
    "debian": ("http://deb.debian.org/debian", "http://security.debian.org/debian-security"),
    "ubuntu": ("http://archive.ubuntu.com/ubuntu", "http://security.ubuntu.com/ubuntu"),
}

#: Packages every later role relies on (download with checksums, PCI listing, module tools).
BASE_PACKAGES = ["ca-certificates", "curl", "gnupg", "pciutils", "kmod", "procps", "lsb-release"]

#: The distribution's own source files, replaced by ours. Renamed with `.disabled`, which apt ignores silently
#: (Dir::Ignore-Files-Silently), so the user's original content stays on the host.
DISTRO_SOURCE_FILES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources",
                       "/etc/apt/sources.list.d/ubuntu.sources")


def check(settings: Settings, users: dict) -> list[str]:
    """Refusals from host facts: `users` is pyinfra's Users fact. The service user must be a system account of
    its own, never root or a login user (the role sets its shell to nologin and its home)."""
    u = users.get(settings.base_service_user)
    if u is None:
        return []
    uid = int(u.get("uid") or 0)
    if uid == 0 or uid >= 1000 or (u.get("home") or "").rstrip("/") != settings.base_service_home.rstrip("/"):
        return [problem("base_service_user", settings.base_service_user,
                        f"an existing account (uid {uid}, home {u.get('home')}) would get nologin and a new home",
                        "choose a name no account has yet, e.g. 'llm' (the default)")]
    return []


@operation()
def update_if_stale():
    """apt-get update when the sources changed since the last update (new source or component, or an earlier
    deploy interrupted before its update). Evaluated when it runs, so it sees the changes made before it."""
    if host.get_fact(AptSourcesChanged):
        yield from apt.update._inner()
        yield f"cat {SOURCES_GLOB} 2>/dev/null | sha256sum | cut -d' ' -f1 > {SOURCES_STAMP}"


@deploy("Base")
def base(settings: Settings, platform: Platform) -> None:
    files.put(
        name="apt waits for dpkg locks instead of failing",
        src=StringIO(f'DPkg::Lock::Timeout "{settings.base_apt_lock_timeout_s}";\n'),
        dest="/etc/apt/apt.conf.d/50v100kit-lock-timeout", mode="644",
    )
    mirror, security = MIRRORS[platform.family]
    ours = f"/etc/apt/sources.list.d/v100kit-{platform.family}.sources"
    files.template(
        name=f"{platform.family} sources with the NVIDIA components",
        src=str(TEMPLATES / f"{platform.family}.sources.j2"), dest=ours, mode="644",
        mirror=settings.base_apt_mirror or mirror, security_mirror=security, codename=platform.codename,
    )
    for path in DISTRO_SOURCE_FILES:
        if host.get_fact(File, path=path):
            server.shell(name=f"disable {path} (kept as {path}.disabled)", commands=[f"mv -f {path} {path}.disabled"])
    update_if_stale(name="apt-get update if the sources changed")
    apt.packages(name="essential packages", packages=BASE_PACKAGES + list(settings.base_extra_packages),
                 no_recommends=True)
    server.user(
        name=f"service user {settings.base_service_user}",
        user=settings.base_service_user, system=True, home=settings.base_service_home, create_home=True,
        shell="/usr/sbin/nologin", groups=["video"], append=True,
    )
    files.directory(name="service home", path=settings.base_service_home, user=settings.base_service_user,
                    group=settings.base_service_user, mode="750")
