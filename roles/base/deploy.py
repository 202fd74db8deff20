"""base deploy: the operations for apt sources, essential packages, trusted CAs and the service user."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, server

from roles.base.decide import (BASE_PACKAGES, COMPONENTS, DISTRO_SOURCE_FILES, MIRRORS, NVIDIA_SOURCE_FILE,
                               managed_repositories, our_source_file, stray_sources)
from roles.base.facts import AptSourceEntries, CaBundleStale
from roles.facts import SOURCES_GLOB, SOURCES_STAMP, AptSourcesChanged
from roles.platform import Platform
from roles.settings import Settings

TEMPLATES = Path(__file__).parent / "templates"


@operation()
def update_if_stale():
    """apt-get update when the sources changed since the last update (new source or component, or an earlier
    deploy interrupted before its update). Evaluated when it runs, so it sees the changes made before it."""
    if host.get_fact(AptSourcesChanged):
        yield from apt.update._inner()
        yield f"cat {SOURCES_GLOB} 2>/dev/null | sha256sum | cut -d' ' -f1 > {SOURCES_STAMP}"


@operation()
def ca_bundle_current():
    """update-ca-certificates when a CA file changed since the bundle was built (also after an interruption)."""
    if host.get_fact(CaBundleStale):
        yield "update-ca-certificates"


def stray_sources_disabled(settings: Settings, platform: Platform) -> None:
    """Disable other sources files whose every entry is for a repository the toolkit manages (kept as
    FILE.disabled, which apt ignores), saying so; warn about files that mix such entries with others."""
    to_disable, mixed = stray_sources(host.get_fact(AptSourceEntries), managed_repositories(settings, platform),
                                      {our_source_file(platform), NVIDIA_SOURCE_FILE})
    for path, hits in to_disable.items():
        logger.warning(f"[{host.name}] base: {path} is another entry for {', '.join(hits)}, which v100kit manages "
                       f"(two entries with different Signed-By make apt fail): disabled, kept as {path}.disabled")
        server.shell(name=f"disable {path}: another entry for a repository v100kit manages (kept as "
                          f"{path}.disabled)", commands=[f"mv -f {path} {path}.disabled"])
    for path, hits in mixed.items():
        logger.warning(f"[{host.name}] base: {path} also has entries for {', '.join(hits)}, which v100kit manages; "
                       "left alone because it holds other entries too: remove those lines by hand")


@deploy("Base")
def base(settings: Settings, platform: Platform) -> None:
    """apt lock timeout, our sources file (distribution ones disabled), essential packages, trusted CAs, the
    service user and its home."""
    files.put(
        name="apt waits for dpkg locks instead of failing",
        src=StringIO(f'DPkg::Lock::Timeout "{settings.base_apt_lock_timeout_s}";\n'),
        dest="/etc/apt/apt.conf.d/50v100kit-lock-timeout", mode="644",
    )
    mirror, security = MIRRORS[platform.family]
    ours = our_source_file(platform)
    files.template(
        name=f"{platform.family} sources with the NVIDIA components",
        src=str(TEMPLATES / f"{platform.family}.sources.j2"), dest=ours, mode="644",
        mirror=settings.base_apt_mirror or mirror, security_mirror=settings.base_apt_security_mirror or security,
        codename=platform.codename, components=" ".join(COMPONENTS[platform.family]),
    )
    for path in DISTRO_SOURCE_FILES:
        if host.get_fact(File, path=path):
            server.shell(name=f"disable {path} (kept as {path}.disabled)", commands=[f"mv -f {path} {path}.disabled"])
    stray_sources_disabled(settings, platform)
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
