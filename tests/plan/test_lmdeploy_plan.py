"""Plan-level tests (facts in, commands out) of roles/lmdeploy on a Debian 13 box (Python 3.13) with two 32 GB V100s,
and without a GPU: the TurboMind routing of a 4-bit AWQ model, the refusals of what TurboMind cannot run on Volta,
the KV plan against LMDeploy's own arithmetic, the rendered unit and arguments, and a second deploy that changes
nothing. Run through tests/plan/lmdeploy_deploy.py (the role's own operations, without the other roles')."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from lab.models import TURBOMIND_CONFIG, write_tiny_hf
from roles.lmdeploy.flags import ServeArgs, serve_argv
from roles.lmdeploy.quant import TurbomindFormat
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, converged, plan_commands

DEPLOY = ("tests/plan/lmdeploy_deploy.py",)
LAYER_SIZES = Path(__file__).resolve().parents[1] / "data" / "lmdeploy" / "layer_size-0.15.0.txt"
MIB = 1 << 20
SMI = "nvidia-smi --query-gpu"
TWO_V100 = {SMI: ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05",
                  "1, GPU-00000000-0000-0000-0000-000000000001, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05"],
            "sys.version_info": ["3.13"]}
NO_GPU = {"sys.version_info": ["3.13"]}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
# Qwen2.5-7B-Instruct-AWQ's config.json (huggingface.co/Qwen/Qwen2.5-7B-Instruct-AWQ): 28 layers, 28 heads, 4 KV heads,
# head_dim 128, max_position_embeddings 32768, quantization_config AWQ gemm 4-bit group 128
QWEN_AWQ = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
            "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "max_position_embeddings": 32768, "vocab_size": 152064, "torch_dtype": "float16",
            "quantization_config": {**AWQ, "modules_to_not_convert": None}}
QWEN_PATH = "/srv/models/qwen25-7b-awq"
QWEN_BYTES = 5_583_457_485  # the safetensors the fact reads (illustrative: the plan's arithmetic takes any size)


def host_model(path: str, config: dict, size: int) -> dict:
    """The HfModelDir fact's answer for a model directory on the host (roles/vllm/facts.py)."""
    return {f"test -r {path}/config.json": ["#files", f"{size} model.safetensors", "#index", "", "#config",
                                            json.dumps(config)]}


def plan(instances: dict, responses: dict) -> tuple[list[str], dict[str, str]]:
    """The commands and the uploads (text) of this role's deploy file on the Debian 13 box."""
    cmds, uploads = plan_raw(instances, responses)
    return cmds, {k: v.decode(errors="replace") for k, v in uploads.items()}


def tiny(tmp_path: Path, quant: dict | None = AWQ) -> str:
    return str(write_tiny_hf(tmp_path / "m", config={**TURBOMIND_CONFIG, **({"quantization_config": quant} if quant else {})}))


def plan_raw(instances: dict, responses: dict) -> tuple[list[str], dict[str, bytes]]:
    """The commands and the uploads (bytes) of this role's deploy file on the Debian 13 box."""
    uploads: dict[str, bytes] = {}
    cmds = plan_commands(DEBIAN_13, {"lmdeploy_instances": instances}, responses, deploys=DEPLOY, _uploads=uploads)
    return [str(c) for c in cmds], uploads


def env_of(uploads: dict[str, str], name: str = "tiny") -> dict[str, str]:
    return dict(line.split("=", 1) for line in uploads[f"/etc/lmdeploy/{name}.env"].splitlines())


def test_awq_4bit_model_is_routed_to_turbomind_with_model_format_awq(tmp_path):
    cmds, uploads = plan({"tiny": {"model_source": tiny(tmp_path)}}, TWO_V100)
    words = shlex.split(env_of(uploads)["LMDEPLOY_ARGS"])
    assert words[:3] == ["serve", "api_server", "/var/lib/llm/models/lmdeploy-tiny"]
    assert words[words.index("--backend") + 1] == "turbomind"
    assert words[words.index("--model-format") + 1] == "awq"
    assert words[words.index("--dtype") + 1] == "float16"
    # the words are the recorded sample's form: LMDeploy's own parser read them (tests/data/lmdeploy/parsed-0.15.0.json)
    recorded = json.loads((LAYER_SIZES.parent / "parsed-0.15.0.json").read_text())["samples"]["awq"]["argv"]
    assert [w for w in words if w.startswith("--")] == [w for w in recorded if w.startswith("--")]
    assert "systemctl start lmdeploy@tiny.service" in cmds


def test_fp16_model_has_no_model_format(tmp_path):
    _, uploads = plan({"tiny": {"model_source": tiny(tmp_path, None)}}, TWO_V100)
    assert "--model-format" not in env_of(uploads)["LMDEPLOY_ARGS"]


@pytest.mark.parametrize("quant, value", [
    ({"quant_method": "fp8", "fmt": "e4m3"}, "quant_method fp8"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False, "sym": True}, "gptq bits 8"),
    ({**AWQ, "group_size": 64}, "awq group_size 64"),
], ids=["fp8", "gptq-8bit", "awq-group64"])
def test_what_turbomind_cannot_run_on_volta_is_refused_with_the_fix_before_any_command(tmp_path, quant, value):
    with pytest.raises(SettingsError) as e:
        plan({"tiny": {"model_source": tiny(tmp_path, quant)}}, TWO_V100)
    text = str(e.value)
    assert f"lmdeploy_instances.tiny.model_source = '{value}'" in text
    assert "Fix: choose a 4-bit AWQ (version gemm) or GPTQ" in text


def _layer_size(head_dim: int, heads: int, block_len: int, t_bits: int, q_bits: int) -> int:
    """block::Layout::layer_size() as LMDeploy v0.15.0 computes it (recorded: tests/data/lmdeploy)."""
    for line in LAYER_SIZES.read_text().splitlines():
        if line and not line.startswith("#") and tuple(map(int, line.split()[:5])) == (head_dim, heads, block_len,
                                                                                       t_bits, q_bits):
            return int(line.split()[5])
    raise KeyError((head_dim, heads, block_len, t_bits, q_bits))


@pytest.mark.parametrize("tp, quant_policy", [(1, 0), (2, 8)])
def test_kv_plan_is_lmdeploys_arithmetic_over_the_tp_group(tp, quant_policy):
    """turbomind.cc:291-301: the cache is floor(free * cache_max_entry_count) of the smallest free memory of the TP
    group after the weights; blocks of cache_block_seq_len tokens sized by block::Layout::layer_size() (the recorded
    table) times the layers. GPU 1 has 4000 MiB in use by another process: the group's smallest free memory."""
    from roles.engines import PlanInputs
    from roles.lmdeploy.engine import ENGINE
    from roles.nvidia_driver.shapes import GpuInfo
    from tests.plan.lmdeploy_deploy_settings import settings_of

    gpus = [GpuInfo(index=i, name="Tesla V100-SXM2-32GB", compute_cap="7.0", memory_mib=32510, persistence_mode=True,
                    driver_version="580.95.05", memory_used_mib=used, memory_free_mib=32510 - used,
                    processes=[{"pid": 9, "name": "other", "used_mib": used, "unit": ""}] if used else [])
            for i, used in ((0, 0), (1, 4000))]
    s = settings_of({"lmdeploy_instances": {"q": {"model_path": QWEN_PATH, "tp": tp, "quant_policy": quant_policy,
                                                  "session_len": 32768, "gpus": [1, 0][:tp] if tp == 1 else [0, 1]}}})
    facts = {"PythonVersion": "3.13", "HfModelDir": {"config": QWEN_AWQ, "safetensors_bytes": QWEN_BYTES}}
    p, problems = ENGINE.plan(PlanInputs(s, [], gpus, None, None, {}, lambda cls, **kw: facts[cls.__name__]))
    assert problems == []
    m = p.instances[0].memory
    weights = -(-QWEN_BYTES // tp)
    free = (32510 - 4000) * MIB - weights - m.cuda_context_bytes  # GPU 1 is in every group here
    assert m.free_bytes == free
    assert m.kv.cache_bytes == int(free * 0.8)
    block = 28 * _layer_size(128, 4 // tp, 64, 16 if quant_policy else 0, quant_policy or 16)
    assert m.kv.block_bytes == block
    assert m.kv.blocks == int(free * 0.8) // block and m.kv.tokens == m.kv.blocks * 64
    assert m.kv.session_blocks == 32768 // 64


def test_a_session_longer_than_the_cache_is_refused_naming_session_len(tmp_path):
    resp = {**TWO_V100, **host_model(QWEN_PATH, QWEN_AWQ, QWEN_BYTES)}
    with pytest.raises(SettingsError) as e:
        plan({"q": {"model_path": QWEN_PATH, "session_len": 1 << 20, "cache_max_entry_count": 0.1}}, resp)
    text = str(e.value)
    assert "lmdeploy_instances.q.session_len = 1048576" in text and "quant_policy 8" in text


def test_unit_has_the_shared_hardening_and_no_key_and_the_key_is_never_in_argv(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-lmdeploy-0123456789abcdef\n")
    cmds, uploads = plan({"tiny": {"model_source": tiny(tmp_path), "api_key_file": str(key)}}, TWO_V100)
    unit = uploads["/etc/systemd/system/lmdeploy@.service"]
    include = (Path(__file__).resolve().parents[2] / "roles" / "templates" / "engine-hardening.j2").read_text()
    hardening = [line for line in include.split("-#}", 1)[1].splitlines()
                 if line and not line.startswith(("#", "{")) and "{{" not in line]
    assert len(hardening) > 15 and all(line in unit.splitlines() for line in hardening)
    for line in ("ConditionPathExistsGlob=/proc/driver/nvidia/gpus/*", "LoadCredential=api-key:/etc/lmdeploy/%i.key.env",
                 "ExecStart=/opt/lmdeploy/current/bin/python /opt/lmdeploy/launch.py $LMDEPLOY_KEY $LMDEPLOY_ARGS"):
        assert line in unit.splitlines()
    assert "ReadOnlyPaths=/var/lib/llm" in unit
    secret = "sk-lmdeploy-0123456789abcdef"
    assert secret not in unit and secret not in uploads["/etc/lmdeploy/tiny.env"]
    env = env_of(uploads)
    assert env["LMDEPLOY_KEY"] == "api-key" and "--api-keys" not in env["LMDEPLOY_ARGS"]
    staged = [v for k, v in uploads.items() if k.startswith("/run/v100kit-secrets/")]
    assert staged == [secret + "\n"]
    assert any(re.search(r"chmod 600 /run/v100kit-secrets/\S+ && mv -f \S+ /etc/lmdeploy/tiny.key.env", c)
               for c in cmds)


def test_extra_args_may_not_carry_a_key_or_a_flag_a_setting_owns(tmp_path):
    with pytest.raises(SettingsError) as e:
        plan({"tiny": {"model_source": tiny(tmp_path), "extra_args": ["--api-keys", "sk-x", "--tp", "2"]}}, TWO_V100)
    assert "extra_args = '--api-keys'" in str(e.value) and "extra_args = '--tp'" in str(e.value)


def test_without_a_gpu_enabled_not_started_and_a_second_deploy_changes_nothing(tmp_path):
    inst = {"tiny": {"model_source": tiny(tmp_path)}}
    cmds, raw = plan_raw(inst, NO_GPU)
    uploads = {k: v.decode(errors="replace") for k, v in raw.items()}
    assert "systemctl enable lmdeploy@tiny.service" in cmds
    assert not [c for c in cmds if c.startswith(("systemctl start lmdeploy", "systemctl restart lmdeploy"))]
    install = next(c for c in cmds if "pip install --python" in c)
    for arg in ("--require-hashes", "--no-deps", "--only-binary :all:", "/opt/lmdeploy/locks/0.15.0-py3.13-",
                "check_venv.py 0.15.0"):
        assert arg in install
    assert env_of(uploads)["LMDEPLOY_KEY"] == "-"
    # the host as the first deploy left it: its files, the venv's stamp and uv there, the unit enabled
    host = converged(cmds, raw)
    host[re.compile(r"test -e /opt/lmdeploy/[^ ]+/\.v100kit-venv\.json \|\|")] = [
        "user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=80 'stamp'"]
    host[re.compile(r"test -e /opt/v100kit/uv-[^ ]+/uv \|\|")] = [
        "user=root group=root mode=-rwxr-xr-x atime=0 mtime=0 ctime=0 size=80 'uv'"]
    host["lmdeploy@tiny.service"] = ["Id=lmdeploy@tiny.service", "SubState=dead", "UnitFileState=enabled"]
    host["ls /etc/lmdeploy/*.env"] = ["/etc/lmdeploy/tiny.env"]
    again, uploads = plan_raw(inst, {**NO_GPU, **host})
    changes = [c for c in again if re.match(r"(systemctl (start|restart|enable|stop|daemon-reload)|mkdir |chmod |chown |"
                                            r"ln -sfn|mv |rm |set -e|curl |wget |install |.* -c 'import sys, zipfile)", c)]
    assert uploads == {} and changes == [], changes


def test_an_architecture_turbomind_lacks_is_refused_before_any_command(tmp_path):
    """A Mistral AWQ checkpoint (huggingface.co/solidrust/Mistral-7B-Instruct-v0.3-AWQ: MistralForCausalLM) is not
    in TurboMind's SUPPORTED_ARCHS (lmdeploy/turbomind/supported_models.py, v0.15.0): LMDeploy would serve it with
    its PyTorch engine despite --backend turbomind (lmdeploy/archs.py autoget_backend), which nothing here planned."""
    model = str(write_tiny_hf(tmp_path / "m", config={**TURBOMIND_CONFIG, "quantization_config": AWQ,
                                                      "architectures": ["MistralForCausalLM"], "model_type": "mistral"}))
    with pytest.raises(SettingsError) as e:
        plan({"tiny": {"model_source": model}}, TWO_V100)
    assert "lmdeploy_instances.tiny.model_source = 'architecture MistralForCausalLM'" in str(e.value)


# Phi-3-mini-4k-instruct's shape (huggingface.co/microsoft/Phi-3-mini-4k-instruct config.json: hidden_size 3072, 32
# attention heads: head size 96), in an AWQ build: TurboMind's kernels on compute capability 7.0 are for head sizes
# 64, 128, 256 and 576 only (src/turbomind/kernels/attention/kernel/attention_sm70_{64,128,256,576}.cu at v0.15.0);
# Registry::Find finds none for 96 and the engine stops at its first forward (attention.cu: "No attention kernel").
PHI3_AWQ = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 3072,
            "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
            "max_position_embeddings": 4096, "vocab_size": 32064, "torch_dtype": "float16", "quantization_config": AWQ}


@pytest.mark.parametrize("heads, head_dim, refused", [
    (32, None, True),  # 3072 / 32 = 96
    (24, None, False),  # 3072 / 24 = 128
    (12, 256, False),
    (96, None, True),  # 32
], ids=["96", "128", "256", "32"])
def test_a_head_size_turbomind_has_no_sm70_kernel_for_is_refused_before_any_command(heads, head_dim, refused):
    path = "/srv/models/phi3-awq"
    config = {**PHI3_AWQ, "num_attention_heads": heads, "num_key_value_heads": heads,
              **({"head_dim": head_dim} if head_dim else {})}
    facts = {**TWO_V100, **host_model(path, config, 2_300_000_000)}
    if not refused:
        plan({"phi": {"model_path": path, "session_len": 4096}}, facts)
        return
    with pytest.raises(SettingsError) as e:
        plan({"phi": {"model_path": path, "session_len": 4096}}, facts)
    text = str(e.value)
    assert f"lmdeploy_instances.phi.model_path = '{path}'" in text
    assert f"head dimension {3072 // heads}" in text and "compute capability 7.0" in text
    assert "Fix: serve a GGUF of the model with llama.cpp" in text
