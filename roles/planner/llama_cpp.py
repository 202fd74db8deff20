"""llama.cpp arithmetic: does a GGUF model fit llama-server's per-GPU memory, and if not, what would.

Per GPU: weights of the layers on it + their KV cache + the compute buffer + the CUDA context, against
VRAM x usable_fraction. Bytes unless a name says otherwise; contexts in tokens; speeds in tokens/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import messages
from .kv import LLAMA_CPP_CACHE_TYPES, LLAMA_CPP_FA_CACHE_TYPES, _bytes_per_element, _row_bytes
from .models import GgufModel
from .units import (
    LLAMA_CPP_CUDA_CONTEXT_BYTES,
    MiB,
    Outcome,
    Plan,
    _check_positive,
    _decode_tps,
    _largest,
    _pad,
)

#: llama.cpp's default physical batch (`-ub`); the compute buffer is sized for it.
LLAMA_CPP_N_UBATCH = 512
#: llama.cpp rounds the KV cache (n_ctx) up to a multiple of 256. (llama-context.cpp, GGML_PAD(n_ctx, 256); H)
LLAMA_CPP_CTX_PAD = 256
#: ggml pads the KQ mask's token dimension to a multiple of 64. (ggml.h GGML_KQ_MASK_PAD; llama-graph.cpp
#: build_attn_inp_kv_unified: self_kq_mask [n_kv, GGML_PAD(n_tokens, GGML_KQ_MASK_PAD)]; H)
LLAMA_CPP_KQ_MASK_PAD = 64
#: Vocabulary assumed when a GGUF header states none: 256k tokens covers today's largest (Gemma 3, 262144). (M)
LLAMA_CPP_UNKNOWN_VOCAB = 262144
#: f32 activations [n_embd, n_ubatch] alive next to the large tensors of a phase (residual stream, its norm, Q,
#: the attention output, the GPU copy of the token embeddings): 4 measured at 131072 tokens with flash attention
#: (416 MiB logged = 384 of mask + 4 x 8), 4.5 without (564 = 16 + 512 + 36); 5 is the bound. (issue 12; M)
LLAMA_CPP_LIVE_ACTIVATIONS = 5
#: The CUDA backend takes over a matrix multiplication whose weights are in host memory when the batch is >= 32
#: tokens: the scheduler then copies the weights into the GPU compute buffer. (ggml-cuda.cu
#: ggml_backend_cuda_device_offload_op min_batch_size = 32; ggml-backend.cpp ggml_backend_sched_backend_id_from_cur
#: "1.off"; H)
LLAMA_CPP_OFFLOAD_MIN_BATCH = 32
#: Largest trained context assumed when a GGUF does not record one, in tokens.
_UNKNOWN_TRAINED_CONTEXT = 1 << 22
#: Upper end of the search for the context VRAM alone would allow, in tokens.
_VRAM_CONTEXT_SEARCH = 1 << 24


@dataclass(frozen=True)
class _LlamaUsage:
    weights: int  # per GPU
    kv: int  # per GPU
    compute: int
    context: int
    host_read: int  # weight bytes read from host memory per decoded token (CPU layers, output on the CPU)
    gpu_weights_total: int  # all GPUs
    gpu_kv_per_token: int  # whole model, one sequence: KV of the layers on the GPU
    host_kv_per_token: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.context


def llama_compute_buffer(model: GgufModel, kv_tokens: int, layers_on_gpu: int, output_on_gpu: bool,
                         flash_attn: bool = True, n_ubatch: int = LLAMA_CPP_N_UBATCH) -> int:
    """The "CUDA0 compute buffer size" llama-server logs, in bytes: the peak of ggml-alloc's reservation for the
    worst-case graph (llama-context.cpp graph_reserve: n_ubatch tokens, all of them outputs, n_kv = the whole KV
    cache). ggml-alloc frees a tensor after its last use and runs element-wise ops in place, so the buffer is the
    largest phase of the graph, not the sum of its tensors:

    - output: the f32 logits [n_vocab, n_ubatch] (llama-graph.cpp res->t_logits) next to the final norm
      [n_embd, n_ubatch]; with the output layer left on the CPU (-ngl <= n_layers) the CUDA backend still runs its
      matmul (batch >= 32) and the scheduler copies the output weights into this buffer for it (the issue's -ngl 20
      case: 411.0 + 250.5 + 8 = 669.5 MiB logged);
    - attention, per layer (freed before the next): flash attention keeps the f32 KQ mask [n_kv, pad(n_ubatch, 64)]
      and its f16 cast (llama-graph.cpp kq_mask_cnv = ggml_cast(..., GGML_TYPE_F16)); without flash attention the
      f32 mask and KQ = mul_mat(k, q), f32 [n_kv, n_ubatch, n_head], which soft_max_ext overwrites in place
      (llama-graph.cpp build_attn_mha);
    - a layer left on the CPU: its weights copied in for the offloaded matmuls (bounded by its whole size);
    each plus LLAMA_CPP_LIVE_ACTIVATIONS f32 [n_embd, n_ubatch] activations.
    """
    act = 4 * n_ubatch * model.embd
    vocab = model.n_vocab or LLAMA_CPP_UNKNOWN_VOCAB
    offload = n_ubatch >= LLAMA_CPP_OFFLOAD_MIN_BATCH
    output = 4 * n_ubatch * vocab + act
    if not output_on_gpu and offload:
        output += model.output_gpu_bytes
    phases = [output]
    if layers_on_gpu > 0:
        mask = kv_tokens * _pad(n_ubatch, LLAMA_CPP_KQ_MASK_PAD)
        if flash_attn:
            attention = mask * (4 + 2)
        else:
            attention = mask * 4 + 4 * kv_tokens * n_ubatch * model.n_head
        phases.append(attention + LLAMA_CPP_LIVE_ACTIVATIONS * act)
    if layers_on_gpu < model.n_layers and offload:
        phases.append(max(model.layer_bytes[:model.n_layers - layers_on_gpu]) + LLAMA_CPP_LIVE_ACTIVATIONS * act)
    return max(phases)


#: What llama-server's memory grows by after its first real request, on top of everything it holds at start-up
#: (CUDA's and cuBLAS's lazily loaded kernels and workspaces): 64-128 MiB after a 1000-token prompt in all seven
#: cases measured on an H200 (tests/data/llama_cpp_memory_remeasured.json, measured_after_prompt_mib). Counted
#: with the CUDA context so that a plan also holds once the server serves. (measured, one GPU; M for a V100)
LLAMA_CPP_RUNTIME_GROWTH_BYTES = 128 * MiB


def _llama_usage(model: GgufModel, n_gpus: int, kv_layer_tok: int, layers_on_gpu: int, output_on_gpu: bool,
                 kv_tokens: int, flash_attn: bool = True, cuda_context: int = LLAMA_CPP_CUDA_CONTEXT_BYTES,
                 n_ubatch: int = LLAMA_CPP_N_UBATCH) -> _LlamaUsage:
    """Memory per GPU and bytes read per token with the last `layers_on_gpu` layers (and the output layer if
    `output_on_gpu`) on the GPUs and a KV cache of `kv_tokens` tokens; kv_layer_tok: K+V bytes per token per layer."""
    # llama.cpp offloads the *last* layers_on_gpu blocks; each layer's KV lives with its layer.
    split = model.n_layers - layers_on_gpu
    output = model.output_gpu_bytes  # with tied embeddings the output layer is a copy of token_embd
    gpu_w = sum(model.layer_bytes[split:]) + (output if output_on_gpu else 0)
    # The token embedding is a row lookup (one row per token); everything else on the host is read in full.
    host_read = sum(model.layer_bytes[:split]) + (0 if output_on_gpu else output)
    kv_total = kv_layer_tok * layers_on_gpu * kv_tokens
    return _LlamaUsage(
        weights=-(-gpu_w // n_gpus),
        kv=-(-kv_total // n_gpus),
        compute=llama_compute_buffer(model, kv_tokens, layers_on_gpu, output_on_gpu, flash_attn, n_ubatch),
        context=cuda_context + LLAMA_CPP_RUNTIME_GROWTH_BYTES,
        host_read=host_read,
        gpu_weights_total=gpu_w,
        gpu_kv_per_token=kv_layer_tok * layers_on_gpu,
        host_kv_per_token=kv_layer_tok * (model.n_layers - layers_on_gpu),
    )


@dataclass(frozen=True)
class _LlamaCase:
    """One plan_llama_cpp request (its arguments), the budget per GPU and the KV bytes per token of a layer."""

    model: GgufModel
    gpu_mib: int
    n_gpus: int
    context: int  # tokens per slot
    cache_type_k: str
    cache_type_v: str
    parallel: int
    usable_fraction: float
    n_gpu_layers: int
    budget: int  # bytes per GPU: gpu_mib x usable_fraction
    kv_layer_tok: int  # K+V bytes per token of one layer
    flash_attn: bool = True
    cuda_context: int = LLAMA_CPP_CUDA_CONTEXT_BYTES  # bytes per GPU outside the logged buffers
    n_ubatch: int = LLAMA_CPP_N_UBATCH  # -ub: the compute buffer is reserved for this many tokens

    @property
    def n(self) -> int:
        return self.model.n_layers

    @property
    def layers_gpu(self) -> int:
        return min(self.n_gpu_layers, self.n)

    @property
    def output_gpu(self) -> bool:
        return self.n_gpu_layers > self.n

    def kv_tokens(self, context: int) -> int:
        """Tokens of KV cache llama.cpp allocates for `context` tokens per slot: all slots, padded."""
        return _pad(context * self.parallel, LLAMA_CPP_CTX_PAD)

    def usage(self, layers: int, output: bool, tokens: int) -> _LlamaUsage:
        return _llama_usage(self.model, self.n_gpus, self.kv_layer_tok, layers, output, tokens, self.flash_attn,
                            self.cuda_context, self.n_ubatch)


@dataclass(frozen=True)
class _LlamaFigures:
    """What the arithmetic found for one case; reasons are worded from these."""

    outcome: Outcome
    planned: _LlamaUsage  # the placement as configured (n_gpu_layers)
    max_ctx: int  # tokens per slot, capped at the trained context
    vram_ctx: int  # tokens per slot VRAM would allow (uncapped when max_ctx is the trained context)
    max_weights: int  # bytes, whole model
    on_gpu: int  # layers on the GPU where the plan runs
    offloaded: int  # layers on the CPU where the plan runs
    tps_running: float  # where the plan runs (offloaded layers at host bandwidth)
    tps_all_gpu: float  # everything on the GPU
    tps: float  # the plan's decode ceiling


def _check_llama_args(gpu_mib: int, n_gpus: int, context: int, cache_type_k: str, cache_type_v: str,
                      parallel: int, usable_fraction: float, n_gpu_layers: int) -> None:
    """Raises ValueError for non-positive sizes, usable_fraction > 1, n_gpu_layers < 0 or an unknown cache type."""
    _check_positive(gpu_mib=gpu_mib, n_gpus=n_gpus, context=context, parallel=parallel,
                    usable_fraction=usable_fraction)
    if usable_fraction > 1:
        raise ValueError(f"usable_fraction must be at most 1, got {usable_fraction}")
    if n_gpu_layers < 0:
        raise ValueError(f"n_gpu_layers must be >= 0, got {n_gpu_layers}")
    for name, t in (("cache_type_k", cache_type_k), ("cache_type_v", cache_type_v)):
        if t not in LLAMA_CPP_CACHE_TYPES:
            raise ValueError(f"{name}: unknown KV cache type {t!r} for llama.cpp; known: "
                             f"{', '.join(LLAMA_CPP_CACHE_TYPES)}")


def _llama_max_context(case: _LlamaCase) -> tuple[int, int]:
    """(largest context per slot at the planned layer placement, capped at the trained context; the largest VRAM
    would allow, searched further only when the cap was reached), in tokens; 0 when none fits."""
    cap = case.model.context_length or _UNKNOWN_TRAINED_CONTEXT

    def ctx_ok(c: int) -> bool:
        return case.usage(case.layers_gpu, case.output_gpu, case.kv_tokens(c)).total <= case.budget

    max_ctx = max(0, _largest(ctx_ok, 1, cap))
    vram_ctx = max(0, _largest(ctx_ok, 1, _VRAM_CONTEXT_SEARCH)) if max_ctx == cap else max_ctx
    return max_ctx, vram_ctx


def _llama_max_weights(case: _LlamaCase, full: _LlamaUsage) -> int:
    """Largest GPU-resident weights (everything on the GPU) at the planned context, scaled back to a whole-model
    size in bytes; `full` is the usage with every layer and the output on the GPU."""
    room = (case.budget - full.kv - full.compute - full.context) * case.n_gpus
    weight_bytes = case.model.weight_bytes
    gpu_share = full.gpu_weights_total / weight_bytes if weight_bytes else 1
    return max(0, int(room / gpu_share)) if gpu_share else 0


def _llama_outcome(case: _LlamaCase, planned: _LlamaUsage) -> Outcome:
    """offload when the weights alone exceed the budget or n_gpu_layers leaves layers on the CPU; else fits or
    does_not_fit by the planned total."""
    if planned.weights > case.budget:
        return "offload"
    if planned.total <= case.budget:
        return "offload" if case.layers_gpu < case.n else "fits"
    return "does_not_fit"


def _llama_placement(case: _LlamaCase, outcome: Outcome, planned: _LlamaUsage) -> tuple[int, _LlamaUsage]:
    """(layers on the GPU, usage) where the plan runs: as planned when that fits the budget, else the GPUs filled
    from the last layer down with the output layer on the CPU."""
    if outcome == "fits" or (outcome == "offload" and planned.total <= case.budget):
        return case.layers_gpu, planned
    tokens = case.kv_tokens(case.context)
    on_gpu = max(0, _largest(lambda k: case.usage(k, False, tokens).total <= case.budget, 0, case.n))
    return on_gpu, case.usage(on_gpu, False, tokens)


def _usage_tps(u: _LlamaUsage, context: int) -> float:
    """Decode ceiling of one sequence at `context` tokens with this placement, tokens/s."""
    return _decode_tps(u.gpu_weights_total + u.gpu_kv_per_token * context,
                       u.host_read + u.host_kv_per_token * context)


def _llama_figures(case: _LlamaCase) -> _LlamaFigures:
    """Run the arithmetic of one case: outcome, placement, largest context and weights, decode ceilings."""
    tokens = case.kv_tokens(case.context)
    planned = case.usage(case.layers_gpu, case.output_gpu, tokens)
    full = case.usage(case.n, True, tokens)
    max_ctx, vram_ctx = _llama_max_context(case)
    outcome = _llama_outcome(case, planned)
    on_gpu, running = _llama_placement(case, outcome, planned)
    # Decode ceiling of one sequence at its full context: what runs (offload) or what was planned.
    tps_running = _usage_tps(running, case.context)
    tps_all_gpu = _decode_tps(full.gpu_weights_total + case.kv_layer_tok * case.n * case.context, 0)
    return _LlamaFigures(
        outcome=outcome, planned=planned, max_ctx=max_ctx, vram_ctx=vram_ctx,
        max_weights=_llama_max_weights(case, full), on_gpu=on_gpu, offloaded=case.n - on_gpu,
        tps_running=tps_running, tps_all_gpu=tps_all_gpu,
        tps=tps_running if outcome == "offload" else _usage_tps(planned, case.context),
    )


def _llama_used(case: _LlamaCase, f: _LlamaFigures) -> str:
    p = f.planned
    return messages.llama_used(p.weights, p.kv, case.kv_tokens(case.context), case.cache_type_k, case.cache_type_v,
                               p.compute, p.context, p.total, case.budget, case.usable_fraction, case.gpu_mib)


def _llama_smaller_kv(case: _LlamaCase) -> str | None:
    """The first smaller quantized KV cache pair with default CUDA flash-attention kernels (q8_0, then q4_0) with
    which the same case fits, as a reason line; None if neither does."""
    current = (_bytes_per_element(case.cache_type_k) + _bytes_per_element(case.cache_type_v)) / 2
    for smaller in ("q8_0", "q4_0"):
        if _bytes_per_element(smaller) < current:
            alt = plan_llama_cpp(case.model, case.gpu_mib, case.n_gpus, case.context, smaller, smaller,
                                 case.parallel, case.usable_fraction, case.n_gpu_layers, flash_attn=case.flash_attn,
                                 cuda_context_bytes=case.cuda_context, n_ubatch=case.n_ubatch)
            if alt.fits:
                return messages.llama_or_smaller_kv(smaller)
    return None


def _llama_refused_lines(case: _LlamaCase, f: _LlamaFigures, used: str) -> list[str]:
    """does_not_fit: the sum, the largest context and model that fit, and the alternatives."""
    lines = [messages.llama_does_not_fit(used), messages.llama_largest_context_refused(f.max_ctx),
             messages.llama_largest_model(case.context, case.parallel, f.max_weights, case.model.weight_bytes)]
    if f.offloaded:
        lines.append(messages.llama_or_offload(f.on_gpu, f.offloaded, case.n, f.tps_running, f.tps_all_gpu))
    smaller = _llama_smaller_kv(case)
    if smaller:
        lines.append(smaller)
    return lines


def _llama_offload_lines(case: _LlamaCase, f: _LlamaFigures, used: str) -> list[str]:
    """offload: why layers run on the CPU, how many, and what that costs in tokens/s."""
    if case.layers_gpu < case.n and f.planned.total <= case.budget:
        lines = [messages.llama_ngl_leaves_layers(case.n_gpu_layers, f.offloaded, case.n, used)]
    else:
        lines = [
            messages.llama_weights_exceed_budget(f.planned.weights, case.budget, case.usable_fraction, case.gpu_mib),
            messages.llama_layers_on_cpu(case.context, case.parallel, f.offloaded, case.n, f.on_gpu),
            messages.llama_largest_model_entirely(case.context, f.max_weights, case.model.weight_bytes),
        ]
    lines.append(messages.llama_offload_ceiling(f.offloaded, f.tps_running, f.tps_all_gpu))
    return lines


def _llama_reasons(case: _LlamaCase, f: _LlamaFigures) -> list[str]:
    """Plan.reasons: the outcome's lines, then warnings (flash-attention KV types, trained context), then the
    decode ceiling unless the offload lines gave it."""
    used = _llama_used(case, f)
    if f.outcome == "fits":
        reasons = [messages.fits(used), messages.llama_largest_context_fits(f.max_ctx, f.vram_ctx)]
    elif f.outcome == "does_not_fit":
        reasons = _llama_refused_lines(case, f, used)
    else:
        reasons = _llama_offload_lines(case, f, used)
    if not (case.cache_type_k == case.cache_type_v and case.cache_type_k in LLAMA_CPP_FA_CACHE_TYPES):
        reasons.append(messages.llama_fa_cache_types(case.cache_type_k, case.cache_type_v))
    trained = case.model.context_length
    if trained and case.context > trained:
        reasons.append(messages.beyond_trained_context(case.context, trained))
    if f.outcome != "offload":
        reasons.append(messages.llama_decode_ceiling(f.tps, case.context))
    return reasons


def plan_llama_cpp(model: GgufModel, gpu_mib: int, n_gpus: int, context: int, cache_type_k: str, cache_type_v: str,
                   parallel: int, usable_fraction: float, n_gpu_layers: int = 99, *, flash_attn: bool = True,
                   cuda_context_bytes: int | None = None, n_ubatch: int = LLAMA_CPP_N_UBATCH) -> Plan:
    """Plan a llama-server instance: `context` tokens per slot, `parallel` slots (the server then needs
    `-c context*parallel -np parallel`), KV cache types `cache_type_k/_v` (-ctk/-ctv), `n_gpu_layers` (-ngl; more
    than the layer count also puts the output layer on the GPU), on `n_gpus` GPUs of `gpu_mib` MiB each with the
    default layer split. The budget per GPU is gpu_mib x usable_fraction; the CUDA context and compute buffer are
    counted explicitly on top of weights and KV, so usable_fraction is only the safety margin left unused.
    flash_attn: whether llama-server runs with flash attention (without it the compute buffer holds a layer's KQ
    scores, llama_compute_buffer). cuda_context_bytes: memory per GPU outside the logged buffers, e.g.
    units.llama_cpp_cuda_context_bytes(gpu, cuda); None: LLAMA_CPP_CUDA_CONTEXT_BYTES (the conservative V100 row).
    n_ubatch: llama-server's physical batch (-ub, tokens), which the compute buffer is reserved for.

    Outcome: "fits"; "does_not_fit" (the weights fit but not with the KV cache and buffers: reasons name the
    largest context and the largest weight size that fit); "offload" (the GPU-resident weights alone exceed the
    budget, or n_gpu_layers leaves layers on the CPU: layers_offloaded says how many run on the CPU, and
    decode_ceiling_tps counts them at host memory bandwidth). Raises ValueError for non-positive sizes, a
    usable_fraction outside (0, 1], or an unknown cache type.
    """
    _check_llama_args(gpu_mib, n_gpus, context, cache_type_k, cache_type_v, parallel, usable_fraction, n_gpu_layers)
    # K+V bytes per token of one layer; raises ValueError for a quantized row that is not whole blocks.
    kv_layer_tok = (_row_bytes(model.n_kv_heads * model.head_dim, cache_type_k)
                    + _row_bytes(model.n_kv_heads * model.v_head_dim, cache_type_v))
    case = _LlamaCase(model, gpu_mib, n_gpus, context, cache_type_k, cache_type_v, parallel, usable_fraction,
                      n_gpu_layers, budget=int(gpu_mib * MiB * usable_fraction), kv_layer_tok=kv_layer_tok,
                      flash_attn=flash_attn,
                      cuda_context=LLAMA_CPP_CUDA_CONTEXT_BYTES if cuda_context_bytes is None else cuda_context_bytes,
                      n_ubatch=n_ubatch)
    kv_tok = kv_layer_tok * model.n_layers
    f = _llama_figures(case)
    p = f.planned
    return Plan(
        engine="llama.cpp", outcome=f.outcome, n_gpus=n_gpus, gpu_bytes=gpu_mib * MiB, budget_bytes=case.budget,
        weight_bytes=p.weights, kv_bytes=p.kv, compute_buffer_bytes=p.compute, cuda_context_bytes=p.context,
        total_bytes=p.total, context=context, kv_bytes_per_token=kv_tok, layers_offloaded=f.offloaded,
        max_context_that_fits=f.max_ctx, max_weight_bytes=f.max_weights, decode_ceiling_tps=f.tps,
        reasons=_llama_reasons(case, f),
    )
