"""CUDA-graph memory outside gpu_memory_utilization, against what vLLM's users measured and logged.

Expected values come from the reports, not the planner: issue 27's field report (7B fp16, 2 x V100-16GB, TP 2,
0.92, CUDA graphs, ran a month), vllm#7553 (nvidia-smi 23859 MiB of 24564 at 0.90 with graphs, TP 4, Yi-34B,
60 layers), vllm#11251 (TP 2 on 16 GB: out of memory capturing graphs at 0.95), LMCache#3430 (V1's logged estimate
0.52 GiB for Qwen3-8B, 36 layers, then out of memory with 6.37 GiB of KV at 0.9764 of 24 GB), vllm#11349 (V0,
Llama-3.2-1B, 16 layers: "Graph capturing finished in 14 secs, took 0.21 GiB"), vllm#22897 and #23184 (V1, one
"Graph capturing for N input tokens ... took X MiB" line per size, Llama-3.1-8B, 32 layers): the last three in
tests/data/vllm_graph_logs.json with their quotes and sources, the others in the start-up corpus. The graph counts are
those of vLLM's code at the reports' max_num_seqs 256 (V0's 35 sizes, the 67 of V1 PIECEWISE, 0.21's 51
piecewise + 35 full), which tests/unit/test_vllm_pin.py::test_cuda_graph_sizes_are_those_vllm_captures runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.planner import (GiB, MiB, V100_16GB_MIB, VLLM_CUDA_CONTEXT_BYTES, VLLM_GRAPH_RULES, HfModel, plan_vllm,
                           vllm_cuda_graph_sizes, vllm_graph_bytes)
from tools.vllm_corpus_table import corpus, plan_of

CASES = {c["id"]: c for c in corpus()}
#: graphs captured at max_num_seqs 256 (vLLM's default in the reports): V0, V1 PIECEWISE (vllm RFC #20098: "By
#: default, vLLM captures 67 graphs"), FULL_AND_PIECEWISE (0.19.1 and later: 51 + 35)
V0_GRAPHS, V1_PIECEWISE_GRAPHS, V1_FULL_AND_PIECEWISE_GRAPHS = 35, 67, 86
#: public logs that print graph memory (vllm#11349's total, vllm#23184 and #22897's per-size lines)
LOGS = json.loads((Path(__file__).parents[1] / "data" / "vllm_graph_logs.json").read_text())
#: the readable per-size lines (size: MiB) of Llama-3.1-8B's V1 PIECEWISE capture, both threads: a subset of its sizes
PER_SIZE_MIB = {int(k): v for log in LOGS["per_size"] for k, v in log["mib_by_size"].items()}


def test_field_report_2x_v100_16gb_tp2_at_0_92_is_accepted():
    """What ran for a month is accepted: the share outside 0.92 (0.08 x 16160 MiB) holds context and graphs."""
    case = CASES["issue27-field-2xv100-16g-tp2-7b-0.92"]
    assert case["gpu_mib"] == V100_16GB_MIB and case["tp"] == 2 and case["gpu_memory_utilization"] == 0.92
    plan = plan_of(case)
    assert plan.fits, plan.reasons
    assert plan.outside_bytes <= V100_16GB_MIB * MiB - int(V100_16GB_MIB * MiB * 0.92)


def test_graph_oom_logs_still_refused_and_accepted_eager():
    """vllm#11251 at 0.95 and LMCache#3430 ran out of memory capturing graphs: still refused, for that reason."""
    for cid in ("11251-16g-tp2-0.95", "lmcache3430-24g-qwen3-8b-v1"):
        plan = plan_of(CASES[cid])
        assert not plan.fits and "capturing CUDA graphs" in "\n".join(plan.reasons), cid
    assert plan_of(CASES["11251-16g-tp2-0.95"], enforce_eager=True).fits


def test_estimate_covers_what_was_measured():
    """Never below a measurement: vllm#7553's context + graphs per GPU are 23859 MiB (nvidia-smi with graphs) minus
    the 0.90 share of 24564 MiB; LMCache#3430's V1 logged a 0.52 GiB graph estimate at 36 layers on one GPU;
    vllm#11349 took 0.21 GiB at 16 layers; the per-size lines of vllm#23184/#22897 are a subset of the 67 sizes."""
    measured_7553 = (23859 - int(0.9 * 24564)) * MiB
    assert VLLM_CUDA_CONTEXT_BYTES + vllm_graph_bytes(4, False, 60, V0_GRAPHS) >= measured_7553
    assert vllm_graph_bytes(1, False, 36, V1_FULL_AND_PIECEWISE_GRAPHS) >= 0.52 * GiB
    for log in LOGS["total"]:  # vllm#11349: 0.21 GiB at 16 layers, 35 graphs
        assert vllm_graph_bytes(log["tp"], False, log["layers"], log["graphs"]) >= log["graph_gib"] * GiB, log["id"]
    assert len(PER_SIZE_MIB) == 22 and vllm_graph_bytes(1, False, 32, V1_PIECEWISE_GRAPHS) >= sum(
        PER_SIZE_MIB.values()) * MiB
    # and vllm#11251's failure: context + graphs above the 0.79 GiB it had outside at 0.95
    assert VLLM_CUDA_CONTEXT_BYTES + vllm_graph_bytes(2, False, 32, V0_GRAPHS) > 0.79 * GiB


def test_enforce_eager_and_unknown_layers():
    assert vllm_graph_bytes(2, True, 32, V0_GRAPHS) == 0
    # without the model (another engine's claim on a shared GPU) the flat estimate, above what a 32-layer model
    # captures at the toolkit's default max_num_seqs (64) under every rule
    for tp in (1, 2):
        for rule in VLLM_GRAPH_RULES:
            assert vllm_graph_bytes(tp, False) >= vllm_graph_bytes(tp, False, 32, len(vllm_cuda_graph_sizes(
                rule, 64, 2048))), (tp, rule)


#: Llama-2-7B's config.json (fp16, 6.74e9 parameters)
LLAMA_7B = HfModel(architecture="LlamaForCausalLM", n_layers=32, n_heads=32, n_kv_heads=32, head_dim=128,
                   max_position_embeddings=4096, weight_bytes=int(6.74e9) * 2, hidden_size=4096,
                   intermediate_size=11008, vocab_size=32000)


@pytest.mark.parametrize("engine,rule", [("V0", "v0"), ("V1", "v1_full_decode")])
def test_fewer_sequences_capture_fewer_graphs_and_leave_more_for_the_share(engine, rule):
    """Issue 27: the graphs follow max_num_seqs (vLLM captures sizes up to about max_num_seqs), so a 7B fp16 model
    on one V100-16GB at gpu_memory_utilization 0.96 (646 MiB outside) is accepted with 16 sequences (5 graphs) and
    refused at vLLM's default 256 (35), where 32 layers' graphs and the CUDA context do not fit outside."""
    kw = dict(engine=engine, cuda_graphs=rule, vllm_version="0.8.5.post1" if engine == "V0" else "0.19.1")
    few = plan_vllm(LLAMA_7B, V100_16GB_MIB, 1, 1, 2048, 0.96, "auto", 16, **kw)
    many = plan_vllm(LLAMA_7B, V100_16GB_MIB, 1, 1, 2048, 0.96, "auto", 256, **kw)
    assert len(vllm_cuda_graph_sizes(rule, 16, 2048)) == 5
    assert few.fits, few.reasons
    assert not many.fits and "capturing CUDA graphs" in "\n".join(many.reasons)
    assert few.outside_bytes - VLLM_CUDA_CONTEXT_BYTES == vllm_graph_bytes(1, False, 32, 5)


def test_v0_captures_its_list_once_per_pipeline_stage():
    """0.8.5.post1 worker/model_runner.py 1503-1504: V0 captures every size once per virtual engine (one per
    pipeline stage) on every GPU; V1 once."""
    v0 = [plan_vllm(LLAMA_7B, 32510, 2, 1, 2048, 0.9, "auto", 64, engine="V0", pipeline_parallel=pp,
                    cuda_graphs="v0").outside_bytes - VLLM_CUDA_CONTEXT_BYTES for pp in (1, 2)]
    assert v0 == [vllm_graph_bytes(1, False, 32, 11), vllm_graph_bytes(1, False, 16, 22)]
    v1 = plan_vllm(LLAMA_7B, 32510, 2, 1, 2048, 0.9, "auto", 64, engine="V1", pipeline_parallel=2,
                   cuda_graphs="v1_full_decode").outside_bytes - VLLM_CUDA_CONTEXT_BYTES
    assert v1 == vllm_graph_bytes(1, False, 16, 11)


def test_an_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown vLLM CUDA graph rule 'v2'"):
        vllm_cuda_graph_sizes("v2", 64, 2048)
    with pytest.raises(ValueError, match="unknown vLLM cuda_graphs 'v2'"):
        plan_vllm(LLAMA_7B, 32510, 1, 1, 2048, 0.9, cuda_graphs="v2")


def test_a_v1_release_outside_the_table_counts_vllms_own_default_mode():
    """A V1 release the table does not know (a corpus log's 0.21) is planned with FULL_AND_PIECEWISE, vLLM's own
    default cudagraph_mode from 0.19.1's code on (vllm/config/vllm.py 215, 234), which captures the most graphs of
    the V1 rules at every max_num_seqs; a V0 one with V0's rule."""
    for seqs in (1, 8, 64, 256, 1024):
        counts = {r: len(vllm_cuda_graph_sizes(r, seqs, 2048)) for r in VLLM_GRAPH_RULES if r != "v0"}
        assert max(counts.values()) == counts["v1_full_and_piecewise"], seqs
    for engine, rule in (("V1", "v1_full_and_piecewise"), ("V0", "v0")):
        unknown, known = (plan_vllm(LLAMA_7B, 32510, 1, 1, 2048, 0.9, "auto", 256, engine=engine,
                                    vllm_version="0.21.0", cuda_graphs=r).outside_bytes for r in (None, rule))
        assert unknown == known, engine


def test_tensor_parallel_graphs_cost_the_same_at_every_tp_above_one():
    """Custom all-reduce registers its buffers in every graph at any tensor parallel above 1 (vLLM's
    CustomAllreduce supports world sizes 2, 4, 6 and 8: vllm/distributed/device_communicators/custom_all_reduce.py
    _SUPPORTED_WORLD_SIZES), so TP 2 is costed as vllm#7553's TP 4 was calibrated, above TP 1; the per-graph
    figure is linear in the graphs (no log at TP 2 with few graphs: an extrapolation, roles/planner/vllm.py)."""
    assert vllm_graph_bytes(2, False, 32, V0_GRAPHS) == vllm_graph_bytes(4, False, 32, V0_GRAPHS) \
        > vllm_graph_bytes(1, False, 32, V0_GRAPHS)


def test_layers_without_graphs_is_an_error():
    with pytest.raises(ValueError, match="n_layers needs graphs"):
        vllm_graph_bytes(1, False, 32)


def test_another_engine_never_counts_fewer_graphs_than_a_planned_instance_of_up_to_80_layers():
    """Where llama.cpp plans beside a vLLM instance whose model it did not read (roles/llama_cpp/decide.py
    gpu_shares), the graphs it leaves room for cover any model of up to 80 layers (Llama-3-70B, Qwen2.5-72B) under
    the release's rule, and are never below the former flat estimate."""
    from roles.planner import vllm_unread_graph_bytes

    for tp in (1, 2):
        for rule in VLLM_GRAPH_RULES:
            for seqs in (1, 16, 64, 256, 1024):
                unread = vllm_unread_graph_bytes(tp, False, seqs, rule, "V1")
                assert unread >= vllm_graph_bytes(tp, False)
                for layers in (16, 32, 80):
                    assert unread >= vllm_graph_bytes(tp, False, layers, len(vllm_cuda_graph_sizes(rule, seqs, 8192)))
    assert vllm_unread_graph_bytes(1, True, 256, "v0", "V0") == 0
    # a release outside the table: V1's rule with the most graphs
    assert vllm_unread_graph_bytes(1, False, 256, None, "V1") == 80 * V1_FULL_AND_PIECEWISE_GRAPHS * MiB // 2


#: Llama-2-13B's config.json (fp16, 13.0e9 parameters)
LLAMA_13B = HfModel(architecture="LlamaForCausalLM", n_layers=40, n_heads=40, n_kv_heads=40, head_dim=128,
                    max_position_embeddings=4096, weight_bytes=int(13.0e9) * 2, hidden_size=5120,
                    intermediate_size=13824, vocab_size=32000)


def test_a_suggested_tensor_parallel_is_planned_with_the_releases_graphs():
    """A 13B fp16 model does not fit one V100-16GB; at tensor parallel 2 and 0.95 (808 MiB outside) 0.19.1's
    FULL_DECODE_ONLY graphs (40 layers x 11 x 0.75 MiB) and the context fit, so the refusal suggests TP 2; with
    FULL_AND_PIECEWISE's 30 graphs, or LoRA's 22, they would not, and nothing is suggested."""
    kw = dict(engine="V1", vllm_version="0.19.1", v1_profile_tokens=2048)
    decode = plan_vllm(LLAMA_13B, V100_16GB_MIB, 2, 1, 2048, 0.95, "auto", 64, cuda_graphs="v1_full_decode", **kw)
    both = plan_vllm(LLAMA_13B, V100_16GB_MIB, 2, 1, 2048, 0.95, "auto", 64, cuda_graphs="v1_full_and_piecewise",
                     **kw)
    assert not decode.fits and "fits with tensor_parallel_size 2 on 2 GPUs of 16160 MiB" in decode.reasons
    assert not both.fits and not any("tensor_parallel_size 2" in r for r in both.reasons)
    # nor with LoRA, whose adapter graphs double FULL_DECODE_ONLY's 11
    lora = plan_vllm(LLAMA_13B, V100_16GB_MIB, 2, 1, 2048, 0.95, "auto", 64, cuda_graphs="v1_full_decode", lora=True,
                     **kw)
    assert not lora.fits and not any("tensor_parallel_size 2" in r for r in lora.reasons)
