"""Plan-level (facts in, commands out): repair on hosts whose driver comes from NVIDIA's repository, where the
pinned metapackage pulls in further packages of the same driver version."""

from tests.plan.harness import UBUNTU_2404, doctor_rows, plan_commands

PINNED_AND_DEPS = [
    "cuda-drivers-580\t580.95.05-1\tnvidia-graphics-drivers-580\tii ",
    "nvidia-dkms-580\t580.95.05-1\tnvidia-graphics-drivers-580\tii ",
    "nvidia-driver-580\t580.95.05-1\tnvidia-graphics-drivers-580\tii ",
    "libnvidia-compute-580\t580.95.05-1\tnvidia-graphics-drivers-580\tii ",
    "nvidia-utils-580\t580.95.05-1\tnvidia-graphics-drivers-580\tii ",
]
OTHER_BRANCH = ["libnvidia-compute-535\t535.274.02-0ubuntu1\tnvidia-graphics-drivers-535\tii "]
DATA = {"nvidia_driver_source": "nvidia"}


def test_repair_keeps_the_pinned_drivers_own_dependencies_and_holds_them():
    cmds = plan_commands(UBUNTU_2404, DATA, {"dpkg-query -W -f": PINNED_AND_DEPS},
                         deploys=("repair.py", "deploy.py"))
    assert not [c for c in cmds if " purge " in c], cmds
    hold = next(c for c in cmds if c.startswith("apt-mark hold"))
    for name in ("libnvidia-compute-580", "nvidia-driver-580", "nvidia-utils-580", "cuda-drivers-580"):
        assert name in hold
    rows = doctor_rows(UBUNTU_2404, DATA, {"dpkg-query -W -f": PINNED_AND_DEPS})
    assert rows["no other driver branch installed"].state == "ok"


def test_repair_purges_another_branch_after_releasing_its_hold():
    cmds = plan_commands(UBUNTU_2404, DATA, {"dpkg-query -W -f": PINNED_AND_DEPS + OTHER_BRANCH,
                                             "apt-mark showhold": ["libnvidia-compute-535"]},
                         deploys=("repair.py", "deploy.py"))
    unhold = next(i for i, c in enumerate(cmds) if c.startswith("apt-mark unhold libnvidia-compute-535"))
    purge = next(i for i, c in enumerate(cmds) if " purge libnvidia-compute-535" in c)
    assert unhold < purge
    assert not [c for c in cmds if " purge " in c and "580" in c]
