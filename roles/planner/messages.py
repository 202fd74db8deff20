"""The wording of the planner's reasons and refusals, apart from the arithmetic that decides them.

Each function formats one line of Plan.reasons from figures the engine modules computed. Arguments: bytes unless
a name says otherwise (gpu_mib in MiB; context, max_model_len, capacity in tokens; tps in tokens/s).
"""

from __future__ import annotations

from .kv import LLAMA_CPP_FA_CACHE_TYPES
from .units import GB, HOST_BANDWIDTH_BYTES_S, V100_BANDWIDTH_BYTES_S, _gb, _mib

# -- Shared -------------------------------------------------------------------------------------------------


def fits(used: str) -> str:
    return f"fits: {used}"


def beyond_trained_context(context: int, trained: int) -> str:
    return f"context {context} is beyond the trained context {trained}: quality degrades"


# -- llama.cpp ----------------------------------------------------------------------------------------------


def llama_used(weights: int, kv: int, kv_tokens: int, cache_type_k: str, cache_type_v: str, compute: int,
               cuda_context: int, total: int, budget: int, usable_fraction: float, gpu_mib: int) -> str:
    """The per-GPU sum the other llama.cpp lines quote: weights + KV + compute buffer + CUDA context vs budget."""
    return (f"per GPU: weights {_mib(weights)} + KV {_mib(kv)} ({kv_tokens} tokens of "
            f"{cache_type_k}/{cache_type_v}) + compute buffer {_mib(compute)} + CUDA context "
            f"{_mib(cuda_context)} = {_mib(total)} against a budget of {_mib(budget)} "
            f"({usable_fraction:.0%} of {gpu_mib} MiB)")


def llama_largest_context_fits(max_ctx: int, vram_ctx: int) -> str:
    """A plan that fits: the largest context per slot, and what VRAM would allow beyond the trained context."""
    if vram_ctx > max_ctx:
        return f"largest context per slot: {max_ctx} tokens (the trained context; VRAM would allow {vram_ctx})"
    return f"largest context per slot that fits: {max_ctx} tokens"


def llama_does_not_fit(used: str) -> str:
    return f"does not fit: {used}"


def llama_largest_context_refused(max_ctx: int) -> str:
    return (f"largest context per slot that fits: {max_ctx} tokens" if max_ctx
            else "no context fits: the weights and buffers leave no room for a KV cache")


def llama_largest_model(context: int, parallel: int, max_weights: int, weight_bytes: int) -> str:
    return (f"largest model of this shape that fits at {context} tokens x {parallel} slot(s): "
            f"{_gb(max_weights)} of weights (this one has {_gb(weight_bytes)}): choose a smaller "
            f"quant, a shorter context or fewer slots")


def llama_or_offload(on_gpu: int, offloaded: int, n_layers: int, tps_running: float, tps_all_gpu: float) -> str:
    return (f"or -ngl {on_gpu}, running {offloaded} of {n_layers} layers on the CPU: about "
            f"{tps_running:.1f} tok/s instead of {tps_all_gpu:.0f}")


def llama_or_smaller_kv(cache_type: str) -> str:
    return f"or a {cache_type} KV cache (-ctk {cache_type} -ctv {cache_type}), which fits"


def llama_ngl_leaves_layers(n_gpu_layers: int, offloaded: int, n_layers: int, used: str) -> str:
    return f"n_gpu_layers {n_gpu_layers} leaves {offloaded} of {n_layers} layers on the CPU: {used}"


def llama_weights_exceed_budget(weights: int, budget: int, usable_fraction: float, gpu_mib: int) -> str:
    return (f"would offload: the weights alone ({_mib(weights)} per GPU) exceed the budget "
            f"of {_mib(budget)} ({usable_fraction:.0%} of {gpu_mib} MiB)")


def llama_layers_on_cpu(context: int, parallel: int, offloaded: int, n_layers: int, on_gpu: int) -> str:
    return (f"at {context} tokens x {parallel} slot(s), {offloaded} of {n_layers} layers would not fit on "
            f"the GPU and run on the CPU (-ngl {on_gpu})")


def llama_largest_model_entirely(context: int, max_weights: int, weight_bytes: int) -> str:
    return (f"largest model of this shape that fits entirely at {context} tokens: {_gb(max_weights)} "
            f"of weights (this one has {_gb(weight_bytes)}): choose a smaller quant or add GPUs")


def llama_offload_ceiling(offloaded: int, tps_running: float, tps_all_gpu: float) -> str:
    return (f"decode ceiling with {offloaded} layers on the CPU: about {tps_running:.1f} tok/s (host "
            f"memory ~{HOST_BANDWIDTH_BYTES_S / GB:.0f} GB/s) instead of {tps_all_gpu:.0f} tok/s on "
            f"the GPU")


def llama_fa_cache_types(cache_type_k: str, cache_type_v: str) -> str:
    return (f"-ctk {cache_type_k} -ctv {cache_type_v}: llama.cpp's CUDA flash attention is built by default "
            f"only for equal K/V types among {', '.join(LLAMA_CPP_FA_CACHE_TYPES)}; other pairs need "
            f"GGML_CUDA_FA_ALL_QUANTS, or llama-server aborts at the first request (0.3.16 tree, measured) or "
            f"converts them to f16 (0.3.36 tree); where attention runs for this model is decided per tree "
            f"(roles/llama_cpp/attention.py)")


def llama_decode_ceiling(tps: float, context: int) -> str:
    return (f"decode ceiling: {tps:.1f} tok/s per sequence at {context} tokens "
            f"({V100_BANDWIDTH_BYTES_S / GB:.0f} GB/s / bytes read per token)")


# -- vLLM ---------------------------------------------------------------------------------------------------


def vllm_used(weights: int, compute: int, kv_space: int, budget: int, util: float, gpu_mib: int,
              max_model_len: int, kv_one: int, encoder: int = 0) -> str:
    """The per-GPU account the other vLLM lines quote: what weights and overhead (`compute`, bytes, of which
    `encoder` is a vision encoder's stated memory) leave for one sequence's KV."""
    overhead = (f"activation peak and non-torch memory {_mib(compute - encoder)} + vision encoder {_mib(encoder)} "
                f"(encoder_memory_gib)" if encoder else f"activation peak and non-torch memory {_mib(compute)}")
    return (f"per GPU: weights {_mib(weights)} + {overhead} leave "
            f"{_mib(kv_space)} for the KV cache out of {_mib(budget)} ({util:.0%} of {gpu_mib} MiB); one "
            f"{max_model_len}-token sequence needs {_mib(kv_one)}")


def vllm_tp_exceeds_gpus(tp: int, n_gpus: int) -> str:
    return f"tensor_parallel_size {tp} needs {tp} GPUs; this host has {n_gpus}"


def vllm_pp_stage_without_layers(n_layers: int, pp: int, partition: list[int]) -> str:
    return (f"pipeline_parallel_size {pp} splits {n_layers} hidden layers as {partition}: a stage without a layer "
            "(vLLM's get_pp_indices)")


def vllm_heads_not_divisible(n_heads: int, tp: int) -> str:
    """vLLM's own wording for this refusal."""
    return f"Total number of attention heads ({n_heads}) must be divisible by tensor parallel size ({tp})"


def vllm_beyond_max_position(max_model_len: int, derived_max_len: int, max_position_embeddings: int) -> str:
    """A length problem, not a memory one: vLLM's own check against the length it derives from config.json."""
    how = (f"max_position_embeddings {max_position_embeddings} with its rope_scaling"
           if derived_max_len != max_position_embeddings else "max_position_embeddings")
    return (f"max_model_len {max_model_len} is greater than the derived max model len {derived_max_len} "
            f"({how} in the model's config.json); vLLM refuses it at start-up: set max_model_len to at most "
            f"{derived_max_len}, or use a build of the model whose config.json states a longer context")


def vllm_no_cache_memory(used: str) -> str:
    """vLLM's own wording when nothing is left for KV cache blocks."""
    return f"No available memory for the cache blocks: {used}"


def vllm_max_seq_len_too_large(max_model_len: int, capacity: int, used: str) -> str:
    """vLLM's own wording when the KV cache holds fewer tokens than one max_model_len sequence."""
    return (f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that "
            f"can be stored in KV cache ({capacity}): {used}")


def vllm_utilization_leaves_no_context(util: float, outside: int, cuda_context: int, graphs: int = 0) -> str:
    """gpu_memory_utilization too high: the CUDA context and the CUDA graphs live outside vLLM's share."""
    if graphs:
        return (f"gpu_memory_utilization {util:g} leaves {_mib(outside)} outside vLLM's budget, less than the CUDA "
                f"context (~{_mib(cuda_context)}) plus the CUDA graphs vLLM captures after sizing the KV cache "
                f"(~{_mib(graphs)}): it would run out of memory while capturing CUDA graphs. Lower "
                f"gpu_memory_utilization, or set enforce_eager (no graphs; slower decoding)")
    return (f"gpu_memory_utilization {util:g} leaves {_mib(outside)} outside vLLM's budget, "
            f"less than the CUDA context (~{_mib(cuda_context)}): it would run out of memory; lower "
            f"gpu_memory_utilization")


def vllm_capacity(capacity: int, max_model_len: int, max_num_seqs: int) -> str:
    return (f"the KV cache holds {capacity} tokens: {capacity / max_model_len:.1f} concurrent "
            f"{max_model_len}-token sequences (max_num_seqs {max_num_seqs})")


def vllm_fits_with_tp(tp: int, gpu_mib: int) -> str:
    return f"fits with tensor_parallel_size {tp} on {tp} GPUs of {gpu_mib} MiB"


def vllm_fits_as_gptq(weight_bytes: int, tp: int) -> str:
    return (f"fits as a GPTQ 4-bit build (about {_gb(weight_bytes)} of weights) at "
            f"tensor_parallel_size {tp} (GPTQ works on Volta; AWQ does not)")


def vllm_or_max_model_len(max_ctx: int) -> str:
    return f"or max_model_len {max_ctx}, the largest that fits as configured"


def vllm_decode_ceiling(tps: float, max_model_len: int) -> str:
    return (f"decode ceiling: {tps:.1f} tok/s per sequence at {max_model_len} tokens "
            f"({V100_BANDWIDTH_BYTES_S / GB:.0f} GB/s per GPU / bytes read per token per GPU)")
