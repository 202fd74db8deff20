"""KV cache element sizes of both engines and the KV bytes per token of context.

llama.cpp's cache types (`-ctk/-ctv`) are ggml types: their sizes come from the gguf package's GGML_QUANT_SIZES
(elements per block, bytes per block), the table gguf-py keeps in step with ggml's type_traits. vLLM's
`--kv-cache-dtype` sizes are a small table here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from functools import lru_cache

#: llama.cpp KV cache types (`-ctk/-ctv`) the planner knows, in the order messages list them.
LLAMA_CPP_CACHE_TYPE_NAMES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


@lru_cache(maxsize=None)
def _ggml_block(cache_type: str) -> tuple[int, int]:
    """(elements per block, bytes per block) of a llama.cpp cache type, e.g. q8_0 -> (32, 34): 32 int8 and one f16
    scale. From gguf.GGML_QUANT_SIZES (gguf-py/gguf/constants.py; H). gguf is imported on first use: it pulls in
    numpy, and importing roles.planner (every deploy does) should stay cheap."""
    import gguf

    return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[cache_type.upper()]]


class _LlamaCppCacheTypes(Mapping[str, Fraction]):
    """Bytes per element of each llama.cpp KV cache type: bytes per block / elements per block (q8_0 = 34/32).
    Names and membership need no import; a value imports gguf on first use."""

    def __getitem__(self, cache_type: str) -> Fraction:
        if cache_type not in LLAMA_CPP_CACHE_TYPE_NAMES:
            raise KeyError(cache_type)
        block_size, type_size = _ggml_block(cache_type)
        return Fraction(type_size, block_size)

    def __contains__(self, cache_type: object) -> bool:
        return cache_type in LLAMA_CPP_CACHE_TYPE_NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(LLAMA_CPP_CACHE_TYPE_NAMES)

    def __len__(self) -> int:
        return len(LLAMA_CPP_CACHE_TYPE_NAMES)

    def __repr__(self) -> str:
        return f"LLAMA_CPP_CACHE_TYPES({', '.join(LLAMA_CPP_CACHE_TYPE_NAMES)})"


#: Bytes per element (Fraction) of each llama.cpp KV cache type (`-ctk/-ctv`), read-only mapping name -> Fraction.
LLAMA_CPP_CACHE_TYPES: Mapping[str, Fraction] = _LlamaCppCacheTypes()
#: KV types with CUDA flash-attention kernels in a default build (K and V the same type); others need
#: GGML_CUDA_FA_ALL_QUANTS. (docs/volta.md §5; H)
LLAMA_CPP_FA_CACHE_TYPES = ("f16", "q8_0", "q4_0")

#: Bytes per element of vLLM's `--kv-cache-dtype`. auto = the model dtype, half on Volta (`--dtype half`, bf16 is
#: unsupported below cc 8.0); fp8 variants are storage-only and work on Volta. (vLLM docs; docs/volta.md §4; H/M)
VLLM_KV_CACHE_DTYPES: dict[str, Fraction] = {
    "auto": Fraction(2), "float16": Fraction(2), "fp8": Fraction(1), "fp8_e5m2": Fraction(1), "fp8_e4m3": Fraction(1),
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


def _block_elements(cache_type: str) -> int:
    """Elements per storage block: 32 for llama.cpp's quantized types, 1 for float types and vLLM dtypes."""
    return _ggml_block(cache_type)[0] if cache_type in LLAMA_CPP_CACHE_TYPES else 1


def _row_bytes(n_elements: int, cache_type: str) -> int:
    """Bytes of one token's K (or V) row of one layer: quantized types store whole blocks (of 32 elements).
    Raises ValueError for an unknown type or a row that is not whole blocks."""
    per = _bytes_per_element(cache_type)
    block = _block_elements(cache_type)
    if block > 1 and n_elements % block:
        raise ValueError(f"cache type {cache_type} needs n_kv_heads x head_dim divisible by {block}, got {n_elements}")
    return int(per * n_elements)


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, cache_type: str) -> int:
    """KV cache bytes per token of context for one sequence: 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes
    per element of `cache_type` (llama.cpp -ctk/-ctv names, or vLLM --kv-cache-dtype names).

    Example: 64 layers, 4 KV heads of 128, q8_0 -> 2 x 64 x 4 x 128 x 34/32 = 69632 bytes.
    Raises ValueError for an unknown cache type or a quantized type whose row is not whole 32-element blocks.
    """
    return 2 * n_layers * _row_bytes(n_kv_heads * head_dim, cache_type)
