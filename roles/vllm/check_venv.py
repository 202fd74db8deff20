"""Run inside a vLLM venv on the host (no GPU needed): exit 0 only if the venv is what its lock says.

    <venv>/bin/python check_venv.py VERSION

Checks: vllm imports and is exactly VERSION; torch was built with sm_70 kernels (the architecture list compiled
into the installed libtorch_cuda, torch._C._cuda_getArchFlags(), which needs no device; docs/volta.md §3). The
dependency set is checked separately with `uv pip check`. Prints one JSON line with what it found.
"""

import json
import logging
import sys

logging.disable(logging.WARNING)  # vLLM warns that no platform / libcuda is found on a GPU-less host

want = sys.argv[1]
import torch  # noqa: E402
import vllm  # noqa: E402

arch = torch._C._cuda_getArchFlags().split()
found = {"vllm": vllm.__version__, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "arch": arch}
print(json.dumps(found))
if vllm.__version__ != want:
    sys.exit(f"vllm {vllm.__version__} imported, {want} expected")
if "sm_70" not in arch:
    sys.exit(f"torch {torch.__version__} has no sm_70 kernels ({' '.join(arch)}): a V100 cannot run it")
