"""nvidia_driver: an exact pinned driver with the proprietary kernel module, built by DKMS for every installed
kernel, held against upgrades, nouveau blacklisted (also inside the initramfs), nvidia-persistenced enabled.

`plan()` decides everything that can be refused from settings and facts, before any operation; `nvidia_driver()`
applies it. Reboots are explicit: only with `nvidia_driver_reboot: true`, otherwise the deploy says one is due.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FactBase, deploy, operation
from pyinfra.api.command import FunctionCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.server import Command
from pyinfra.operations import apt, files, server, systemd

from roles.facts import AptHolds, HostTraits
from roles.nvidia_driver.facts import (DkmsStatus, DriverPackages, InitramfsLacking, InstalledKernels,
                                      LoadedNvidiaModule, NvidiaGpus, split_driver_packages)
from roles.nvidia_driver.versions import DRIVER_PINS, DriverPin
from roles.platform import Platform
from roles.settings import Settings, problem
from roles.volta import LAST_VOLTA_DRIVER_BRANCH, OPEN_MODULE_MIN_COMPUTE_CAPABILITY

TEMPLATES = Path(__file__).parent / "templates"
BLACKLIST = "/etc/modprobe.d/v100kit-blacklist-nouveau.conf"
PREFERENCES = "/etc/apt/preferences.d/v100kit-nvidia-driver"
UNATTENDED = "/etc/apt/apt.conf.d/51v100kit-unattended-upgrades"
REBOOT_DELAY_S = 10  # seconds pyinfra waits after `reboot` before reconnecting
#: Name prefixes of every NVIDIA driver package family (Debian, Ubuntu -server, NVIDIA's repo).
DRIVER_NAME_PATTERNS = ("^nvidia-", "^libnvidia-", "^libcuda1", "^cuda-drivers", "^firmware-nvidia",
                        "^xserver-xorg-video-nvidia")


@dataclass(frozen=True)
class DriverPlan:
    """What the role installs on one host: the pin and the kernel headers metapackage."""

    pin: DriverPin
    headers_package: str


def compute_capability(settings: Settings) -> tuple[int, int]:
    major, minor = settings.gpu_compute_capability.split(".")
    return int(major), int(minor)


def plan(settings: Settings, platform: Platform, installed: dict) -> tuple[DriverPlan | None, list[str]]:
    """Resolve the driver for this host. `installed` is the DebPackages fact ({name: [versions]}).

    Returns (plan, problems): problems are SettingsError lines; plan is None when any were found.
    """
    problems = []
    cc = compute_capability(settings)
    if settings.nvidia_driver_kernel_module == "open" and cc < OPEN_MODULE_MIN_COMPUTE_CAPABILITY:
        problems.append(problem(
            "nvidia_driver_kernel_module", "open",
            f"open kernel modules need GSP, compute capability >= 7.5; these GPUs are {settings.gpu_compute_capability}"
            " (NVIDIA/open-gpu-kernel-modules README)", "set nvidia_driver_kernel_module: proprietary"))
    pins = DRIVER_PINS.get((platform.id, settings.nvidia_driver_source), ())
    pin = pins[0] if pins else None
    if settings.nvidia_driver_version:
        version = settings.nvidia_driver_version
        if int(version.split(".")[0]) > LAST_VOLTA_DRIVER_BRANCH and cc < (7, 5):
            problems.append(problem(
                "nvidia_driver_version", version,
                f"driver branch {version.split('.')[0]} does not support Volta; R{LAST_VOLTA_DRIVER_BRANCH} is the "
                "last branch for compute capability 7.0 (NVIDIA Unix driver deprecation notice)",
                f"pin a {LAST_VOLTA_DRIVER_BRANCH}-or-older version: "
                + (", ".join(p.version for p in pins) or "none in the map for this OS")))
            pin = None
        else:
            pin = next((p for p in pins if p.version == version), None)
            if pin is None:
                problems.append(problem(
                    "nvidia_driver_version", version,
                    f"not in the version map for {platform.id} from source {settings.nvidia_driver_source!r}",
                    "use one of " + (", ".join(p.version for p in pins) or "nothing: choose another source")
                    + " (roles/nvidia_driver/versions.py)"))
    elif pin is None:
        problems.append(problem("nvidia_driver_source", settings.nvidia_driver_source,
                                f"no driver in the version map for {platform.id} from this source",
                                "choose " + " or ".join(s for (p, s) in DRIVER_PINS if p == platform.id)))
    headers = settings.nvidia_driver_headers_package or headers_metapackage(platform, installed)
    if problems or pin is None:
        return None, problems
    return DriverPlan(pin, headers), []


def headers_metapackage(platform: Platform, installed: dict) -> str:
    """The headers metapackage matching the installed kernel metapackage, so headers follow kernel upgrades:
    linux-image-amd64 -> linux-headers-amd64, linux-image-generic-hwe-22.04 -> linux-headers-generic-hwe-22.04.
    Falls back to the distribution's default flavour where no kernel metapackage is installed."""
    metas = sorted(n for n in installed if re.fullmatch(r"linux-image-(?!\d)[a-z0-9.+-]+", n)
                   and not n.startswith("linux-image-unsigned"))
    if metas:
        return "linux-headers-" + metas[0].removeprefix("linux-image-")
    return "linux-headers-amd64" if platform.family == "debian" else "linux-headers-generic"


@operation()
def hold(pin: DriverPin):
    """apt-mark hold the pin's packages and every installed package of the driver at the pinned version (the
    dependencies that metapackages pull in), each only if not held yet."""
    ours, _ = split_driver_packages(host.get_fact(DriverPackages), pin.packages, pin.version)
    missing = sorted((set(pin.packages) | set(ours)) - set(host.get_fact(AptHolds)))
    if missing:
        yield "apt-mark hold " + " ".join(missing)


@operation()
def dkms_for_every_kernel(module_prefix: str):
    """Headers and the DKMS module for every installed kernel, so the next boot into any of them comes up with a
    driver. The headers metapackage only follows the newest kernel; an installed older kernel gets its own
    linux-headers-<version> where the archive still has it, and is reported where it does not."""
    built = {r["kernel"] for r in host.get_fact(DkmsStatus)
             if r["module"].startswith(module_prefix) and r["state"] == "installed"}
    for kernel, has_headers in sorted(host.get_fact(InstalledKernels).items()):
        if kernel in built:
            continue
        if not has_headers:
            if not host.get_fact(Command, command=f"apt-cache show linux-headers-{kernel} >/dev/null 2>&1 && echo y"
                                                  " || true"):
                logger.warning(f"[{host.name}] nvidia_driver: kernel {kernel} has no headers and the archive has no "
                               f"linux-headers-{kernel}: no module can be built for it; remove that kernel or "
                               "install its headers by hand")
                continue
            yield f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends linux-headers-{kernel}"
        yield f"dkms autoinstall -k {kernel}"


@operation()
def initramfs_contains(path: str):
    """update-initramfs for each kernel whose initramfs lacks `path` (converges after an interrupted deploy)."""
    for kernel in host.get_fact(InitramfsLacking, path=path):
        yield f"update-initramfs -u -k {kernel}"


class BootId(FactBase):
    """This boot's id (/proc/sys/kernel/random/boot_id): it changes at every boot."""

    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""


def _booted_again(state, host, before: str) -> bool:
    """Raise unless the host reports a boot_id other than `before` (the reboot really happened)."""
    now = host.get_fact(BootId)
    if not now or now == before:
        raise OperationError(f"{host.name}: boot_id still {before!r} after the reboot")
    logger.info(f"[{host.name}] rebooted: boot_id {before} -> {now}")
    return True


@operation()
def module_loaded(version: str, allow_reboot: bool):
    """Load the pinned module where the host allows it; reboot only when allowed and the running module must
    change (nouveau bound, or another version loaded). Containers cannot load modules: say so, change nothing."""
    traits = host.get_fact(HostTraits)
    if not traits["modules_loadable"]:
        host.noop(f"module loading and reboots skipped: modules cannot be loaded here ({traits['virt']})")
        return
    loaded = host.get_fact(LoadedNvidiaModule)
    if loaded == version:
        return
    if loaded is None and not traits["nouveau_loaded"]:
        yield "modprobe nvidia"
        return
    why = "nouveau owns the GPU" if traits["nouveau_loaded"] else f"module {loaded} is loaded, pinned {version}"
    if allow_reboot:
        logger.warning(f"[{host.name}] nvidia_driver: rebooting: {why}")
        before = host.get_fact(BootId)
        yield from server.reboot._inner(delay=REBOOT_DELAY_S, reboot_timeout=600)
        yield FunctionCommand(_booted_again, (before,), {})  # then the deploy resumes on the new boot
    else:
        logger.warning(f"[{host.name}] nvidia_driver: REBOOT REQUIRED ({why}); reboot, or deploy again with "
                       "nvidia_driver_reboot: true")


@deploy("NVIDIA driver")
def nvidia_driver(settings: Settings, driver: DriverPlan) -> None:
    pin = driver.pin
    blacklist = files.put(name="nouveau blacklisted", src=str(TEMPLATES / "blacklist-nouveau.conf"),
                          dest=BLACKLIST, mode="644")
    files.template(name=f"apt pins the driver at {pin.version}", src=str(TEMPLATES / "preferences.j2"),
                   dest=PREFERENCES, mode="644", pin=pin)
    patterns = list(DRIVER_NAME_PATTERNS) + [f"^{re.escape(n)}$" for n in sorted(pin.packages)]
    files.template(name="unattended-upgrades never touches the driver",
                   src=str(TEMPLATES / "unattended-upgrades.conf.j2"), dest=UNATTENDED, mode="644",
                   patterns=patterns)
    apt.packages(name=f"kernel headers ({driver.headers_package}) and DKMS",
                 packages=[driver.headers_package, "dkms"], no_recommends=True)
    apt.packages(name=f"driver {pin.version}, proprietary module",
                 packages=[f"{n}={v}" for n, v in sorted(pin.packages.items())], no_recommends=True,
                 extra_install_args="--allow-change-held-packages")
    hold(name="driver packages held", pin=pin)
    dkms_for_every_kernel(name="module built for every installed kernel", module_prefix=pin.dkms_module)
    server.shell(name="initramfs rebuilt with the blacklist", commands=["update-initramfs -u -k all"],
                 _if=blacklist.did_change)
    initramfs_contains(name="blacklist inside every initramfs", path=BLACKLIST)
    has_gpu = bool(host.get_fact(NvidiaGpus))
    systemd.service(name="nvidia-persistenced enabled", service="nvidia-persistenced", enabled=True,
                    running=has_gpu or None)
    module_loaded(name="module loaded", version=pin.version, allow_reboot=settings.nvidia_driver_reboot)
