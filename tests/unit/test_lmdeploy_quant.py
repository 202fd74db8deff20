"""Routing of quantized checkpoints to TurboMind (roles/lmdeploy/quant.py). The accepted and refused
quantization_config blocks follow public checkpoints' config.json (written here from their hub pages, not fetched at
test time: only quant_method, bits, group_size, version, desc_act and sym matter to the decision); the rules they meet are LMDeploy
0.15.0's lmdeploy/turbomind/converter.py get_tm_config and _SUPPORTED_GROUP_SIZES."""

from __future__ import annotations

from roles.lmdeploy.quant import TurbomindFormat, turbomind_format

# huggingface.co/Qwen/Qwen2.5-7B-Instruct-AWQ config.json
AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq", "version": "gemm",
       "zero_point": True}
# huggingface.co/TheBloke/Llama-2-7B-Chat-GPTQ config.json (main branch)
GPTQ = {"bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False, "sym": True, "true_sequential": True,
        "model_name_or_path": None, "model_file_base_name": "model", "quant_method": "gptq"}
# huggingface.co/Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8 config.json
GPTQ_INT8 = {"bits": 8, "damp_percent": 0.01, "desc_act": False, "group_size": 128, "sym": True,
             "true_sequential": True, "quant_method": "gptq"}
# huggingface.co/Qwen/Qwen3-8B-FP8 config.json
FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def test_4bit_awq_and_gptq_go_to_turbomind():
    assert turbomind_format({"quantization_config": AWQ}) == (TurbomindFormat("awq", 4, 128), [])
    assert turbomind_format({"quantization_config": GPTQ}) == (TurbomindFormat("gptq", 4, 128), [])
    assert TurbomindFormat("awq", 4, 128).args() == ("--model-format", "awq")


def test_a_config_nested_in_text_config_is_found():
    assert turbomind_format({"text_config": {"quantization_config": AWQ}})[0] == TurbomindFormat("awq", 4, 128)


def test_unquantized_models_need_no_model_format():
    assert turbomind_format({"torch_dtype": "bfloat16"}) == (TurbomindFormat(None), [])
    assert TurbomindFormat(None).args() == ()


def test_fp8_is_refused_on_volta_with_the_fix():
    fmt, problems = turbomind_format({"quantization_config": FP8}, key="lmdeploy_instances.q3.model")
    assert fmt is None and len(problems) == 1
    assert problems[0].startswith("lmdeploy_instances.q3.model = 'quant_method fp8': ")
    assert "8.9" in problems[0] and "Fix: choose a 4-bit AWQ" in problems[0]


def test_what_turbomind_asserts_against_is_refused_before_the_host():
    cases = {"gptq bits 8": GPTQ_INT8, "group_size 64": {**AWQ, "group_size": 64},
             "version gemv": {**AWQ, "version": "gemv"}, "desc_act True": {**GPTQ, "desc_act": True},
             # converter.py reads quant_config.get('version') and asserts it is 'gemm': absent fails as well
             "awq version None": {k: v for k, v in AWQ.items() if k != "version"},
             "sym False": {**GPTQ, "sym": False}, "quant_method bitsandbytes": {"quant_method": "bitsandbytes"}}
    for needle, qc in cases.items():
        fmt, problems = turbomind_format({"quantization_config": qc})
        assert fmt is None and any(needle in p for p in problems), (needle, problems)


def test_a_missing_group_size_means_turbominds_default_128():
    assert turbomind_format({"quantization_config": {**AWQ, "group_size": 0}})[0].group_size == 128


def test_an_architecture_turbomind_lacks_is_refused_naming_it():
    """LMDeploy 0.15.0 serves a model whose architectures[0] is not in TurboMind's SUPPORTED_ARCHS
    (lmdeploy/turbomind/supported_models.py:7-33) with its PyTorch engine instead, with only a warning
    (lmdeploy/archs.py autoget_backend:40-48; cli/serve.py:231-233 ignores --backend turbomind for it)."""
    from roles.lmdeploy.quant import architecture_problems

    # huggingface.co/mistralai/Mistral-7B-Instruct-v0.3 and google/gemma-2-9b-it config.json
    for arch in ("MistralForCausalLM", "Gemma2ForCausalLM"):
        problems = architecture_problems({"architectures": [arch]}, "lmdeploy_instances.a.model_path")
        assert len(problems) == 1 and f"lmdeploy_instances.a.model_path = 'architecture {arch}'" in problems[0]
        assert "PyTorch engine" in problems[0] and "vllm_instances" in problems[0]
    # huggingface.co/Qwen/Qwen2.5-7B-Instruct-AWQ, meta-llama/Llama-3.1-8B-Instruct, OpenGVLab/InternVL2_5-8B
    for arch in ("Qwen2ForCausalLM", "LlamaForCausalLM", "InternVLChatModel"):
        assert architecture_problems({"architectures": [arch]}) == []
    # no architectures: LMDeploy reads auto_map's AutoModelForCausalLM (lmdeploy/archs.py get_model_arch:152-158)
    assert architecture_problems({"auto_map": {"AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"}}) == []
    assert architecture_problems({}) != []


def test_a_group_size_that_is_no_number_is_a_problem_not_a_traceback():
    fmt, problems = turbomind_format({"quantization_config": {**AWQ, "group_size": "abc"}}, "lmdeploy_instances.a.model_path")
    assert fmt is None and len(problems) == 1 and "lmdeploy_instances.a.model_path = 'awq group_size abc'" in problems[0]


def test_a_quant_method_not_in_lower_case_is_refused_and_not_offered():
    # LMDeploy 0.15.0 turbomind/converter.py:171-176 asserts model_format == quant_method as written, and its
    # --model-format choices are lower case (tests/data/lmdeploy/parsed-0.15.0.json): "AWQ" stops it at load
    from lab.models import HF_CONFIG, TURBOMIND_CONFIG
    from roles.engines import quant_fixes
    from roles.lmdeploy.quant import turbomind_format

    config = {**HF_CONFIG, **TURBOMIND_CONFIG,
              "quantization_config": {"quant_method": "AWQ", "bits": 4, "group_size": 128, "version": "gemm"}}
    fmt, problems = turbomind_format(config)
    assert fmt is None and "quant_method AWQ" in problems[0] and '"quant_method": "awq"' in problems[0]
    assert not any("LMDeploy" in f for f in quant_fixes(config, (7, 0), besides="vllm"))
    lower = {**config, "quantization_config": {**config["quantization_config"], "quant_method": "awq"}}
    assert turbomind_format(lower)[1] == [] and quant_fixes(lower, (7, 0), besides="vllm")
