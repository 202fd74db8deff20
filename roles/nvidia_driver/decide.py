"""nvidia_driver decisions, pure: settings and facts in, a DriverPlan or refusals out. No operations are imported
here. Sources of the Volta rules: docs/volta.md §1 (driver) and §7 (the V100)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roles.nvidia_driver.versions import (BRANCHLESS_METAPACKAGES, DRIVER_PINS, KERNEL_NEWEST_KNOWN,
                                          NVIDIA_REPO_WITHOUT_VOLTA, RUNFILE_STANDIN_SOURCE, DriverPin, below,
                                          kernel_min_driver, kernel_series_tuple)
from roles.platform import Platform
from roles.settings import Settings, problem
from roles.volta import (AFTER_LAST_VOLTA_BRANCH_MIN_COMPUTE_CAPABILITY, LAST_VOLTA_DRIVER_BRANCH,
                         OPEN_MODULE_MIN_COMPUTE_CAPABILITY, driver_branch)

if TYPE_CHECKING:
    from roles.nvidia_driver.shapes import DkmsRow, DriverPackage, SecureBootInfo

BLACKLIST = "/etc/modprobe.d/v100kit-blacklist-nouveau.conf"
PREFERENCES = "/etc/apt/preferences.d/v100kit-nvidia-driver"
UNATTENDED = "/etc/apt/apt.conf.d/51v100kit-unattended-upgrades"
#: Name prefixes of every NVIDIA driver package family (Debian, Ubuntu -server, NVIDIA's repo).
DRIVER_NAME_PATTERNS = ("^nvidia-", "^libnvidia-", "^libcuda1", "^cuda-drivers", "^firmware-nvidia",
                        "^xserver-xorg-video-nvidia")


@dataclass(frozen=True)
class DriverPlan:
    """What the role installs on one host: the pin, the kernel headers metapackage, and the OS family ('debian' |
    'ubuntu': where DKMS keeps its signing key)."""

    pin: DriverPin
    headers_package: str
    family: str = "debian"
    #: where the .run file is downloaded from (nvidia_driver_runfile_url or the pin's own URL); None: not a runfile pin
    runfile_url: str | None = None


def with_gpu_capability(settings: Settings, gpus: list) -> Settings:
    """`settings` with gpu_compute_capability lowered to the lowest compute capability nvidia-smi gives for this
    host's GPUs (the NvidiaGpus fact: the driver serves every one of them), where that is lower; never raised, since
    nvidia-smi lists only the GPUs the loaded driver drives (a V100 under the open module or a branch after R580 is
    not listed, and a row without a capability is dropped). So a V100 answering 7.0 under gpu_compute_capability
    7.5 is refused the open module and the branches after R580, which would lose it; where no GPU answers the
    setting decides."""
    from roles.engines import compute_capability as lowest_of  # the lowest of `gpus`, else the setting

    lowest = lowest_of(settings, gpus)
    if lowest >= compute_capability(settings):
        return settings
    return settings.model_copy(update={"gpu_compute_capability": "{}.{}".format(*lowest)})


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


def plan(settings: Settings, platform: Platform, kernel_metas: dict, booted: str = "",
         kernels: tuple[str, ...] | list[str] = (), container: bool = False) -> tuple[DriverPlan | None, list[str]]:
    """Resolve the driver for this host. `kernel_metas` is the KernelMetapackages fact ({metapackage: the kernel
    image package it depends on}), `booted` the running kernel (`uname -r`; '' unknown): see headers_metapackage.
    `kernels`: the installed kernels (InstalledKernels' keys, `uname -r` form); with `booted` they are checked
    against the pinned driver (kernel_problems). `container`: the host is a container (HostTraits' virt), whose
    `uname -r` is the machine's kernel, not one this host builds a module for: only the installed kernels are checked.

    Returns (plan, problems): problems are SettingsError lines; plan is None when any were found.
    """
    pins = pins_for(settings, platform)
    problems = (open_module_refused(settings) + branch_drops_volta(settings, pins)
                + nvidia_repo_without_volta(settings, platform) + version_not_in_map(settings, platform, pins)
                + source_has_no_driver(settings, platform, pins))
    pin = select_pin(settings, pins)
    if pin is not None:
        checked = [*([] if container else [booted]), *kernels]
        found = kernel_problems(settings, pin, checked)
        if found:
            found = [p + kernel_alternative(settings, platform, pin, checked) for p in found]
        problems += branchless_metapackages(pin) + found
    headers = settings.nvidia_driver_headers_package or headers_metapackage(platform, kernel_metas, booted)
    if problems or pin is None:
        return None, problems
    url = (settings.nvidia_driver_runfile_url or pin.runfile.url) if pin.runfile else None
    return DriverPlan(pin, headers, platform.family, url), []


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
    return (bool(version) and driver_branch(version) > LAST_VOLTA_DRIVER_BRANCH
            and compute_capability(settings) < AFTER_LAST_VOLTA_BRANCH_MIN_COMPUTE_CAPABILITY)


def branch_drops_volta(settings: Settings, pins: tuple[DriverPin, ...]) -> list[str]:
    """A pinned version of a branch that no longer supports Volta is refused, naming the pins that do."""
    if not drops_volta(settings):
        return []
    version = settings.nvidia_driver_version
    return [problem(
        "nvidia_driver_version", version,
        f"driver branch {driver_branch(version)} drives compute capability 7.5 and newer only, these GPUs are "
        f"{settings.gpu_compute_capability}; R{LAST_VOLTA_DRIVER_BRANCH} is the last branch for them ('supported "
        "through the NVIDIA 580.xx Legacy drivers': NVIDIA Unix driver notice, NixOS/nixos-hardware#1880)",
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
    """Without a pinned version, the source must offer a default driver for this OS (nvidia_repo_without_volta
    says more where NVIDIA's repository has only branches after R580)."""
    if settings.nvidia_driver_version or pins or nvidia_repo_without_volta(settings, platform):
        return []
    return [problem("nvidia_driver_source", settings.nvidia_driver_source,
                    f"no driver in the version map for {platform.id} from this source",
                    "choose " + " or ".join(s for (p, s) in DRIVER_PINS if p == platform.id))]


def nvidia_repo_without_volta(settings: Settings, platform: Platform) -> list[str]:
    """NVIDIA's repository for this OS carries only branches after R580 (debian13: 590+ only,
    NVIDIA/cuda-repo-management#38, #40): refused below compute capability 7.5, naming the runfile source."""
    why = NVIDIA_REPO_WITHOUT_VOLTA.get(platform.id)
    if (settings.nvidia_driver_source != "nvidia" or why is None
            or compute_capability(settings) >= AFTER_LAST_VOLTA_BRANCH_MIN_COMPUTE_CAPABILITY):
        return []
    fix = ("set nvidia_driver_source: runfile (NVIDIA's R580 .run installer, pinned with its sha256, DKMS)"
           if (platform.id, "runfile") in DRIVER_PINS else "set nvidia_driver_source: distro")
    return [problem("nvidia_driver_source", "nvidia",
                    f"{why}, and R{LAST_VOLTA_DRIVER_BRANCH} is the last branch for compute capability "
                    f"{settings.gpu_compute_capability}", fix)]


def branchless_metapackages(pin: DriverPin) -> list[str]:
    """A pin must never name a branchless metapackage (BRANCHLESS_METAPACKAGES: cuda-drivers, nvidia-open): they
    follow the newest branch, which ignores a V100, and the branchless cuda-drivers installs no kernel module
    (cupy/cupy#10295). The version map has none; this guards it."""
    named = sorted(n for n in pin.packages if n in BRANCHLESS_METAPACKAGES)
    if not named:
        return []
    return [problem("nvidia_driver_version", pin.version,
                    f"its entry in the version map names the branchless metapackage(s) {named}, which follow the "
                    "newest branch and may install no kernel module (cupy/cupy#10295)",
                    f"name cuda-drivers-{pin.branch} and the module package in roles/nvidia_driver/versions.py")]


def kernel_problems(settings: Settings, pin: DriverPin, kernels: list[str]) -> list[str]:
    """Each running or installed kernel (`uname -r` form, '' ignored) must be one the pinned driver builds on:
    a kernel of a series with a KERNEL_MIN_DRIVER row needs at least that point release of the pin's branch
    (refused otherwise, naming newer pins or an older kernel); a kernel of a series newer than KERNEL_NEWEST_KNOWN
    of the branch (no public report that any release of it builds there) is refused unless
    nvidia_driver_allow_untested_kernel is set. A branch without a KERNEL_NEWEST_KNOWN entry is not checked."""
    problems = []
    for kernel in sorted({k for k in kernels if k}):
        series = kernel_series(kernel)
        if not series:
            continue
        floor = kernel_min_driver(pin.branch, series)
        if floor and below(pin.version, floor.version):
            problems.append(problem(
                "nvidia_driver_version", pin.version,
                f"kernel {kernel} (series {series}) needs driver {floor.version} or newer of branch {pin.branch} to "
                f"build the module ({floor.evidence}); DKMS would fail and the GPU would have no driver after a "
                "reboot into it",
                "pin a newer version of the map (roles/nvidia_driver/versions.py) or another source, or remove "
                f"kernel {kernel} and boot an older one"))
            continue
        newest = KERNEL_NEWEST_KNOWN.get(pin.branch)
        if newest and kernel_series_tuple(series) > kernel_series_tuple(newest[0]) \
                and not settings.nvidia_driver_allow_untested_kernel:
            problems.append(problem(
                "nvidia_driver_allow_untested_kernel", False,
                f"kernel {kernel} (series {series}) is newer than any series driver branch {pin.branch} is known to "
                f"build on ({newest[0]}: {newest[1]}); out-of-tree modules that predate a kernel series are not "
                "expected to build on it",
                f"boot a kernel of series {newest[0]} or older and remove {kernel}, or set "
                "nvidia_driver_allow_untested_kernel: true to try the build (the deploy then fails at DKMS if it "
                "does not build)"))
    return problems


def kernel_alternative(settings: Settings, platform: Platform, pin: DriverPin, kernels: list[str]) -> str:
    """A further fix for a kernel refusal of `pin`: the first other pin of the map for this OS (its own source's pins
    first, each source's default first) that the same kernels do not refuse, from a source not refused for Volta and
    of a branch that drives these GPUs, as '; or set nvidia_driver_...' ('' when there is none)."""
    below_turing = compute_capability(settings) < AFTER_LAST_VOLTA_BRANCH_MIN_COMPUTE_CAPABILITY
    sources = [settings.nvidia_driver_source] + [s for (p, s) in DRIVER_PINS if p == platform.id
                                                 and s != settings.nvidia_driver_source]
    for source in sources:
        if source == "nvidia" and platform.id in NVIDIA_REPO_WITHOUT_VOLTA and below_turing:
            continue
        for i, other in enumerate(DRIVER_PINS.get((platform.id, source), ())):
            if other.version == pin.version or (below_turing and other.branch > LAST_VOLTA_DRIVER_BRANCH):
                continue
            if kernel_problems(settings, other, kernels):
                continue
            if source == settings.nvidia_driver_source:
                return f"; or set nvidia_driver_version: {other.version} (it builds on these kernels)"
            version = "" if i == 0 else f" and nvidia_driver_version: {other.version}"
            return (f"; or set nvidia_driver_source: {source}{version} (driver {other.version}, which builds on these "
                    "kernels)")
    return ""


def runfile_problems(settings: Settings, pin: DriverPin, installed: str | None, pkgs: dict[str, DriverPackage]
                     ) -> list[str]:
    """A runfile driver is held by the toolkit: a .run driver of another version on the host (`installed`, the
    RunfileDriver fact) is refused, not replaced; so are the packages of a packaged driver (DriverPackages) beside
    it, which the installer would overwrite file by file. [] for other pins."""
    if pin.runfile is None:
        return []
    problems = []
    if installed and installed != pin.version:
        problems.append(problem(
            "nvidia_driver_version", settings.nvidia_driver_version or pin.version,
            f"NVIDIA's installer reports driver {installed} installed on this host; v100kit holds a runfile driver and "
            "never replaces one on its own",
            f"set nvidia_driver_version: {installed} to keep it (if the map has it), or run "
            f"`/usr/bin/nvidia-uninstall --silent` on the host and deploy again to install {pin.version}"))
    packaged = sorted(n for n, p in pkgs.items() if p["source"] != RUNFILE_STANDIN_SOURCE
                      and p["source"].startswith("nvidia-graphics-drivers"))
    if packaged:
        problems.append(problem(
            "nvidia_driver_source", "runfile",
            f"packages of a packaged driver are installed ({', '.join(packaged)}); the .run installer would "
            "overwrite their files and dpkg would put them back at the next upgrade",
            f"purge them first (apt-get purge {' '.join(packaged)}), or keep nvidia_driver_source: distro"))
    return problems


def kernel_flavour(release: str) -> str:
    """The flavour of a kernel release or image package: '6.8.0-45-generic' -> 'generic', '6.1.0-26-cloud-amd64' ->
    'cloud-amd64', 'linux-image-6.1.0-26-amd64' -> 'amd64' (the part after the ABI number)."""
    m = re.match(r"(?:linux-image-(?:unsigned-)?)?\d+\.\d+(?:\.\d+)?(?:-\d+)?(?:\+[a-z0-9.]+)?-(.+)$", release)
    return m.group(1) if m else ""


def kernel_series(release: str) -> str:
    """The upstream series of a kernel release or image package: '6.8.0-45-generic' -> '6.8' (what tells Ubuntu's GA
    kernel of a release from its HWE kernel: 22.04 GA is 5.15, its HWE 6.8)."""
    m = re.match(r"(?:linux-image-(?:unsigned-)?)?(\d+\.\d+)", release)
    return m.group(1) if m else ""


def headers_metapackage(platform: Platform, kernel_metas: dict, booted: str = "") -> str:
    """The headers metapackage of the kernel metapackage the booted kernel belongs to, so headers follow that
    flavour series' upgrades: linux-image-amd64 -> linux-headers-amd64, linux-image-cloud-amd64 ->
    linux-headers-cloud-amd64, linux-image-generic-hwe-22.04 -> linux-headers-generic-hwe-22.04,
    linux-image-virtual -> linux-headers-virtual, linux-image-lowlatency -> linux-headers-lowlatency.

    `kernel_metas`: {metapackage: the image package it depends on ('' unknown)}; `booted`: `uname -r` ('' unknown).
    The metapackage is, in this order: one that depends on the booted kernel's image; one whose kernel has the booted
    kernel's flavour and series (the metapackage moved on to a newer ABI not booted yet); one of the booted flavour;
    the first installed one. Without any: linux-headers-<booted flavour>, else the distribution's default."""
    metas = {n: (d if isinstance(d, str) else "") for n, d in kernel_metas.items()
             if re.fullmatch(r"linux-image-(?!\d)(?!unsigned)[a-z0-9.+-]+", n)}
    flavour, series = kernel_flavour(booted), kernel_series(booted)
    tiers = [
        [n for n, d in metas.items() if booted and d.removeprefix("linux-image-").removeprefix("unsigned-") == booted],
        [n for n, d in metas.items() if flavour and kernel_flavour(d) == flavour and kernel_series(d) == series],
        [n for n, d in metas.items() if flavour and kernel_flavour(d) == flavour],
        list(metas),
    ]
    chosen = next((sorted(t)[0] for t in tiers if t), None)
    if chosen:
        return "linux-headers-" + chosen.removeprefix("linux-image-")
    if flavour:
        return "linux-headers-" + flavour
    return "linux-headers-amd64" if platform.family == "debian" else "linux-headers-generic"


def secure_boot_refused(settings: Settings, sb: SecureBootInfo) -> list[str]:
    """With Secure Boot on, the kernel loads only signed modules: the DKMS-built nvidia module would install cleanly
    and never load (NVIDIA ansible-role-nvidia-driver issue 78). Refused unless a DKMS signing key is enrolled or
    queued for enrollment, or nvidia_driver_secure_boot is 'enroll' (the deploy then makes and queues the key)."""
    if sb["state"] != "enabled" or sb["enrolled"] or sb["pending"] or settings.nvidia_driver_secure_boot == "enroll":
        return []
    return [problem(
        "nvidia_driver_secure_boot", settings.nvidia_driver_secure_boot,
        f"Secure Boot is enabled ({sb['source']}) and no DKMS signing key is enrolled: the kernel would refuse the "
        "unsigned nvidia module, which installs and never loads",
        "enroll a machine owner key that DKMS signs with (Debian/Ubuntu dkms: `dkms generate_mok`, then "
        "`mokutil --import /var/lib/dkms/mok.pub` and confirm it in MokManager at the next boot), or turn Secure "
        "Boot off in the firmware, or set nvidia_driver_secure_boot: enroll to let the deploy make and queue the key")]


def unattended_patterns(pin: DriverPin) -> list[str]:
    """Package-name regexes unattended-upgrades must never touch: every driver family and the pin's packages."""
    return list(DRIVER_NAME_PATTERNS) + [f"^{re.escape(n)}$" for n in sorted(pin.packages)]


def upstream(version: str) -> str:
    """The upstream part of a Debian version: '1:550.163.01-2' -> '550.163.01'."""
    return version.split(":")[-1].rsplit("-", 1)[0]


def is_open_module_package(name: str) -> bool:
    """True for packages of the open kernel module: nvidia-open, nvidia-kernel-open-dkms, nvidia-open-kernel-dkms
    (Debian), nvidia-dkms-580-open, nvidia-dkms-580-server-open, nvidia-kernel-source-580-open (Ubuntu)."""
    return bool(re.search(r"(^|-)open(-|$)", name))


def open_module_packages(pkgs: dict[str, DriverPackage]) -> list[str]:
    """The installed open-module packages among the driver packages (DriverPackages), sorted."""
    return sorted(n for n in pkgs if is_open_module_package(n))


def split_driver_packages(pkgs: dict[str, DriverPackage], pin: DriverPin
                          ) -> tuple[dict[str, DriverPackage], dict[str, DriverPackage]]:
    """Split installed driver packages (DriverPackages) into (ours, others).

    Ours: the pin's packages, and packages of the driver's own source at the pinned version (dependencies that
    NVIDIA's and Ubuntu's metapackages pull in). The own source is that of the pin's installed packages, else
    pin.source, else any source of the pin's flavour (-server or not). Others: any other version of a driver
    source (another branch); another flavour's source at the same version (desktop nvidia-graphics-drivers-535
    beside the pinned -server, which conflict in dpkg: Canonical nvidia-graphics-drivers PR 59; Debian's
    nvidia-graphics-drivers-tesla-535 beside nvidia-graphics-drivers); the open kernel module's packages (a V100
    needs the proprietary one: docs/volta.md §1)."""
    own = {p["source"] for n, p in pkgs.items() if n in pin.packages and p["source"].startswith("nvidia-graphics-drivers")}
    own = own or ({pin.source} if pin.source else set())

    def own_source(source: str) -> bool:
        return source in own if own else source.endswith("-server") == pin.server

    ours, others = {}, {}
    for name, p in pkgs.items():
        same = name in pin.packages or (p["source"].startswith("nvidia-graphics-drivers")
                                        and upstream(p["version"]) == pin.version and own_source(p["source"])
                                        and not is_open_module_package(name))
        (ours if same else others)[name] = p
    return ours, others


def unheld(pin: DriverPin, pkgs: dict[str, DriverPackage], holds: list[str]) -> list[str]:
    """The pin's packages and the installed packages of the driver at the pinned version not held yet, sorted."""
    ours, _ = split_driver_packages(pkgs, pin)
    return sorted((set(pin.packages) | set(ours)) - set(holds))


def built_kernels(dkms: list[DkmsRow], module_prefix: str) -> set[str]:
    """Kernels for which DKMS reports the driver's module (name starting with `module_prefix`) installed."""
    return {r["kernel"] for r in dkms if r["module"].startswith(module_prefix) and r["state"] == "installed"}
