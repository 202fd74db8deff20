"""KV cache element sizes of both engines (llama.cpp `-ctk/-ctv`, vLLM `--kv-cache-dtype`) and the KV bytes per
token of context."""

from __future__ import annotations

from fractions import Fraction

#: Bytes per element of each llama.cpp KV cache type (`-ctk/-ctv`): ggml block size / elements per block,
#: e.g. q8_0 = 32 int8 + one f16 scale = 34 bytes per 32 elements. (ggml/src/ggml.c type_traits; H)
LLAMA_CPP_CACHE_TYPES: dict[str, Fraction] = {
    "f32": Fraction(4), "f16": Fraction(2), "bf16": Fraction(2),
    "q8_0": Fraction(34, 32), "q4_0": Fraction(18, 32), "q4_1": Fraction(20, 32),
    "q5_0": Fraction(22, 32), "q5_1": Fraction(24, 32), "iq4_nl": Fraction(18, 32),
}
#: KV types with CUDA flash-attention kernels in a default build (K and V the same type); others need
#: GGML_CUDA_FA_ALL_QUANTS. (docs/volta.md §5; H)
LLAMA_CPP_FA_CACHE_TYPES = ("f16", "q8_0", "q4_0")

#: Bytes per element of vLLM's `--kv-cache-dtype`. auto = the model dtype, half on Volta (`--dtype half`, bf16 is
#: unsupported below cc 8.0); fp8 variants are storage-only and work on Volta. (vLLM docs; docs/volta.md §4; H/M)
VLLM_KV_CACHE_DTYPES: dict[str, Fraction] = {
    "auto": Fraction(2), "fp8": Fraction(1), "fp8_e5m2": Fraction(1), "fp8_e4m3": Fraction(1),
    "auto_float32": Fraction(4),  # "auto" under --dtype float32: the KV cache follows the model dtype
}


def _bytes_per_element(cache_type: str) -> Fraction:
    """Bytes per element of a llama.cpp cache type or a vLLM kv_cache_dtype. Raises ValueError if unknown."""
    if cache_type in LLAMA_CPP_CACHE_TYPES:
        return LLAMA_CPP_CACHE_TYPES[cache_type]
    if cache_type in VLLM_KV_CACHE_DTYPES:
        return VLLM_KV_CACHE_DTYPES[cache_type]
    known = sorted({*LLAMA_CPP_CACHE_TYPES, *VLLM_KV_CACHE_DTYPES})
    raise ValueError(f"unknown KV cache type {cache_type!r}; known: {', '.join(known)}")


def _row_bytes(n_elements: int, cache_type: str) -> int:
    """Bytes of one token's K (or V) row of one layer: quantized types store whole 32-element blocks.
    Raises ValueError for an unknown type or a row that is not whole blocks."""
    per = _bytes_per_element(cache_type)
    if per.denominator != 1 and n_elements % 32:
        raise ValueError(f"cache type {cache_type} needs n_kv_heads x head_dim divisible by 32, got {n_elements}")
    return int(per * n_elements)


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, cache_type: str) -> int:
    """KV cache bytes per token of context for one sequence: 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes
    per element of `cache_type` (llama.cpp -ctk/-ctv names, or vLLM --kv-cache-dtype names).

    Example: 64 layers, 4 KV heads of 128, q8_0 -> 2 x 64 x 4 x 128 x 34/32 = 69632 bytes.
    Raises ValueError for an unknown cache type or a quantized type whose row is not whole 32-element blocks.
    """
    return 2 * n_layers * _row_bytes(n_kv_heads * head_dim, cache_type)
