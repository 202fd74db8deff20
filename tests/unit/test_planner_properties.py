"""Property tests (hypothesis) of the planner's arithmetic, issue 14: over generated model shapes and settings,

- monotonic: more context per slot, more slots (llama.cpp -np) or a larger cache type (f16 >= q8_0 >= q4_0, and
  vLLM's auto >= fp8) never plan fewer bytes;
- K and V independent: changing only -ctv changes only the V part of the KV cache, sized with V's own type and
  V's head size;
- per-GPU figures sum back to the whole: llama.cpp's layer split and vLLM's tensor parallel divide the weights and
  the KV cache, rounded up by less than a byte per GPU (vLLM replicates KV heads when TP exceeds them);
- never under the engine: for the shapes measured on a real GPU (tests/data/llama_cpp_memory_measured.json, the
  buffers llama-server logged), the planned total at that context or more is at least the logged model + KV +
  compute buffers, the KV scaled linearly with the cached tokens.

Expected KV sizes come from ggml's block layouts (ggml-common.h: f16 2 bytes per element; block_q8_0 an f16 scale
and 32 int8 = 34 bytes per 32 elements; block_q4_0 an f16 scale and 16 bytes of nibbles = 18 bytes per 32), not
from the planner's tables. Each test draws few examples and no example database is kept, so the file runs in
seconds and writes nothing outside pytest's temporary directory.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from roles.planner import (HOST_BANDWIDTH_BYTES_S, V100_BANDWIDTH_BYTES_S, GgufModel, HfModel, MiB,
                           kv_bytes_per_token, plan_llama_cpp, plan_vllm)
from tests.unit.test_llama_cpp_memory_measured import DATA, _model as measured_model, _plan as measured_plan

# derandomize: the same examples every run, so a mutation run and a CI run see the same cases
FAST = settings(max_examples=25, deadline=None, database=None, derandomize=True)

#: ggml-common.h block layouts: (elements per block, bytes per block).
GGML_BLOCK = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
#: llama-context.cpp: n_ctx padded to a multiple of 256.
CTX_PAD = 256
#: Largest first: f16 >= q8_0 >= q4_0.
CACHE_TYPES = ("f16", "q8_0", "q4_0")
GPU_MIB = 32510  # a V100 32GB as nvidia-smi reports it


def _row(n_elements: int, cache_type: str) -> int:
    """Bytes of one token's K or V row of one layer, from ggml's block layout."""
    elements, nbytes = GGML_BLOCK[cache_type]
    assert n_elements % elements == 0
    return n_elements // elements * nbytes


@st.composite
def gguf_models(draw) -> GgufModel:
    """A llama-shaped GGUF model: 1-48 layers, 1-8 KV heads of 64 or 128 (V head size the same or not), GQA groups of
    1-8, layers of 1-400 MiB, a vocabulary and an output layer."""
    n_layers = draw(st.integers(1, 48))
    n_kv = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([64, 128]))
    head_dim_v = draw(st.sampled_from([0, 64, 128]))
    n_head = n_kv * draw(st.integers(1, 8))
    layer = draw(st.integers(1 * MiB, 400 * MiB))
    n_vocab = draw(st.integers(1000, 160000))
    return GgufModel(architecture="llama", n_layers=n_layers, n_head=n_head, n_kv_heads=n_kv, head_dim=head_dim,
                     head_dim_v=head_dim_v, context_length=1 << 20,
                     layer_bytes=tuple(layer + i for i in range(n_layers)), token_embd_bytes=n_vocab * n_head * 64,
                     output_bytes=n_vocab * n_head * 64, n_embd=n_head * head_dim, n_vocab=n_vocab)


def _llama(model: GgufModel, context: int, parallel: int = 1, k: str = "f16", v: str = "f16", n_gpus: int = 1,
           ngl: int = 99, flash_attn: bool = True):
    return plan_llama_cpp(model, GPU_MIB, n_gpus, context, k, v, parallel, 0.95, ngl, flash_attn=flash_attn)


contexts = st.integers(1, 1 << 17)
slots = st.integers(1, 8)
layers_on_gpu = st.integers(0, 60)  # -ngl: 0 .. beyond the layer count (then the output layer is on the GPU too)


# -- monotonic -------------------------------------------------------------------------------------------------

@FAST
@given(gguf_models(), contexts, contexts, slots, st.sampled_from(CACHE_TYPES), st.sampled_from(CACHE_TYPES),
       layers_on_gpu, st.booleans())
def test_llama_cpp_never_plans_less_for_more_context(model, c1, c2, parallel, k, v, ngl, fa):
    lo, hi = sorted((c1, c2))
    small, large = (_llama(model, c, parallel, k, v, ngl=ngl, flash_attn=fa) for c in (lo, hi))
    assert large.kv_bytes >= small.kv_bytes
    assert large.compute_buffer_bytes >= small.compute_buffer_bytes
    assert large.total_bytes >= small.total_bytes


@FAST
@given(gguf_models(), contexts, slots, slots, st.sampled_from(CACHE_TYPES), layers_on_gpu)
def test_llama_cpp_never_plans_less_for_more_slots(model, context, p1, p2, k, ngl):
    lo, hi = sorted((p1, p2))
    small, large = (_llama(model, context, p, k, k, ngl=ngl) for p in (lo, hi))
    assert large.kv_bytes >= small.kv_bytes
    assert large.total_bytes >= small.total_bytes


@FAST
@given(gguf_models(), contexts, slots, st.sampled_from(CACHE_TYPES), layers_on_gpu)
def test_llama_cpp_cache_types_order_f16_q8_0_q4_0_for_k_and_for_v(model, context, parallel, other, ngl):
    by_k = [_llama(model, context, parallel, t, other, ngl=ngl) for t in CACHE_TYPES]
    by_v = [_llama(model, context, parallel, other, t, ngl=ngl) for t in CACHE_TYPES]
    for plans in (by_k, by_v):
        kv = [p.kv_bytes for p in plans]
        assert kv == sorted(kv, reverse=True)
        total = [p.total_bytes for p in plans]
        assert total == sorted(total, reverse=True)
    if ngl > 0:  # some KV on the GPU: a smaller type is strictly smaller
        assert by_k[0].kv_bytes > by_k[1].kv_bytes > by_k[2].kv_bytes
        assert by_v[0].kv_bytes > by_v[1].kv_bytes > by_v[2].kv_bytes


# -- K and V independent ---------------------------------------------------------------------------------------

@FAST
@given(gguf_models(), contexts, slots, st.sampled_from(CACHE_TYPES), st.sampled_from(CACHE_TYPES), layers_on_gpu)
def test_llama_cpp_kv_is_k_rows_in_k_type_plus_v_rows_in_v_type(model, context, parallel, k, v, ngl):
    """One GPU: KV = layers on the GPU x cached tokens x (K row in K's type + V row in V's type), ggml's layouts."""
    p = _llama(model, context, parallel, k, v, ngl=ngl)
    tokens = -(-context * parallel // CTX_PAD) * CTX_PAD
    k_row = _row(model.n_kv_heads * model.head_dim, k)
    v_row = _row(model.n_kv_heads * (model.head_dim_v or model.head_dim), v)
    assert p.kv_bytes == min(ngl, model.n_layers) * tokens * (k_row + v_row)
    assert p.kv_bytes_per_token == model.n_layers * (k_row + v_row)


@FAST
@given(gguf_models(), contexts, slots, st.sampled_from(CACHE_TYPES), st.sampled_from(CACHE_TYPES),
       st.sampled_from(CACHE_TYPES))
def test_llama_cpp_changing_only_v_changes_only_the_v_part(model, context, parallel, k, v1, v2):
    a, b = _llama(model, context, parallel, k, v1), _llama(model, context, parallel, k, v2)
    tokens = -(-context * parallel // CTX_PAD) * CTX_PAD
    v_elements = model.n_kv_heads * (model.head_dim_v or model.head_dim)
    assert a.kv_bytes - b.kv_bytes == model.n_layers * tokens * (_row(v_elements, v1) - _row(v_elements, v2))
    # and the same V change costs the same whatever K is
    a_f16, b_f16 = _llama(model, context, parallel, "f16", v1), _llama(model, context, parallel, "f16", v2)
    assert a.kv_bytes - b.kv_bytes == a_f16.kv_bytes - b_f16.kv_bytes
    assert (a.weight_bytes, a.compute_buffer_bytes) == (b.weight_bytes, b.compute_buffer_bytes)


# -- layer placement -------------------------------------------------------------------------------------------

@FAST
@given(gguf_models(), st.integers(1, 1 << 16))
def test_llama_cpp_ngl_puts_the_last_layers_on_the_gpu_and_decode_reads_the_rest_from_host_memory(model, context):
    """llama.cpp offloads the last -ngl layers, and the output layer too when -ngl exceeds the layer count
    (llama-model.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers). Decoding a token reads the weights and KV of the
    GPU layers at the V100's bandwidth and the rest at host bandwidth (the planner's two stated bandwidths)."""
    n = model.n_layers
    kv_layer = _row(model.n_kv_heads * model.head_dim, "f16") + _row(model.n_kv_heads * (model.head_dim_v or
                                                                                        model.head_dim), "f16")
    for ngl in sorted({0, n // 2, n, n + 1}):
        p = plan_llama_cpp(model, 1 << 20, 1, context, "f16", "f16", 1, 1.0, ngl)  # a GPU nothing overflows
        on_gpu, output_on_gpu = min(ngl, n), ngl > n
        assert p.weight_bytes == sum(model.layer_bytes[n - on_gpu:]) + (model.output_bytes if output_on_gpu else 0)
        assert p.layers_offloaded == n - on_gpu
        gpu_read = p.weight_bytes + kv_layer * on_gpu * context
        host_read = (sum(model.layer_bytes[:n - on_gpu]) + (0 if output_on_gpu else model.output_bytes)
                     + kv_layer * (n - on_gpu) * context)
        expected = 1 / (gpu_read / V100_BANDWIDTH_BYTES_S + host_read / HOST_BANDWIDTH_BYTES_S)
        assert abs(p.decode_ceiling_tps - expected) <= 1e-12 * expected, ngl


# -- per-GPU sums ----------------------------------------------------------------------------------------------

@FAST
@given(gguf_models(), contexts, slots, st.sampled_from(CACHE_TYPES), st.integers(2, 8))
def test_llama_cpp_layer_split_per_gpu_sums_to_the_one_gpu_figures(model, context, parallel, k, n_gpus):
    one, split = _llama(model, context, parallel, k, k), _llama(model, context, parallel, k, k, n_gpus=n_gpus)
    assert 0 <= split.weight_bytes * n_gpus - one.weight_bytes < n_gpus
    assert 0 <= split.kv_bytes * n_gpus - one.kv_bytes < n_gpus
    # -ngl 99 puts every layer and the output layer on the GPUs: the one-GPU weights are all of them but the input
    # embedding, which llama.cpp keeps in host memory
    assert one.weight_bytes == sum(model.layer_bytes) + model.output_bytes


@st.composite
def hf_models(draw) -> HfModel:
    n_kv = draw(st.sampled_from([1, 2, 4, 8, 16]))
    head_dim = draw(st.sampled_from([64, 128]))
    n_heads = 16 * draw(st.integers(1, 4))  # divisible by every TP candidate
    return HfModel(architecture="LlamaForCausalLM", n_layers=draw(st.integers(1, 80)), n_heads=n_heads,
                   n_kv_heads=min(n_kv, n_heads), head_dim=head_dim, max_position_embeddings=1 << 17,
                   weight_bytes=draw(st.integers(100 * MiB, 60_000 * MiB)), hidden_size=n_heads * head_dim,
                   vocab_size=draw(st.integers(1000, 160000)))


@FAST
@given(hf_models(), st.sampled_from([1, 2, 4, 8]), st.integers(1, 1 << 17), st.sampled_from(["auto", "fp8"]))
def test_vllm_tensor_parallel_per_gpu_sums_to_the_whole_model(model, tp, length, dtype):
    p = plan_vllm(model, GPU_MIB, 8, tp, length, 0.9, dtype)
    assert p.n_gpus == tp
    assert 0 <= p.weight_bytes * tp - model.weight_bytes < tp
    whole_kv = p.kv_bytes_per_token * (-(-length // 16) * 16)  # one sequence in whole blocks of 16 tokens
    element = {"auto": 2, "fp8": 1}[dtype]
    assert p.kv_bytes_per_token == 2 * model.n_layers * model.n_kv_heads * model.head_dim * element
    if model.n_kv_heads % tp == 0:  # the KV heads split evenly over the ranks
        assert p.kv_bytes * tp == whole_kv
    else:  # fewer KV heads than ranks: vLLM replicates one head per rank
        assert p.kv_bytes * tp > whole_kv
        assert p.kv_bytes == whole_kv // model.n_kv_heads


@FAST
@given(hf_models(), st.sampled_from([1, 2, 4, 8]), st.integers(1, 1 << 17), st.integers(1, 1 << 17))
def test_vllm_kv_monotonic_in_length_and_dtype(model, tp, l1, l2):
    lo, hi = sorted((l1, l2))
    auto_lo, auto_hi = (plan_vllm(model, GPU_MIB, 8, tp, n, 0.9, "auto") for n in (lo, hi))
    fp8_lo = plan_vllm(model, GPU_MIB, 8, tp, lo, 0.9, "fp8")
    assert auto_hi.kv_bytes >= auto_lo.kv_bytes
    assert auto_lo.kv_bytes == 2 * fp8_lo.kv_bytes


# -- never under the engine's logged buffers -------------------------------------------------------------------

MEASURED = DATA["cases"]


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(MEASURED), st.integers(1, 4), st.integers(1, 4))
def test_never_less_than_the_logged_buffers_at_the_measured_shapes(case, ctx_scale, slot_scale):
    """At the measured case and at `ctx_scale` times its context with `slot_scale` times its slots (same types,
    layers, flash attention): the plan is at least the logged model + KV + compute buffers, the KV cache scaled by
    the tokens cached. The logged compute buffer only grows with the cached tokens (it holds the KQ mask over them)."""
    context = case["ctx"] // case["parallel"] * ctx_scale
    parallel = case["parallel"] * slot_scale
    scaled = dict(case, ctx=context * parallel, parallel=parallel)
    p = measured_plan(scaled)
    tokens_ratio = context * parallel / case["ctx"]
    logged = (case["logged_model_mib"] + case["logged_kv_mib"] * tokens_ratio + case["logged_compute_mib"]) * MiB
    assert p.total_bytes >= logged
    assert p.kv_bytes >= case["logged_kv_mib"] * tokens_ratio * MiB * 0.99
    assert p.weight_bytes >= case["logged_model_mib"] * MiB * 0.999


def test_measured_shapes_kv_matches_ggml_layouts_per_type():
    """The measured 8B shape at 8192 tokens with q8_0 K and f16 V (not in the table: llama-server logs K and V
    separately, K (q8_0): 272.00 MiB, V (f16): 512.00 MiB, from the layouts): 32 layers x 8192 x 1024 elements."""
    model = measured_model("8b")
    p = plan_llama_cpp(model, 143771, 1, 8192, "q8_0", "f16", 1, 1.0, 99)
    assert p.kv_bytes == (272 + 512) * MiB
    p = plan_llama_cpp(model, 143771, 1, 8192, "f16", "q4_0", 1, 1.0, 99)
    assert p.kv_bytes == (512 + 144) * MiB
    assert kv_bytes_per_token(32, 8, 128, "q8_0") == 2 * 32 * 1024 * 34 // 32
