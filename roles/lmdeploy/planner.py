"""LMDeploy TurboMind's KV cache arithmetic (release 0.15.0), for planning an instance before it starts.

TurboMind's rules, read in its code at tag v0.15.0 (git f4b8140b):
  - Order: the weights are loaded and processed first, then each rank creates its engine
    (lmdeploy/turbomind/turbomind.py:166-170: model_loader.export(), _process_weights(), _create_engine()).
  - The cache budget: at engine creation each rank reads cudaMemGetInfo, takes the smallest free memory of its
    tensor-parallel group, and reserves floor(free * cache_max_entry_count) bytes as one region
    (src/turbomind/turbomind.cc:291-301, TurboMind::Impl::CreateEngine; the ratio must lie in (0, 1): lines 292-293).
    So cache_max_entry_count is a share of the memory left FREE after the weights, not of the GPU's total.
  - One KV block holds cache_block_seq_len tokens (default 64, lmdeploy/messages.py:323) of every attention layer;
    its bytes are the sum over layers of block::Layout::layer_size() (src/turbomind/models/llama/
    unified_attention_layer.cc:147-165; src/turbomind/kernels/attention/block.h:172-176):
        kv_heads_per_rank * 2 * block_len * (q_bits * head_dim / 8 + t_bits * 2 / 8)
    with q_bits = quant_policy (4 or 8: int4/int8 KV) or the dtype's 16 bits, t_bits = 16 (a scale and a zero per
    token and head) when the KV is quantized, else 0; K and V share one array when head_dim is 576 (MLA).
  - AWQ and GPTQ weights run in float16 (lmdeploy/turbomind/converter.py:40-45), so the unquantized KV is 16-bit.
  - A request longer than session_len is refused (src/turbomind/engine/engine.cc:381); the default session_len is
    the model's max_position_embeddings family (converter.py get_tm_config step 4).
Not modelled: the object allocator's page bookkeeping inside the region (src/turbomind/memory/object.h), so the
block count here is an upper bound, and the runtime buffers TurboMind allocates after the region (sized by
max_batch_size and session_len), which must fit in the remaining (1 - cache_max_entry_count) share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from roles.settings_base import problem

DEFAULT_CACHE_MAX_ENTRY_COUNT = 0.8  # lmdeploy/messages.py:321 (TurbomindEngineConfig)
DEFAULT_CACHE_BLOCK_SEQ_LEN = 64  # lmdeploy/messages.py:323
#: KV quantization policies TurboMind runs on Volta: none, int4, int8 (lmdeploy/messages.py QuantPolicy; FP8 ones
#: are refused by TurbomindEngineConfig.__post_init__, messages.py:355-358; int4/int8 on sm70:
#: docs/en/quantization/kv_quant.md:11). TurboQuant (42) has another layout and is not planned here.
QUANT_POLICIES = (0, 4, 8)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return config


@dataclass(frozen=True)
class KvShape:
    """The attention geometry of a model, from config.json: layers, kv_heads (all ranks), head_dim."""

    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> KvShape:
        """From a parsed config.json (its text_config/llm_config for vision-language models): num_hidden_layers,
        num_key_value_heads (else num_attention_heads), head_dim (else hidden_size / num_attention_heads).
        Raises KeyError when a field is missing, ValueError for num_attention_heads below 1."""
        c = _text_config(config)
        heads = int(c["num_attention_heads"])
        if heads < 1:  # hidden_size / heads below; the caller reports "config.json lacks ..."
            raise ValueError(f"num_attention_heads of at least 1 (it says {heads})")
        return cls(int(c["num_hidden_layers"]), int(c.get("num_key_value_heads") or heads),
                   int(c.get("head_dim") or c["hidden_size"] // heads))


def layer_block_bytes(head_dim: int, kv_heads_per_rank: int, block_len: int, quant_policy: int,
                      dtype_bits: int = 16) -> int:
    """Bytes of one layer's KV in one block on one rank: block::Layout::layer_size() (block.h:172-176) with the
    BlockConfig of unified_attention_layer.cc:147-155 (module docstring)."""
    q_bits = quant_policy or dtype_bits
    t_bits = 0 if q_bits == dtype_bits else dtype_bits
    kv_num = 1 if head_dim == 576 else 2
    token_data = q_bits * head_dim // 8
    token_param = t_bits * 2 // 8
    return kv_heads_per_rank * kv_num * block_len * token_data + kv_heads_per_rank * kv_num * block_len * token_param


@dataclass(frozen=True)
class KvPlan:
    """A TurboMind KV plan for one rank. cache_bytes: the region reserved (bytes); block_bytes: one block, all
    layers (bytes); blocks: whole blocks in the region (an upper bound: see the module docstring); tokens: blocks *
    block_len; session_blocks: blocks one sequence of session_len tokens needs; problems: refusals (empty: fits)."""

    cache_bytes: int
    block_bytes: int
    blocks: int
    tokens: int
    session_blocks: int
    problems: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        """One sequence of session_len tokens fits in the cache."""
        return not self.problems


def plan_kv(free_bytes_after_weights: int, shape: KvShape, *, session_len: int, tp: int = 1,
            cache_max_entry_count: float = DEFAULT_CACHE_MAX_ENTRY_COUNT,
            cache_block_seq_len: int = DEFAULT_CACHE_BLOCK_SEQ_LEN, quant_policy: int = 0,
            key: str = "lmdeploy_instances") -> KvPlan:
    """The KV cache TurboMind will reserve on each rank, and whether one session_len sequence fits.

    free_bytes_after_weights: the smallest free GPU memory (bytes) among the tp ranks once the weights are loaded
    (what cudaMemGetInfo returns at engine creation: the GPU's free memory minus the rank's weights and the CUDA
    context). shape: the model's attention geometry; tp: tensor-parallel ranks (kv heads are split across them).
    Raises ValueError for a ratio outside (0, 1), a quant_policy TurboMind does not run on Volta, a block length
    below 1, or kv heads not divisible by tp (settings validation should have caught each, by name)."""
    if not 0 < cache_max_entry_count < 1:
        raise ValueError(f"cache_max_entry_count {cache_max_entry_count} outside (0, 1) (turbomind.cc:292-293)")
    if quant_policy not in QUANT_POLICIES:
        raise ValueError(f"quant_policy {quant_policy} not in {QUANT_POLICIES}")
    if cache_block_seq_len < 1 or tp < 1 or shape.kv_heads % tp:
        raise ValueError(f"block length {cache_block_seq_len}, tp {tp}, kv heads {shape.kv_heads}: invalid")
    cache_bytes = int(free_bytes_after_weights * cache_max_entry_count) if free_bytes_after_weights > 0 else 0
    block_bytes = shape.layers * layer_block_bytes(shape.head_dim, shape.kv_heads // tp, cache_block_seq_len,
                                                   quant_policy)
    blocks = cache_bytes // block_bytes
    need = math.ceil(session_len / cache_block_seq_len)
    problems = []
    if blocks < need:
        problems.append(problem(
            f"{key}.session_len", session_len,
            f"one sequence needs {need} KV blocks of {cache_block_seq_len} tokens ({need * block_bytes / 2**20:.1f} "
            f"MiB per GPU) but TurboMind's cache holds {blocks} ({cache_max_entry_count:g} of "
            f"{max(free_bytes_after_weights, 0) / 2**30:.2f} GiB free after the weights = "
            f"{cache_bytes / 2**20:.1f} MiB)",
            f"set session_len at most {blocks * cache_block_seq_len}, raise cache_max_entry_count (below 1), set "
            "quant_policy 8 (int8 KV, about half the bytes), or spread the model over more GPUs (tp)"))
    return KvPlan(cache_bytes, block_bytes, blocks, blocks * cache_block_seq_len, need, tuple(problems))
