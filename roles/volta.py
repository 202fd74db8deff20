"""Facts about Volta (V100, compute capability 7.0, sm_70) that the roles decide with.

Every constant names its source; confidence H = primary source or several, M = one secondary source
(docs/volta.md, by section). Where an M fact is relied on, the comment says so.
"""

from __future__ import annotations

#: Compute capability of the V100 (major, minor). (NVIDIA CUDA GPUs table; docs/volta.md §7; H)
V100_COMPUTE_CAPABILITY = (7, 0)

#: R580 is the last driver branch that supports Maxwell, Pascal and Volta; R590+ ignore a V100 ("NVRM: ... is
#: supported through the NVIDIA 580.xx Legacy drivers. The 590.xx NVIDIA driver will ignore this GPU").
#: (NVIDIA Unix driver deprecation notice; NixOS/nixos-hardware#1880; NVIDIA/ansible-role-nvidia-driver#89 moved its
#: default to 580 for this reason; docs/volta.md §1; H)
LAST_VOLTA_DRIVER_BRANCH = 580
#: The branches after LAST_VOLTA_DRIVER_BRANCH drive Turing (compute capability 7.5) and newer only. (Same sources; H)
AFTER_LAST_VOLTA_BRANCH_MIN_COMPUTE_CAPABILITY = (7, 5)

#: Open kernel modules need GSP, i.e. Turing (7.5) or newer: below this a GPU needs the proprietary module.
#: (NVIDIA/open-gpu-kernel-modules README; docs/volta.md §1; H)
OPEN_MODULE_MIN_COMPUTE_CAPABILITY = (7, 5)

#: CUDA 13.0 removed offline compilation for sm_50..sm_72: sm_70 needs a CUDA 12.x or older toolkit.
#: (CUDA 13.0 release notes; docs/volta.md §2; H)
LAST_CUDA_MAJOR_FOR_SM70 = 12

#: Minimum Linux driver for each CUDA toolkit (major.minor -> driver version), CUDA release notes table 3. (docs/volta.md §1; H)
CUDA_MIN_DRIVER: dict[str, str] = {
    "11.7": "515.43.04",
    "11.8": "520.61.05",
    "12.1": "530.30.02",
    "12.4": "550.54.14",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}

#: Minor-version compatibility floor per CUDA major, release notes table 2: 11.x runs on >= 450.80.02 and 12.x
#: on >= 525.60.13, but PTX that needs the newer driver's JIT fails ("PTX was compiled with an unsupported
#: toolchain"). (H)
CUDA_MINOR_COMPAT_MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13"}


def version_tuple(version: str) -> tuple[int, ...]:
    """'535.261.03' -> (535, 261, 3). Raises ValueError for anything that is not dot-separated integers."""
    return tuple(int(p) for p in version.split("."))


def driver_branch(version: str) -> int:
    """The driver branch of an exact driver version: '550.163.01' -> 550."""
    return version_tuple(version)[0]
