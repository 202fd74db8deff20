"""The sm_70 check of machine code for an LMDeploy lock: the reader and the verdict of roles/vllm/machine_code.py,
applied to files/lmdeploy/lmdeploy-<version>-py<python>.txt.

Every ELF member of every wheel the lock installs is listed with the pinned cuobjdump (SASS architectures and PTX
versions); a binary runs on a V100 when it holds sm_70 SASS or PTX of compute_70 or lower (NVIDIA, CUDA C++
Programming Guide, "Binary Compatibility"; see roles/vllm/machine_code.py). The evidence file has the same schema as
vLLM's (render_evidence), so `tools/lock_vllm.py --sm70-table FILE` prints it too.
"""

from __future__ import annotations

from pathlib import Path

from roles.lmdeploy.versions import lock_name_parts
from roles.vllm.machine_code import Fetch, LockCheck, evidence_path  # noqa: F401
from roles.vllm.machine_code import check_lock as vllm_check_lock


def check_lock(lock_path: Path, cache_dir: Path, fetch: Fetch) -> LockCheck:
    """The sm_70 check of one LMDeploy lock: fetch(lock, python, cache_dir) downloads its wheels (hash-checked;
    tools/lock_lmdeploy.py passes v100kit.offline_pypi.fill_wheels), then every ELF member is read with the pinned
    cuobjdump, results kept per wheel sha256 under cache_dir/machine-code (roles/vllm/machine_code.py check_lock,
    given the Python of the LMDeploy lock's name).

    Returns a LockCheck named after the lock (its `ok`, `failing`, `not_launched` are roles/vllm/machine_code.py's
    rules: the vLLM-only lists there name vLLM's and xformers' files, which an LMDeploy lock does not hold, and
    cuFFT's libcufftw, which no torch binary links). Raises ValueError for a lock name of another form,
    MachineCodeError when cuobjdump is missing or fails, and what fetch raises."""
    _, python = lock_name_parts(Path(lock_path))
    return vllm_check_lock(lock_path, cache_dir, fetch, python)
