"""cuda decisions, pure: settings, the platform and the pinned driver in, toolkits or refusals out. No operations
are imported here. Sources of the rules: docs/volta.md §1 (minimum driver per toolkit) and §2 (CUDA toolkit)."""

from __future__ import annotations

from roles.cuda.versions import DISTRO_TOOLKITS, NVIDIA_REPOS, NVIDIA_TOOLKITS, Toolkit
from roles.nvidia_driver.versions import DriverPin
from roles.platform import Platform
from roles.settings import Settings, problem
from roles.volta import CUDA_MIN_DRIVER, CUDA_MINOR_COMPAT_MIN_DRIVER, LAST_CUDA_MAJOR_FOR_SM70, version_tuple


def source_for(settings: Settings, platform: Platform) -> str:
    """cuda_source, or its per-OS default: distro on Debian, nvidia on Ubuntu."""
    return settings.cuda_source or ("distro" if platform.family == "debian" else "nvidia")


def nvidia_repo_url(settings: Settings, platform: Platform) -> str:
    """The URL of NVIDIA's CUDA repository for this platform under cuda_nvidia_repo_url (NVIDIA's own, or a mirror):
    ROOT/<os directory>/x86_64/. Raises KeyError for a platform NVIDIA has no repository for (NVIDIA_REPOS)."""
    return f"{settings.cuda_nvidia_repo_url}{NVIDIA_REPOS[platform.id]}/x86_64/"


def available(source: str, platform: Platform) -> list[Toolkit]:
    """Toolkits installable on this platform from this source, default first."""
    if source == "distro":
        return [DISTRO_TOOLKITS[platform.id]] if platform.id in DISTRO_TOOLKITS else []
    return [t for (p, _), t in NVIDIA_TOOLKITS.items() if p == platform.id]


def wanted_versions(settings: Settings, offer: list[Toolkit]) -> list[str]:
    """cuda_versions, or the source's default toolkit ([] when the source offers none). Versions as '12.4'."""
    return settings.cuda_versions or [t.version for t in offer[:1]]


def cuda_major(version: str) -> int:
    """'12.4' -> 12."""
    return version_tuple(version)[0]


def plan(settings: Settings, platform: Platform, driver: DriverPin | None) -> tuple[list[Toolkit], list[str]]:
    """Resolve the toolkits for this host against the pinned driver (None: no driver resolved, not checked).

    Returns (toolkits, problems): default toolkit first; problems are SettingsError lines, and toolkits is [] when
    there are any. Minor-version compatibility notes are not logged here: see minor_compat_warnings."""
    source = source_for(settings, platform)
    offer = available(source, platform)
    wanted = wanted_versions(settings, offer)
    problems = nothing_offered(platform, source, wanted)
    toolkits = []
    for v in wanted:
        refused = (too_new_for_sm70(v, source, offer) or not_available(v, platform, source, offer)
                   or driver_too_old(settings, v, driver))
        problems += refused
        if not refused:
            toolkits.append(next(t for t in offer if t.version == v))
    default = settings.cuda_default_version or (wanted[0] if wanted else None)
    problems += default_not_wanted(default, wanted)
    toolkits.sort(key=lambda t: t.version != default)
    return (toolkits if not problems else []), problems


def _offered(source: str, offer: list[Toolkit]) -> str:
    return ", ".join(t.version for t in offer) or "none"


def nothing_offered(platform: Platform, source: str, wanted: list[str]) -> list[str]:
    """Refused when neither cuda_versions nor the source's default gives a toolkit for this OS."""
    if wanted:
        return []
    return [problem("cuda_source", source, f"no CUDA toolkit for {platform.id} from this source",
                    "set cuda_source to " + ("nvidia" if source == "distro" else "distro"))]


def too_new_for_sm70(version: str, source: str, offer: list[Toolkit]) -> list[str]:
    """CUDA 13+ cannot compile for sm_70 (docs/volta.md §2): refused."""
    major = cuda_major(version)
    if major <= LAST_CUDA_MAJOR_FOR_SM70:
        return []
    return [problem("cuda_versions", version, f"CUDA {major} cannot compile for sm_70 (CUDA 13.0 removed "
                    "offline compilation for sm_50..sm_72; CUDA 13.0 release notes)",
                    f"use a 12.x or 11.x toolkit: {_offered(source, offer)} from source {source!r}")]


def not_available(version: str, platform: Platform, source: str, offer: list[Toolkit]) -> list[str]:
    """The toolkit must be in the version map for this OS and source."""
    if any(t.version == version for t in offer):
        return []
    return [problem("cuda_versions", version, f"not available for {platform.id} from source {source!r}",
                    f"use {_offered(source, offer)}, or another cuda_source (roles/cuda/versions.py)")]


def needs_newer_driver(version: str, driver: DriverPin | None) -> bool:
    """True when the pinned driver is older than the toolkit's minimum driver (docs/volta.md §1, release notes
    table 3); False without a driver."""
    return driver is not None and version_tuple(driver.version) < version_tuple(CUDA_MIN_DRIVER[version])


def through_minor_compat(settings: Settings, version: str, driver: DriverPin | None) -> bool:
    """True when a too-old driver is accepted through minor-version compatibility: allowed in the settings and the
    driver at least the major's compatibility floor (docs/volta.md §1, release notes table 2)."""
    return (needs_newer_driver(version, driver) and settings.cuda_allow_minor_version_compat
            and version_tuple(driver.version) >= version_tuple(CUDA_MINOR_COMPAT_MIN_DRIVER[cuda_major(version)]))


def driver_too_old(settings: Settings, version: str, driver: DriverPin | None) -> list[str]:
    """A toolkit whose minimum driver is newer than the pin is refused, unless it runs through minor-version
    compatibility."""
    if not needs_newer_driver(version, driver) or through_minor_compat(settings, version, driver):
        return []
    need, compat = CUDA_MIN_DRIVER[version], CUDA_MINOR_COMPAT_MIN_DRIVER[cuda_major(version)]
    return [problem(
        "cuda_versions", version,
        f"CUDA {version} needs driver >= {need} (CUDA release notes, table 3), the pinned driver is "
        f"{driver.version}; such a toolkit fails at run time with 'PTX was compiled with an "
        "unsupported toolchain'",
        f"pin a driver >= {need} (nvidia_driver_version), choose a toolkit the driver supports, or "
        f"set cuda_allow_minor_version_compat: true (needs driver >= {compat})")]


def default_not_wanted(default: str | None, wanted: list[str]) -> list[str]:
    """cuda_default_version must be one of the toolkits installed."""
    if not default or default in wanted:
        return []
    return [problem("cuda_default_version", default, f"not among cuda_versions {wanted}",
                    "set it to one of cuda_versions")]


def minor_compat_warnings(settings: Settings, platform: Platform, driver: DriverPin | None) -> list[str]:
    """One line per wanted toolkit that plan() accepts only through minor-version compatibility, in the order of
    cuda_versions (the caller logs them, prefixed with the host name)."""
    source = source_for(settings, platform)
    offer = available(source, platform)
    return [f"CUDA {v} needs driver >= {CUDA_MIN_DRIVER[v]}, pinned {driver.version}: running through "
            f"minor-version compatibility (>= {CUDA_MINOR_COMPAT_MIN_DRIVER[cuda_major(v)]}); PTX built for the "
            "newer toolkit cannot JIT on this driver"
            for v in wanted_versions(settings, offer)
            if not too_new_for_sm70(v, source, offer) and not not_available(v, platform, source, offer)
            and through_minor_compat(settings, v, driver)]
