"""base: apt sources with the components NVIDIA's packages need, essential packages, the service user."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import FactBase, deploy, operation
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
    its own, never root or a login user (the role sets its shell to nologin and its home). CA files must be
    PEM certificates on the control machine."""
    problems = []
    for path in settings.base_ca_certificates:
        p = Path(path).expanduser()
        if not p.is_file() or "-----BEGIN CERTIFICATE-----" not in p.read_text(errors="replace"):
            problems.append(problem("base_ca_certificates", path, "not a PEM certificate file on the control machine",
                                    "give the path of the proxy's CA certificate (PEM)"))
    u = users.get(settings.base_service_user)
    if u is None:
        return problems
    uid = int(u.get("uid") or 0)
    if uid == 0 or uid >= 1000 or (u.get("home") or "").rstrip("/") != settings.base_service_home.rstrip("/"):
        problems.append(problem("base_service_user", settings.base_service_user,
                                f"an existing account (uid {uid}, home {u.get('home')}) would get nologin and a "
                                "new home", "choose a name no account has yet, e.g. 'llm' (the default)"))
    return problems


@operation()
def update_if_stale():
    """apt-get update when the sources changed since the last update (new source or component, or an earlier
    deploy interrupted before its update). Evaluated when it runs, so it sees the changes made before it."""
    if host.get_fact(AptSourcesChanged):
        yield from apt.update._inner()
        yield f"cat {SOURCES_GLOB} 2>/dev/null | sha256sum | cut -d' ' -f1 > {SOURCES_STAMP}"


class CaBundleStale(FactBase):
    """True when a v100kit-*.crt under /usr/local/share/ca-certificates is newer than the system CA bundle."""

    def command(self) -> str:
        return ("find /usr/local/share/ca-certificates -name 'v100kit-*.crt' -newer /etc/ssl/certs/ca-certificates.crt"
                " | head -1")

    def process(self, output: list[str]) -> bool:
        return any(line.strip() for line in output)


@operation()
def ca_bundle_current():
    """update-ca-certificates when a CA file changed since the bundle was built (also after an interruption)."""
    if host.get_fact(CaBundleStale):
        yield "update-ca-certificates"


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
    cas = [files.put(name=f"trusted CA {Path(path).name}", src=str(Path(path).expanduser()),
                     dest=f"/usr/local/share/ca-certificates/v100kit-{i}.crt", mode="644")
           for i, path in enumerate(settings.base_ca_certificates)]
    if cas:
        ca_bundle_current(name="CA bundle includes them")
    server.user(
        name=f"service user {settings.base_service_user}",
        user=settings.base_service_user, system=True, home=settings.base_service_home, create_home=True,
        shell="/usr/sbin/nologin", groups=["video"], append=True,
    )
    files.directory(name="service home", path=settings.base_service_home, user=settings.base_service_user,
                    group=settings.base_service_user, mode="750")
