"""vLLM arithmetic: the KV cache vLLM would size at start-up, its refusals, and what would fit instead.

Per GPU after tensor parallel: KV space = VRAM x gpu_memory_utilization - weights / TP - activation peak -
non-torch memory, in whole blocks of 16 tokens. Bytes unless a name says otherwise; lengths in tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import messages
from .kv import VLLM_KV_CACHE_DTYPES, kv_bytes_per_token
from .models import HfModel
from .units import (
    GiB,
    MiB,
    VLLM_CUDA_CONTEXT_BYTES,
    Outcome,
    Plan,
    _check_positive,
    _decode_tps,
    _largest,
    _pad,
)

#: vLLM's paged KV cache block, in tokens (default --block-size on CUDA). (H)
VLLM_BLOCK_SIZE = 16
#: vLLM's "PyTorch activation peak memory" from its profile run at the V0 defaults (max_num_batched_tokens 8192,
#: max_num_seqs 256): logs show 1.19-1.39 GiB for 1.5B-8B models (vllm#10511, #12529); rounded up to 1.5 GiB. The
#: profile's batch grows with max_model_len (V0: max(max_model_len, 2048) tokens), so the planner scales this
#: linearly above 8192 profiled tokens. Not split by tensor parallel: logs show the same peak at TP 1 and 2. (M)
VLLM_ACTIVATION_PEAK_BYTES = 3 * GiB // 2
VLLM_ACTIVATION_REF_TOKENS = 8192
#: V0 turns chunked prefill on above a 32k max_model_len and then profiles 2048-token batches. (vLLM
#: EngineArgs defaults; M)
VLLM_CHUNKED_PREFILL_ABOVE = 32768
VLLM_MIN_BATCHED_TOKENS = 2048
#: vLLM's "non_torch_memory" (memory outside torch's allocator that appears during loading and profiling: cuBLAS
#: workspaces, allocator slack): 0.04-0.20 GiB in single-GPU logs (vllm#12126, #12529, #14447). (M)
VLLM_NON_TORCH_BYTES = GiB // 5
#: Extra non-torch memory per GPU under tensor parallel (NCCL buffers, custom all-reduce): 0.59-0.73 GiB at TP 2
#: in logs, versus 0.2 GiB at TP 1. (M)
VLLM_TP_COMM_BYTES = GiB // 2
#: A GPTQ 4-bit build with group size 128 stores per weight 4 bits + a 16-bit scale and a 4-bit zero per group:
#: (4 + 16/128 + 4/128) / 16 of the fp16 bytes. Embeddings stay fp16, so a real build is somewhat larger. GPTQ
#: runs on Volta, AWQ does not (docs/volta.md §4). (H)
GPTQ_4BIT_FRACTION_OF_FP16 = (4 + 16 / 128 + 4 / 128) / 16
#: Tensor-parallel sizes the planner suggests, one GPU each.
VLLM_TP_CANDIDATES = (2, 4, 8)
#: Largest max_model_len searched when the config states no max_position_embeddings, in tokens.
_UNKNOWN_MAX_POSITION = 1 << 22


def _vllm_activation_bytes(max_model_len: int) -> int:
    """vLLM's profile-run activation peak: the reference peak, grown with the profiled batch above 8192 tokens."""
    tokens = (VLLM_MIN_BATCHED_TOKENS if max_model_len > VLLM_CHUNKED_PREFILL_ABOVE
              else max(max_model_len, VLLM_MIN_BATCHED_TOKENS))
    return int(VLLM_ACTIVATION_PEAK_BYTES * max(1.0, tokens / VLLM_ACTIVATION_REF_TOKENS))


@dataclass(frozen=True)
class _VllmCase:
    """One vLLM plan request and its per-GPU figures that do not depend on max_model_len (bytes)."""

    model: HfModel
    gpu_mib: int
    n_gpus: int
    tp: int
    max_model_len: int
    util: float  # gpu_memory_utilization
    kv_cache_dtype: str
    max_num_seqs: int
    budget: int  # VRAM x util, per GPU
    kv_tok_gpu: int  # KV bytes per token on one GPU
    weights: int  # per GPU
    non_torch: int  # per GPU

    @property
    def gpu_bytes(self) -> int:
        return self.gpu_mib * MiB

    def overhead(self, length: int) -> int:
        """Activation peak + non-torch memory per GPU at this max_model_len."""
        return _vllm_activation_bytes(length) + self.non_torch

    def kv_tokens(self, length: int) -> int:
        """Tokens the KV cache holds at this max_model_len, whole blocks."""
        space = self.budget - self.weights - self.overhead(length)
        return max(0, space // (self.kv_tok_gpu * VLLM_BLOCK_SIZE)) * VLLM_BLOCK_SIZE


def _check_vllm_args(gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float, kv_cache_dtype: str,
                     max_num_seqs: int) -> None:
    """Raises ValueError for non-positive sizes, a utilization above 1 or an unknown kv_cache_dtype."""
    _check_positive(gpu_mib=gpu_mib, n_gpus=n_gpus, tensor_parallel=tp, max_model_len=max_model_len,
                    gpu_memory_utilization=util, max_num_seqs=max_num_seqs)
    if util > 1:
        raise ValueError(f"gpu_memory_utilization must be at most 1, got {util}")
    if kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
        raise ValueError(f"unknown vLLM kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(VLLM_KV_CACHE_DTYPES)}")


def _vllm_case(model: HfModel, gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float,
               kv_cache_dtype: str, max_num_seqs: int) -> _VllmCase:
    # vLLM splits KV heads across TP ranks and replicates them when there are fewer heads than ranks.
    kv_heads_gpu = max(1, model.n_kv_heads // tp)
    return _VllmCase(
        model, gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs,
        budget=int(gpu_mib * MiB * util),
        kv_tok_gpu=kv_bytes_per_token(model.n_layers, kv_heads_gpu, model.head_dim, kv_cache_dtype),
        weights=-(-model.weight_bytes // tp),
        non_torch=VLLM_NON_TORCH_BYTES + (VLLM_TP_COMM_BYTES if tp > 1 else 0),
    )


def _structural_refusals(c: _VllmCase) -> list[str]:
    """Refusals that no memory changes: more TP ranks than GPUs, heads not divisible by TP, a max_model_len beyond
    max_position_embeddings."""
    model, refused = c.model, []
    if c.tp > c.n_gpus:
        refused.append(messages.vllm_tp_exceeds_gpus(c.tp, c.n_gpus))
    if model.n_heads % c.tp:
        refused.append(messages.vllm_heads_not_divisible(model.n_heads, c.tp))
    if model.max_position_embeddings and c.max_model_len > model.max_position_embeddings:
        refused.append(messages.vllm_beyond_max_position(c.max_model_len, model.max_position_embeddings))
    return refused


def _memory_refusal(kv_space: int, capacity: int, max_model_len: int, used: str) -> str | None:
    """vLLM's two start-up refusals: no memory left for cache blocks (kv_space <= 0 bytes), or a KV cache that holds
    fewer tokens (`capacity`) than one max_model_len sequence. None when neither applies."""
    if kv_space <= 0:
        return messages.vllm_no_cache_memory(used)
    if capacity < max_model_len:
        return messages.vllm_max_seq_len_too_large(max_model_len, capacity, used)
    return None


def _utilization_refusal(c: _VllmCase) -> str | None:
    """A gpu_memory_utilization that leaves less than the CUDA context outside vLLM's budget; None if it does not."""
    outside = c.gpu_bytes - c.budget
    if outside < VLLM_CUDA_CONTEXT_BYTES:
        return messages.vllm_utilization_leaves_no_context(c.util, outside, VLLM_CUDA_CONTEXT_BYTES)
    return None


def _suggest_tp(c: _VllmCase) -> str | None:
    """The first larger tensor parallel size (one GPU each) that divides the heads and fits; None if none does."""
    for cand in VLLM_TP_CANDIDATES:
        if cand <= c.tp or c.model.n_heads % cand:
            continue
        alt = _plan_vllm(c.model, c.gpu_mib, cand, cand, c.max_model_len, c.util, c.kv_cache_dtype, c.max_num_seqs,
                         False)
        if alt.fits:
            return messages.vllm_fits_with_tp(cand, c.gpu_mib)
    return None


def _suggest_gptq(c: _VllmCase) -> str | None:
    """An unquantized model planned as a GPTQ 4-bit build at the same tensor parallel; None if it would not fit or
    the model is already quantized."""
    if c.model.quantization is not None:
        return None
    gptq = replace(c.model, weight_bytes=int(c.model.weight_bytes * GPTQ_4BIT_FRACTION_OF_FP16), quantization="gptq")
    alt = _plan_vllm(gptq, c.gpu_mib, c.n_gpus, c.tp, c.max_model_len, c.util, c.kv_cache_dtype, c.max_num_seqs,
                     False)
    return messages.vllm_fits_as_gptq(gptq.weight_bytes, c.tp) if alt.fits else None


def _suggestions(c: _VllmCase, max_ctx: int) -> list[str]:
    """What would fit after a memory refusal: more tensor parallel, a GPTQ build, the largest max_model_len."""
    lines = [line for line in (_suggest_tp(c), _suggest_gptq(c)) if line]
    if max_ctx:
        lines.append(messages.vllm_or_max_model_len(max_ctx))
    return lines


def plan_vllm(model: HfModel, gpu_mib: int, n_gpus: int, tensor_parallel: int, max_model_len: int,
              gpu_memory_utilization: float, kv_cache_dtype: str = "auto", max_num_seqs: int = 256) -> Plan:
    """Plan a vLLM instance the way vLLM sizes its KV cache at start-up, per GPU after tensor parallel:
    KV space = VRAM x gpu_memory_utilization - weights / TP - activation peak - non-torch memory, in whole blocks of
    16 tokens. vLLM refuses to start when that is <= 0 ("No available memory for the cache blocks") or when it holds
    fewer tokens than one max_model_len sequence ("The model's max seq len ... is larger than the maximum number of
    tokens that can be stored in KV cache"); the planner refuses the same, and also a tensor_parallel larger than
    n_gpus or not dividing the attention heads, and a max_model_len beyond max_position_embeddings. A refusal
    suggests the next power-of-two tensor parallel that fits, a GPTQ 4-bit build, and the largest max_model_len.

    gpu_mib: VRAM per GPU in MiB; max_model_len, max_num_seqs in tokens/sequences. Outcome is "fits" or
    "does_not_fit" (vLLM has no layer offload here). Raises ValueError for non-positive sizes, a utilization outside
    (0, 1] or an unknown kv_cache_dtype.
    """
    return _plan_vllm(model, gpu_mib, n_gpus, tensor_parallel, max_model_len, gpu_memory_utilization,
                      kv_cache_dtype, max_num_seqs, suggest=True)


def _plan_vllm(model: HfModel, gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float,
               kv_cache_dtype: str, max_num_seqs: int, suggest: bool) -> Plan:
    """plan_vllm; `suggest` False plans an alternative without suggesting further ones."""
    _check_vllm_args(gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs)
    c = _vllm_case(model, gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs)
    compute = c.overhead(max_model_len)
    kv_space = c.budget - c.weights - compute
    capacity = c.kv_tokens(max_model_len)
    kv_one = c.kv_tok_gpu * _pad(max_model_len, VLLM_BLOCK_SIZE)
    max_ctx = max(0, _largest(lambda n: c.kv_tokens(n) >= n, 1, model.max_position_embeddings or _UNKNOWN_MAX_POSITION))
    tps = _decode_tps(c.weights + c.kv_tok_gpu * max_model_len, 0)

    used = messages.vllm_used(c.weights, compute, kv_space, c.budget, util, gpu_mib, max_model_len, kv_one)
    memory = _memory_refusal(kv_space, capacity, max_model_len, used)
    refused = [r for r in (*_structural_refusals(c), memory, _utilization_refusal(c)) if r]
    outcome: Outcome = "does_not_fit" if refused else "fits"
    reasons = ([messages.fits(used), messages.vllm_capacity(capacity, max_model_len, max_num_seqs)]
               if outcome == "fits" else refused)
    if suggest and memory:
        reasons.extend(_suggestions(c, max_ctx))
    reasons.append(messages.vllm_decode_ceiling(tps, max_model_len))

    return Plan(
        engine="vllm", outcome=outcome, n_gpus=tp, gpu_bytes=c.gpu_bytes, budget_bytes=c.budget, weight_bytes=c.weights,
        kv_bytes=kv_one, compute_buffer_bytes=compute, cuda_context_bytes=VLLM_CUDA_CONTEXT_BYTES,
        total_bytes=c.weights + kv_one + compute, context=max_model_len,
        kv_bytes_per_token=kv_bytes_per_token(model.n_layers, model.n_kv_heads, model.head_dim, kv_cache_dtype),
        layers_offloaded=0, max_context_that_fits=max_ctx, max_weight_bytes=max(0, (c.budget - compute - kv_one) * tp),
        decode_ceiling_tps=tps, reasons=reasons,
    )
