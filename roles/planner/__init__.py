"""VRAM / KV-cache planner: does a model fit on the host's V100s, before anything touches the host.

Pure arithmetic over the model's own metadata (a GGUF header for llama.cpp; config.json plus safetensors headers
for vLLM) and the planned settings. Nothing here loads weights or talks to a GPU. Every number the planner adds
on top of the model (CUDA context, compute buffers, vLLM's activation peak) is a module constant, with where it
comes from; confidence H/M as in docs/volta.md. Where a constant is M, prefer a measurement on the host.

Modules: units (units, the GPU, Plan, helpers), models (model-file readers), kv (KV cache element sizes),
llama_cpp and vllm (each engine's arithmetic), messages (the wording of reasons). Callers use this package's
names: `from roles import planner`, then planner.read_gguf, planner.plan_llama_cpp, ...

Units: bytes unless a name says otherwise (MiB = 2**20 bytes; GB = 1e9 bytes, used only in messages about model
sizes, because that is how downloads are labelled); contexts in tokens; speeds in tokens/s.
"""

from __future__ import annotations

from .units import (
    CUDA_CONTEXT_BYTES,
    GB,
    HOST_BANDWIDTH_BYTES_S,
    LLAMA_CPP_CUDA_CONTEXT_BYTES,
    LLAMA_CPP_CUDA_CONTEXT_MIB,
    V100_16GB_MIB,
    V100_32GB_MIB,
    V100_BANDWIDTH_BYTES_S,
    VLLM_CUDA_CONTEXT_BYTES,
    GiB,
    MiB,
    Outcome,
    Plan,
    llama_cpp_cuda_context_bytes,
)
from .models import GgufModel, HfModel, hf_model_from_config, vllm_derived_max_len, hf_text_config, read_gguf, read_hf, safetensors_sizes
from .kv import LLAMA_CPP_CACHE_TYPES, LLAMA_CPP_FA_CACHE_TYPES, VLLM_KV_CACHE_DTYPES, kv_bytes_per_token
from .llama_cpp import (
    LLAMA_CPP_CTX_PAD,
    LLAMA_CPP_KQ_MASK_PAD,
    LLAMA_CPP_N_UBATCH,
    llama_compute_buffer,
    plan_llama_cpp,
)
from .vllm import (
    GPTQ_4BIT_FRACTION_OF_FP16,
    VLLM_ACTIVATION_PEAK_BYTES,
    VLLM_ACTIVATION_REF_TOKENS,
    VLLM_BLOCK_SIZE,
    VLLM_CHUNKED_PREFILL_ABOVE,
    VLLM_MIN_BATCHED_TOKENS,
    VLLM_NON_TORCH_BYTES,
    VLLM_TP_CANDIDATES,
    VLLM_TP_COMM_BYTES,
    VLLM_CUDA_GRAPH_BYTES,
    VLLM_CUDA_GRAPH_TP_BYTES,
    VLLM_GRAPH_BYTES_PER_LAYER_GRAPH,
    VLLM_GRAPH_RULES,
    VLLM_GRAPH_TP_BYTES_PER_LAYER_GRAPH,
    VLLM_ENGINES,
    VLLM_SAMPLER_FP32_COPIES,
    plan_vllm,
    vllm_activation_bytes,
    vllm_cuda_graph_sizes,
    vllm_graph_bytes,
    vllm_graph_rule,
    vllm_unread_graph_bytes,
    vllm_profiled_tokens,
    vllm_sampler_bytes,
    vllm_samples_in_profile,
)

__all__ = [
    "CUDA_CONTEXT_BYTES", "GB", "GPTQ_4BIT_FRACTION_OF_FP16", "GgufModel", "GiB", "HOST_BANDWIDTH_BYTES_S", "HfModel",
    "LLAMA_CPP_CACHE_TYPES", "LLAMA_CPP_CTX_PAD", "LLAMA_CPP_CUDA_CONTEXT_BYTES", "LLAMA_CPP_CUDA_CONTEXT_MIB",
    "LLAMA_CPP_FA_CACHE_TYPES", "LLAMA_CPP_KQ_MASK_PAD", "llama_compute_buffer", "llama_cpp_cuda_context_bytes", "LLAMA_CPP_N_UBATCH", "MiB", "Outcome", "Plan", "V100_16GB_MIB",
    "V100_32GB_MIB", "V100_BANDWIDTH_BYTES_S", "VLLM_ACTIVATION_PEAK_BYTES", "VLLM_ACTIVATION_REF_TOKENS",
    "VLLM_BLOCK_SIZE", "VLLM_CHUNKED_PREFILL_ABOVE", "VLLM_CUDA_CONTEXT_BYTES", "VLLM_KV_CACHE_DTYPES",
    "VLLM_MIN_BATCHED_TOKENS", "VLLM_NON_TORCH_BYTES", "VLLM_TP_CANDIDATES", "VLLM_TP_COMM_BYTES",
    "hf_model_from_config", "hf_text_config", "kv_bytes_per_token", "plan_llama_cpp", "plan_vllm", "read_gguf",
    "read_hf", "safetensors_sizes", "VLLM_CUDA_GRAPH_BYTES", "VLLM_CUDA_GRAPH_TP_BYTES", "VLLM_GRAPH_BYTES_PER_LAYER_GRAPH", "VLLM_GRAPH_RULES",
    "VLLM_GRAPH_TP_BYTES_PER_LAYER_GRAPH", "VLLM_ENGINES",
    "vllm_activation_bytes", "vllm_derived_max_len", "vllm_cuda_graph_sizes", "vllm_graph_bytes",
    "vllm_graph_rule", "vllm_unread_graph_bytes", "vllm_profiled_tokens",
    "VLLM_SAMPLER_FP32_COPIES", "vllm_sampler_bytes", "vllm_samples_in_profile",
]
