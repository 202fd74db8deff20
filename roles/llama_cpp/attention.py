"""Where llama.cpp runs flash attention (GGML_OP_FLASH_ATTN_EXT) and the attention without it, per form of its
source code: one rule function per known form, transcribed from the llama.cpp tree it was read from.

A form is a version of the code that decides the placement: the CUDA backend's `supports_op` answer for
GGML_OP_FLASH_ATTN_EXT (false: the scheduler runs the op on the CPU), the kernel dispatch in
ggml/src/ggml-cuda/fattn.cu (no kernel: GGML_ABORT at run time) and the refusals in src/llama-context.cpp.
roles/llama_cpp/tree.py recognises the form of a source archive by a fingerprint of those functions.

Pure: no pyinfra, no I/O. Batch-dependent branches are taken at DecodeShape (one sequence decoding one token),
the shape that every server reaches and the one llama.cpp itself probes `-fa auto` with
(src/llama-context.cpp llm_fused_op_flash_attn_probe, n_tokens_per_seq = 1, in the 0.3.36 tree).
Assumption of every rule: llama.cpp is built for the GPU's own architecture, so ggml_cuda_highest_compiled_arch(cc)
is cc (roles/llama_cpp/decide.py requires llama_cpp_cuda_architectures to include it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Literal

Placement = Literal["gpu", "cpu", "abort", "refused"]

#: The KV cache types llama-server takes (-ctk/-ctv; roles/llama_cpp/settings.py LlamaCacheType).
CACHE_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
#: ggml_is_quantized (ggml/src/ggml.c type_traits: is_quantized) for those types.
QUANTIZED = frozenset({"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"})
#: ggml_blck_size (ggml/src/ggml.c type_traits: blck_size; QK8_0 = QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK4_NL = 32).
BLOCK_SIZE = {"f32": 1, "f16": 1, "bf16": 1, "q8_0": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32,
              "iq4_nl": 32}

#: Form ids. FORM_INLINE: the rules inline in supports_op (llama-cpp-python 0.3.16, llama.cpp of August 2025).
#: FORM_BEST_KERNEL: supports_op asks fattn.cu ggml_cuda_get_best_fattn_kernel (llama-cpp-python 0.3.36).
FORM_INLINE = "cuda-fa-inline-v1"
FORM_BEST_KERNEL = "cuda-fa-best-kernel-v1"

DEFAULT_CCS: tuple[tuple[int, int], ...] = ((7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0))
DEFAULT_HEADS: tuple[tuple[int, int], ...] = ((64, 64), (80, 80), (96, 96), (112, 112), (128, 128), (256, 256),
                                              (576, 512))

_CUDA = "ggml/src/ggml-cuda/ggml-cuda.cu"
_FATTN = "ggml/src/ggml-cuda/fattn.cu"
_CTX = "src/llama-context.cpp"
_GRAPH = "src/llama-graph.cpp"
_SUPPORTS_FA = f"{_CUDA} ggml_backend_cuda_device_supports_op (case GGML_OP_FLASH_ATTN_EXT)"
_SUPPORTS_MUL_MAT = f"{_CUDA} ggml_backend_cuda_device_supports_op (case GGML_OP_MUL_MAT)"


@dataclass(frozen=True)
class DecodeShape:
    """The tensor shape the batch-dependent branches are evaluated at: `n_tokens` = Q->ne[1] (tokens per sequence
    in the ubatch), `n_stream` = Q->ne[3], `gqa_ratio` = Q->ne[2] / K->ne[2] (None: 4 where the K and V head sizes
    are equal, a Llama-3-like GQA; 16 where they differ, MLA with one KV head and 16 query heads as in
    DeepSeek-V2-Lite), `n_kv` = K->ne[1] (the KV length, padded to 256 with flash attention: src/llama-kv-cache*.cpp
    get_padding / get_n_kv), a KQ mask with mask->ne[2] == 1 (src/llama-graph.cpp build_attn_inp_kv*), no ALiBi
    (max_bias 0) and no attention sinks (op->src[4])."""

    n_tokens: int = 1
    n_stream: int = 1
    gqa_ratio: int | None = None
    n_kv: int = 4096
    mask: bool = True
    max_bias: float = 0.0
    sinks: bool = False

    def gqa(self, head_k: int, head_v: int) -> int:
        """The GQA ratio at these head sizes (an int >= 1)."""
        if self.gqa_ratio is not None:
            return self.gqa_ratio
        return 4 if head_k == head_v else 16


STANDARD_SHAPE = DecodeShape()

_Rule = Callable[[int, int, int, str, str, bool, bool, DecodeShape], tuple[Placement, str]]


def _cc_int(cc: tuple[int, int]) -> int:
    """ggml's cc number: 100*major + 10*minor (ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_init)."""
    return 100 * cc[0] + 10 * cc[1]


def _f32_as_f16(t: str) -> str:
    """src/llama-graph.cpp build_attn_mha (both forms): an F32 K or V is ggml_cast to F16 before
    ggml_flash_attn_ext, so the op sees f16."""
    return "f16" if t == "f32" else t


#: ggml-cuda.cu supports_op case GGML_OP_MUL_MAT: the src0 types it accepts, restricted to the KV cache types (both
#: trees list f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl).
_MUL_MAT_TYPES = frozenset(CACHE_TYPES)


def _without_fa(type_k: str, type_v: str) -> tuple[Placement, str]:
    """Attention without flash attention (src/llama-graph.cpp build_attn_mha, else branch): kq = ggml_mul_mat(k, q)
    with q F32, kqv = ggml_mul_mat(v, softmax(kq)) with an F32 right operand; supports_op case GGML_OP_MUL_MAT
    takes every cache type as src0 (its F16-src1 refusal does not apply: src1 is F32)."""
    if type_k in _MUL_MAT_TYPES and type_v in _MUL_MAT_TYPES:
        return "gpu", f"{_GRAPH} build_attn_mha (ggml_mul_mat); {_SUPPORTS_MUL_MAT}"
    return "cpu", _SUPPORTS_MUL_MAT


# --- form cuda-fa-inline-v1 (llama-cpp-python 0.3.16) -------------------------------------------------------------

def _v1_fp16_mma(cc: int) -> bool:
    """ggml/src/ggml-cuda/common.cuh fp16_mma_available, NVIDIA: highest compiled arch >= GGML_CUDA_CC_VOLTA."""
    return cc >= 700


def _v1_turing_mma(cc: int) -> bool:
    """common.cuh turing_mma_available: NVIDIA and highest compiled arch >= GGML_CUDA_CC_TURING."""
    return cc >= 750


def _v1_fast_fp16(cc: int) -> bool:
    """common.cuh fast_fp16_available, NVIDIA: fp16_available (>= GGML_CUDA_CC_PASCAL) and cc != 610."""
    return cc >= 600 and cc != 610


def _v1_vec_case(d: int, type_k: str, type_v: str, fa_all_quants: bool) -> bool:
    """fattn.cu ggml_cuda_flash_attn_ext_vec_f32 (and _vec_f16, the same list): the FATTN_VEC_*_CASE instances."""
    if fa_all_quants:  # #ifdef GGML_CUDA_FA_ALL_QUANTS
        quants = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16")
        return ((d == 64 and type_k == "f16" and type_v in quants)
                or (d == 128 and type_k in quants and type_v in quants)
                or (d == 256 and type_k == "f16" and type_v == "f16"))
    return (d, type_k, type_v) in {(128, "q4_0", "q4_0"), (128, "q8_0", "q8_0"), (64, "f16", "f16"),
                                   (128, "f16", "f16"), (256, "f16", "f16")}


def _v1_supports(cc: int, hk: int, hv: int, tk: str, tv: str, shape: DecodeShape) -> tuple[bool, str]:
    """ggml-cuda.cu ggml_backend_cuda_device_supports_op, case GGML_OP_FLASH_ATTN_EXT, branch by branch
    (op->src[0]->ne[0] is the Q = K head size, src[1] K, src[2] V, src[3] the mask, src[4] the sinks)."""
    if hk != hv:  # op->src[1]->ne[0] != op->src[2]->ne[0]
        if not _v1_turing_mma(cc):
            return False, "K head != V head needs turing_mma_available"
        ok = hk == 576 and hv == 512 and shape.mask and shape.gqa(hk, hv) % 16 == 0
        return ok, "K head != V head: only 576/512 with a mask and gqa_ratio % 16 == 0"
    if shape.sinks and not _v1_fp16_mma(cc) and hk not in (64, 128):
        return False, "attention sinks without fp16 MMA only at head 64/128"
    if hk == 192:
        return False, "head 192"
    if tk == "bf16" or tv == "bf16":
        return False, "BF16 K or V"
    if hk == 64 and tk == "f16":
        return True, "head 64 with F16 K"
    if hk == 128:
        return True, "head 128"
    if hk == 256 and tk == "f16" and tv == "f16":
        return True, "head 256 with F16 K and V"
    # `op->src[3] && op->src[3]->ne[2] != 1` -> false: the decode mask has ne[2] == 1 (DecodeShape)
    ok = _v1_fp16_mma(cc) and tk == "f16" and tv == "f16"
    return ok, f"head {hk}: fp16_mma_available and F16 K and V"


def _v1_dispatch(cc: int, hk: int, hv: int, tk: str, tv: str, fa_all_quants: bool,
                 shape: DecodeShape) -> tuple[Placement, str]:
    """fattn.cu ggml_cuda_flash_attn_ext: the kernel the op runs; build_attn_mha sets GGML_PREC_F32, so the
    vector kernel is ggml_cuda_flash_attn_ext_vec_f32 and WMMA takes its prec != GGML_PREC_DEFAULT branch."""
    d, gqa = hk, shape.gqa(hk, hv)

    def vec(name: str) -> tuple[Placement, str]:
        if _v1_vec_case(d, tk, tv, fa_all_quants):
            return "gpu", f"{_FATTN} {name}"
        return "abort", f"{_FATTN} {name}: no FATTN_VEC case, on_no_fattn_vec_case aborts"

    def tile(name: str) -> tuple[Placement, str]:  # fattn-tile-f16.cu / -f32.cu: head sizes 64 and 128 only
        return ("gpu", f"{_FATTN} {name}") if d in (64, 128) else ("abort", f"{_FATTN} {name}: head {d}")

    if not _v1_fast_fp16(cc) or not _v1_fp16_mma(cc):  # both branches: prec F32 -> the f32 kernels
        return vec("ggml_cuda_flash_attn_ext_vec_f32") if shape.n_tokens <= 8 or d == 256 else \
            tile("ggml_cuda_flash_attn_ext_tile_f32")
    gqa_opt_applies = gqa % 2 == 0 and shape.mask
    needs_conversion = tk != "f16" or tv != "f16"
    faster_for_rtx4000 = shape.n_stream > 1 or (gqa > 4 and shape.n_kv >= 8192)
    mma_faster_for_bs1 = (_v1_turing_mma(cc) and gqa_opt_applies and not needs_conversion
                          and (cc < 890 or faster_for_rtx4000))
    can_use_vector_kernel = d <= 256 and d % (2 * 32) == 0
    if shape.n_tokens == 1 and can_use_vector_kernel and not mma_faster_for_bs1:
        return vec("ggml_cuda_flash_attn_ext_vec_f32")
    if _v1_fp16_mma(cc) and not _v1_turing_mma(cc):  # Volta: fattn-wmma-f16.cu, K/V converted to F16
        heads = (64, 80, 96, 112, 128, 256) if shape.n_tokens <= 32 or d > 128 else (64, 80, 96, 112, 128)
        src = f"{_FATTN} ggml_cuda_flash_attn_ext -> fattn-wmma-f16.cu ggml_cuda_flash_attn_ext_wmma_f16"
        return ("gpu", src) if d in heads else ("abort", f"{src}: head {d}")
    src = f"{_FATTN} ggml_cuda_flash_attn_ext_mma_f16"  # K/V converted to F16 (launch_fattn need_f16_K/V)
    return ("gpu", src) if d in (64, 80, 96, 112, 128, 256, 576) else ("abort", f"{src}: head {d}")


def _rule_inline(cc: int, hk: int, hv: int, tk: str, tv: str, fa: bool, fa_all_quants: bool,
                 shape: DecodeShape) -> tuple[Placement, str]:
    """Form cuda-fa-inline-v1 (llama-cpp-python 0.3.16)."""
    if tv in QUANTIZED and not fa:
        return "refused", f"{_CTX} llama_init_from_model: V cache quantization requires flash_attn"
    if not fa:
        return _without_fa(tk, tv)
    tk, tv = _f32_as_f16(tk), _f32_as_f16(tv)
    ok, why = _v1_supports(cc, hk, hv, tk, tv, shape)
    if not ok:
        return "cpu", f"{_SUPPORTS_FA}: {why}"
    return _v1_dispatch(cc, hk, hv, tk, tv, fa_all_quants, shape)


# --- form cuda-fa-best-kernel-v1 (llama-cpp-python 0.3.36) --------------------------------------------------------

#: fattn.cu ggml_cuda_fattn_kv_type_supported: K/V types with vector kernel instances; others are refused.
_V2_KV_TYPES = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})


def _v2_best_kernel(cc: int, hk: int, hv: int, tk: str, tv: str,
                    shape: DecodeShape) -> tuple[str, str]:
    """fattn.cu ggml_cuda_get_best_fattn_kernel for an NVIDIA GPU: ("none" | "vec" | "tile" | "mma", why)."""
    gqa = shape.gqa(hk, hv)
    # K->ne[1] % FATTN_KQ_STRIDE (256) == 0: n_kv is padded to 256; nb[i] % 16 == 0 holds for the cache views
    # of the non-quantized types at these head sizes (head * 2 bytes, a multiple of 16 for head % 8 == 0)
    gqa_opt_applies = gqa >= 2 and shape.mask and shape.max_bias == 0.0 and shape.n_kv % 256 == 0 and \
        all(h * 2 % 16 == 0 for h, t in ((hk, tk), (hv, tv)) if t not in QUANTIZED)
    if hk in (40, 64, 72, 80, 96, 128, 112, 256):
        if hv != hk:
            return "none", f"head {hk} needs V head {hk}"
    elif hk == 192:
        if hv != 128 or not gqa_opt_applies or gqa % 8 != 0:
            return "none", "head 192 needs V 128, the GQA optimisation and gqa_ratio % 8 == 0"
    elif hk == 320:
        if hv != 256 or not gqa_opt_applies or gqa % 32 != 0:
            return "none", "head 320 needs V 256, the GQA optimisation and gqa_ratio % 32 == 0"
    elif hk == 512:
        if hv != 512 or not gqa_opt_applies:
            return "none", "head 512 needs V 512 and the GQA optimisation"
    elif hk == 576:
        if hv != 512 or not gqa_opt_applies:
            return "none", "head 576 needs V 512 and the GQA optimisation"
    else:
        return "none", f"head {hk}"
    if tk not in _V2_KV_TYPES or tv not in _V2_KV_TYPES:
        return "none", "ggml_cuda_fattn_kv_type_supported: K or V type has no FA kernel"
    # mask->ne[2] != 1 -> none: the decode mask has ne[2] == 1 (DecodeShape)
    d = hk
    can_use_vector_kernel = d <= 256 and d % 64 == 0 and d != 192 and shape.n_kv % 256 == 0
    quantized = tk in QUANTIZED or tv in QUANTIZED
    if cc >= 750 and d not in (40, 72):  # turing_mma_available
        if can_use_vector_kernel:
            if not quantized:
                # VEC or MMA, depending on the sparse decode heuristics and Ada+; both kernels have heads
                # 64/128/256, so the placement is the same either way: MMA stands for both here.
                pass
            elif (cc >= 890 and shape.n_tokens <= 2) or (cc < 890 and shape.n_tokens == 1):
                return "vec", "Turing+ quantized KV, small batch"
            if not gqa_opt_applies and shape.n_tokens == 1:
                return "vec", "Turing+, no GQA optimisation"
        return "mma", "Turing+ tensor cores"
    ncols2_max = 32 if d == 320 else (16 if d in (576, 192) else 8)
    gqa_eff = 1
    while gqa % (2 * gqa_eff) == 0 and gqa_eff < ncols2_max:
        gqa_eff *= 2
    if cc == 700 and d not in (40, 72):  # volta_mma_available: highest compiled arch == GGML_CUDA_CC_VOLTA
        if can_use_vector_kernel and shape.n_tokens * gqa_eff <= 2:
            return "vec", "Volta, batch * gqa <= 2"
        if shape.n_tokens * gqa_eff <= 16:
            return "tile", "Volta, batch * gqa <= 16"
        return "mma", "Volta, batch * gqa > 16"
    if can_use_vector_kernel:  # no tensor cores (the AMD branches do not apply to NVIDIA)
        if not quantized:
            if shape.n_tokens == 1 and not gqa_opt_applies:
                return "vec", "no tensor cores, no GQA optimisation"
        elif shape.n_tokens <= 2:
            return "vec", "no tensor cores, quantized KV"
    return "tile", "no tensor cores"


def _rule_best_kernel(cc: int, hk: int, hv: int, tk: str, tv: str, fa: bool, fa_all_quants: bool,
                      shape: DecodeShape) -> tuple[Placement, str]:
    """Form cuda-fa-best-kernel-v1 (llama-cpp-python 0.3.36). fa_all_quants (GGML_CUDA_FA_ALL_QUANTS, deprecated
    there for GGML_CUDA_FA_QUANTS=all) changes no placement: a missing vector instance converts K and V to f16."""
    init = f"{_CTX} llama_init_from_model"
    if (hk, hv) == (576, 512) and tk != tv:  # MLA (hparams.is_mla): one cache type for K and V
        return "refused", f"{init}: model does not support different K and V cache types (MLA)"
    if tv in QUANTIZED and not fa:
        return "refused", f"{init}: quantized V cache requires flash_attn to be enabled"
    if fa and tk in QUANTIZED and hk % BLOCK_SIZE[tk]:
        return "refused", f"{init}: K cache type block size does not divide n_embd_head_k"
    if fa and tv in QUANTIZED and hv % BLOCK_SIZE[tv]:
        return "refused", f"{init}: V cache type block size does not divide n_embd_head_v"
    if not fa:
        return _without_fa(tk, tv)
    tk, tv = _f32_as_f16(tk), _f32_as_f16(tv)
    kernel, why = _v2_best_kernel(cc, hk, hv, tk, tv, shape)
    best = f"{_FATTN} ggml_cuda_get_best_fattn_kernel"
    if kernel == "none":  # ggml_cuda_flash_attn_ext_supported is false -> supports_op false
        return "cpu", f"{best} (via {_SUPPORTS_FA}): {why}"
    heads = {"tile": (40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576),  # fattn-tile.cu
             "mma": (64, 80, 96, 112, 128, 192, 256, 320, 512, 576),  # fattn.cu ggml_cuda_flash_attn_ext_mma_f16
             # ggml_cuda_flash_attn_ext_vec: no instance -> the f16-f16 one, always compiled
             # (ggml/cmake/common.cmake ggml_cuda_fattn_vec_instances)
             "vec": (64, 128, 256)}[kernel]
    if hk not in heads:
        return "abort", f"{best} -> {kernel} kernel: head {hk}"
    return "gpu", f"{best}: {kernel} kernel ({why})"


RULES: dict[str, _Rule] = {FORM_INLINE: _rule_inline, FORM_BEST_KERNEL: _rule_best_kernel}


def explain(form: str, cc: tuple[int, int], head_k: int, head_v: int, type_k: str, type_v: str, flash_attn: bool,
            fa_all_quants: bool = False, shape: DecodeShape = STANDARD_SHAPE) -> tuple[Placement, str]:
    """(placement, source) of llama.cpp's attention for one cell: `form` a key of RULES, `cc` the compute
    capability (major, minor), head sizes in elements, cache types from CACHE_TYPES, flash attention on or off,
    GGML_CUDA_FA_ALL_QUANTS at build time; `source` names the file and function (and branch) that decides.
    Raises ValueError for an unknown form or cache type (roles/llama_cpp/tree.py: a tree of an unknown form has
    no rules; quantized KV must then be refused)."""
    if form not in RULES:
        raise ValueError(f"unknown llama.cpp flash-attention form {form!r}; known: {', '.join(RULES)}")
    for t in (type_k, type_v):
        if t not in BLOCK_SIZE:
            raise ValueError(f"unknown KV cache type {t!r}; known: {', '.join(CACHE_TYPES)}")
    return RULES[form](_cc_int(cc), head_k, head_v, type_k, type_v, flash_attn, fa_all_quants, shape)


def placement(form: str, cc: tuple[int, int], head_k: int, head_v: int, type_k: str, type_v: str, flash_attn: bool,
              fa_all_quants: bool = False) -> Placement:
    """Where llama.cpp runs attention for one cell, at STANDARD_SHAPE (decode: one sequence, one token):
    "gpu"; "cpu" (the scheduler puts FLASH_ATTN_EXT on the CPU, tens of times slower); "abort" (llama-server
    aborts at run time, no kernel compiled); "refused" (llama.cpp refuses the context). Arguments and errors as
    explain(), which also names the source."""
    return explain(form, cc, head_k, head_v, type_k, type_v, flash_attn, fa_all_quants)[0]


def auto_placement(form: str, cc: tuple[int, int], head_k: int, head_v: int, type_k: str, type_v: str,
                   fa_all_quants: bool = False) -> tuple[Placement, bool]:
    """(placement, flash attention used) for `-fa auto`, in forms that have it. FORM_BEST_KERNEL:
    src/llama-context.cpp llama_init_from_model turns auto into on for a quantized V cache (and applies its
    block-size refusals to auto as to on); otherwise llama_context::resolve_fused_ops probes a decode graph and keeps
    flash attention only where the FLASH_ATTN_EXT node is on the layer's device (here: the GPU), else turns it
    off. Raises ValueError for FORM_INLINE (a bare -fa flag: no auto; the toolkit's `auto` there is
    roles/llama_cpp/decide.py server_args) and for an unknown form."""
    if form == FORM_INLINE:
        raise ValueError(f"{form}: llama.cpp takes a bare -fa flag, there is no -fa auto")
    on = explain(form, cc, head_k, head_v, type_k, type_v, True, fa_all_quants)[0]
    if type_v in QUANTIZED or on in ("gpu", "refused", "abort"):
        return on, True
    return explain(form, cc, head_k, head_v, type_k, type_v, False, fa_all_quants)[0], False


def _cc_key(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def matrix(form: str, ccs: tuple[tuple[int, int], ...] = DEFAULT_CCS,
           heads: tuple[tuple[int, int], ...] = DEFAULT_HEADS, types: tuple[str, ...] = CACHE_TYPES,
           fa_all_quants: bool = False) -> dict:
    """Every cell of the placement table, JSON-ready: {"form", "fa_all_quants", "shape" (STANDARD_SHAPE's fields),
    "sources": {"s1": "file function: branch", ...}, "cells": {"7.0": {"64/64": {"on"|"off": {"q8_0/q8_0":
    "cpu s3", ...}}}}}: cc "major.minor", "head_k/head_v", flash attention on/off, "type_k/type_v" -> "placement
    source-id". Read a cell back with cell(). Raises ValueError as explain()."""
    sources: dict[str, str] = {}
    cells: dict[str, dict] = {}
    for cc in ccs:
        by_head = cells.setdefault(_cc_key(cc), {})
        for hk, hv in heads:
            by_fa = by_head.setdefault(f"{hk}/{hv}", {})
            for fa in (True, False):
                row = by_fa.setdefault("on" if fa else "off", {})
                for tk in types:
                    for tv in types:
                        where, src = explain(form, cc, hk, hv, tk, tv, fa, fa_all_quants)
                        key = next((k for k, v in sources.items() if v == src), None)
                        if key is None:
                            key = f"s{len(sources) + 1}"
                            sources[key] = src
                        row[f"{tk}/{tv}"] = f"{where} {key}"
    return {"form": form, "fa_all_quants": fa_all_quants, "shape": asdict(STANDARD_SHAPE), "sources": sources,
            "cells": cells}


def cell(m: dict, cc: tuple[int, int], head_k: int, head_v: int, type_k: str, type_v: str,
         flash_attn: bool) -> tuple[str, str]:
    """(placement, source) of one cell of a matrix() result (or its JSON copy). Raises KeyError for a cell the
    matrix does not hold."""
    where, key = m["cells"][_cc_key(cc)][f"{head_k}/{head_v}"]["on" if flash_attn else "off"][
        f"{type_k}/{type_v}"].split(" ", 1)
    return where, m["sources"][key]
