"""Run inside an LMDeploy venv on the host (no GPU needed): exit 0 only if the venv is what its lock says.

    <venv>/bin/python check_venv.py VERSION

Checks: the installed lmdeploy distribution is exactly VERSION (its metadata: importing lmdeploy's TurboMind
library needs libcuda, absent on a host without a driver), and torch was built with sm_70 kernels (the architecture
list compiled into libtorch_cuda, torch._C._cuda_getArchFlags(), which needs no device; docs/volta.md §3). The
dependency set is checked separately with `uv pip check`. Prints one JSON line with what it found.
"""

import json
import sys
from importlib.metadata import version

want = sys.argv[1]
import torch  # noqa: E402

arch = torch._C._cuda_getArchFlags().split()
found = {"lmdeploy": version("lmdeploy"), "torch": torch.__version__, "torch_cuda": torch.version.cuda, "arch": arch}
print(json.dumps(found))
if found["lmdeploy"] != want:
    sys.exit(f"lmdeploy {found['lmdeploy']} installed, {want} expected")
if "sm_70" not in arch:
    sys.exit(f"torch {torch.__version__} has no sm_70 kernels ({' '.join(arch)}): a V100 cannot run it")
