"""nvidia_driver role on real lab hosts: what still means something without a GPU (package versions, holds,
pins, DKMS state, nouveau blacklisted inside the initramfs). The driver packages at their pinned versions, held
and pinned for apt, nvidia-persistenced enabled and the GPU checks are in the host suite (v100kit/verify/suite),
which tests/lab/test_verify.py runs on these hosts."""

import shlex

BLACKLIST = "/etc/modprobe.d/v100kit-blacklist-nouveau.conf"


def test_every_installed_driver_package_is_pinned(target):
    """Nothing of the driver came in unpinned as a dependency (it could move on its own otherwise)."""
    out = target.host.check_output("dpkg-query -W -f '${Package} ${source:Package} ${Status}\\n'")
    driver_sources = {"nvidia-graphics-drivers", "nvidia-persistenced", "nvidia-modprobe"}
    installed = {line.split()[0] for line in out.splitlines()
                 if line.split()[1] in driver_sources and line.endswith("installed")}
    assert installed and installed <= set(target.driver.pin.packages)


def test_field_unattended_upgrades_cannot_touch_the_driver(target):
    """Field case: unattended-upgrades upgraded libnvidia-* under a loaded module ("Failed to initialize NVML:
    Driver/library version mismatch"). Asked with unattended-upgrades' own matcher and apt's merged config."""
    names = " ".join(shlex.quote(n) for n in target.driver.pin.packages)
    script = (
        "import sys, apt_pkg, importlib.machinery, importlib.util\n"
        "loader = importlib.machinery.SourceFileLoader('uu', '/usr/bin/unattended-upgrade')\n"
        "spec = importlib.util.spec_from_loader('uu', loader); uu = importlib.util.module_from_spec(spec)\n"
        "loader.exec_module(uu); apt_pkg.init_config()\n"
        "bl = apt_pkg.config.value_list('Unattended-Upgrade::Package-Blacklist')\n"
        "print(' '.join(n for n in sys.argv[1:] if not uu.is_pkgname_in_blacklist(n, bl)))\n"
    )
    out = target.host.check_output(f"python3 -c {shlex.quote(script)} {names}")
    assert out.strip() == "", f"not blacklisted for unattended-upgrades: {out}"
    assert target.host.package("unattended-upgrades").is_installed  # the lab image carries it, as servers do
    held = set(target.host.check_output("apt-mark showhold").split())
    assert set(target.driver.pin.packages) <= held


def test_field_nouveau_blacklisted_inside_every_initramfs(target):
    """Field case: a V100 bound to nouveau ("NVIDIA probe routine was not called")."""
    conf = target.host.file(BLACKLIST)
    assert conf.contains("^blacklist nouveau") and conf.contains("^options nouveau modeset=0")
    config = target.host.check_output("modprobe --showconfig")
    assert "blacklist nouveau" in config and "options nouveau modeset=0" in config
    kernels = [p.removeprefix("/boot/vmlinuz-") for p in target.host.check_output("ls /boot/vmlinuz-*").split()]
    assert kernels, "the lab host carries a real kernel with an initramfs"
    for initrd in (f"/boot/initrd.img-{k}" for k in kernels):
        out = target.host.check_output(
            f"d=$(mktemp -d) && unmkinitramfs {initrd} $d && cat $(find $d -path '*{BLACKLIST}'); rm -rf $d")
        assert "blacklist nouveau" in out and "options nouveau modeset=0" in out, initrd


def test_dkms_built_the_module_for_every_installed_kernel(target):
    kernels = [p.removeprefix("/boot/vmlinuz-") for p in target.host.check_output("ls /boot/vmlinuz-*").split()]
    status = target.host.check_output("dkms status")
    version = target.driver.pin.version
    for kernel in kernels:
        assert f"{target.driver.pin.dkms_module}/{version}, {kernel}, x86_64: installed" in status, status
        ko = target.host.check_output(f"ls /lib/modules/{kernel}/updates/dkms/nvidia*.ko*").split()
        modinfo = target.host.check_output(f"modinfo -F version {ko[0]}")
        assert modinfo.strip() == version


