"""nvidia_driver decisions, pure: settings and facts in, a DriverPlan or refusals out. No operations are imported
here. Sources of the Volta rules: docs/volta.md §1 (driver) and §7 (the V100)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roles.nvidia_driver.versions import DRIVER_PINS, DriverPin
from roles.platform import Platform
from roles.settings import Settings, problem
from roles.volta import LAST_VOLTA_DRIVER_BRANCH, OPEN_MODULE_MIN_COMPUTE_CAPABILITY, driver_branch

if TYPE_CHECKING:
    from roles.nvidia_driver.facts import DkmsRow, DriverPackage

BLACKLIST = "/etc/modprobe.d/v100kit-blacklist-nouveau.conf"
PREFERENCES = "/etc/apt/preferences.d/v100kit-nvidia-driver"
UNATTENDED = "/etc/apt/apt.conf.d/51v100kit-unattended-upgrades"
#: Name prefixes of every NVIDIA driver package family (Debian, Ubuntu -server, NVIDIA's repo).
DRIVER_NAME_PATTERNS = ("^nvidia-", "^libnvidia-", "^libcuda1", "^cuda-drivers", "^firmware-nvidia",
                        "^xserver-xorg-video-nvidia")


@dataclass(frozen=True)
class DriverPlan:
    """What the role installs on one host: the pin and the kernel headers metapackage."""

    pin: DriverPin
    headers_package: str


def compute_capability(settings: Settings) -> tuple[int, int]:
    """gpu_compute_capability as (major, minor): '7.0' -> (7, 0)."""
    major, minor = settings.gpu_compute_capability.split(".")
    return int(major), int(minor)


def pins_for(settings: Settings, platform: Platform) -> tuple[DriverPin, ...]:
    """The installable drivers for this OS and nvidia_driver_source, default first (may be empty)."""
    return DRIVER_PINS.get((platform.id, settings.nvidia_driver_source), ())


def select_pin(settings: Settings, pins: tuple[DriverPin, ...]) -> DriverPin | None:
    """The pin of nvidia_driver_version among `pins`, or the default pin; None when there is none."""
    if settings.nvidia_driver_version:
        return next((p for p in pins if p.version == settings.nvidia_driver_version), None)
    return pins[0] if pins else None


def plan(settings: Settings, platform: Platform, installed: dict) -> tuple[DriverPlan | None, list[str]]:
    """Resolve the driver for this host. `installed` is the DebPackages fact ({name: [versions]}).

    Returns (plan, problems): problems are SettingsError lines; plan is None when any were found.
    """
    pins = pins_for(settings, platform)
    problems = (open_module_refused(settings) + branch_drops_volta(settings, pins)
                + version_not_in_map(settings, platform, pins) + source_has_no_driver(settings, platform, pins))
    pin = select_pin(settings, pins)
    headers = settings.nvidia_driver_headers_package or headers_metapackage(platform, installed)
    if problems or pin is None:
        return None, problems
    return DriverPlan(pin, headers), []


def open_module_refused(settings: Settings) -> list[str]:
    """The open kernel module needs GSP, compute capability >= 7.5 (docs/volta.md §1): refused below."""
    cc = compute_capability(settings)
    if settings.nvidia_driver_kernel_module == "open" and cc < OPEN_MODULE_MIN_COMPUTE_CAPABILITY:
        return [problem(
            "nvidia_driver_kernel_module", "open",
            f"open kernel modules need GSP, compute capability >= 7.5; these GPUs are {settings.gpu_compute_capability}"
            " (NVIDIA/open-gpu-kernel-modules README)", "set nvidia_driver_kernel_module: proprietary")]
    return []


def drops_volta(settings: Settings) -> bool:
    """True when nvidia_driver_version is of a branch after R580 and the GPUs are older than Turing (7.5): such a
    driver refuses them (docs/volta.md §1)."""
    version = settings.nvidia_driver_version
    return bool(version) and driver_branch(version) > LAST_VOLTA_DRIVER_BRANCH and compute_capability(settings) < (7, 5)


def branch_drops_volta(settings: Settings, pins: tuple[DriverPin, ...]) -> list[str]:
    """A pinned version of a branch that no longer supports Volta is refused, naming the pins that do."""
    if not drops_volta(settings):
        return []
    version = settings.nvidia_driver_version
    return [problem(
        "nvidia_driver_version", version,
        f"driver branch {driver_branch(version)} does not support Volta; R{LAST_VOLTA_DRIVER_BRANCH} is the "
        "last branch for compute capability 7.0 (NVIDIA Unix driver deprecation notice)",
        f"pin a {LAST_VOLTA_DRIVER_BRANCH}-or-older version: "
        + (", ".join(p.version for p in pins) or "none in the map for this OS"))]


def version_not_in_map(settings: Settings, platform: Platform, pins: tuple[DriverPin, ...]) -> list[str]:
    """A pinned version must be in the version map for this OS and source (unless refused for its branch)."""
    version = settings.nvidia_driver_version
    if not version or drops_volta(settings) or any(p.version == version for p in pins):
        return []
    return [problem(
        "nvidia_driver_version", version,
        f"not in the version map for {platform.id} from source {settings.nvidia_driver_source!r}",
        "use one of " + (", ".join(p.version for p in pins) or "nothing: choose another source")
        + " (roles/nvidia_driver/versions.py)")]


def source_has_no_driver(settings: Settings, platform: Platform, pins: tuple[DriverPin, ...]) -> list[str]:
    """Without a pinned version, the source must offer a default driver for this OS."""
    if settings.nvidia_driver_version or pins:
        return []
    return [problem("nvidia_driver_source", settings.nvidia_driver_source,
                    f"no driver in the version map for {platform.id} from this source",
                    "choose " + " or ".join(s for (p, s) in DRIVER_PINS if p == platform.id))]


def headers_metapackage(platform: Platform, installed: dict) -> str:
    """The headers metapackage matching the installed kernel metapackage, so headers follow kernel upgrades:
    linux-image-amd64 -> linux-headers-amd64, linux-image-generic-hwe-22.04 -> linux-headers-generic-hwe-22.04.
    Falls back to the distribution's default flavour where no kernel metapackage is installed."""
    metas = sorted(n for n in installed if re.fullmatch(r"linux-image-(?!\d)[a-z0-9.+-]+", n)
                   and not n.startswith("linux-image-unsigned"))
    if metas:
        return "linux-headers-" + metas[0].removeprefix("linux-image-")
    return "linux-headers-amd64" if platform.family == "debian" else "linux-headers-generic"


def unattended_patterns(pin: DriverPin) -> list[str]:
    """Package-name regexes unattended-upgrades must never touch: every driver family and the pin's packages."""
    return list(DRIVER_NAME_PATTERNS) + [f"^{re.escape(n)}$" for n in sorted(pin.packages)]


def upstream(version: str) -> str:
    """The upstream part of a Debian version: '1:550.163.01-2' -> '550.163.01'."""
    return version.split(":")[-1].rsplit("-", 1)[0]


def split_driver_packages(pkgs: dict[str, DriverPackage], pin_packages: dict[str, str], pin_version: str
                          ) -> tuple[dict[str, DriverPackage], dict[str, DriverPackage]]:
    """Split installed driver packages (DriverPackages) into (ours, others).

    Ours: the pin's packages, and packages of the driver's own source at the pinned version (dependencies that
    NVIDIA's and Ubuntu's metapackages pull in). Others: any other version of a driver source: another branch."""
    ours, others = {}, {}
    for name, p in pkgs.items():
        same = name in pin_packages or (p["source"].startswith("nvidia-graphics-drivers")
                                        and upstream(p["version"]) == pin_version)
        (ours if same else others)[name] = p
    return ours, others


def unheld(pin: DriverPin, pkgs: dict[str, DriverPackage], holds: list[str]) -> list[str]:
    """The pin's packages and the installed packages of the driver at the pinned version not held yet, sorted."""
    ours, _ = split_driver_packages(pkgs, pin.packages, pin.version)
    return sorted((set(pin.packages) | set(ours)) - set(holds))


def built_kernels(dkms: list[DkmsRow], module_prefix: str) -> set[str]:
    """Kernels for which DKMS reports the driver's module (name starting with `module_prefix`) installed."""
    return {r["kernel"] for r in dkms if r["module"].startswith(module_prefix) and r["state"] == "installed"}
