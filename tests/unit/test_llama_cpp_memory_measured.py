"""The llama.cpp planner against issue 12's table (tests/data/llama_cpp_memory_measured.json): llama-server started
on an NVIDIA GPU, its logged model / KV / compute buffers and nvidia-smi's used memory per case.

Each model shape is built directly as a GgufModel whose GPU-resident bytes equal the logged model buffer: the
output weight from its quant type (Q6_K 210 bytes per 256 weights, F16 2 bytes), output_norm f32, the rest of the
logged buffer spread over the layers. Tolerances: KV within 1 % of the logged KV; compute buffer at most 16 % under
(the 1.5B tied case, 299.75 planned against 355 logged: the ~55 MiB of allocator placement there is not modelled)
and at most 20 % over the logged one; total within 5 % of the measured VRAM and never more than 2 % under it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.planner import GgufModel, MiB, llama_compute_buffer, llama_cpp_cuda_context_bytes, plan_llama_cpp

DATA = json.loads((Path(__file__).parent.parent / "data" / "llama_cpp_memory_measured.json").read_text())
_BYTES_PER_WEIGHT = {"Q6_K": 210 / 256, "Q4_K": 144 / 256, "F16": 2}


def _model(key: str) -> GgufModel:
    """The shape of DATA's model `key` with GPU bytes matching its logged model buffer at -ngl 99."""
    m = DATA["models"][key]
    logged = next(c["logged_model_mib"] for c in DATA["cases"] if c["model"] == key and c["n_gpu_layers"] > m["n_layers"])
    matrix = m["n_vocab"] * m["n_embd"]
    token_embd = round(matrix * _BYTES_PER_WEIGHT[m["token_embd_type"]])
    output_norm = 4 * m["n_embd"]
    output = output_norm + (0 if m["tied_output"] else round(matrix * _BYTES_PER_WEIGHT[m["output_weight_type"]]))
    on_gpu_outside_layers = output + (token_embd if m["tied_output"] else 0)
    layers_total = round(logged * MiB) - on_gpu_outside_layers
    base, extra = divmod(layers_total, m["n_layers"])
    return GgufModel(
        architecture=m["architecture"], n_layers=m["n_layers"], n_head=m["n_head"], n_kv_heads=m["n_kv_heads"],
        head_dim=m["head_dim"], context_length=131072,
        layer_bytes=tuple(base + (1 if i < extra else 0) for i in range(m["n_layers"])),
        token_embd_bytes=token_embd, output_bytes=output, tied_output=m["tied_output"], n_embd=m["n_embd"],
        n_vocab=m["n_vocab"])


def _plan(case: dict):
    return plan_llama_cpp(_model(case["model"]), 143771, 1, case["ctx"] // case["parallel"], case["cache_type_k"],
                          case["cache_type_v"], case["parallel"], 1.0, case["n_gpu_layers"],
                          flash_attn=case["flash_attn"],
                          cuda_context_bytes=llama_cpp_cuda_context_bytes(DATA["gpu"], DATA["cuda"]))


CASES = [pytest.param(c, id=f"{c['model']}-c{c['ctx']}-np{c['parallel']}-{c['cache_type_k']}-"
                         f"{'fa' if c['flash_attn'] else 'nofa'}-ngl{c['n_gpu_layers']}") for c in DATA["cases"]]


@pytest.mark.parametrize("case", CASES)
def test_weights_match_the_logged_model_buffer(case: dict):
    assert _plan(case).weight_bytes / MiB == pytest.approx(case["logged_model_mib"], abs=0.1)


@pytest.mark.parametrize("case", CASES)
def test_kv_matches_the_logged_kv_cache(case: dict):
    assert _plan(case).kv_bytes / MiB == pytest.approx(case["logged_kv_mib"], rel=0.01)


@pytest.mark.parametrize("case", CASES)
def test_compute_buffer_is_close_to_the_logged_one(case: dict):
    ratio = _plan(case).compute_buffer_bytes / MiB / case["logged_compute_mib"]
    assert 0.84 <= ratio <= 1.20, ratio


@pytest.mark.parametrize("case", CASES)
def test_total_within_5_percent_and_never_2_percent_under(case: dict):
    ratio = _plan(case).total_bytes / MiB / case["measured_mib"]
    assert 0.98 <= ratio <= 1.05, ratio


@pytest.mark.parametrize("case", CASES)
def test_total_is_at_least_the_logged_buffers(case: dict):
    p = _plan(case)
    logged = case["logged_model_mib"] + case["logged_kv_mib"] + case["logged_compute_mib"]
    assert p.total_bytes / MiB >= logged


def test_the_old_planner_missed_the_targets_the_new_one_meets():
    """The table's own "before" column: no-FA and -ngl 20 were more than 2 % under."""
    before = [c["planner_before_mib"] / c["measured_mib"] for c in DATA["cases"]]
    assert min(before) < 0.98


@pytest.mark.parametrize("ctx", [4096, 8192, 32768, 131072])
@pytest.mark.parametrize("fa", [True, False])
@pytest.mark.parametrize("ngl", [0, 10, 32, 99])
def test_compute_buffer_grows_with_context_and_without_fa(ctx: int, fa: bool, ngl: int):
    m = _model("8b")
    layers, output = min(ngl, m.n_layers), ngl > m.n_layers
    here = llama_compute_buffer(m, ctx, layers, output, fa)
    assert llama_compute_buffer(m, 2 * ctx, layers, output, fa) >= here
    assert llama_compute_buffer(m, ctx, layers, output, False) >= llama_compute_buffer(m, ctx, layers, output, True)
    # never below the logits and the final norm
    assert here >= 4 * 512 * (m.n_vocab + m.n_embd)


@pytest.mark.parametrize("k", ["f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("v", ["f16", "q8_0", "q4_0"])
def test_monotonic_in_context_and_slots_and_k_v_independent(k: str, v: str):
    m = _model("8b")
    ctx_bytes = llama_cpp_cuda_context_bytes("h200", "13")

    def total(context: int, parallel: int, ck: str = k, cv: str = v) -> int:
        return plan_llama_cpp(m, 143771, 1, context, ck, cv, parallel, 1.0, 99, flash_attn=True,
                              cuda_context_bytes=ctx_bytes).total_bytes

    for parallel in (1, 2, 4):
        totals = [total(c, parallel) for c in (1024, 4096, 16384, 65536)]
        assert totals == sorted(totals)
        assert total(4096, parallel + 1) >= total(4096, parallel)
    # K and V contribute independently: changing V alone changes the total by the V bytes alone
    p_kv = plan_llama_cpp(m, 143771, 1, 8192, k, v, 1, 1.0, 99, cuda_context_bytes=ctx_bytes)
    p_kf = plan_llama_cpp(m, 143771, 1, 8192, k, "f16", 1, 1.0, 99, cuda_context_bytes=ctx_bytes)
    p_fv = plan_llama_cpp(m, 143771, 1, 8192, "f16", v, 1, 1.0, 99, cuda_context_bytes=ctx_bytes)
    p_ff = plan_llama_cpp(m, 143771, 1, 8192, "f16", "f16", 1, 1.0, 99, cuda_context_bytes=ctx_bytes)
    assert p_kv.kv_bytes - p_kf.kv_bytes == p_fv.kv_bytes - p_ff.kv_bytes


def test_cuda_context_table_rows():
    assert llama_cpp_cuda_context_bytes("H200", "13.0") == 600 * MiB
    assert llama_cpp_cuda_context_bytes("v100", "12.4") == 600 * MiB
    assert llama_cpp_cuda_context_bytes("v100", "11.8") == 800 * MiB
    assert llama_cpp_cuda_context_bytes("a100", "12.4") == 800 * MiB  # unknown: the conservative default
