"""The llama.cpp planner against issue 12's table re-measured on an NVIDIA H200
(tests/data/llama_cpp_memory_remeasured.json): llama-server 0.3.16 started with each case's arguments, nvidia-smi's
used memory of the process once /health answered (and again after a 1000-token prompt), and the model / KV / compute
buffers it logged.

The models are the GgufModels read_gguf made from the measured GGUF files' headers (stored in the data), so the weights
are the files' own tensor bytes. Targets (issue 12): the planned total within 5 % of the measured VRAM and never more
than 2 % under it. Case 7 (-np 2, q8_0 K / f16 V) is one the planner was not fitted to.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.planner import GgufModel, MiB, llama_cpp_cuda_context_bytes, plan_llama_cpp

DATA = json.loads((Path(__file__).parent.parent / "data" / "llama_cpp_memory_remeasured.json").read_text())


def _model(key: str) -> GgufModel:
    fields = dict(DATA["models"][key]["gguf_model"])
    fields["layer_bytes"] = tuple(fields["layer_bytes"])
    return GgufModel(**fields)


def _plan(case: dict):
    return plan_llama_cpp(_model(case["model"]), DATA["gpu_mib"], 1, case["ctx"] // case["parallel"],
                          case["cache_type_k"], case["cache_type_v"], case["parallel"], 1.0, case["n_gpu_layers"],
                          flash_attn=case["flash_attn"],
                          cuda_context_bytes=llama_cpp_cuda_context_bytes(DATA["gpu"], DATA["cuda"]))


def _id(c: dict) -> str:
    kv = c["cache_type_k"] if c["cache_type_k"] == c["cache_type_v"] else f"{c['cache_type_k']}-{c['cache_type_v']}"
    fa = "fa" if c["flash_attn"] else "nofa"
    return f"case{c['case']}-{c['model']}-c{c['ctx']}-np{c['parallel']}-{kv}-{fa}-ngl{c['n_gpu_layers']}"


CASES = [pytest.param(c, id=_id(c)) for c in DATA["cases"]]

#: After a 1000-token prompt ggml-cuda's memory pool has grown by 64-128 MiB over the start-up figure; the planner
#: counts that growth (LLAMA_CPP_RUNTIME_GROWTH_BYTES). Before it did, the 1.5B tied case was 4 % under (4320
#: planned against 4502 MiB after the prompt); now every case is at least 0.988 of the after-prompt figure.
_AFTER_PROMPT_MISSES: dict[int, float] = {}  # none since the planner counts the growth after the first request


@pytest.mark.parametrize("case", CASES)
def test_total_within_5_percent_and_never_2_percent_under(case: dict):
    ratio = _plan(case).total_bytes / MiB / case["measured_mib"]
    assert 0.98 <= ratio <= 1.05, ratio


@pytest.mark.parametrize("case", CASES)
def test_weights_and_kv_are_the_logged_buffers(case: dict):
    p = _plan(case)
    assert p.weight_bytes / MiB == pytest.approx(case["logged_model_mib"], abs=0.01)
    assert p.kv_bytes / MiB == pytest.approx(case["logged_kv_mib"], abs=0.05)


@pytest.mark.parametrize("case", CASES)
def test_compute_buffer_is_close_to_the_logged_one(case: dict):
    # the 1.5B tied case is planned 0.844 of its logged 355.25 MiB; the 8B cases within 2 %
    ratio = _plan(case).compute_buffer_bytes / MiB / case["logged_compute_mib"]
    assert 0.84 <= ratio <= 1.05, ratio


@pytest.mark.parametrize("case", CASES)
def test_re_measurement_repeats_the_issue_table(case: dict):
    if case["issue_measured_mib"] is None:
        pytest.skip("not in issue 12's table")
    assert case["measured_mib"] == case["issue_measured_mib"]


@pytest.mark.parametrize("case", [
    pytest.param(c, id=_id(c), marks=pytest.mark.xfail(
        strict=True, reason=f"after a prompt the pool has grown: planned/measured {_AFTER_PROMPT_MISSES[c['case']]}"))
    if c["case"] in _AFTER_PROMPT_MISSES else pytest.param(c, id=_id(c)) for c in DATA["cases"]])
def test_total_after_a_1000_token_prompt_never_2_percent_under(case: dict):
    ratio = _plan(case).total_bytes / MiB / case["measured_after_prompt_mib"]
    assert ratio >= 0.98, ratio
