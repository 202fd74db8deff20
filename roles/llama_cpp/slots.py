"""How one llama-server instance serves several clients: its slots (-np), the context each request may use, the KV
cache pool all slots share (-c) and its type, chosen for throughput within the GPU's memory. Pure: no pyinfra import.

Why these defaults (measured on an H200 with the default pin's tree, an 8B-shaped Q4_K_M model; issue 26's tables):
with one slot every second client queues (at 8 clients 0.64 of the best aggregate, 6x the TTFT); 8 slots with a
KV stream each served 8 clients best (below); an f16 KV cache decodes 14-32 % faster than q8_0 (llama-bench tg128 at
depth 0 to 32768). So, where settings leave them unset: SLOT_CANDIDATES, most first; f16 before q8_0; and the
context of one request as long as the model was trained for, as far as the GPU holds it for every slot at once.

How the pool is laid out (the pinned tree's own code): -c is always slots x per-request context, so every slot can
hold a full-length request at the same time. By default each slot has a KV stream of its own (an explicit -np
without -kvu: src/llama-context.cpp n_ctx_seq = n_ctx / n_seq_max). With `kv_unified: true` (-kvu) every slot draws
from one pool of -c cells, each capped by `--kv-unified-per-slot` (tools/server/server-context.cpp n_ctx_slot());
there each decode step's attention runs over the cells of every slot (src/llama-kv-cache.cpp get_n_kv: the used
span of the stream, one stream for all slots; the mask hides the others' cells), so long concurrent prompts slow
every stream.
Measured (H200, default pin's tree, 128 output tokens, 16 requests per level (2 per client in the 8B
38-token run); tools/gpu/README.md has the commands,
tests/data/bench_sweep_h200_*.json the runs): with 16k-token prompts at 8 clients, 8 slots with a stream each
against the unified pool served 52.0 against 29.2 end-to-end tok/s on an 8B-shaped Q4_K_M (TTFT p50 10.6 against
15.2 s) and 162.5 against 86.3 on a 1B one (3.0 against 4.6 s); with 38-token prompts the split pool was as fast
or faster end to end (8B 704.8 against 652.2 tok/s, TTFT p50 73.5 against 108.0 ms). Single-stream decode within
0.95 of the unified pool's but for the 1B model at 16k (0.946).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from roles.llama_cpp.choices import KvChoice
from roles.planner import Plan

#: Slots tried when `parallel` is unset, most first: 8 measured best at 8 clients (issue 26: -np 8 -kvu, 240 tok/s
#: aggregate and 1,006 ms TTFT p50 against 155 / 5,985 with -np 1); fewer only where 8 do not fit.
SLOT_CANDIDATES = (8, 4, 2, 1)
#: The shortest context per request an unset `context` may shrink to before a smaller KV type or fewer slots are
#: tried, tokens (the toolkit's former default; capped at the model's trained context).
CONTEXT_FLOOR = 8192
#: Where the model's header is not readable before the deploy (a URL, a file already on the host): llama-server's
#: own automatic slots (tools/server/server.cpp: "n_parallel is set to auto, using n_parallel = 4 and kv_unified =
#: true"), each of CONTEXT_FLOOR tokens; nothing is checked against the GPU's memory then, and the plan says so.
UNREAD_SLOTS = 4
#: Memory an automatically grown context leaves free on each GPU, as a share of its VRAM: the planner's largest
#: underestimate against the measured llama-server totals (README: "none more than 2 % under";
#: tests/data/llama_cpp_memory_measured.json), so that a pool sized to the last MiB still starts.
GROWTH_MARGIN = 0.02
#: llama.cpp pads the KV cache to a multiple of 256 cells (src/llama-context.cpp GGML_PAD(n_ctx_seq, 256)).
PAD = 256
#: Single-stream decode speed with a q8_0 KV cache over f16, by depth in tokens (H200, default pin's tree,
#: 8B-shaped Q4_K_M, `llama-bench -fa 1 -n 128 -d D`; issue 26). Said in the plan when q8_0 is chosen.
Q8_0_DECODE_RATIO = {0: 0.86, 4096: 0.82, 16384: 0.72, 32768: 0.68}


@dataclass(frozen=True)
class Serving:
    """What one instance runs with: `slots` (-np), `context` tokens one request may use (prompt + output), the
    pool of slots x context cells (-c), `unified` (-kvu with --kv-unified-per-slot context, only where kv_unified
    is set true; False, the default: -c split evenly, a KV stream per slot), its KV cache (`kv`) and why, one line
    each."""

    slots: int
    context: int
    unified: bool
    kv: KvChoice
    why: tuple[str, ...] = ()

    @property
    def pool(self) -> int:
        """-c: KV cache cells of all slots together, tokens."""
        return self.slots * self.context


def _floor(n: int) -> int:
    return n // PAD * PAD


def _q8_cost(kv: KvChoice) -> str:
    if kv.cache_type_k == "f16" and kv.cache_type_v == "f16":
        return ""
    ratios = ", ".join(f"{r:.2f} at depth {d}" for d, r in Q8_0_DECODE_RATIO.items())
    return f"; a quantized KV cache decodes slower than f16 (q8_0/f16 measured {ratios})"


def choose(slots_set: int | None, context_set: int | None, trained: int, candidates: list[KvChoice],
           plan: Callable[[int, int, KvChoice], Plan], unified_set: bool) -> Serving:
    """The slots, per-request context and KV cache of one instance whose model header was read.

    slots_set / context_set: the `parallel` and `context` settings (None: chosen here). trained: the model's
    trained context, tokens (0: not recorded). candidates: the KV cache choices that keep attention on the GPU,
    preferred first (f16 before q8_0; one element when the types are set). plan(context, slots, kv): the memory
    planner's verdict for `slots` slots of `context` tokens each. unified_set: the kv_unified setting is true (the
    slots share one pool; kv_unified_problems refuses it where the tree lacks -kvu or --kv-unified-per-slot).

    The first (slots, KV) in SLOT_CANDIDATES x candidates order whose plan fits at the set context, or at
    min(trained, CONTEXT_FLOOR) when context is unset, wins; an unset context then grows to the longest that fits
    for every slot (Plan.max_context_that_fits, capped at the trained context), in multiples of 256. When nothing
    fits, the smallest try (fewest slots, last KV candidate) is returned for the memory planner to refuse or offload
    with its own reasons. Never raises."""
    floor = min(trained, CONTEXT_FLOOR) if trained else CONTEXT_FLOOR
    want = context_set or floor
    slot_tries = (slots_set,) if slots_set else SLOT_CANDIDATES
    for slots in slot_tries:
        for kv in candidates:
            p = plan(want, slots, kv)
            if not p.fits:
                continue
            context = want if context_set else max(want, _grown(want, trained, slots, kv, p, plan))
            return _serving(slots, context, kv, slots_set, context_set, trained, unified_set, candidates)
    return _serving(slot_tries[-1], want, candidates[-1], slots_set, context_set, trained, unified_set, candidates,
                    fits=False)


def _grown(want: int, trained: int, slots: int, kv: KvChoice, p: Plan, plan: Callable[[int, int, KvChoice], Plan]
           ) -> int:
    """The longest context per slot that fits (Plan.max_context_that_fits, at most the trained context) in multiples
    of PAD, less what keeps GROWTH_MARGIN of each GPU free; at least `want` is the caller's business."""
    c = _floor(min(p.max_context_that_fits, trained or want))
    if c <= want:
        return c
    q = plan(c, slots, kv)
    short = GROWTH_MARGIN * q.gpu_bytes - (q.budget_bytes - q.total_bytes)  # bytes per GPU still to free
    if short > 0 and q.kv_bytes_per_token:
        tokens = -(-int(short) * q.n_gpus // (slots * q.kv_bytes_per_token))  # the pool is split over the GPUs
        c -= -(-tokens // PAD) * PAD
    return c


def _serving(slots: int, context: int, kv: KvChoice, slots_set: int | None, context_set: int | None, trained: int,
             unified_set: bool, candidates: list[KvChoice], fits: bool = True) -> Serving:
    unified = slots > 1 and unified_set
    why = [f"{slots} slot(s)" + (" as set" if slots_set else
                                 f" (the most of {', '.join(map(str, SLOT_CANDIDATES))} that fit)" if fits else
                                 f" (none of {', '.join(map(str, SLOT_CANDIDATES))} fits: the fewest)"),
           f"{context} tokens per request" + (" as set" if context_set else
                                              f" (the longest that fits for every slot, up to the trained "
                                              f"{trained or 'context'})"),
           f"KV cache pool {slots * context} tokens" + (", unified (-kvu, each slot capped at its share)"
                                                         if unified else
                                                         f", a stream of {context} per slot" if slots > 1 else ""),
           f"KV cache {kv.cache_type_k}/{kv.cache_type_v}"
           + ("" if len(candidates) == 1 else
              " (f16 fits)" if kv.cache_type_k == "f16" else " (f16 does not fit)") + _q8_cost(kv)]
    return Serving(slots, context, unified, kv, tuple(why))


def unread(slots_set: int | None, context_set: int | None, kv: KvChoice, unified_set: bool) -> Serving:
    """The serving of an instance whose model header is not readable before the deploy: the settings as given,
    else UNREAD_SLOTS slots of CONTEXT_FLOOR tokens each."""
    slots = slots_set or UNREAD_SLOTS
    context = context_set or CONTEXT_FLOOR
    unified = slots > 1 and unified_set
    return Serving(slots, context, unified, kv, (
        f"the model is not readable before the deploy: {slots} slot(s) of {context} tokens"
        + ("" if context_set else " (set context and parallel for what the GPU holds)"),))
