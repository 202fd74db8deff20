"""Which quantized checkpoints LMDeploy's TurboMind engine runs on a V100, from the model's config.json.

TurboMind reads `quantization_config` (top level, or nested in text_config/llm_config) and accepts it, or asserts,
in lmdeploy/turbomind/converter.py get_tm_config (v0.15.0, lines 167-206): `awq` only with version "gemm", `gptq`
only with desc_act false and sym true, and (_validate_quant_group_size, lines 78-110) group_size 128 for both (0 or
absent means 128). Both are 4-bit formats (AWQFormat / GPTQFormat in turbomind/weight_format.py unpack int4) and
TurboMind runs them in float16 (converter.py:40-45), on compute capability 7.0 included
(docs/en/quantization/w4a16.md:5-10: "V100(sm70)"). FP8 weights need compute capability 8.9
(docs/en/quantization/w8a8.md:15-17: Ada and Hopper only). TurboMind's other formats (mxfp4, compressed-tensors
pack-quantized) are not offered by the toolkit yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.settings_base import problem

#: group sizes TurboMind accepts per format (lmdeploy/turbomind/converter.py _SUPPORTED_GROUP_SIZES, v0.15.0:86-92)
SUPPORTED_GROUP_SIZES: dict[str, frozenset[int]] = {"awq": frozenset({128}), "gptq": frozenset({128})}
DEFAULT_GROUP_SIZE = 128  # converter.py _DEFAULT_GROUP_SIZES (v0.15.0:78-84): 0 or absent means 128
_NESTED = ("text_config", "llm_config", "language_config")


@dataclass(frozen=True)
class TurbomindFormat:
    """What TurboMind is told about a checkpoint: model_format ("awq", "gptq" or None for unquantized float16 or
    bfloat16 weights), bits (4, or None when unquantized) and group_size (128, or None)."""

    model_format: str | None
    bits: int | None = None
    group_size: int | None = None

    def args(self) -> tuple[str, ...]:
        """The `lmdeploy serve api_server` words for it: ("--model-format", "awq"), or () for unquantized."""
        return ("--model-format", self.model_format) if self.model_format else ()


def quantization_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """The `quantization_config` of a parsed config.json: at the top level, else in text_config / llm_config /
    language_config (as lmdeploy's search_nested_config finds it for vision-language models); None when absent."""
    if isinstance(config.get("quantization_config"), dict):
        return config["quantization_config"]
    for key in _NESTED:
        sub = config.get(key)
        if isinstance(sub, dict) and isinstance(sub.get("quantization_config"), dict):
            return sub["quantization_config"]
    return None


def turbomind_format(config: dict[str, Any], key: str = "lmdeploy_instances.model") -> tuple[TurbomindFormat | None,
                                                                                                 list[str]]:
    """Decide how TurboMind loads the model of a parsed config.json on a V100: (format, []) when it can, (None,
    problems) otherwise, each problem one line of roles.settings.problem naming `key` (the setting that chose the
    model), the value found in config.json, why, and the fix."""
    qc = quantization_config(config)
    if qc is None:
        return TurbomindFormat(None), []
    written = str(qc.get("quant_method", ""))
    method = written.lower()
    if written != method and method in ("awq", "gptq", "fp8", "compressed-tensors", "mxfp4"):
        # LMDeploy compares quant_method as written with the --model-format it is given, which its parser takes in
        # lower case only (turbomind/converter.py:171-176 at v0.15.0: "mismatched quant method")
        return None, [problem(key, f"quant_method {written}", "LMDeploy 0.15.0 compares it as written with its "
                              f"--model-format choice {method!r} and stops at load (mismatched quant method)",
                              f"write \"quant_method\": \"{method}\" in the model's config.json")]
    fix_other = ("choose a 4-bit AWQ (version gemm) or GPTQ (desc_act false, sym true) checkpoint with group size "
                 "128, or the unquantized model")
    if method == "fp8":
        return None, [problem(key, "quant_method fp8", "FP8 weights need compute capability 8.9 (LMDeploy "
                              "docs/en/quantization/w8a8.md: Ada, Hopper); a V100 is 7.0", fix_other)]
    if method not in SUPPORTED_GROUP_SIZES:
        return None, [problem(key, f"quant_method {method or '(none)'}", "v100kit runs only AWQ and GPTQ "
                              "checkpoints with LMDeploy's TurboMind", fix_other)]
    problems = []
    bits = qc.get("bits", qc.get("w_bit", 4))
    if bits != 4:
        problems.append(problem(key, f"{method} bits {bits}", "TurboMind's AWQ and GPTQ kernels are 4-bit "
                                "(lmdeploy/turbomind/weight_format.py unpacks int4)", fix_other))
    raw_group = qc.get("group_size", qc.get("q_group_size", 0))
    try:
        group = int(raw_group or DEFAULT_GROUP_SIZE)
    except (TypeError, ValueError):  # LMDeploy's int() of it fails at start (converter.py get_tm_config)
        group = raw_group
    if group not in SUPPORTED_GROUP_SIZES[method]:
        problems.append(problem(key, f"{method} group_size {group}", "TurboMind accepts group size "
                                f"{', '.join(map(str, sorted(SUPPORTED_GROUP_SIZES[method])))} for {method} "
                                "(lmdeploy/turbomind/converter.py _SUPPORTED_GROUP_SIZES)", fix_other))
    if method == "awq" and qc.get("version") != "gemm":  # absent too: LMDeploy reads it with .get('version')
        problems.append(problem(key, f"awq version {qc.get('version')}", "TurboMind loads AWQ's GEMM packing "
                                "only (converter.py: version = quant_config.get('version'); assert version == "
                                "'gemm'), and config.json's quantization_config " + ("says another" if "version" in qc
                                                                                     else "names none"),
                                fix_other))
    if method == "gptq" and (qc.get("desc_act", False) or not qc.get("sym", True)):
        problems.append(problem(key, f"gptq desc_act {qc.get('desc_act', False)} sym {qc.get('sym', True)}",
                                "TurboMind loads GPTQ without act-order and symmetric only (converter.py: "
                                "assert not desc_act and sym)", fix_other))
    if problems:
        return None, problems
    return TurbomindFormat(method, 4, group), []


#: The architectures (config.json architectures[0]) TurboMind runs: lmdeploy/turbomind/supported_models.py
#: SUPPORTED_ARCHS at v0.15.0 (lines 7-33). Any other is served by LMDeploy's PyTorch engine, whatever --backend says
#: (lmdeploy/archs.py autoget_backend; cli/serve.py:231-233), with a warning in the log only.
SUPPORTED_ARCHS = frozenset({
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
    "InternVLChatModel", "InternVLForConditionalGeneration", "InternS1ForConditionalGeneration", "LlamaForCausalLM",
    "InternLM2ForCausalLM", "InternLM3ForCausalLM", "Glm4MoeLiteForCausalLM", "GptOssForCausalLM",
    "MixtralForCausalLM"})


def architecture(config: dict[str, Any]) -> str | None:
    """The architecture LMDeploy reads from a parsed config.json (lmdeploy/archs.py get_model_arch, v0.15.0:152-158):
    architectures[0], else the class of auto_map's AutoModelForCausalLM (top level, then language_config); None."""
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    for where in (config, config.get("language_config")):
        auto = where.get("auto_map") if isinstance(where, dict) else None
        if isinstance(auto, dict) and isinstance(auto.get("AutoModelForCausalLM"), str):
            return auto["AutoModelForCausalLM"].split(".")[-1]
    return None


def architecture_problems(config: dict[str, Any], key: str = "lmdeploy_instances.model") -> list[str]:
    """[] when TurboMind runs the model's architecture (SUPPORTED_ARCHS; Glm4MoeLite only without a vision_config,
    supported_models.py:67-69); else one problem naming `key`: LMDeploy would serve it with its PyTorch engine, which
    the toolkit neither plans nor checks on Volta."""
    arch = architecture(config)
    if arch in SUPPORTED_ARCHS and not (arch == "Glm4MoeLiteForCausalLM" and config.get("vision_config") is not None):
        return []
    return [problem(key, f"architecture {arch or '(none in config.json)'}", "TurboMind does not run it "
                    "(lmdeploy/turbomind/supported_models.py SUPPORTED_ARCHS): LMDeploy would serve it with its "
                    "PyTorch engine instead, which v100kit does not plan or check on Volta",
                    "serve it with vLLM (vllm_instances) or llama.cpp (a GGUF build, llama_cpp_instances), or "
                    f"choose a model of {', '.join(sorted(SUPPORTED_ARCHS))}")]
