"""Plan-level (facts in, commands out): the host states the field leaves behind (issue 13). Each state: the doctor's
row, and the commands repair.py + deploy.py (or deploy.py alone) would run. Expected values come from the sources
named at each test, not from the code under test."""

from __future__ import annotations

import re

import pytest

from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_12, DEBIAN_13, UBUNTU_2204, UBUNTU_2404, doctor_rows, plan_commands
from tests.plan.test_ubuntu_nvidia_plan import installs

REPAIR = ("repair.py", "deploy.py")

# -- 1. Secure Boot ----------------------------------------------------------------------------------------------
# mokutil(1) --sb-state prints "SecureBoot enabled" / "SecureBoot disabled"; --test-key prints "<cert> is already
# enrolled" (the fact command turns that into enrolled=<cert>).
SB_ON = {"mokutil": ["mokutil=SecureBoot enabled", "efi=1"]}
SB_ON_ENROLLED = {"mokutil": ["mokutil=SecureBoot enabled", "efi=1", "enrolled=/var/lib/shim-signed/mok/MOK.der"]}


def test_secure_boot_on_without_an_enrolled_key_refuses_the_deploy_naming_the_fixes():
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2204, responses=SB_ON)
    msg = str(e.value)
    assert "nvidia_driver_secure_boot" in msg and "nothing was changed" in msg
    assert "mokutil --import /var/lib/dkms/mok.pub" in msg and "turn Secure Boot off" in msg
    assert "nvidia_driver_secure_boot: enroll" in msg


def test_secure_boot_state_from_the_efi_variable_without_mokutil():
    with pytest.raises(SettingsError, match="efivar"):
        plan_commands(DEBIAN_12, responses={"mokutil": ["efivar=1", "efi=1"]})
    assert plan_commands(DEBIAN_12, responses={"mokutil": ["efivar=0", "efi=1"]})


def test_secure_boot_doctor_row():
    row = doctor_rows(UBUNTU_2204, responses=SB_ON)["Secure Boot lets the module load"]
    assert row.state == "broken" and "no DKMS signing key enrolled" in row.evidence and "mokutil --import" in row.fix
    assert doctor_rows(UBUNTU_2204, responses=SB_ON_ENROLLED)["Secure Boot lets the module load"].state == "ok"
    off = doctor_rows(UBUNTU_2204, responses={"mokutil": ["mokutil=SecureBoot disabled", "efi=1"]})
    assert off["Secure Boot lets the module load"].state == "ok"
    bios = doctor_rows(UBUNTU_2204, responses={"mokutil": ["efi=0"]})["Secure Boot lets the module load"]
    assert bios.state == "ok" and "no EFI" in bios.evidence


def test_secure_boot_with_an_enrolled_key_deploys():
    assert "nvidia-dkms-580-server=580.178.04-0ubuntu0.22.04.1" in installs(
        plan_commands(UBUNTU_2204, responses=SB_ON_ENROLLED))


def test_secure_boot_enroll_makes_the_dkms_key_and_queues_it_before_the_driver():
    # Debian's dkms signs with /var/lib/dkms/mok.key + mok.pub (dkms(8), framework.conf mok_signing_key)
    cmds = plan_commands(DEBIAN_12, {"nvidia_driver_secure_boot": "enroll"}, SB_ON)
    key = next(i for i, c in enumerate(cmds) if "openssl req" in c and "/var/lib/dkms/mok.pub" in c)
    queue = next(i for i, c in enumerate(cmds) if c == "mokutil --import /var/lib/dkms/mok.pub --root-pw")
    driver = next(i for i, c in enumerate(cmds) if "nvidia-kernel-dkms=" in c)
    assert key < queue < driver
    # Ubuntu's with shim-signed's MOK (update-secureboot-policy)
    ubuntu = plan_commands(UBUNTU_2204, {"nvidia_driver_secure_boot": "enroll"}, SB_ON)
    assert ubuntu.index("update-secureboot-policy --new-key") < ubuntu.index(
        "mokutil --import /var/lib/shim-signed/mok/MOK.der --root-pw")
    pending = {"mokutil": ["mokutil=SecureBoot enabled", "efi=1", "pending=/var/lib/dkms/mok.pub"]}
    again = plan_commands(UBUNTU_2204, {"nvidia_driver_secure_boot": "enroll"}, pending)
    assert not [c for c in again if c.startswith("mokutil --import") or "openssl req" in c]  # queued already: nothing again


# -- 2. The open kernel module ------------------------------------------------------------------------------------
# The line a loaded open module writes (issue 13, from a real host); the proprietary one reads "NVIDIA UNIX x86_64
# Kernel Module".
PROC_OPEN = ["NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.178.04  Release Build  (builder@host)",
             "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)"]
# What `ubuntu-drivers install` leaves for a recent branch: the -open DKMS package of Ubuntu's -server flavour.
SRV = "nvidia-graphics-drivers-580-server"
OPEN_PKGS = [f"nvidia-dkms-580-server-open\t580.178.04-0ubuntu0.22.04.1\t{SRV}\tii ",
             f"nvidia-kernel-source-580-server-open\t580.178.04-0ubuntu0.22.04.1\t{SRV}\tii ",
             f"nvidia-utils-580-server\t580.178.04-0ubuntu0.22.04.1\t{SRV}\tii "]
GPU_HOST = {"cat /proc/driver/nvidia/version": PROC_OPEN, "cat /sys/module/nvidia/version": ["580.178.04"],
            "dpkg-query -W -f": OPEN_PKGS}


def test_open_module_doctor_row_names_it_and_the_fix():
    row = doctor_rows(UBUNTU_2204, responses=GPU_HOST)["proprietary kernel module for these GPUs"]
    assert row.state == "broken" and "Open Kernel Module" in row.evidence and "nvidia-dkms-580-server-open" in row.evidence
    assert "repair.py" in row.fix and "nvidia_driver_reboot: true" in row.fix
    # a GPU that has GSP (Turing, 7.5) may run the open module
    assert doctor_rows(UBUNTU_2204, {"gpu_compute_capability": "7.5"}, GPU_HOST)[
        "proprietary kernel module for these GPUs"].state == "ok"


def test_repair_purges_the_open_packages_before_the_proprietary_driver_and_reboots(monkeypatch):
    monkeypatch.setattr("roles.nvidia_driver.deploy.REBOOT_DELAY_S", 0)
    cmds = plan_commands(UBUNTU_2204, {"nvidia_driver_reboot": True}, GPU_HOST, deploys=REPAIR, stops_early=True)
    purge = next(i for i, c in enumerate(cmds) if " purge " in c)
    assert "nvidia-dkms-580-server-open" in cmds[purge] and "nvidia-kernel-source-580-server-open" in cmds[purge]
    assert "nvidia-utils-580-server " not in cmds[purge] + " "  # the pin's own package stays
    install = next(i for i, c in enumerate(cmds) if "nvidia-dkms-580-server=580.178.04" in c)
    assert purge < install
    assert not [c for c in cmds if c.startswith("apt-mark hold") and "-open" in c]
    assert [c for c in cmds if "reboot" in c]  # same version, wrong module: only a reboot changes it


def test_open_module_loaded_without_reboot_allowed_is_not_claimed_fine(caplog):
    cmds = plan_commands(UBUNTU_2204, responses=GPU_HOST)
    assert "modprobe nvidia" not in cmds and not [c for c in cmds if "reboot" in c]
    assert "REBOOT REQUIRED (the open kernel module 580.178.04 is loaded" in caplog.text


# -- 3. Desktop and -server flavours of one branch ---------------------------------------------------------------
# Ubuntu builds nvidia-*-535 from nvidia-graphics-drivers-535 and nvidia-*-535-server from
# nvidia-graphics-drivers-535-server, at identical upstream versions; they conflict in dpkg (Canonical PR 59).
V535 = "535.274.02-0ubuntu0.22.04.1"
SERVER_PIN = [f"{n}\t{V535}\tnvidia-graphics-drivers-535-server\tii " for n in (
    "nvidia-dkms-535-server", "nvidia-kernel-common-535-server", "nvidia-kernel-source-535-server",
    "nvidia-utils-535-server", "nvidia-compute-utils-535-server", "libnvidia-compute-535-server",
    "libnvidia-cfg1-535-server")]
DESKTOP = [f"libnvidia-compute-535\t{V535}\tnvidia-graphics-drivers-535\tii ",
           f"nvidia-utils-535\t{V535}\tnvidia-graphics-drivers-535\tii "]
FLAVOURS = {"dpkg-query -W -f": SERVER_PIN + DESKTOP, "apt-mark showhold": ["libnvidia-compute-535"]}
DATA_535 = {"nvidia_driver_version": "535.274.02", "cuda_allow_minor_version_compat": True}


def test_desktop_flavour_beside_the_server_pin_is_another_driver():
    row = doctor_rows(UBUNTU_2204, DATA_535, FLAVOURS)["no other driver branch installed"]
    assert row.state == "broken" and "libnvidia-compute-535" in row.evidence and "nvidia-utils-535" in row.evidence
    assert "nvidia-utils-535-server" not in row.evidence


def test_repair_releases_and_purges_the_desktop_flavour_and_holds_only_the_pin():
    cmds = plan_commands(UBUNTU_2204, DATA_535, FLAVOURS, deploys=REPAIR)
    unhold = next(i for i, c in enumerate(cmds) if c == "apt-mark unhold libnvidia-compute-535")
    purge = next(i for i, c in enumerate(cmds) if c.endswith(" purge libnvidia-compute-535 nvidia-utils-535"))
    assert unhold < purge
    hold = next(c for c in cmds if c.startswith("apt-mark hold")).split()[2:]
    assert "libnvidia-compute-535" not in hold and "nvidia-utils-535" not in hold
    assert "nvidia-utils-535-server" in hold


# Debian builds the same branch as src:nvidia-graphics-drivers and src:nvidia-graphics-drivers-tesla-535 (Debian
# package tracker); at one upstream version they are still two drivers.
D535 = "535.261.03-1"
DEBIAN_PIN = [f"{n}\t{D535}\tnvidia-graphics-drivers\tii " for n in ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1")]
TESLA = [f"libnvidia-tesla-535-ml1\t{D535}\tnvidia-graphics-drivers-tesla-535\tii "]


def test_debian_tesla_flavour_at_the_pinned_version_is_another_driver():
    cmds = plan_commands(DEBIAN_12, responses={"dpkg-query -W -f": DEBIAN_PIN + TESLA}, deploys=REPAIR)
    assert [c for c in cmds if c.endswith(" purge libnvidia-tesla-535-ml1")]
    assert "libnvidia-tesla-535-ml1" not in next(c for c in cmds if c.startswith("apt-mark hold"))
    # without any of the pin's packages installed yet, the pin's own source (src:nvidia-graphics-drivers) tells
    row = doctor_rows(DEBIAN_12, responses={"dpkg-query -W -f": TESLA})["no other driver branch installed"]
    assert row.state == "broken" and "libnvidia-tesla-535-ml1" in row.evidence


# -- 4. An old NVIDIA repository entry next to the toolkit's own --------------------------------------------------
# What NVIDIA's network-repo instructions used to leave: a one-line .list for the same repository (issue 13;
# NVIDIA cuda-repo-management issue 4: "Conflicting values set for option Signed-By").
OLD_LIST = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"
OLD_ENTRY = {"awk -v f=": [
    f"{OLD_LIST}\tdeb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
    "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /", f"{OLD_LIST}\t"]}


def test_old_nvidia_entry_is_disabled_before_apt_update_and_reported():
    cmds = plan_commands(UBUNTU_2204, responses={**OLD_ENTRY, "b=$(cat /var/lib/apt/lists/v100kit-sources": ["changed"]})
    move = cmds.index(f"mv -f {OLD_LIST} {OLD_LIST}.disabled")
    update = next(i for i, c in enumerate(cmds) if c.startswith("apt-get update"))
    assert move < update
    row = doctor_rows(UBUNTU_2204, responses=OLD_ENTRY)["no other source entry for a repository v100kit manages"]
    assert row.state == "broken" and OLD_LIST in row.evidence and "deploy.py" in row.fix


def test_a_file_mixing_an_old_entry_with_others_is_reported_not_moved():
    mixed = {"awk -v f=": OLD_ENTRY["awk -v f="][:1] + [f"{OLD_LIST}\tdeb http://ppa.example/x jammy main"]}
    cmds = plan_commands(UBUNTU_2204, responses=mixed)
    assert not [c for c in cmds if OLD_LIST in c and c.startswith("mv ")]
    row = doctor_rows(UBUNTU_2204, responses=mixed)["no other source entry for a repository v100kit manages"]
    assert row.state == "broken" and "by hand" in row.fix


def test_old_entry_of_the_distribution_mirror_in_deb822_is_disabled():
    f = "/etc/apt/sources.list.d/old-debian.sources"
    lines = [f"{f}\tTypes: deb", f"{f}\tURIs: https://deb.debian.org/debian/", f"{f}\tSuites: trixie trixie-updates",
             f"{f}\tComponents: main", f"{f}\t"]
    assert f"mv -f {f} {f}.disabled" in plan_commands(DEBIAN_13, responses={"awk -v f=": lines})
    other = [x.replace("trixie trixie-updates", "trixie-backports") for x in lines]  # not a suite we manage
    assert not [c for c in plan_commands(DEBIAN_13, responses={"awk -v f=": other}) if c.startswith(f"mv -f {f}")]


def test_nvidia_entry_is_left_alone_where_the_toolkit_does_not_use_nvidias_repository():
    entry = {"awk -v f=": [f"{OLD_LIST}\tdeb https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /"]}
    cmds = plan_commands(DEBIAN_12, responses=entry)  # Debian: driver and toolkit from the distribution
    assert not [c for c in cmds if c.startswith(f"mv -f {OLD_LIST}")]
    assert f"mv -f {OLD_LIST} {OLD_LIST}.disabled" in plan_commands(DEBIAN_12, {"nvidia_driver_source": "nvidia"},
                                                                     entry)


# -- 5. Kernel flavours --------------------------------------------------------------------------------------------
# (os, installed kernel metapackages as `dpkg-query` prints them, booted `uname -r`, expected headers metapackage).
# Every expected name was checked against the archives' package lists: see docs/field-states.md.
KERNEL_CASES = {
    "ubuntu-22.04-GA": (UBUNTU_2204, ["linux-image-generic|linux-image-5.15.0-126-generic, linux-firmware"],
                        "5.15.0-126-generic", "linux-headers-generic"),
    "ubuntu-22.04-HWE": (UBUNTU_2204, ["linux-image-generic|linux-image-5.15.0-126-generic",
                                       "linux-image-generic-hwe-22.04|linux-image-6.8.0-49-generic, linux-firmware"],
                         "6.8.0-49-generic", "linux-headers-generic-hwe-22.04"),
    "ubuntu-22.04-HWE-upgraded-not-rebooted": (
        UBUNTU_2204, ["linux-image-generic|linux-image-5.15.0-126-generic",
                      "linux-image-generic-hwe-22.04|linux-image-6.8.0-51-generic"],
        "6.8.0-49-generic", "linux-headers-generic-hwe-22.04"),
    "ubuntu-22.04-virtual": (UBUNTU_2204, ["linux-image-virtual|linux-image-5.15.0-126-generic"],
                             "5.15.0-126-generic", "linux-headers-virtual"),
    "ubuntu-22.04-lowlatency-HWE": (UBUNTU_2204, ["linux-image-generic|linux-image-5.15.0-126-generic",
                                                  "linux-image-lowlatency-hwe-22.04|linux-image-6.8.0-49-lowlatency"],
                                    "6.8.0-49-lowlatency", "linux-headers-lowlatency-hwe-22.04"),
    "ubuntu-24.04-GA": (UBUNTU_2404, ["linux-image-generic|linux-image-6.8.0-49-generic"], "6.8.0-49-generic",
                        "linux-headers-generic"),
    "ubuntu-24.04-HWE": (UBUNTU_2404, ["linux-image-generic|linux-image-6.8.0-49-generic",
                                       "linux-image-generic-hwe-24.04|linux-image-6.14.0-36-generic"],
                         "6.14.0-36-generic", "linux-headers-generic-hwe-24.04"),
    "debian-12-amd64": (DEBIAN_12, ["linux-image-amd64|linux-image-6.1.0-50-amd64 (= 6.1.176-1)"],
                        "6.1.0-50-amd64", "linux-headers-amd64"),
    "debian-12-cloud": (DEBIAN_12, ["linux-image-amd64|linux-image-6.1.0-50-amd64 (= 6.1.176-1)",
                                    "linux-image-cloud-amd64|linux-image-6.1.0-50-cloud-amd64 (= 6.1.176-1)"],
                        "6.1.0-50-cloud-amd64", "linux-headers-cloud-amd64"),
    "debian-13-cloud": (DEBIAN_13, ["linux-image-cloud-amd64|linux-image-6.12.57+deb13-cloud-amd64 (= 6.12.57-1)"],
                        "6.12.57+deb13-cloud-amd64", "linux-headers-cloud-amd64"),
}


def _kernel_facts(metas: list[str], booted: str, kernels: list[str]) -> dict:
    return {"--showformat='${db:Status-Abbrev}|": [f"ii |{m}" for m in metas],
            "systemd-detect-virt": ["virt=none", f"kernel={booted}", "sysctl_writable=1", "thp_writable=1",
                                    "modules_dir=1", "nouveau_loaded=0", "thp_mode=madvise"],
            "for k in /boot/vmlinuz-*; do [ -e \"$k\" ] || continue; v=${k#/boot/vmlinuz-}; if": kernels,
            "apt-cache show linux-headers-": ["y"]}


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_headers_follow_the_booted_kernels_flavour_series_and_every_kernel_gets_its_headers(case):
    os_release, metas, booted, expected = KERNEL_CASES[case]
    # the booted kernel has its headers; an older installed one does not yet
    older = re.sub(r"-(\d+)-", lambda m: f"-{int(m.group(1)) - 2}-", booted, count=1)
    cmds = plan_commands(os_release, responses=_kernel_facts(metas, booted, [f"{booted} 1", f"{older} 0"]))
    pkgs = installs(cmds)
    assert expected in pkgs, pkgs
    assert [p for p in pkgs if p.startswith("linux-headers-")] == [expected, f"linux-headers-{older}"]
    assert f"dkms autoinstall -k {booted}" in cmds and f"dkms autoinstall -k {older}" in cmds


def test_doctor_reports_the_flavour_series_headers_missing():
    os_release, metas, booted, expected = KERNEL_CASES["ubuntu-22.04-HWE"]
    row = doctor_rows(os_release, responses=_kernel_facts(metas, booted, [f"{booted} 1"]))["headers metapackage installed"]
    assert row.state == "broken" and expected in row.evidence


# -- 6. Swap on btrfs, ZFS, a changed swap path ------------------------------------------------------------------
# btrfs(5) SWAPFILE SUPPORT: the file must be NOCOW, set while it is empty (chattr +C); ZFS has no swapfiles.
GIB8 = str(8 * 1024**3)


def test_swapfile_on_btrfs_is_made_nocow_while_empty():
    cmds = plan_commands(DEBIAN_12, responses={"stat -f -c %T": ["btrfs"]}, stops_early=True)
    make = next(c for c in cmds if "mkswap" in c)
    assert make.index("touch /swapfile.v100kit-new && chattr +C /swapfile.v100kit-new") < make.index("fallocate")


def test_copy_on_write_swapfile_on_btrfs_is_made_again():
    cow = {"stat -f -c %T": ["btrfs"], "test -f /swapfile &&": [GIB8], "lsattr /swapfile": ["--------------------"],
           "cat /var/lib/v100kit/swapfiles": ["created /swapfile"]}
    assert [c for c in plan_commands(DEBIAN_12, responses=cow, stops_early=True) if "chattr +C" in c]
    nocow = {**cow, "lsattr /swapfile": ["---------------C------"]}
    assert not [c for c in plan_commands(DEBIAN_12, responses=nocow, stops_early=True) if "mkswap" in c]


@pytest.mark.parametrize("fs", ["zfs", "tmpfs"])
def test_swapfile_on_a_filesystem_that_cannot_swap_is_refused_before_any_change(fs):
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_12, responses={"stat -f -c %T": [fs]})
    assert "tuning_swap_file = '/swapfile'" in str(e.value) and "nothing was changed" in str(e.value)
    assert ("zvol" in str(e.value)) == (fs == "zfs")
    plan_commands(DEBIAN_12, {"tuning_swap_size_gib": 0}, {"stat -f -c %T": [fs]}, stops_early=True)  # no swapfile


MOVED = {"cat /proc/swaps": ["Filename Type Size Used Priority", "/swapfile file 8388604 0 -2"],
         "test -f /swapfile &&": [GIB8], re.compile(r"grep -e '\^/swapfile"): ["/swapfile none swap sw 0 0"]}


def test_changed_swap_path_retires_the_old_swapfile_the_toolkit_created():
    cmds = plan_commands(DEBIAN_12, {"tuning_swap_file": "/var/swapfile"},
                         {**MOVED, "cat /var/lib/v100kit/swapfiles": ["created /swapfile"]}, stops_early=True)
    off, rm = cmds.index("swapoff /swapfile"), cmds.index("rm -f /swapfile")
    fstab = next(i for i, c in enumerate(cmds) if c.startswith("sed -i") and "/^\\/swapfile\\s.*$/d" in c)
    assert off < rm and off < fstab and "swapon /var/swapfile" in cmds


def test_changed_swap_path_keeps_a_swapfile_the_toolkit_did_not_create():
    cmds = plan_commands(DEBIAN_12, {"tuning_swap_file": "/var/swapfile"},
                         {**MOVED, "cat /var/lib/v100kit/swapfiles": ["adopted /swapfile"]}, stops_early=True)
    assert "swapoff /swapfile" in cmds and "rm -f /swapfile" not in cmds
    assert [c for c in cmds if c.startswith("sed -i") and "/^\\/swapfile\\s.*$/d" in c]


def test_unchanged_swap_path_retires_nothing():
    cmds = plan_commands(DEBIAN_12, responses={**MOVED, "cat /var/lib/v100kit/swapfiles": ["created /swapfile"]},
                         stops_early=True)
    assert "swapoff /swapfile" not in cmds and "rm -f /swapfile" not in cmds


def test_doctor_swapfile_row():
    cow = {"stat -f -c %T": ["btrfs"], "test -f /swapfile &&": [GIB8], "lsattr /swapfile": ["--------------------"]}
    row = doctor_rows(DEBIAN_12, responses=cow)["swapfile as configured"]
    assert row.state == "broken" and "copy-on-write" in row.evidence
    assert doctor_rows(DEBIAN_12, responses={**cow, "lsattr /swapfile": ["---------------C------"]})[
        "swapfile as configured"].state == "ok"
    moved = doctor_rows(DEBIAN_12, {"tuning_swap_file": "/var/swapfile"},
                        {**cow, "cat /var/lib/v100kit/swapfiles": ["created /swapfile"]})["swapfile as configured"]
    assert moved.state == "broken" and "/swapfile" in moved.evidence


def test_no_swapfile_wanted_swaps_off_and_deletes_only_a_created_one():
    created = plan_commands(DEBIAN_12, {"tuning_swap_size_gib": 0},
                            {**MOVED, "cat /var/lib/v100kit/swapfiles": ["created /swapfile"]}, stops_early=True)
    assert created.index("swapoff /swapfile") < created.index("rm -f /swapfile")
    unrecorded = plan_commands(DEBIAN_12, {"tuning_swap_size_gib": 0}, MOVED, stops_early=True)
    assert "swapoff /swapfile" in unrecorded and "rm -f /swapfile" not in unrecorded
    assert not [c for c in unrecorded if "/var/lib/v100kit/swapfiles.new" in c]  # nothing to change next time
