"""roles/lmdeploy/engine.py: the declaration the registry will list, and its hooks on a decided plan."""

from __future__ import annotations

import dataclasses

from lab.models import TURBOMIND_CONFIG, write_tiny_hf
from roles.engines import Engine, PlanInputs
from roles.lmdeploy.engine import ENGINE
from tests.plan.lmdeploy_deploy_settings import settings_of


def test_every_field_of_the_engine_interface_is_declared():
    declared = {f.name for f in dataclasses.fields(Engine)}
    assert all(getattr(ENGINE, name) is not None for name in declared - {"doctor", "evidence"})
    assert (ENGINE.name, ENGINE.role, ENGINE.key, ENGINE.unit, ENGINE.config_dir) == (
        "lmdeploy", "lmdeploy", "lmdeploy_instances", "lmdeploy", "/etc/lmdeploy")
    assert ENGINE.unit_of("q") == "lmdeploy@q" and ENGINE.key_file("q") == "/etc/lmdeploy/q.key.env"


def test_hooks_on_a_plan(tmp_path):
    model = write_tiny_hf(tmp_path / "m", config={**TURBOMIND_CONFIG, "quantization_config": {"quant_method": "awq", "bits": 4,
                                                                          "group_size": 128, "version": "gemm"}})
    s = settings_of({"gpu_count": 2, "lmdeploy_instances": {"q": {"model_source": str(model), "port": 23400,
                                                                  "gpus": [1], "served_model_name": "qwen"}}})
    p, problems = ENGINE.plan(PlanInputs(s, [], [], None, None, {23400: "vllm@x"}, lambda cls, **kw: "3.13"))
    assert p is None and "lmdeploy_instances.q.port = 23400" in problems[0] and "vllm@x already uses it" in problems[0]
    p, problems = ENGINE.plan(PlanInputs(s, [], [], None, None, {}, lambda cls, **kw: "3.13"))
    assert problems == []
    inst = ENGINE.served(p)[0]
    assert ENGINE.ports(s) == {23400: "lmdeploy@q"}
    claims = ENGINE.claims(p, {0: s.gpu_memory_mib, 1: s.gpu_memory_mib})
    assert list(claims) == [1] and claims[1] == [("lmdeploy@q", inst.memory.claim_bytes)]
    assert ENGINE.bench.model_name(inst) == "qwen" and ENGINE.bench.n_gpu_layers(inst) == 0
    assert ENGINE.bench.request_limit(inst) == (inst.session_len, "session_len")
    env = ENGINE.environment(p, inst)
    assert "CUDA_VISIBLE_DEVICES=1\n" in env and "LMDEPLOY_KEY=-\n" in env
    top, rows = ENGINE.summary(None, p, None)
    assert top["lmdeploy"]["version"] == "0.15.0" and rows["lmdeploy@q"]["model_format"] == "awq"
    line = ENGINE.memory_line("lmdeploy@q", rows["lmdeploy@q"], rows["lmdeploy@q"]["plan"])
    assert line.startswith("   lmdeploy@q: FITS on 1 GPU(s), TurboMind awq")
    assert ENGINE.table(top)[0].startswith("   LMDeploy 0.15.0 (TurboMind engine, Python 3.13)")


def test_a_vllm_refusal_of_awq_on_volta_names_lmdeploy_and_only_where_turbomind_runs_it():
    """vLLM's own refusal (its AWQ kernels need 7.5: "Minimum capability: 75. Current capability: 70", vllm#4202)
    offers LMDeploy only for a model LMDeploy's own instances would take: 4-bit AWQ of an architecture in
    TurboMind's SUPPORTED_ARCHS (lmdeploy/turbomind/supported_models.py) with a head dimension that has an sm70
    attention kernel (64/128/256/576: src/turbomind/kernels/attention/kernel/*_sm70_*.cu of v0.15.0). Before, an 8-bit
    check was all, and a model LMDeploy refuses (head dimension 96, a PyTorch-engine architecture) named it."""
    from lab.models import HF_CONFIG
    from roles.vllm.decide import model_problems
    from roles.vllm.settings import VllmInstance
    from roles.vllm.versions import DEFAULT_VERSION, VLLM_RELEASES

    inst, rel = VllmInstance(model_path="/srv/m"), VLLM_RELEASES[DEFAULT_VERSION]
    awq4 = {**HF_CONFIG, **TURBOMIND_CONFIG, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                                                  "version": "gemm"}}
    [why] = model_problems("vllm_instances.m", inst, awq4, (7, 0), rel)
    assert "Minimum capability: 75. Current capability: 70" in why and "LMDeploy's TurboMind" in why
    assert "lmdeploy_instances" in why
    for refused_by_lmdeploy in ({**awq4, "quantization_config": {**awq4["quantization_config"], "bits": 8}},
                                {**awq4, "head_dim": 96},
                                {**awq4, "architectures": ["PhiMoEForCausalLM"]}):
        [why] = model_problems("vllm_instances.m", inst, refused_by_lmdeploy, (7, 0), rel)
        assert "Minimum capability: 75" in why and "LMDeploy" not in why, refused_by_lmdeploy


def test_the_bench_reads_the_tensor_parallel_size_from_each_engine_s_own_setting(tmp_path):
    """LMDeploy's setting is `tp` (`--tp`), vLLM's `tensor_parallel_size`: the bench's roofline gets the one each
    instance was given, not 1 (it read `tensor_parallel_size` of every engine before)."""
    from roles.vllm.engine import ENGINE as VLLM
    from roles.vllm.settings import VllmInstance

    model = write_tiny_hf(tmp_path / "m", config={**TURBOMIND_CONFIG, "num_attention_heads": 2,
                                                  "num_key_value_heads": 2})  # two KV heads: one per rank
    s = settings_of({"gpu_count": 2, "lmdeploy_instances": {"q": {"model_source": str(model), "port": 23400,
                                                                  "gpus": [0, 1], "tp": 2}}})
    p, problems = ENGINE.plan(PlanInputs(s, [], [], None, None, {}, lambda cls, **kw: "3.13"))
    assert problems == []
    [inst] = ENGINE.served(p)
    assert ENGINE.bench.tensor_parallel(inst) == 2
    vinst = type("Inst", (), {"settings": VllmInstance(model_path="/srv/m", tensor_parallel_size=2)})()
    assert VLLM.bench.tensor_parallel(vinst) == 2


def test_a_session_len_beyond_the_trained_positions_is_a_warning_of_the_plan(tmp_path):
    """LMDeploy accepts a session_len past config.json's max_position_embeddings (vLLM refuses the same): the plan
    says so in preflight's warnings instead of staying silent."""
    from lab.models import HF_CONFIG

    model = write_tiny_hf(tmp_path / "m", config=TURBOMIND_CONFIG)
    trained = HF_CONFIG["max_position_embeddings"]
    for session_len, warned in ((trained, False), (trained * 4, True)):
        s = settings_of({"lmdeploy_instances": {"q": {"model_source": str(model), "session_len": session_len}}})
        p, problems = ENGINE.plan(PlanInputs(s, [], [], None, None, {}, lambda cls, **kw: "3.13"))
        assert problems == [] and bool(ENGINE.notes(p)) == warned, ENGINE.notes(p)
    [note] = ENGINE.notes(p)
    assert f"session_len {trained * 4} is beyond the {trained} positions" in note and note.startswith("lmdeploy@q")


def test_a_gpu_nvidia_smi_does_not_list_is_refused(tmp_path):
    """nvidia-smi listing GPUs 0 and 2 (GPU 1 gone): lmdeploy_instances.q.gpus [1] is refused naming them."""
    from tests.unit.test_memory_plan_gpus import gpu

    model = write_tiny_hf(tmp_path / "m", config=TURBOMIND_CONFIG)
    gap = [gpu(0, "Tesla V100-SXM2-32GB", 32510, "7.0"), gpu(2, "Tesla V100-SXM2-32GB", 32510, "7.0")]
    for gpus, refused in (([1], True), ([2], False)):
        s = settings_of({"lmdeploy_instances": {"q": {"model_source": str(model), "gpus": gpus}}})
        p, problems = ENGINE.plan(PlanInputs(s, [], gap, None, None, {}, lambda cls, **kw: "3.13"))
        said = [x for x in problems if "lmdeploy_instances.q.gpus" in x]
        assert said == (["lmdeploy_instances.q.gpus = [1]: this host has GPUs 0, 2: nvidia-smi lists no GPU 1. Fix: "
                         "list existing GPU indices, or leave gpus unset"] if refused else []), problems
