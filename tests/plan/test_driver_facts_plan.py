"""Plan-level tests (facts in, commands out, nothing executed) of the driver facts in roles/nvidia_driver/versions.py:
the refusals (branches after R580 on Volta, NVIDIA's debian13 repository, kernels newer than the pinned driver builds
on), the branchless metapackages that no pin installs, and the runfile source on Debian 13. NVIDIA's download server
and repositories cannot be reached from here, so the runfile path is checked through the commands it would run.

Expected values come from the cited public records, not from the code: the runfile's sha256 from nixpkgs' SRI hash
(base64, converted here) and flathub's data file; the kernel floors from the release notes quoted in the issues."""

from __future__ import annotations

import base64
import re
import subprocess

import pytest

from roles.nvidia_driver.versions import DRIVER_PINS
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_12, DEBIAN_13, UBUNTU_2204, UBUNTU_2404, doctor_rows, plan_commands

OS = {"debian12": DEBIAN_12, "debian13": DEBIAN_13, "ubuntu2204": UBUNTU_2204, "ubuntu2404": UBUNTU_2404}

#: a Debian 13 box as it reports itself: trixie's kernel release string (`uname -r`) and its kernel metapackage
TRIXIE_KERNEL = "6.12.57+deb13-amd64"


def debian13(kernel: str = TRIXIE_KERNEL, installed: list[str] | None = None, **more) -> dict:
    """fake_responses of a bare-metal Debian 13 box booted into `kernel`, with `installed` kernels in /boot."""
    return {"systemd-detect-virt": ["virt=none", f"kernel={kernel}", "sysctl_writable=1", "thp_writable=1",
                                    "modules_dir=1", "nouveau_loaded=0", "thp_mode=always"],
            "--showformat='${db:Status-Abbrev}|": [f"ii |linux-image-amd64|linux-image-{kernel}"],
            "build/Makefile": [f"{k} 1" for k in (installed or [kernel])], **more}


RUNFILE = {"nvidia_driver_source": "runfile"}
#: NVIDIA-Linux-x86_64-580.173.02.run: nixpkgs legacy_580 sha256_64bit (NixOS/nixpkgs#538659), SRI base64
NIXPKGS_SRI_580_173_02 = "jY65AB4FqaimY9PV0wT+tk7yhE7hhczf2VJ4aCD0bhs="
#: the same file in flathub/org.freedesktop.Platform.GL.nvidia data/nvidia-580.173.02-x86_64.data (sha256sum, hex)
FLATHUB_580_173_02 = "8d8eb9001e05a9a8a663d3d5d304feb64ef2844ee185ccdfd952786820f46e1b"
RUN_PATH = "/var/cache/v100kit/nvidia-runfile/NVIDIA-Linux-x86_64-580.173.02.run"


def index(cmds: list[str], needle: str) -> int:
    return next(i for i, c in enumerate(cmds) if needle in str(c))


# -- branches after R580 on Volta ---------------------------------------------------------------------------------

@pytest.mark.parametrize("os_release", [DEBIAN_12, DEBIAN_13, UBUNTU_2204, UBUNTU_2404])
def test_plan_level_branch_after_580_refused_on_volta(os_release):
    # 590.44.01 is a real R590 release (flathub versions.sh BETA_VERSIONS); R580 is the last for compute capability
    # 7.0 ("supported through the NVIDIA 580.xx Legacy drivers", NixOS/nixos-hardware#1880)
    with pytest.raises(SettingsError) as e:
        plan_commands(os_release, {"nvidia_driver_version": "590.44.01"})
    text = str(e.value)
    assert "nvidia_driver_version = '590.44.01'" in text and "580.xx Legacy" in text
    assert "Fix: pin a 580-or-older version" in text


def test_plan_level_branch_after_580_is_no_volta_refusal_on_turing():
    # on a compute capability 7.5 box 590 drives the GPU: only the version map refuses it (not in the map)
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, {"nvidia_driver_version": "590.44.01", "gpu_compute_capability": "7.5"})
    assert "580.xx Legacy" not in str(e.value) and "not in the version map" in str(e.value)


# -- branchless metapackages ---------------------------------------------------------------------------------------

BRANCHLESS = re.compile(r"(?<![\w.-])(cuda-drivers|nvidia-open)(?=$|[\s=:'\"])")


@pytest.mark.parametrize("platform, source, version", [
    (p, s, pin.version) for (p, s), pins in DRIVER_PINS.items() for pin in pins])
def test_plan_level_no_branchless_metapackage_is_ever_installed(platform, source, version):
    # cupy/cupy#10295: NVIDIA's branchless cuda-drivers installs no kernel module (and nvidia-open is the open module a
    # V100 cannot use); every pin of every (platform, source) plans without either name as a word of a command
    # (CUDA minor-version compatibility accepted: the default toolkits need a newer driver than the 535 pins)
    cmds = [str(c) for c in plan_commands(OS[platform], {"nvidia_driver_source": source, "nvidia_driver_version": version,
                                                         "cuda_allow_minor_version_compat": True})]
    assert cmds, "nothing planned"
    assert not [c for c in cmds if BRANCHLESS.search(c)]
    # the pattern is not blind: it does find the bare names
    assert BRANCHLESS.search("apt-get install -y cuda-drivers") and BRANCHLESS.search("install nvidia-open=595.1-1")
    assert not BRANCHLESS.search("install cuda-drivers-580=580.95.05-1 nvidia-open-kernel-dkms")


def test_plan_level_nvidia_repo_pins_hold_the_branchless_dependencies_to_the_branch():
    # NVIDIA's debian12 cuda-drivers-580 depends on packages named without a branch (nvidia-driver, libcuda1 ...), which
    # resolve to 595 without a pin (public provisioning notes for Pascal/Volta boxes, 2026): the preferences hold them
    from tests.plan.harness import plan_uploads

    _, uploads = plan_uploads(DEBIAN_12, {"nvidia_driver_source": "nvidia", "nvidia_driver_version": "580.159.04"})
    prefs = uploads["/etc/apt/preferences.d/v100kit-nvidia-driver"]
    block = prefs[prefs.index("Package: /^(nvidia-"):]
    assert "Pin: version 580.159.04-*" in block and "Pin-Priority: 1001" in block
    assert re.search(r"Package: (\S+)", block).group(1).startswith("/^(nvidia-|libnvidia-|libcuda1")
    _, distro = plan_uploads(DEBIAN_12)
    assert "Package: /" not in distro["/etc/apt/preferences.d/v100kit-nvidia-driver"]  # Debian's own: exact names only


# -- NVIDIA's debian13 repository -----------------------------------------------------------------------------------

def test_plan_level_nvidia_debian13_repository_refused_on_volta_naming_the_runfile():
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"nvidia_driver_source": "nvidia"}, debian13())
    text = str(e.value)
    assert "nvidia_driver_source = 'nvidia'" in text and "590 and newer only" in text
    assert "cuda-repo-management#38" in text and "Fix: set nvidia_driver_source: runfile" in text
    assert "nothing was changed" in text


def test_plan_level_nvidia_debian13_refusal_is_for_volta_only():
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"nvidia_driver_source": "nvidia", "gpu_compute_capability": "8.0"}, debian13())
    assert "590 and newer only" not in str(e.value) and "no driver in the version map" in str(e.value)


# -- the runfile source on Debian 13 --------------------------------------------------------------------------------

def test_runfile_sha256_is_the_one_public_records_agree_on():
    pin = DRIVER_PINS[("debian13", "runfile")][0]
    assert pin.version == "580.173.02"
    assert pin.runfile.sha256 == base64.b64decode(NIXPKGS_SRI_580_173_02).hex() == FLATHUB_580_173_02
    assert pin.runfile.size == 398312209  # flathub data file


def test_plan_level_runfile_fresh_debian13_box():
    cmds = [str(c) for c in plan_commands(DEBIAN_13, RUNFILE, debian13())]
    headers = index(cmds, "install --no-install-recommends linux-headers-amd64 dkms build-essential")
    download = index(cmds, "https://us.download.nvidia.com/XFree86/Linux-x86_64/580.173.02/NVIDIA-Linux-x86_64-580.173.02.run")
    check = index(cmds, f"sha256sum {RUN_PATH} 2> /dev/null")
    recheck = index(cmds, f"echo '{FLATHUB_580_173_02}  {RUN_PATH}' | sha256sum --check")
    install = index(cmds, f"sh {RUN_PATH} ")
    standin = index(cmds, "dpkg-deb --build")
    hold = index(cmds, "apt-mark hold v100kit-nvidia-runfile")
    dkms = index(cmds, f"dkms autoinstall -k {TRIXIE_KERNEL}")
    initramfs = index(cmds, "update-initramfs -u -k all")
    toolkit = index(cmds, "nvidia-cuda-toolkit=12.4.131~12.4.1-2")
    assert headers < download < check < recheck < install < standin < hold < dkms < initramfs < toolkit
    assert FLATHUB_580_173_02 in cmds[check]
    flags = cmds[install].split()
    # a headless compute box: DKMS, the proprietary module (the open one needs GSP, compute capability >= 7.5)
    assert {"--silent", "--dkms", "--kernel-module-type=proprietary", "--no-opengl-files"} <= set(flags)
    assert not [c for c in cmds if re.search(r"apt-get .*install .*(libcuda1|nvidia-kernel-dkms|nvidia-driver)", c)]
    assert "systemctl enable nvidia-persistenced.service" in cmds


def test_plan_level_runfile_standin_package_records_the_driver():
    from tests.plan.harness import plan_uploads

    _, uploads = plan_uploads(DEBIAN_13, RUNFILE, debian13())
    control = uploads["/var/cache/v100kit/nvidia-runfile/v100kit-nvidia-runfile/DEBIAN/control"]
    assert "Version: 580.173.02\n" in control and "Source: nvidia-graphics-drivers-runfile\n" in control
    # Debian's nvidia-cuda-dev: Depends libcuda1 (>= 550) | libcuda.so.1 (>= 550) | libcuda-12.4-1
    assert "libcuda.so.1 (= 580.173.02)" in control
    assert "Conflicts: libcuda1, nvidia-kernel-dkms, nvidia-driver" in control
    unit = uploads["/etc/systemd/system/nvidia-persistenced.service"]
    assert "ExecStart=/usr/bin/nvidia-persistenced" in unit


#: what a Debian 13 box on which the runfile deploy ran reports: the installer's version line, the stand-in package
#: (held), DKMS's module built for the kernel, the blacklist in the initramfs
INSTALLED = {
    "nvidia-installer --version": ["nvidia-installer:  version 580.173.02  (buildmeister@builder)  Tue Jul 21 2026",
                                   "  The NVIDIA Software Installer for Unix/Linux."],
    "dpkg-query -W -f": ["v100kit-nvidia-runfile\t580.173.02\tnvidia-graphics-drivers-runfile\tii "],
    "apt-mark showhold": ["v100kit-nvidia-runfile"],
    "dkms status": [f"nvidia/580.173.02, {TRIXIE_KERNEL}, x86_64: installed"],
    "ls -d /usr/bin/nvidia-uninstall": ["/usr/bin/nvidia-uninstall"],
}


def test_plan_level_runfile_redeploy_is_a_noop_when_the_installed_version_matches():
    cmds = [str(c) for c in plan_commands(DEBIAN_13, RUNFILE, debian13(**INSTALLED))]
    for needle in (".run", "download.nvidia.com", "dpkg-deb", "dpkg -i", "apt-mark hold", "dkms autoinstall"):
        assert not [c for c in cmds if needle in c and "nvidia-installer --version" not in c], needle


def test_plan_level_runfile_wrong_sha256_refused_before_the_installer_runs(tmp_path):
    cmds = [str(c) for c in plan_commands(DEBIAN_13, RUNFILE, debian13())]
    wrong = tmp_path / "NVIDIA-Linux-x86_64-580.173.02.run"
    wrong.write_bytes(b"#!/bin/sh\necho not NVIDIA's installer\n")
    # both checks the plan runs before `sh FILE` (pyinfra's after the download, the role's own before the installer),
    # executed for real against a file that is not the pinned one
    for needle in (f"sha256sum {RUN_PATH} 2> /dev/null", f"| sha256sum --check"):
        check = cmds[index(cmds, needle)].replace(RUN_PATH, str(wrong))
        run = subprocess.run(["bash", "-c", check], capture_output=True, text=True)
        assert run.returncode != 0, check
        assert "did not match" in run.stdout or "is not the pinned" in run.stdout
    # and the installer comes only after both, so a failed check stops the deploy before it
    assert index(cmds, "| sha256sum --check") < index(cmds, f"sh {RUN_PATH} ")


def test_plan_level_runfile_from_an_offline_mirror():
    url = "http://mirror.lan/nvidia/NVIDIA-Linux-x86_64-580.173.02.run"
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {**RUNFILE, "nvidia_driver_runfile_url": url}, debian13())]
    assert any(url in c and c.startswith("curl ") for c in cmds)
    assert not [c for c in cmds if "download.nvidia.com" in c]
    assert FLATHUB_580_173_02 in cmds[index(cmds, f"sha256sum {RUN_PATH} 2> /dev/null")]  # the same pin


def test_plan_level_runfile_mirror_url_must_name_a_run_file():
    with pytest.raises(SettingsError, match="nvidia_driver_runfile_url"):
        plan_commands(DEBIAN_13, {**RUNFILE, "nvidia_driver_runfile_url": "http://mirror.lan/nvidia/"}, debian13())


def test_plan_level_runfile_other_installed_version_refused_not_replaced():
    other = {**INSTALLED, "nvidia-installer --version": ["nvidia-installer:  version 580.159.04  (buildmeister@b)"]}
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, RUNFILE, debian13(**other))
    text = str(e.value)
    assert "reports driver 580.159.04 installed" in text
    assert "set nvidia_driver_version: 580.159.04" in text and "nvidia-uninstall --silent" in text
    # the other pinned runfile version is accepted when asked for
    assert plan_commands(DEBIAN_13, {**RUNFILE, "nvidia_driver_version": "580.159.04"}, debian13(**other))


def test_plan_level_runfile_refused_over_debian_driver_packages():
    debian_550 = {"dpkg-query -W -f": ["nvidia-kernel-dkms\t550.163.01-2\tnvidia-graphics-drivers\tii ",
                                       "libcuda1\t550.163.01-2\tnvidia-graphics-drivers\tii "]}
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, RUNFILE, debian13(**debian_550))
    assert "apt-get purge libcuda1 nvidia-kernel-dkms" in str(e.value)


def test_plan_level_runfile_doctor_rows_like_the_packaged_path():
    gpu = {"cat /proc/driver/nvidia/version": [
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Release Build  (buildmeister@builder)"],
        "modprobe --showconfig": ["blacklist nouveau", "options nouveau modeset=0"]}
    rows = doctor_rows(DEBIAN_13, RUNFILE, debian13(**INSTALLED, **gpu))
    for check in ("driver packages at the pinned versions", "loaded module matches the userland",
                  "nvidia module built for every installed kernel", "blacklist inside every initramfs",
                  "driver packages held", "driver installed by NVIDIA's .run installer"):
        assert rows[check].state == "ok", (check, rows[check])
    # a kernel DKMS did not build for, and the initramfs without the blacklist, are flagged as on the packaged path
    newer = "6.12.63+deb13-amd64"
    # (InitramfsLacking's loop prints the kernels whose initramfs lacks the blacklist)
    broken = doctor_rows(DEBIAN_13, RUNFILE, debian13(installed=[TRIXIE_KERNEL, newer], **INSTALLED, **gpu,
                                                     lsinitramfs=[newer]))
    assert broken["nvidia module built for every installed kernel"].state == "broken"
    assert newer in broken["nvidia module built for every installed kernel"].evidence
    assert broken["blacklist inside every initramfs"].state == "broken"


# -- kernels newer than the pinned driver builds on -----------------------------------------------------------------

def test_plan_level_kernel_below_the_floor_refused_naming_the_release_that_builds():
    # Ubuntu's mainline kernel build of 6.19 installed beside the GA kernel; NVIDIA's 580.126.18 notes: "Fixed kernel
    # module build issue with Linux kernel v6.19" (NixOS/nixpkgs#491462), so 580.95.05 cannot build there
    responses = {"build/Makefile": ["6.8.0-45-generic 1", "6.19.0-061900-generic 1"]}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, {"nvidia_driver_source": "nvidia"}, responses)
    text = str(e.value)
    assert "kernel 6.19.0-061900-generic (series 6.19) needs driver 580.126.18 or newer" in text
    assert "nvidia_driver_version = '580.95.05'" in text


def test_plan_level_kernel_71_needs_580_159_04():
    # void-linux/void-packages#61087: 580.142 fails on 7.1, 580.159.04 fixes it; both runfile pins are newer/equal
    assert plan_commands(DEBIAN_13, {**RUNFILE, "nvidia_driver_version": "580.159.04"},
                         debian13(kernel="7.1.0-1-amd64"))
    ok = plan_commands(UBUNTU_2404, responses={"build/Makefile": ["7.0.0-31-generic 1"]})  # 24.04 HWE 7.0, 580.173.02
    assert any("nvidia-dkms-580-server=580.173.02-0ubuntu0.24.04.1" in str(c) for c in ok)


def test_plan_level_kernel_newer_than_any_known_series_refused_unless_accepted():
    kernel = "7.2.3+deb14-amd64"  # newer than 7.1, the newest series any R580 release is reported to build on
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, RUNFILE, debian13(kernel=kernel))
    text = str(e.value)
    assert "nvidia_driver_allow_untested_kernel = False" in text and f"kernel {kernel} (series 7.2)" in text
    assert "set nvidia_driver_allow_untested_kernel: true" in text
    assert plan_commands(DEBIAN_13, {**RUNFILE, "nvidia_driver_allow_untested_kernel": True}, debian13(kernel=kernel))


def test_plan_level_installed_backports_kernel_refused_for_debians_550():
    # Debian 13's own driver is 550.163.01, shipped for trixie's 6.12; a trixie-backports 6.16 kernel installed (not
    # yet booted) is a series no 550 release is reported to build on
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {}, debian13(installed=[TRIXIE_KERNEL, "6.16.12+deb13-amd64"]))
    assert "kernel 6.16.12+deb13-amd64 (series 6.16) is newer than any series driver branch 550" in str(e.value)


def test_plan_level_container_checks_installed_kernels_not_the_machines():
    # A systemd-nspawn host (the lab) reports the machine's kernel in `uname -r` (lab.md: "uname -r is the host's
    # kernel (6.18.x)"); DKMS there builds for the kernels installed in /boot, which are the ones to check.
    machine_kernel = "6.18.44-fc-v1045"  # this development machine's `uname -r`
    bare = debian13(kernel=machine_kernel, installed=[TRIXIE_KERNEL])
    with pytest.raises(SettingsError) as e:  # on bare metal that running kernel is refused for Debian's 550
        plan_commands(DEBIAN_13, {}, bare)
    assert f"kernel {machine_kernel} (series 6.18)" in str(e.value)
    container = {**bare, "systemd-detect-virt": ["virt=systemd-nspawn", *bare["systemd-detect-virt"][1:]]}
    assert plan_commands(DEBIAN_13, {}, container)
    # an installed kernel the branch is not known to build on is still refused inside a container
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {}, {**container, "build/Makefile": [f"{TRIXIE_KERNEL} 1", "6.16.12+deb13-amd64 1"]})
    assert "kernel 6.16.12+deb13-amd64 (series 6.16)" in str(e.value)


# -- the kernel refusals name a pin of the map that builds there (tests/plan/test_volta_2026_user_plan.py's user) ----

def test_plan_level_debian13_backports_kernel_refusal_names_the_runfile_driver():
    # trixie-backports kernels (6.16 here) are newer than the 6.12 Debian's 550.163.01 is shipped for; NVIDIA's R580
    # .run installer builds through 7.1 (580.159.04 and newer: void-linux/void-packages#61087). A Debian 13 user who
    # installed a backports kernel must be pointed at nvidia_driver_source: runfile, not only at an older kernel.
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {}, debian13(installed=[TRIXIE_KERNEL, "6.16.12+deb13-amd64"]))
    assert "set nvidia_driver_source: runfile" in str(e.value).split("Fix: ", 1)[1]
    assert plan_commands(DEBIAN_13, RUNFILE, debian13(installed=[TRIXIE_KERNEL, "6.16.12+deb13-amd64"]))


def test_plan_level_ubuntu_hwe_kernel_refusal_for_535_names_the_580_pin():
    # Ubuntu 24.04's HWE kernel 6.14 with the 535 -server pin: no 535 release is reported to build past 6.12, while
    # R580 builds through 7.1; the fix names the map's 580 pin for that source
    hwe = {"systemd-detect-virt": ["virt=none", "kernel=6.14.0-36-generic", "sysctl_writable=1", "thp_writable=1",
                                   "modules_dir=1", "nouveau_loaded=0", "thp_mode=always"],
           "build/Makefile": ["6.14.0-36-generic 1"]}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, {"nvidia_driver_version": "535.274.02", "cuda_allow_minor_version_compat": True}, hwe)
    assert "set nvidia_driver_version: 580.173.02" in str(e.value).split("Fix: ", 1)[1]


def test_plan_level_550_below_its_kernel_floor_refused():
    # 550.78 fails to build its module on Linux 6.10.5 (NixOS/nixpkgs#332350, the build log pasted there: make
    # "Error 2" in NVIDIA-Linux-x86_64-550.78/kernel); 550.54.15 is older still, so NVIDIA's debian12 repository's
    # 550 pin is refused beside a 6.10 kernel, naming the R580 of the same repository, which builds there
    responses = {"build/Makefile": ["6.1.0-26-amd64 1", "6.10.5-amd64 1"]}
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_12, {"nvidia_driver_source": "nvidia", "nvidia_driver_version": "550.54.15"}, responses)
    text = str(e.value)
    assert "nvidia_driver_version = '550.54.15'" in text and "kernel 6.10.5-amd64 (series 6.10)" in text
    assert "580.159.04" in text.split("Fix: ", 1)[1]
    assert plan_commands(DEBIAN_12, {"nvidia_driver_source": "nvidia"}, responses)  # the R580 default builds there
