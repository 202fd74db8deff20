"""Plan-level tests (facts in, commands out, nothing executed): Ubuntu archives and NVIDIA's repository cannot
be reached from the lab, so these check the commands deploy.py would run there."""

from __future__ import annotations

import re

import pytest

from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_12, UBUNTU_2204, UBUNTU_2404, plan_commands


def installs(commands: list[str]) -> list[str]:
    """Package specs passed to `apt-get install` in the plan."""
    pkgs = []
    for c in commands:
        m = re.search(r"apt-get .*install (.*)", c)
        if m:
            pkgs += [p for p in m.group(1).split() if not p.startswith("-")]
    return pkgs


def test_plan_ubuntu2204_exact_server_driver_and_nvidia_cuda():
    cmds = plan_commands(UBUNTU_2204)
    pkgs = installs(cmds)
    assert "nvidia-dkms-580-server=580.178.04-0ubuntu0.22.04.1" in pkgs
    assert "cuda-toolkit-12-4=12.4.1-1" in pkgs
    assert "linux-headers-generic" in pkgs  # follows the installed linux-image-generic
    assert not [p for p in pkgs if re.search(r"(^|-)open(-|=|$)", p)], "an -open module package was chosen"
    assert any("apt-mark hold" in c and "nvidia-dkms-580-server" in c for c in cmds)
    assert any("update-alternatives --set cuda /usr/local/cuda-12.4" in c for c in cmds)
    # the NVIDIA repository key is trusted only after its fingerprint is checked
    key = next(c for c in cmds if "3bf863cc.pub" in c)
    assert "EB693B3035CD5710E231E123A4B469963BF863CC" in key


def test_plan_ubuntu2204_two_toolkits_side_by_side_default_first():
    cmds = plan_commands(UBUNTU_2204, {"cuda_versions": ["12.4", "11.7"], "cuda_default_version": "11.7",
                                       "nvidia_driver_version": "580.178.04"})
    pkgs = installs(cmds)
    assert {"cuda-toolkit-12-4=12.4.1-1", "cuda-toolkit-11-7=11.7.1-1"} <= set(pkgs)
    assert any("update-alternatives --set cuda /usr/local/cuda-11.7" in c for c in cmds)


def test_plan_nvidia_repo_driver_is_proprietary():
    cmds = plan_commands(UBUNTU_2404, {"nvidia_driver_source": "nvidia"})
    pkgs = installs(cmds)
    assert "cuda-drivers-580=580.95.05-1" in pkgs and "nvidia-dkms-580=580.95.05-1" in pkgs
    assert not [p for p in pkgs if re.search(r"(^|-)open(-|=|$)", p)]


def test_plan_gpu_host_loads_module_and_starts_persistenced():
    cmds = plan_commands(UBUNTU_2204, responses={
        "nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Disabled, 535.274.02"],
    })
    assert "modprobe nvidia" in cmds
    assert any("systemctl start nvidia-persistenced" in c for c in cmds)


def test_plan_reboot_only_when_allowed(monkeypatch):
    monkeypatch.setattr("roles.nvidia_driver.deploy.REBOOT_DELAY_S", 0)
    traits = ["virt=none", "kernel=6.8.0-45-generic", "sysctl_writable=1", "thp_writable=1", "modules_dir=1",
              "nouveau_loaded=1", "thp_mode=madvise"]
    without = plan_commands(UBUNTU_2204, responses={"systemd-detect-virt": traits})
    assert not [c for c in without if "reboot" in c] and "modprobe nvidia" not in without
    allowed = plan_commands(UBUNTU_2204, {"nvidia_driver_reboot": True}, responses={"systemd-detect-virt": traits},
                            stops_early=True)  # the fake host does not come back from the reboot
    assert [c for c in allowed if "reboot" in c]


@pytest.mark.parametrize("data, key", [
    ({"nvidia_driver_version": "590.44.01"}, "nvidia_driver_version"),
    ({"nvidia_driver_kernel_module": "open"}, "nvidia_driver_kernel_module"),
    ({"cuda_versions": ["13.0"]}, "cuda_versions"),
    ({"cuda_versions": ["12.4"], "nvidia_driver_version": "535.274.02"}, "cuda_versions"),
])
def test_plan_refusals_happen_before_any_command(data, key):
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2204, data)
    assert key in str(e.value) and "Fix:" in str(e.value)


def test_plan_debian12_cuda124_needs_minor_version_compat():
    data = {"cuda_source": "nvidia", "cuda_versions": ["12.4"]}
    with pytest.raises(SettingsError, match="550.54.14"):
        plan_commands(DEBIAN_12, data)
    cmds = plan_commands(DEBIAN_12, {**data, "cuda_allow_minor_version_compat": True})
    assert "cuda-toolkit-12-4=12.4.1-1" in installs(cmds)


#: NVIDIA's repositories carry the driver each CUDA release bundles: CUDA 13.0 Update 2's installer is
#: cuda_13.0.2_580.95.05_linux.run (developer.download.nvidia.com/compute/cuda/13.0.2/local_installers/, installed by
#: name in pytorch's .ci/docker/common/install_cuda.sh), so cuda-drivers-580=580.95.05-1 in the ubuntu repositories
UBUNTU_REPO_R580 = "580.95.05-1"
#: NVIDIA's debian12 repository: nvidia-kernel-dkms=580.159.04-1 installed from
#: developer.download.nvidia.com/compute/cuda/repos/debian12 in public provisioning notes (2026-05)
DEBIAN12_REPO_R580 = "580.159.04-1"


@pytest.mark.parametrize("os_release, dkms, version", [
    (UBUNTU_2204, "nvidia-dkms-580", UBUNTU_REPO_R580), (DEBIAN_12, "nvidia-kernel-dkms", DEBIAN12_REPO_R580)])
def test_plan_level_nvidia_repo_default_is_r580_not_the_ended_550(os_release, dkms, version):
    # R580 is the last branch for Volta and the 550 branch has ended (issue 28; NVIDIA's own ansible role moved its
    # default to 580: NVIDIA/ansible-role-nvidia-driver#89): NVIDIA's repository defaults to the newest R580 it shows
    pkgs = installs(plan_commands(os_release, {"nvidia_driver_source": "nvidia"}))
    assert f"cuda-drivers-580={version}" in pkgs and f"{dkms}={version}" in pkgs
    assert not [p for p in pkgs if "550" in p.split("=")[0] or "=550." in p], pkgs
