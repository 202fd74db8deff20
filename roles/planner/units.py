"""Units, the GPU's constants, the Plan every engine returns, and small arithmetic helpers of the planner.

Units: bytes unless a name says otherwise (MiB = 2**20 bytes; GB = 1e9 bytes, used only in messages about model
sizes, because that is how downloads are labelled); speeds in tokens/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Literal

MiB = 1 << 20
GiB = 1 << 30
GB = 10**9

# -- The GPU ------------------------------------------------------------------------------------------------
#: Memory a V100 reports (nvidia-smi "Total", torch.cuda.mem_get_info), ECC on, in MiB. (docs/volta.md §7; M)
V100_16GB_MIB = 16160
V100_32GB_MIB = 32510
#: HBM2 bandwidth of a V100: ~900 GB/s. Decode is bandwidth bound, so this caps tokens/s. (docs/volta.md §6, §7; H)
V100_BANDWIDTH_BYTES_S = 900e9
#: Effective host DRAM bandwidth for layers llama.cpp runs on the CPU, bytes/s. A 6-channel DDR4-2666 Xeon peaks at
#: ~128 GB/s per socket and CPU decode reaches well under half of that; 50 GB/s reproduces the 3.5-4 tok/s users
#: report for partly offloaded ~27 GB models (docs/volta.md §6). An assumption (M): measure with llama-bench on the
#: host.
HOST_BANDWIDTH_BYTES_S = 50e9

#: Per GPU per process, outside any buffer the engines report: the CUDA context with lazy module loading
#: (default since CUDA 12.2), cuBLAS handle and workspace. Typical nvidia-smi "used" of an idle CUDA process is
#: 250-400 MiB; vLLM users see ~400 MiB per GPU before the model loads (torch loads more kernels). (M)
CUDA_CONTEXT_BYTES = 300 * MiB
#: llama-server per GPU outside the buffers it logs (model, KV, compute): the CUDA context, cuBLAS handle and
#: workspace, ggml-cuda's memory pool (f16 copies of activations for cuBLAS, FA temporaries) and the loaded kernels;
#: MiB by (GPU, CUDA version). Source per row:
#:  - ("h200", "13"): measured, issue 12 table (nvidia-smi used_memory minus the logged buffers: 592.5-598.5 MiB over
#:    six cases, rounded up). (H for that machine)
#:  - ("v100", "12.4"): conservative bound, not measured: the H200 figure. CUDA 12.2+ loads modules lazily (same
#:    as the H200's CUDA 13), a V100 has fewer SMs (80 against 132: smaller per-SM local-memory reservation) and
#:    cuBLAS reserves a smaller workspace before Hopper. (M)
#:  - ("v100", "11.8"): conservative bound, not measured: the H200 figure plus 200 MiB, because CUDA 11.8 loads
#:    every kernel of libggml-cuda eagerly (CUDA_MODULE_LOADING=LAZY became the default in 12.2), and an sm_70-only
#:    libggml-cuda is well under 200 MiB of device code. (M)
LLAMA_CPP_CUDA_CONTEXT_MIB = {
    ("h200", "13"): 600,
    ("v100", "12.4"): 600,
    ("v100", "11.8"): 800,
}
#: What the llama.cpp plan counts when the caller does not say which GPU and CUDA: the largest V100 row. (M)
LLAMA_CPP_CUDA_CONTEXT_BYTES = max(v for (gpu, _), v in LLAMA_CPP_CUDA_CONTEXT_MIB.items() if gpu == "v100") * MiB


def llama_cpp_cuda_context_bytes(gpu: str, cuda_version: str) -> int:
    """LLAMA_CPP_CUDA_CONTEXT_MIB's row for a GPU (h200, v100) and CUDA version ("12.4", "13.0"), in bytes: the
    exact version, else its major version, else the conservative default LLAMA_CPP_CUDA_CONTEXT_BYTES."""
    gpu = gpu.lower()
    for key in ((gpu, cuda_version), (gpu, cuda_version.split(".")[0])):
        if key in LLAMA_CPP_CUDA_CONTEXT_MIB:
            return LLAMA_CPP_CUDA_CONTEXT_MIB[key] * MiB
    return LLAMA_CPP_CUDA_CONTEXT_BYTES
VLLM_CUDA_CONTEXT_BYTES = 400 * MiB

Outcome = Literal["fits", "does_not_fit", "offload"]


@dataclass(frozen=True)
class Plan:
    """The memory plan of one model instance. Byte fields are per GPU unless they say otherwise.

    total_bytes = weight + kv + compute_buffer + cuda_context for llama.cpp. For vLLM it follows vLLM's own
    accounting, weight + kv + compute_buffer (activation peak + non-torch memory) against VRAM x
    gpu_memory_utilization; the CUDA context lives in the remaining (1 - utilization) and is reported only.
    """

    engine: Literal["llama.cpp", "vllm"]
    outcome: Outcome
    n_gpus: int  # GPUs the instance uses
    gpu_bytes: int  # VRAM of one GPU
    budget_bytes: int  # VRAM x usable fraction (llama.cpp) or x gpu_memory_utilization (vLLM)
    weight_bytes: int
    kv_bytes: int  # llama.cpp: context x parallel slots; vLLM: one max_model_len sequence (the minimum it needs)
    compute_buffer_bytes: int  # llama.cpp compute buffer; vLLM activation peak + non-torch memory
    cuda_context_bytes: int
    total_bytes: int
    context: int  # tokens per sequence as planned
    kv_bytes_per_token: int  # whole model, one sequence
    layers_offloaded: int  # llama.cpp: layers that would run on the CPU at the planned context; vLLM: 0
    max_context_that_fits: int  # tokens per sequence, capped at the trained context; 0 if none
    max_weight_bytes: int  # whole model: largest weights (same shape) that fit at the planned context; 0 if none
    decode_ceiling_tps: float  # tokens/s of one sequence at full context, from memory bandwidth
    reasons: list[str] = field(default_factory=list)
    outside_bytes: int = 0  # vLLM: CUDA context + CUDA graphs per GPU outside gpu_memory_utilization; else 0

    @property
    def fits(self) -> bool:
        return self.outcome == "fits"


def _mib(n: float) -> str:
    """Bytes as whole MiB for a message: 1048576 -> "1 MiB"."""
    return f"{n / MiB:,.0f} MiB"


def _gb(n: float) -> str:
    """Bytes as GB (1e9) with two decimals for a message about model sizes: 15.2e9 -> "15.20 GB"."""
    return f"{n / GB:.2f} GB"


def _largest(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """Largest x in [lo, hi] with ok(x), for ok monotone (true then false); lo - 1 if none."""
    if hi < lo or not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _check_positive(**values: float) -> None:
    """Raises ValueError "NAME must be positive, got V" for the first value that is not > 0."""
    for name, v in values.items():
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")


def _pad(n: int, to: int) -> int:
    """n rounded up to a multiple of `to`."""
    return -(-n // to) * to


def _decode_tps(gpu_bytes: float, host_bytes: float) -> float:
    """Decode ceiling in tokens/s when each token reads `gpu_bytes` from V100 memory and `host_bytes` from host
    memory (docs/volta.md §6: decode is memory-bandwidth bound); inf when nothing is read."""
    seconds = gpu_bytes / V100_BANDWIDTH_BYTES_S + host_bytes / HOST_BANDWIDTH_BYTES_S
    return 1 / seconds if seconds > 0 else math.inf


def plan_row(m: Plan | None) -> dict | None:
    """A Plan as plain data for `v100kit plan` (sizes in MiB, speeds in tokens/s); None when the model was not
    readable."""
    mib = 1 << 20
    return None if m is None else {
                "outcome": m.outcome, "gpus": m.n_gpus, "weights_mib": round(m.weight_bytes / mib),
                "kv_cache_mib": round(m.kv_bytes / mib, 2), "compute_buffer_mib": round(m.compute_buffer_bytes / mib),
                "cuda_context_mib": round(m.cuda_context_bytes / mib), "total_mib": round(m.total_bytes / mib),
                "budget_mib": round(m.budget_bytes / mib), "max_context_tokens": m.max_context_that_fits,
                "layers_offloaded": m.layers_offloaded, "decode_ceiling_tps": round(m.decode_ceiling_tps, 1),
                "reasons": m.reasons}
