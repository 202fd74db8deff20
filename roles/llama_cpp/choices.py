"""Per-model choices and refusals of the llama_cpp role that need the model's own header: the KV cache types and
flash attention that keep attention on the GPU, the architectures the pinned llama.cpp can load, the trained
context, and the CUDA architectures the build must contain. Pure: no pyinfra import.

Where llama.cpp runs attention comes from roles/llama_cpp/attention.py (the pinned tree's own rules, by source
file and function); a tree whose code has another form has no rules (`form` None): then only f16 is chosen and
an explicit quantized KV cache is refused, because where it runs is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from roles.llama_cpp.attention import QUANTIZED, explain
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import problem

#: The KV cache types tried where cache_type_k/v are unset, fastest first: f16 decodes 14-32 % faster than q8_0
#: (roles/llama_cpp/slots.py Q8_0_DECODE_RATIO), q8_0 holds twice the tokens. Each is a candidate where attention
#: stays on the GPU with it; roles/llama_cpp/slots.py takes the first that fits in memory.
DEFAULT_CANDIDATES = (("f16", "f16"), ("q8_0", "q8_0"))
ALL_TYPES = ("f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "bf16", "f32")


@dataclass(frozen=True)
class KvChoice:
    """The KV cache the instance runs with: -ctk/-ctv types, flash attention (True on, False off, None: the
    settings' own flash_attn, for a model not readable before the deploy) and why, in one line."""

    cache_type_k: str
    cache_type_v: str
    flash_attn: bool | None
    why: str


def _fa(setting: str, form: str, cc: tuple[int, int], hk: int, hv: int, tk: str, tv: str, all_quants: bool) -> bool:
    """Flash attention for `-fa` on/off/auto: auto is on where flash attention runs on the GPU for these types,
    and always on for a quantized V cache (it needs flash attention)."""
    if setting in ("on", "off"):
        return setting == "on"
    return tv in QUANTIZED or explain(form, cc, hk, hv, tk, tv, True, all_quants)[0] == "gpu"


def _on_gpu(form: str, cc: tuple[int, int], hk: int, hv: int, tk: str, tv: str, fa: bool, all_quants: bool) -> bool:
    return explain(form, cc, hk, hv, tk, tv, fa, all_quants)[0] == "gpu"


def working_pairs(form: str, cc: tuple[int, int], hk: int, hv: int, all_quants: bool) -> list[str]:
    """The same-type K/V pairs that keep attention on the GPU at these head sizes, as 'TYPE/TYPE (fa on|off)'."""
    out = []
    for t in ALL_TYPES:
        for fa in (True, False):
            if _on_gpu(form, cc, hk, hv, t, t, fa, all_quants):
                out.append(f"{t}/{t} (flash_attn {'on' if fa else 'off'})")
                break
    return out


def choose_kv(key: str, inst: LlamaCppInstance, head_k: int | None, head_v: int | None, form: str | None,
              cc: tuple[int, int], all_quants: bool) -> tuple[KvChoice, list[str]]:
    """The KV cache types and flash attention of one instance: (choice, problems).

    head_k/head_v: the model's K and V head sizes (elements; None: the GGUF is not readable before the deploy).
    form: the pinned tree's attention form (None: unknown). cc: the GPUs' compute capability (major, minor).
    Types left unset become the first of DEFAULT_CANDIDATES that keeps attention on the GPU (f16; kv_candidates
    lists the others for the memory choice). Explicit types that llama.cpp
    runs on the CPU, aborts on or refuses are a problem naming the head size and what works, unless
    allow_cpu_attention. Never raises."""
    k, v = inst.cache_type_k, inst.cache_type_v
    if head_k is None or form is None:
        why = ("the model is not readable before the deploy" if head_k is None else
               "this llama.cpp's flash-attention code has a form the toolkit does not know")
        choice = KvChoice(k or "f16", v or "f16", None, f"{why}: f16 where not set (on the GPU at every head size)")
        explicit_q = [t for t in (k, v) if t in QUANTIZED]
        if head_k is not None and explicit_q and not inst.allow_cpu_attention:
            return choice, [problem(f"{key}.cache_type_k", f"{k}/{v}", f"{why}, so where a quantized KV cache runs "
                                    "is unknown (it may run attention on the CPU)",
                                    "leave cache_type_k/v unset (f16), pin a llama_cpp_ref the toolkit knows "
                                    "(roles/llama_cpp/versions.py SOURCES), or set allow_cpu_attention: true")]
        return choice, []
    hv = head_v or head_k
    if k is None and v is None:
        for ck, cv in DEFAULT_CANDIDATES:
            fa = _fa(inst.flash_attn, form, cc, head_k, hv, ck, cv, all_quants)
            if _on_gpu(form, cc, head_k, hv, ck, cv, fa, all_quants):
                return KvChoice(ck, cv, fa, f"head size {head_k}: {ck}/{cv} keeps attention on the GPU "
                                            f"(flash attention {'on' if fa else 'off'})"), []
        k, v = "f16", "f16"  # on the GPU at every head size: its refusal below names what works
    k, v = k or v, v or k
    fa = _fa(inst.flash_attn, form, cc, head_k, hv, k, v, all_quants)
    where, source = explain(form, cc, head_k, hv, k, v, fa, all_quants)
    choice = KvChoice(k, v, fa, f"head size {head_k}: {k}/{v} as set, flash attention {'on' if fa else 'off'}: "
                                f"{where} ({source})")
    if where == "gpu" or inst.allow_cpu_attention:
        return choice, []
    what = {"cpu": "runs attention on the CPU (tens of times slower)", "abort": "aborts llama-server at the first "
            "request (no kernel compiled for this pair)", "refused": "refuses the pair"}[where]
    works = ", ".join(working_pairs(form, cc, head_k, hv, all_quants)) or "none"
    return choice, [problem(f"{key}.cache_type_k", f"{k}/{v}", f"with flash_attn {'on' if fa else 'off'} at this "
                            f"model's head size {head_k}, llama.cpp {what} ({source})",
                            f"leave cache_type_k/v unset, or use one of: {works}; or set allow_cpu_attention: true")]


def kv_candidates(key: str, inst: LlamaCppInstance, head_k: int | None, head_v: int | None, form: str | None,
                  cc: tuple[int, int], all_quants: bool) -> tuple[list[KvChoice], list[str]]:
    """The KV cache choices the memory plan may pick from, preferred first, and the problems: with both types unset
    and the model and the tree's rules known, each DEFAULT_CANDIDATES pair that keeps attention on the GPU (f16,
    then q8_0 where the head size allows it); otherwise choose_kv's one choice. Never raises."""
    first, problems = choose_kv(key, inst, head_k, head_v, form, cc, all_quants)
    if inst.cache_type_k or inst.cache_type_v or head_k is None or form is None:
        return [first], problems
    hv = head_v or head_k
    out = []
    for ck, cv in DEFAULT_CANDIDATES:
        fa = _fa(inst.flash_attn, form, cc, head_k, hv, ck, cv, all_quants)
        if _on_gpu(form, cc, head_k, hv, ck, cv, fa, all_quants):
            out.append(KvChoice(ck, cv, fa, f"head size {head_k}: {ck}/{cv} keeps attention on the GPU "
                                            f"(flash attention {'on' if fa else 'off'})"))
    return out or [first], problems


def architecture_problems(key: str, architecture: str, known: frozenset[str] | None, ref: str,
                          newer: list[str]) -> list[str]:
    """The model's general.architecture must be one the pinned tree loads (src/llama-arch.cpp LLM_ARCH_NAMES);
    `known` None: the tree's list is not known here (no check). `newer`: other pinned refs that know it."""
    if known is None or architecture in known:
        return []
    fix = (f"set llama_cpp_ref: {newer[0]} (its llama.cpp loads {architecture!r})" if newer else
           "pin a llama.cpp release that supports it (llama_cpp_ref, llama_cpp_source, llama_cpp_source_sha256)")
    return [problem(f"{key}.model_source", architecture, f"llama.cpp {ref} cannot load general.architecture "
                    f"{architecture!r} (not in its src/llama-arch.cpp): the service would start and then fail", fix)]


def context_problems(key: str, inst: LlamaCppInstance, trained: int, caps_slots: bool = False) -> list[str]:
    """A context per request (the `context` setting, tokens; unset: chosen within the trained context) above the
    model's trained context (`trained`, 0: not recorded) needs rope scaling (rope_scaling, rope_scale /
    yarn_orig_ctx) or allow_context_beyond_training.

    caps_slots: the tree's server caps every slot at the trained context (tools/server/server-context.cpp
    n_ctx_slot(): min(..., llama_model_n_ctx_train)), which only YaRN with a custom scale raises, to yarn_orig_ctx
    x rope_scale (src/llama-context.cpp: "custom YaRN scaling detected, re-adjusting n_ctx_train"). There a longer
    context would be paid for in the KV pool and never served, so it is refused unless YaRN raises the cap that far."""
    per_slot = inst.context
    if not per_slot or not trained or per_slot <= trained:
        return []
    yarn_cap = ((inst.yarn_orig_ctx or trained) * inst.rope_scale
                if inst.rope_scaling == "yarn" and inst.rope_scale else None)
    if caps_slots and (yarn_cap is None or per_slot > yarn_cap):
        cap = int(yarn_cap or trained)
        return [problem(f"{key}.context", inst.context, f"this llama.cpp serves at most {cap} tokens per request "
                        "(each slot is capped at the model's trained context, which only YaRN with a rope_scale "
                        "raises: tools/server/server-context.cpp n_ctx_slot), so the rest of the KV pool would be "
                        "paid for and never used",
                        f"set context to at most {cap} (or leave it unset), or rope_scaling: yarn with yarn_orig_ctx: "
                        f"{inst.yarn_orig_ctx or trained} and rope_scale {per_slot / (inst.yarn_orig_ctx or trained):g}")]
    if inst.rope_scaling or inst.allow_context_beyond_training:
        return []
    return [problem(f"{key}.context", inst.context, f"{per_slot} tokens per request is beyond the {trained} tokens "
                    "the model was trained for: without rope scaling its output degrades",
                    f"set context to at most {trained} (or leave it unset), or rope_scaling: yarn with "
                    f"yarn_orig_ctx: {trained} (and rope_scale {per_slot / trained:g}), or "
                    "allow_context_beyond_training: true")]


def gpu_architecture_problems(wanted: list[str] | None, gpu_caps: list[str]) -> list[str]:
    """llama_cpp_cuda_architectures (e.g. ["75", "86"]) must contain each GPU's compute capability (`gpu_caps`,
    e.g. ["7.0"]: the NvidiaGpus fact, else gpu_compute_capability): a build without it cannot run there ("no
    kernel image is available for execution on the device", docs/volta.md §5). None: derived, nothing to check."""
    if not wanted:
        return []
    missing = sorted({c.replace(".", "") for c in gpu_caps} - set(wanted))
    if not missing:
        return []
    return [problem("llama_cpp_cuda_architectures", wanted, f"the GPUs here have compute capability "
                    f"{', '.join(sorted(set(gpu_caps)))}, which the build would not contain",
                    f"add {', '.join(missing)} (or leave llama_cpp_cuda_architectures unset: it follows the GPUs)")]
