"""The vLLM planner against every case of tests/data/vllm_startup_corpus.json (public start-up logs): one row per case
with whether vLLM started, the KV tokens it logged, the KV tokens the planner predicts and the error (issue 12's table).

    PYTHONPATH=$PWD .venv/bin/python tools/vllm_corpus_table.py

tests/unit/test_vllm_corpus.py asserts on the same functions; this script asserts nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from roles.planner import GiB, HfModel, Plan, plan_vllm

CORPUS_FILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_startup_corpus.json"


def corpus() -> list[dict]:
    return json.loads(CORPUS_FILE.read_text())["cases"]


def model_of(case: dict) -> HfModel:
    """The case's model; weights per GPU as logged x TP, else derived from the parameter count (whole model, GiB)."""
    m = case["model"]
    per_gpu = case.get("weights_gib_logged")
    weights = per_gpu * case["tp"] if per_gpu else case["weights_gib_from_params"]
    return HfModel(
        architecture=m["name"], n_layers=m["layers"], n_heads=m["heads"], n_kv_heads=m["kv_heads"],
        head_dim=m["head_dim"], max_position_embeddings=m["max_position_embeddings"],
        weight_bytes=int(weights * GiB), quantization=m.get("quantization"),
        hidden_size=m["hidden"], intermediate_size=m["intermediate"], vocab_size=m["vocab"],
    )


def plan_of(case: dict, **override) -> Plan:
    """The planner's plan for the case as vLLM was started (override: e.g. enforce_eager=True); a vision-language
    case's encoder_memory_gib is the planner's encoder term; a V1 case's v1_profile_tokens is the release's profile
    run as its code sets it (VllmRelease.profile_tokens; absent: the planner's default), its v1_sampler_path the
    release's top-k/top-p path (VllmRelease.sampler_path; absent: the planner's default)."""
    case = {**case, **override}
    return plan_vllm(model_of(case), case["gpu_mib"], case["n_gpus"], case["tp"], case["max_model_len"],
                     case["gpu_memory_utilization"], "auto", case["max_num_seqs"],
                     enforce_eager=case["enforce_eager"], engine=case["engine"],
                     enable_chunked_prefill=case["chunked_prefill"], vllm_version=case["vllm_version"],
                     encoder_bytes=int(case.get("encoder_memory_gib", 0) * GiB),
                     v1_profile_tokens=case.get("v1_profile_tokens"), sampler_path=case.get("v1_sampler_path"))


def predicted_tokens(plan: Plan) -> int:
    """The KV tokens the plan says the cache holds (fits: its capacity line; refused for length: from the refusal;
    refused otherwise: 0)."""
    text = "\n".join(plan.reasons)
    if "the KV cache holds " in text:
        return int(text.split("the KV cache holds ")[1].split()[0])
    if "stored in KV cache (" in text:
        return int(text.split("stored in KV cache (")[1].split(")")[0])
    return 0


def row(case: dict) -> dict:
    """One table row: case id, engine, TP, GPU MiB, started, logged and planned KV tokens, error (planned vs logged,
    None without a logged figure), the plan's outcome and its first refusal."""
    plan = plan_of(case)
    logged = (case.get("logged") or {}).get("kv_tokens")
    pred = predicted_tokens(plan)
    return {"id": case["id"], "engine": case["engine"], "tp": case["tp"], "gpu_mib": case["gpu_mib"],
            "started": case["started"], "logged": logged, "planned": pred,
            "error": (pred - logged) / logged if logged else None,
            "plan": "fits" if plan.fits else "refused",
            "reason": "" if plan.fits else plan.reasons[0].split(":")[0][:60]}


def table(rows: list[dict]) -> str:
    lines = ["| case | engine | TP | GPU MiB | vLLM started | logged KV tokens | planned KV tokens | error | plan "
             "| refusal |", "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        err = f"{r['error']:+.1%}" if r["error"] is not None else "n/a"
        logged = r["logged"] if r["logged"] is not None else "-"
        lines.append(f"| {r['id']} | {r['engine']} | {r['tp']} | {r['gpu_mib']} | {'yes' if r['started'] else 'no'} "
                     f"| {logged} | {r['planned']} | {err} | {r['plan']} | {r['reason']} |")
    return "\n".join(lines)


def main() -> int:
    rows = [row(c) for c in corpus()]
    print(table(rows))
    agree = sum(1 for r in rows if (r["plan"] == "fits") == r["started"])
    over = [r["id"] for r in rows if r["error"] is not None and r["error"] > 0]
    print(f"\n{len(rows)} cases; plan agrees with vLLM's start-up in {agree}; planned above logged: "
          f"{', '.join(over) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
