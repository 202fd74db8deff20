"""Does a running llama-server serve from the GPU? Judged from the server's own log and the GPU's process list.

Pure: the deploy (after each (re)start on a host with a GPU) and the doctor feed it what they read on the host.
With CUDA built in but no usable GPU, llama-server logs "ggml_cuda_init: failed to initialize CUDA: ..." and
serves on the CPU, healthy but 10-50x slower (docs/volta.md §5); with -ngl below the layer count, part of the
model runs on the CPU. The log lines are llama.cpp's own: ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_init
("failed to initialize CUDA", "found N CUDA devices") and src/llama-model.cpp load_tensors ("offloaded N/M layers
to GPU"), the same text in the 0.3.16 and 0.3.36 trees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_CUDA_FAILED = re.compile(r"failed to initialize CUDA: ?(.*)")


@dataclass(frozen=True)
class Residency:
    """The verdict: `on_gpu` True only when every check passed; `evidence` says what was seen (one line)."""

    on_gpu: bool
    evidence: str


def parse_compute_apps(lines: list[str]) -> dict[int, int]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` -> {pid: used MiB}.
    Lines that are not "PID, MIB" (headers, "[N/A]", blank) are skipped."""
    apps: dict[int, int] = {}
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            apps[int(parts[0])] = apps.get(int(parts[0]), 0) + int(parts[1])
    return apps


def judge(log: list[str], main_pid: int, compute_apps: dict[int, int], n_gpu_layers: int) -> Residency:
    """Whether the llama-server process `main_pid` serves from the GPU.

    log: the lines this process logged (journal of its unit, this PID only). compute_apps: parse_compute_apps of
    nvidia-smi. n_gpu_layers: the instance's -ngl (99 = all; below the model's layer count is an accepted partial
    offload, planned and allowed before the deploy). Fails when CUDA did not initialise, when fewer layers were
    offloaded than -ngl asks for (capped at the model's count), when the log has no offload line (the model is
    not loaded yet or the build has no GPU backend), or when the process holds no GPU memory.
    """
    text = "\n".join(log)
    if main_pid <= 0:
        return Residency(False, "the service has no running process")
    failed = _CUDA_FAILED.search(text)
    if failed:
        return Residency(False, f"llama-server logged 'failed to initialize CUDA: {failed.group(1).strip()}': it serves "
                                "from the CPU")
    offloads = _OFFLOADED.findall(text)
    if not offloads:
        return Residency(False, "no 'offloaded N/M layers to GPU' line in the server's log: no layer is on a GPU")
    done, total = (int(x) for x in offloads[-1])
    wanted = min(n_gpu_layers, total)
    if done < wanted:
        return Residency(False, f"offloaded {done}/{total} layers to GPU, -ngl asks for {wanted}")
    used = compute_apps.get(main_pid)
    if not used:
        return Residency(False, f"offloaded {done}/{total} layers, but PID {main_pid} holds no GPU memory "
                                "(nvidia-smi --query-compute-apps)")
    return Residency(True, f"offloaded {done}/{total} layers to GPU; PID {main_pid} uses {used} MiB of VRAM")
