"""nvidia_driver deploy: the operations that apply a DriverPlan (decided in decide.py) and the `nvidia_driver`
deploy."""

from __future__ import annotations

from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.api.command import FunctionCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.server import Command
from pyinfra.operations import apt, files, server, systemd

from roles.facts import AptHolds, HostTraits
from roles.ops import CURL_RETRY
from roles.nvidia_driver.decide import (BLACKLIST, PREFERENCES, UNATTENDED, DriverPlan, built_kernels,
                                        compute_capability, unattended_patterns, unheld)
from roles.nvidia_driver.facts import (DKMS_SIGNING_CERTS, BootId, DkmsStatus, DriverPackages, InitramfsLacking,
                                       InstalledKernels, LoadedModuleFlavour, LoadedNvidiaModule, NvidiaGpus,
                                       RunfileDriver, SecureBoot)
from roles.volta import OPEN_MODULE_MIN_COMPUTE_CAPABILITY
from roles.nvidia_driver.versions import RUNFILE_DIR, RUNFILE_STANDIN, RUNFILE_STANDIN_SOURCE, DriverPin
from roles.settings import Settings

TEMPLATES = Path(__file__).parent / "templates"
REBOOT_DELAY_S = 10  # seconds pyinfra waits after `reboot` before reconnecting
#: NVIDIA .run installer options for a headless compute box (`--advanced-options` of nvidia-installer): no questions;
#: the module registered with DKMS (rebuilt for every new kernel like a packaged one); the proprietary module, which
#: the installer must be told since R560 defaults to the open one that a V100 cannot use (NVIDIA's R560 module
#: announcement; docs/volta.md §1); no OpenGL/GLX libraries, no nvidia-drm and no 32-bit libraries (no display);
#: no X and nouveau checks and no initramfs rebuild (the role blacklists nouveau and rebuilds every initramfs itself)
RUNFILE_FLAGS = ("--silent --dkms --kernel-module-type=proprietary --no-opengl-files --no-drm "
                 "--no-install-compat32-libs --no-x-check --no-nouveau-check --no-rebuild-initramfs")
#: the stand-in package's build directory (its DEBIAN/control is rendered from templates/runfile-control.j2)
STANDIN_DIR = f"{RUNFILE_DIR}/{RUNFILE_STANDIN}"


@operation()
def hold(pin: DriverPin):
    """apt-mark hold the pin's packages and every installed package of the driver at the pinned version (the
    dependencies that metapackages pull in), each only if not held yet."""
    missing = unheld(pin, host.get_fact(DriverPackages), host.get_fact(AptHolds))
    if missing:
        yield "apt-mark hold " + " ".join(missing)


@operation()
def dkms_for_every_kernel(module_prefix: str):
    """Headers and the DKMS module for every installed kernel, so the next boot into any of them comes up with a
    driver. The headers metapackage only follows the newest kernel; an installed older kernel gets its own
    linux-headers-<version> where the archive still has it, and is reported where it does not."""
    built = built_kernels(host.get_fact(DkmsStatus), module_prefix)
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


def _booted_again(state, host, before: str) -> bool:
    """Raise OperationError unless the host reports a boot_id other than `before` (the reboot really happened)."""
    now = host.get_fact(BootId)
    if not now or now == before:
        raise OperationError(f"{host.name}: boot_id still {before!r} after the reboot")
    logger.info(f"[{host.name}] rebooted: boot_id {before} -> {now}")
    return True


@operation()
def dkms_key_enrolled(family: str):
    """With Secure Boot on and no DKMS signing key enrolled or queued (nvidia_driver_secure_boot: enroll): make the
    key where the distribution's dkms signs with it, and queue it for enrollment with the root password
    (`mokutil --import --root-pw`); MokManager asks to confirm it at the next boot, on the console. Debian's dkms
    (>= 3.0) signs with /var/lib/dkms/mok.key and mok.pub (made here with openssl, as dkms would); Ubuntu's with
    shim-signed's /var/lib/shim-signed/mok/MOK.priv and MOK.der (`update-secureboot-policy --new-key`; M: Ubuntu's
    dkms packaging, not tried here). Nothing to do with Secure Boot off or a key enrolled or queued."""
    sb = host.get_fact(SecureBoot)
    if sb["state"] != "enabled" or sb["enrolled"] or sb["pending"]:
        return
    cert = DKMS_SIGNING_CERTS[1] if family == "ubuntu" else DKMS_SIGNING_CERTS[0]
    if cert not in sb["keys"]:
        if family == "ubuntu":
            yield "update-secureboot-policy --new-key"
        else:
            yield ("install -d -m 700 /var/lib/dkms && openssl req -new -x509 -nodes -days 36500 -subj "
                   "'/CN=DKMS module signing key' -newkey rsa:2048 -keyout /var/lib/dkms/mok.key -outform DER "
                   f"-out {cert} && chmod 600 /var/lib/dkms/mok.key")
    yield f"mokutil --import {cert} --root-pw"
    logger.warning(f"[{host.name}] nvidia_driver: Secure Boot: {cert} is queued for enrollment; confirm it in "
                   "MokManager at the next boot (console), the nvidia module loads after that")


def open_module_wrong(flavour: str | None, cc: tuple[int, int]) -> bool:
    """True when the open kernel module is loaded on GPUs older than Turing (it needs GSP: docs/volta.md §1)."""
    return flavour == "open" and cc < OPEN_MODULE_MIN_COMPUTE_CAPABILITY


@operation()
def module_loaded(version: str, allow_reboot: bool, cc: tuple[int, int] = (7, 0)):
    """Load the pinned module where the host allows it; reboot only when allowed and the running module must
    change (nouveau bound, another version loaded, or the open module loaded on GPUs of compute capability `cc`
    below 7.5). Containers cannot load modules: say so, change nothing."""
    traits = host.get_fact(HostTraits)
    if not traits["modules_loadable"]:
        host.noop(f"module loading and reboots skipped: modules cannot be loaded here ({traits['virt']})")
        return
    loaded = host.get_fact(LoadedNvidiaModule)
    open_loaded = open_module_wrong(host.get_fact(LoadedModuleFlavour), cc)
    if loaded == version and not open_loaded:
        return
    if loaded is None and not traits["nouveau_loaded"]:
        yield "modprobe nvidia"
        return
    why = ("nouveau owns the GPU" if traits["nouveau_loaded"] else
           f"the open kernel module {loaded} is loaded, these GPUs need the proprietary one" if open_loaded else
           f"module {loaded} is loaded, pinned {version}")
    if allow_reboot:
        logger.warning(f"[{host.name}] nvidia_driver: rebooting: {why}")
        before = host.get_fact(BootId)
        yield from server.reboot._inner(delay=REBOOT_DELAY_S, reboot_timeout=600)
        yield FunctionCommand(_booted_again, (before,), {})  # then the deploy resumes on the new boot
    else:
        logger.warning(f"[{host.name}] nvidia_driver: REBOOT REQUIRED ({why}); reboot, or deploy again with "
                       "nvidia_driver_reboot: true")


def runfile_path(pin: DriverPin) -> str:
    """Where the pin's .run file is kept on the host."""
    return f"{RUNFILE_DIR}/{pin.runfile.file_name}"


@operation()
def runfile_driver(pin: DriverPin):
    """Install the pinned .run driver with DKMS (RUNFILE_FLAGS), after checking the file against the pinned sha256
    once more; nothing when NVIDIA's installer already reports the pinned version (RunfileDriver). Another version
    never reaches here: preflight refuses it (decide.runfile_problems)."""
    if host.get_fact(RunfileDriver) == pin.version:
        return
    path = runfile_path(pin)
    yield (f"echo '{pin.runfile.sha256}  {path}' | sha256sum --check --status - "
           f"|| ( echo 'SHA256 of {path} is not the pinned {pin.runfile.sha256}' && exit 1 )")
    yield f"sh {path} {RUNFILE_FLAGS}"


@operation()
def runfile_recorded(pin: DriverPin):
    """Build and install the stand-in package (versions.RUNFILE_STANDIN) from its rendered DEBIAN/control, unless
    dpkg already has it at the pinned version."""
    recorded = host.get_fact(DriverPackages).get(RUNFILE_STANDIN)
    if recorded and recorded["version"] == pin.version:
        return
    yield (f"dpkg-deb --build --root-owner-group {STANDIN_DIR} {STANDIN_DIR}.deb && dpkg -i {STANDIN_DIR}.deb "
           f"&& rm -f {STANDIN_DIR}.deb")


def runfile_install(settings: Settings, driver: DriverPlan) -> None:
    """The runfile source's install: download the pinned .run (from nvidia_driver_runfile_url or NVIDIA's server,
    checked against the pinned sha256 either way) unless that version is installed, run it with DKMS, record it for
    dpkg with the stand-in package, and give nvidia-persistenced the unit the installer does not ship."""
    pin = driver.pin
    if host.get_fact(RunfileDriver) != pin.version:
        files.download(name=f"NVIDIA {pin.runfile.file_name}", src=driver.runfile_url, dest=runfile_path(pin),
                       sha256sum=pin.runfile.sha256, mode="700", extra_curl_args=CURL_RETRY)
    runfile_driver(name=f"driver {pin.version} from NVIDIA's .run installer, proprietary module, DKMS", pin=pin)
    files.template(name="stand-in package control file", src=str(TEMPLATES / "runfile-control.j2"),
                   dest=f"{STANDIN_DIR}/DEBIAN/control", mode="644", pin=pin, package=RUNFILE_STANDIN,
                   source=RUNFILE_STANDIN_SOURCE)
    runfile_recorded(name=f"{RUNFILE_STANDIN} {pin.version} records the driver for dpkg", pin=pin)
    unit = files.put(name="nvidia-persistenced unit", src=str(TEMPLATES / "nvidia-persistenced.service"),
                     dest="/etc/systemd/system/nvidia-persistenced.service", mode="644")
    systemd.daemon_reload(name="systemd reads the nvidia-persistenced unit", _if=unit.did_change)


@deploy("NVIDIA driver")
def nvidia_driver(settings: Settings, driver: DriverPlan) -> None:
    """Blacklist nouveau, pin, install and hold the driver with headers and DKMS, build it for every kernel, put the
    blacklist into every initramfs, enable nvidia-persistenced and load the module (or reboot if allowed)."""
    pin = driver.pin
    blacklist = files.put(name="nouveau blacklisted", src=str(TEMPLATES / "blacklist-nouveau.conf"),
                          dest=BLACKLIST, mode="644")
    files.template(name=f"apt pins the driver at {pin.version}", src=str(TEMPLATES / "preferences.j2"),
                   dest=PREFERENCES, mode="644", pin=pin)
    files.template(name="unattended-upgrades never touches the driver",
                   src=str(TEMPLATES / "unattended-upgrades.conf.j2"), dest=UNATTENDED, mode="644",
                   patterns=unattended_patterns(pin))
    if settings.nvidia_driver_secure_boot == "enroll":
        apt.packages(name="mokutil (Secure Boot key enrollment)", no_recommends=True,
                     packages=["mokutil", "openssl"] + (["shim-signed"] if driver.family == "ubuntu" else []))
        dkms_key_enrolled(name="Secure Boot: DKMS signing key enrolled or queued", family=driver.family)
    # the .run installer compiles with `cc` and make itself (dkms only recommends a compiler): build-essential
    apt.packages(name=f"kernel headers ({driver.headers_package}) and DKMS",
                 packages=[driver.headers_package, "dkms"] + (["build-essential"] if pin.runfile else []),
                 no_recommends=True)
    if pin.runfile:
        runfile_install(settings, driver)
    else:
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
    module_loaded(name="module loaded", version=pin.version, allow_reboot=settings.nvidia_driver_reboot,
                  cc=compute_capability(settings))
