"""The vLLM planner against vLLM's own start-up logs (tests/data/vllm_startup_corpus.json, public issues).

For every case: the planner never predicts more KV tokens than vLLM logged, never refuses what vLLM started, and
refuses what failed with vLLM's reason. Each case's error is printed (pytest -s) and kept in the report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.planner import GiB, HfModel, plan_vllm

CORPUS = json.loads((Path(__file__).parent.parent / "data" / "vllm_startup_corpus.json").read_text())["cases"]

#: The refusal text each failure reason must produce.
REASON_TEXT = {
    "max_seq_len": "is larger than the maximum number of tokens that can be stored in KV cache",
    "no_cache_memory": "No available memory for the cache blocks",
    "cuda_graph_oom": "capturing CUDA graphs",
}


def model_of(case: dict) -> HfModel:
    m = case["model"]
    per_gpu = case.get("weights_gib_logged")
    weights = per_gpu * case["tp"] if per_gpu else case["weights_gib_from_params"]
    return HfModel(
        architecture=m["name"], n_layers=m["layers"], n_heads=m["heads"], n_kv_heads=m["kv_heads"],
        head_dim=m["head_dim"], max_position_embeddings=m["max_position_embeddings"],
        weight_bytes=int(weights * GiB), quantization=m.get("quantization"),
        hidden_size=m["hidden"], intermediate_size=m["intermediate"], vocab_size=m["vocab"],
    )


def plan_of(case: dict):
    return plan_vllm(model_of(case), case["gpu_mib"], case["n_gpus"], case["tp"], case["max_model_len"],
                     case["gpu_memory_utilization"], "auto", case["max_num_seqs"],
                     enforce_eager=case["enforce_eager"], engine=case["engine"],
                     enable_chunked_prefill=case["chunked_prefill"])


def predicted_tokens(plan, case: dict) -> int:
    """The KV tokens the plan says the cache holds (fits: its capacity line; refused: from the refusal)."""
    text = "\n".join(plan.reasons)
    if "the KV cache holds " in text:
        return int(text.split("the KV cache holds ")[1].split()[0])
    if "stored in KV cache (" in text:
        return int(text.split("stored in KV cache (")[1].split(")")[0])
    return 0


@pytest.mark.parametrize("case", CORPUS, ids=[c["id"] for c in CORPUS])
def test_planner_agrees_with_vllm_log(case: dict):
    plan = plan_of(case)
    text = "\n".join(plan.reasons)
    logged = (case.get("logged") or {}).get("kv_tokens")
    pred = predicted_tokens(plan, case)
    err = f"{(pred - logged) / logged:+.1%}" if logged else "n/a"
    print(f"\n{case['id']}: started={case['started']} logged={logged} predicted={pred} error={err} "
          f"plan={plan.outcome}")
    if case["started"]:
        assert plan.fits, text
    else:
        assert not plan.fits, text
        assert REASON_TEXT[case["failure"]] in text, text
    if logged and case.get("kv_bound_checked", True):
        assert pred <= logged, f"predicted {pred} KV tokens, vLLM logged {logged}"


def test_cuda_graph_case_says_enforce_eager_avoids_it():
    case = next(c for c in CORPUS if c["failure"] == "cuda_graph_oom")
    assert "enforce_eager" in "\n".join(plan_of(case).reasons)
    assert plan_of({**case, "enforce_eager": True}).fits


def test_rope_scaling_yarn_derives_max_len_like_vllm():
    """vllm#8793: Qwen2.5-7B with a YaRN rope_scaling (factor 4, original 32768): vLLM derives 131072 and accepts
    65536; above 131072 the refusal is a length one, never "does not fit" or a memory reason."""
    from roles.planner import hf_model_from_config, vllm_derived_max_len
    config = {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 28, "num_attention_heads": 28,
              "num_key_value_heads": 4, "hidden_size": 3584, "intermediate_size": 18944, "vocab_size": 152064,
              "max_position_embeddings": 32768,
              "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}}
    assert vllm_derived_max_len(config) == 131072
    model = hf_model_from_config(config, int(14.2 * GiB))
    ok = plan_vllm(model, 81559, 1, 1, 65536, 0.9)
    assert ok.fits, ok.reasons
    too_long = plan_vllm(model, 81559, 1, 1, 140000, 0.9)
    text = "\n".join(too_long.reasons)
    assert not too_long.fits
    assert "max_model_len 140000 is greater than the derived max model len 131072" in text
    assert "does not fit" not in text and "No available memory" not in text and "KV cache (" not in text
    # linear/dynamic multiply max_position_embeddings; llama3/longrope do not
    assert vllm_derived_max_len({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2}}) \
        == 8192
    assert vllm_derived_max_len({"max_position_embeddings": 131072,
                                 "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}) == 131072
    assert vllm_derived_max_len({"max_position_embeddings": 8192, "seq_length": 4096}) == 4096
