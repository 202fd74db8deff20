"""The LMDeploy releases the toolkit supports on Volta, as data: version, Pythons, lock files, resolution date.

The lock files in files/lmdeploy/ are produced from this table by `tools/lock_lmdeploy.py` exactly as vLLM's are
(uv, PyPI only, wheels only, one Python per lock, a fixed --exclude-newer date): the same inputs give the same bytes.
Each lock has its sm_70 evidence beside it (files/lmdeploy/lmdeploy-<version>-py<python>.sm70.json), written by
the same machine-code check as vLLM's (roles/vllm/machine_code.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR = Path(__file__).resolve().parents[2] / "files" / "lmdeploy"
_LOCK_NAME = re.compile(r"^lmdeploy-(?P<version>[^-]+)-py(?P<python>3\.\d+)\.txt$")


@dataclass(frozen=True)
class LmdeployRelease:
    """One LMDeploy release as it runs on a V100.

    version: the PyPI version ("0.15.0"); pythons: the "3.N" versions with a lock (one file each; the lmdeploy wheel
    is CPython-specific: cp310-cp314); exclude_newer: uv's --exclude-newer date of the locks (YYYY-MM-DD, the day
    after the release's upload to PyPI); torch / torch_cuda: the torch build its locks resolve to and the CUDA of
    that PyPI wheel ("12.8" = cu128), which must be a build with sm_70 kernels (roles/vllm/versions.py TORCH_SM70);
    platform: uv's --python-platform (the lmdeploy wheel's manylinux tag); sources: where each choice comes from.
    """

    version: str
    pythons: tuple[str, ...]
    exclude_newer: str
    torch: str
    torch_cuda: str
    platform: str = "x86_64-manylinux_2_28"
    sources: tuple[tuple[str, str], ...] = ()

    def lock_file(self, python: str) -> Path:
        """files/lmdeploy/lmdeploy-<version>-py<python>.txt."""
        return LOCK_DIR / f"lmdeploy-{self.version}-py{python}.txt"


# 0.15.0 is the newest release whose lock, resolved as vLLM's are (no constraint of our own), has an sm_70 torch:
# its wheel requires torch<=2.10.0 (METADATA Requires-Dist), and PyPI's torch 2.10.0 is cu128, which keeps sm_70
# (roles/vllm/versions.py TORCH_SM70). 0.16.0, 0.17.0 and 0.18.0 (2026-08-19 .. 2026-09-28) raise the ceiling to
# torch<=2.12.1, whose PyPI wheel is CUDA 13 without sm_70 (their resolved locks carry nvidia-cuda-runtime 13.0.96);
# their TurboMind library still holds sm_70 SASS (cuobjdump --list-elf, 2026-12-02), so they could be locked with a
# `torch==2.10.0` constraint, a combination LMDeploy does not test. The TurboMind build keeps Volta while it is
# compiled with CUDA < 13 (CMakeLists.txt:239-241 at v0.15.0: `70-real 75-real  # V100, 2080`); the wheel on PyPI is
# built with CUDA 12.8 (its dependencies nvidia-*-cu12; cuobjdump finds sm_70 SASS in 99 of its kernels' entries).
LMDEPLOY_RELEASES: dict[str, LmdeployRelease] = {
    "0.15.0": LmdeployRelease(
        "0.15.0", ("3.11", "3.13"), "2026-08-01", "2.10.0", "12.8",
        sources=(
            ("release", "PyPI lmdeploy 0.15.0, uploaded 2026-07-31T14:42Z; git tag v0.15.0 = f4b8140b"),
            ("sm70_build", "CMakeLists.txt:237-241 (v0.15.0): CUDA < 13.0 -> CMAKE_CUDA_ARCHITECTURES 70-real"),
            ("sm70_w4a16", "docs/en/quantization/w4a16.md:5-10 (v0.15.0): AWQ/GPTQ INT4 inference on V100(sm70)"),
            ("sm70_kv_quant", "docs/en/quantization/kv_quant.md:11 (v0.15.0): int8/int4 KV on Volta (sm70)"),
            ("torch", "lmdeploy-0.15.0 METADATA: Requires-Dist torch<=2.10.0,>=2.0.0"),
        )),
}

#: The default release (the only one in the table).
DEFAULT_VERSION = "0.15.0"


def lock_name_parts(lock_path: Path) -> tuple[str, str]:
    """(version, python) of a lock's file name lmdeploy-<version>-py<python>.txt: ("0.15.0", "3.11"). Raises
    ValueError for another name."""
    m = _LOCK_NAME.match(Path(lock_path).name)
    if not m:
        raise ValueError(f"{lock_path}: not a lock name of tools/lock_lmdeploy.py (lmdeploy-<version>-py<3.N>.txt)")
    return m.group("version"), m.group("python")
