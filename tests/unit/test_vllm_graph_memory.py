"""CUDA-graph memory outside gpu_memory_utilization, against what vLLM's users measured and logged.

Expected values come from the reports, not the planner: issue 27's field report (7B fp16, 2 x V100-16GB, TP 2,
0.92, CUDA graphs, ran a month), vllm#7553 (nvidia-smi 23859 MiB of 24564 at 0.90 with graphs, TP 4, Yi-34B,
60 layers), vllm#11251 (TP 2 on 16 GB: out of memory capturing graphs at 0.95), LMCache#3430 (V1's logged estimate
0.52 GiB for Qwen3-8B, 36 layers, then out of memory with 6.37 GiB of KV at 0.9764 of 24 GB).
"""

from __future__ import annotations

from roles.planner import GiB, MiB, V100_16GB_MIB, VLLM_CUDA_CONTEXT_BYTES, vllm_graph_bytes
from tools.vllm_corpus_table import corpus, plan_of

CASES = {c["id"]: c for c in corpus()}


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
    the 0.90 share of 24564 MiB; LMCache#3430's V1 logged a 0.52 GiB graph estimate at 36 layers on one GPU."""
    measured_7553 = (23859 - int(0.9 * 24564)) * MiB
    assert VLLM_CUDA_CONTEXT_BYTES + vllm_graph_bytes(4, False, 60) >= measured_7553
    assert vllm_graph_bytes(1, False, 36) >= 0.52 * GiB
    # and vllm#11251's failure: context + graphs above the 0.79 GiB it had outside at 0.95
    assert VLLM_CUDA_CONTEXT_BYTES + vllm_graph_bytes(2, False, 32) > 0.79 * GiB


def test_enforce_eager_and_unknown_layers():
    assert vllm_graph_bytes(2, True, 32) == 0
    # without the model (another engine's claim on a shared GPU) the flat estimate, above the per-layer one of a
    # 32-layer model
    assert vllm_graph_bytes(2, False) >= vllm_graph_bytes(2, False, 32)
