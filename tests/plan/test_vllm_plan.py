"""Plan-level tests (facts in, commands out) for the vllm role on hosts the lab cannot be: an Ubuntu 24.04 box
(Python 3.12) with two 32 GB V100s answering nvidia-smi, and the same box before any GPU is visible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.data import tiny_hf_model
from roles.settings import SettingsError
from tests.plan.harness import UBUNTU_2404, plan_commands

TWO_V100 = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05",
                                       "1, GPU-00000000-0000-0000-0000-000000000001, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05"],
            "sys.version_info": ["3.12"]}


@pytest.fixture(autouse=True)
def _model_cache(tmp_path_factory):
    """The tiny model is written under pytest's temporary directory, never into the lab cache."""
    global MODEL
    MODEL = tiny_hf_model(tmp_path_factory.getbasetemp() / "cache")


def commands(instance: dict, responses: dict) -> list[str]:
    data = {"vllm_instances": {"tiny": {"model_source": str(MODEL), **instance}}}
    return [str(c) for c in plan_commands(UBUNTU_2404, data, responses=responses)]


def vllm_args(data: dict, name: str) -> list[str]:
    """The VLLM_ARGS words the deploy writes into /etc/vllm/NAME.env for `data` on two V100s."""
    import shlex

    from tests.plan.harness import plan_uploads
    _, uploads = plan_uploads(UBUNTU_2404, data, responses=TWO_V100)
    env = dict(line.split("=", 1) for line in uploads[f"/etc/vllm/{name}.env"].splitlines())
    return shlex.split(env["VLLM_ARGS"])


def index(cmds: list[str], needle: str) -> int:
    return next(i for i, c in enumerate(cmds) if needle in c)


def test_plan_gpu_host_installs_the_py312_lock_then_moves_the_link_then_starts():
    cmds = commands({"tensor_parallel_size": 2}, TWO_V100)
    install = cmds[index(cmds, "pip install --python")]
    for arg in ("--require-hashes", "--no-deps", "--only-binary :all:", "/opt/vllm/locks/0.8.5.post1-py3.12-",
                "UV_LINK_MODE=copy", "pip check", "check_venv.py 0.8.5.post1"):
        assert arg in install
    assert index(cmds, "pip install --python") < index(cmds, "/opt/vllm/current.new") < \
        index(cmds, "systemctl start vllm@tiny")
    assert "systemctl enable vllm@tiny.service" in cmds


def test_plan_without_a_visible_gpu_enables_but_never_starts():
    cmds = commands({}, {"sys.version_info": ["3.12"]})
    assert "systemctl enable vllm@tiny.service" in cmds
    assert not [c for c in cmds if c.startswith(("systemctl start vllm", "systemctl restart vllm"))]


def test_plan_tensor_parallel_beyond_the_visible_gpus_is_refused_before_any_command():
    with pytest.raises(SettingsError, match=r"tensor_parallel_size = 4.*at most 2"):
        commands({"tensor_parallel_size": 4}, TWO_V100)


#: systemd's answer for a unit that runs (`systemctl show --property Id --property SubState`, systemd.unit(5))
RUNNING = {"--property SubState vllm@tiny.service": ["Id=vllm@tiny.service", "SubState=running"]}


def test_plan_first_start_is_not_followed_by_a_restart():
    """A unit that does not run yet is started once, not also restarted; the same plan on a host where the unit
    runs and its arguments file differs (here: absent) restarts it once and starts nothing. The second case is
    what makes the first able to fail: a fake host that never runs the unit never needs a restart."""
    cmds = commands({}, TWO_V100)
    assert cmds.count("systemctl start vllm@tiny.service") == 1
    assert not [c for c in cmds if c.startswith("systemctl restart vllm")]
    running = commands({}, {**TWO_V100, **RUNNING})
    assert running.count("systemctl restart vllm@tiny.service") == 1, [c for c in running if "systemctl" in c]
    assert not [c for c in running if c.startswith("systemctl start vllm")]


def test_plan_instances_left_behind_are_stopped_even_when_none_is_configured():
    cmds = [str(c) for c in plan_commands(UBUNTU_2404, {}, responses={
        "ls /etc/vllm/*.env": ["/etc/vllm/old.env"],
        "vllm@old.service": ["Id=vllm@old.service", "SubState=running", "UnitFileState=enabled"]})]
    assert "systemctl stop vllm@old.service" in cmds and "systemctl disable vllm@old.service" in cmds


def test_plan_head_size_the_release_backend_lacks_is_refused_before_any_command(tmp_path):
    """A model with heads of 80 (Phi-2's shape: hidden_size 2560 / 32 heads; here 160 / 2) on vLLM 0.10.2, whose
    TRITON_ATTN backend takes 32, 64, 96, 128, 160, 192, 224, 256 (vllm/v1/attention/backends/triton_attn.py
    TritonAttentionBackend.get_supported_head_sizes, read in the 0.10.2 wheel): refused before any command, with
    the release whose backend takes 80 as the fix (0.8.5.post1's PagedAttention: 32, 64, 80, ...,
    vllm/attention/ops/paged_attn.py). The same model on 0.8.5.post1 plans."""
    from lab.models import write_tiny_hf
    model = write_tiny_hf(tmp_path / "h80", config={"hidden_size": 160, "num_attention_heads": 2,
                                                    "num_key_value_heads": 2, "head_dim": 80})
    data = {"vllm_version": "0.10.2", "vllm_instances": {"tiny": {"model_source": str(model)}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, data, responses=TWO_V100)
    text = str(e.value)
    assert "head size 80" in text and "32, 64, 96, 128, 160, 192, 224, 256" in text
    assert "set vllm_version to 0.8.5.post1" in text and "llama.cpp" in text
    data["vllm_version"] = "0.8.5.post1"
    assert any("systemctl start vllm@tiny" in str(c) for c in plan_commands(UBUNTU_2404, data, responses=TWO_V100))


def test_plan_head_size_no_release_takes_is_refused_with_llama_cpp_as_the_fix(tmp_path):
    """Heads of 16 (the GGUF lab model's shape): below every Volta backend's sizes (PagedAttention's smallest is 32,
    TRITON_ATTN's 32): the fix is llama.cpp with a GGUF."""
    from lab.models import write_tiny_hf
    model = write_tiny_hf(tmp_path / "h16", config={"num_attention_heads": 4, "num_key_value_heads": 2,
                                                    "head_dim": 16})
    with pytest.raises(SettingsError, match=r"head size 16.*no vLLM release the toolkit supports takes it"):
        plan_commands(UBUNTU_2404, {"vllm_instances": {"tiny": {"model_source": str(model)}}}, responses=TWO_V100)


def test_plan_0_19_1_renders_its_volta_flags_environment_and_lock(tmp_path):
    """vLLM 0.19.1 on the Ubuntu 24.04 box (Python 3.12): its py3.12 lock, and in the instance's environment file
    the flags its own parser accepts for Volta (files/vllm/0.19.1.flags.json: --attention-backend,
    --compilation-config, --skip-mm-profiling), TRITON_ATTN, CUDA graphs FULL_DECODE_ONLY, --skip-mm-profiling for a
    vision-language model only, and VLLM_ENGINE_READY_TIMEOUT_S above vLLM's 600 s default (vllm/envs.py)."""
    import shlex

    from lab.models import write_tiny_hf
    from tests.plan.harness import plan_uploads
    flags = set(json.loads((Path(__file__).resolve().parents[2] / "files/vllm/0.19.1.flags.json").read_text())["flags"])
    vision = write_tiny_hf(tmp_path / "vl", config={"vision_config": {"hidden_size": 32, "patch_size": 14}})
    data = {"vllm_version": "0.19.1", "vllm_instances": {"tiny": {"model_source": str(MODEL), "gpus": [0]},
                                                         "vl": {"model_source": str(vision), "port": 8001,
                                                                "gpus": [1], "encoder_memory_gib": 0}}}
    cmds, uploads = plan_uploads(UBUNTU_2404, data, responses=TWO_V100)
    assert any("/opt/vllm/locks/0.19.1-py3.12-" in str(c) for c in cmds)
    envs = {name: dict(line.split("=", 1) for line in uploads[f"/etc/vllm/{name}.env"].splitlines())
            for name in ("tiny", "vl")}
    for name, env in envs.items():
        args = shlex.split(env["VLLM_ARGS"])
        assert args[args.index("--attention-backend") + 1] == "TRITON_ATTN"
        assert "--compilation-config.cudagraph_mode=FULL_DECODE_ONLY" in args
        assert int(env["VLLM_ENGINE_READY_TIMEOUT_S"]) > 600 and "VLLM_USE_V1" not in env
        assert ("--skip-mm-profiling" in args) == (name == "vl")
        assert {a.split("=")[0].split(".")[0] for a in args if a.startswith("--")} <= flags


def test_plan_vision_model_on_0_10_2_refused_on_volta_with_the_releases_that_run_it(tmp_path):
    """vLLM 0.10.2 runs a vision encoder's attention through xformers below 8.0, and its xformers/_C.so holds SASS for
    sm_75, sm_80 and sm_90a only (the committed cuobjdump evidence, files/vllm/vllm-0.10.2-py3.12.sm70.json, which
    this test reads: an independent record of the wheel, not the decision's data): a vision-language model on a V100
    is refused before any command; the same model on 0.19.1 plans, with --skip-mm-profiling."""
    from lab.models import write_tiny_hf
    evidence = json.loads((Path(__file__).resolve().parents[2] / "files/vllm/vllm-0.10.2-py3.12.sm70.json").read_text())
    xformers = json.dumps(evidence)
    assert "xformers/_C.so" in xformers and "sm_75" in xformers
    vision = write_tiny_hf(tmp_path / "vl", config={"vision_config": {"hidden_size": 32, "patch_size": 14}})
    data = {"vllm_version": "0.10.2", "vllm_instances": {"vl": {"model_source": str(vision)}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, data, responses=TWO_V100)
    text = str(e.value)
    assert "vision-language model" in text and "xformers" in text and "vllm_version: 0.19.1" in text
    text_only = {"vllm_version": "0.10.2", "vllm_instances": {"tiny": {"model_source": str(MODEL)}}}
    assert any("systemctl start vllm@tiny" in str(c) for c in plan_commands(UBUNTU_2404, text_only, responses=TWO_V100))
    data["vllm_version"] = "0.19.1"
    data["vllm_instances"]["vl"]["encoder_memory_gib"] = 0
    assert any("systemctl start vllm@vl" in str(c) for c in plan_commands(UBUNTU_2404, data, responses=TWO_V100))


def test_plan_vision_model_without_encoder_memory_refused_before_any_command(tmp_path):
    """A vision-language model's encoder memory is a term the planner has no formula or Volta log for, and 0.19.1 is
    started with --skip-mm-profiling, so vLLM would not reserve it either: without encoder_memory_gib the instance
    is refused before any command, naming the setting; the same text model (no vision_config) plans."""
    from lab.models import write_tiny_hf
    vision = write_tiny_hf(tmp_path / "vl", config={"vision_config": {"hidden_size": 32, "patch_size": 14},
                                                     "architectures": ["LlavaForConditionalGeneration"]})
    data = {"vllm_version": "0.19.1", "vllm_instances": {"vl": {"model_source": str(vision)}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, data, responses=TWO_V100)
    text = str(e.value)
    assert "vllm_instances.vl.encoder_memory_gib" in text and "--skip-mm-profiling" in text
    assert "LlavaForConditionalGeneration" in text and "nothing was changed" in text
    text_only = {"vllm_version": "0.19.1", "vllm_instances": {"tiny": {"model_source": str(MODEL)}}}
    assert any("systemctl start vllm@tiny" in str(c) for c in plan_commands(UBUNTU_2404, text_only, responses=TWO_V100))


def test_plan_vision_model_encoder_memory_is_kept_out_of_vllms_kv_cache(tmp_path):
    """encoder_memory_gib 1.5 on a 32 GB V100 (nvidia-smi's total: 32510 MiB): vLLM 0.19.1 skips the encoder's
    profile, so it must get a --gpu-memory-utilization whose share of the GPU is 1.5 GiB below the setting's (0.9):
    vLLM's KV budget is total x utilization (vllm/v1/worker/gpu_worker.py requested_memory), and the 1.5 GiB then
    stays free for the encoder. The plan's KV space is smaller by the same 1.5 GiB than the text model's."""
    from lab.models import write_tiny_hf
    from roles import planner
    vision = write_tiny_hf(tmp_path / "vl", config={"vision_config": {"hidden_size": 32, "patch_size": 14}})
    data = {"vllm_version": "0.19.1", "vllm_instances": {"vl": {"model_source": str(vision),
                                                                "encoder_memory_gib": 1.5}}}
    args = vllm_args(data, "vl")
    util = float(args[args.index("--gpu-memory-utilization") + 1])
    total = 32510 * 2**20
    assert 0 <= (0.9 * total - 1.5 * 2**30) - util * total < 1e-4 * total  # at most the share, never above it
    hf = planner.read_hf(vision)
    text, vl = (planner.plan_vllm(hf, 32510, 2, 1, 8192, 0.9, engine="V1", vllm_version="0.19.1",
                                  v1_profile_tokens=2048, encoder_bytes=e) for e in (0, int(1.5 * 2**30)))
    assert vl.compute_buffer_bytes - text.compute_buffer_bytes == int(1.5 * 2**30)
    assert "vision encoder 1,536 MiB (encoder_memory_gib)" in vl.reasons[0], vl.reasons[0]
    with pytest.raises(ValueError, match="encoder_bytes"):
        planner.plan_vllm(hf, 32510, 2, 1, 8192, 0.9, encoder_bytes=-1)


def test_plan_vision_model_on_a_release_that_profiles_its_encoder(tmp_path):
    """0.8.5.post1 (V0) profiles the encoder itself (no --skip-mm-profiling): without encoder_memory_gib the plan
    would promise more KV than vLLM allocates, so it is refused as well; with it, vLLM gets the setting's own
    --gpu-memory-utilization (it reserves its own measurement) and no --skip-mm-profiling."""
    from lab.models import write_tiny_hf
    vision = write_tiny_hf(tmp_path / "vl", config={"vision_config": {"hidden_size": 32, "patch_size": 14}})
    data = {"vllm_version": "0.8.5.post1", "vllm_instances": {"vl": {"model_source": str(vision)}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, data, responses=TWO_V100)
    assert "encoder_memory_gib" in str(e.value) and "profile run reserves it" in str(e.value)
    data["vllm_instances"]["vl"]["encoder_memory_gib"] = 1.5
    args = vllm_args(data, "vl")
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.9" and "--skip-mm-profiling" not in args


def test_plan_encoder_memory_misuse_refused_before_any_command(tmp_path):
    """Found by a new user's review: encoder_memory_gib on a text-only model (the plan counted it, vLLM never would)
    is refused naming the setting; an encoder figure too large to fit names encoder_memory_gib in the fix (lowering
    max_model_len cannot help); and --no-skip-mm-profiling in extra_args (argparse keeps the last of the pair, so
    vLLM would profile the encoder inside the share already lowered for it) is refused like --skip-mm-profiling."""
    from lab.models import write_tiny_hf
    text_only = {"vllm_version": "0.19.1", "vllm_instances": {"tiny": {"model_source": str(MODEL),
                                                                       "encoder_memory_gib": 1.5}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, text_only, responses=TWO_V100)
    assert "vllm_instances.tiny.encoder_memory_gib = 1.5" in str(e.value) and "no vision_config" in str(e.value)
    text_only["vllm_instances"]["tiny"]["encoder_memory_gib"] = 0
    assert any("systemctl start vllm@tiny" in str(c) for c in plan_commands(UBUNTU_2404, text_only, responses=TWO_V100))
    vision = write_tiny_hf(tmp_path / "vl", config={"vision_config": {"hidden_size": 32, "patch_size": 14}})
    big = {"vllm_version": "0.19.1", "vllm_instances": {"vl": {"model_source": str(vision), "max_model_len": 512,
                                                               "encoder_memory_gib": 40}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, big, responses=TWO_V100)
    assert "the vision encoder's 40 GiB (encoder_memory_gib)" in str(e.value), str(e.value)
    undo = {"vllm_version": "0.19.1", "vllm_instances": {"vl": {"model_source": str(vision), "encoder_memory_gib": 1,
                                                                "extra_args": ["--no-skip-mm-profiling"]}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, undo, responses=TWO_V100)
    assert "--no-skip-mm-profiling" in str(e.value) and "cannot be replaced" in str(e.value)


def test_plan_text_names_the_encoder_and_the_utilization_vllm_gets():
    """`v100kit plan`'s memory line splits the vision encoder from the activations it is counted beside and says
    the lowered --gpu-memory-utilization vLLM gets; a text model's line is unchanged."""
    from roles.vllm.engine import _memory_line
    p = {"outcome": "fits", "gpus": 1, "weights_mib": 100, "kv_cache_mib": 8.0, "compute_buffer_mib": 2202,
         "total_mib": 2310, "budget_mib": 29259, "cuda_context_mib": 400, "max_context_tokens": 8192,
         "decode_ceiling_tps": 900.0}
    vl = _memory_line("vllm@vl", {"dtype": "float16", "encoder_mib": 1536, "gpu_memory_utilization": 0.9,
                                  "rendered_gpu_memory_utilization": 0.8527}, p)
    assert "activations and non-torch 666 + vision encoder 1536 = 2310" in vl, vl
    assert "--gpu-memory-utilization 0.8527, not 0.9" in vl, vl
    text = _memory_line("vllm@t", {"dtype": "float16", "encoder_mib": 0, "gpu_memory_utilization": 0.9,
                                   "rendered_gpu_memory_utilization": 0.9}, p)
    assert "activations and non-torch 2202 = 2310" in text and "vision encoder" not in text, text


#: A bitsandbytes 4-bit build's quantization_config as such repositories ship it (the keys transformers'
#: BitsAndBytesConfig.to_dict writes; e.g. unsloth/llama-3-8b-bnb-4bit's config.json).
BNB_4BIT = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
            "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "float16", "bnb_4bit_use_double_quant": True}


@pytest.mark.parametrize("version", ["0.8.5.post1", "0.10.2", "0.19.1"])
def test_plan_quantization_whose_package_the_lock_lacks_is_refused_before_any_command(tmp_path, version):
    """vLLM imports bitsandbytes for quant_method bitsandbytes (vllm/model_executor/layers/quantization/
    bitsandbytes.py in each release's sdist: "Please install bitsandbytes>=... via `pip install ...`") and accepts
    the method on 7.0 (its get_min_capability is 70). The release's lock, read here as text, pins no bitsandbytes,
    so the venv would not have it: refused before any command, naming the lock and the fix. The same lock with a
    bitsandbytes pin added (vllm_lock_dir) plans: the check reads the lock, not a fixed list."""
    from lab.models import write_tiny_hf
    py312 = Path(__file__).resolve().parents[2] / f"files/vllm/vllm-{version}-py3.12.txt"
    assert not [line for line in py312.read_text().splitlines() if line.lower().startswith("bitsandbytes==")]
    model = write_tiny_hf(tmp_path / "bnb", config={"quantization_config": BNB_4BIT})
    data = {"vllm_version": version, "vllm_instances": {"tiny": {"model_source": str(model)}}}
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, data, responses=TWO_V100)
    text = str(e.value)
    assert "vllm_instances.tiny.model" in text and "quant_method bitsandbytes" in text
    assert f"the lock {py312.name} does not install bitsandbytes" in text and "GPTQ" in text
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / py312.name).write_text(py312.read_text() + "bitsandbytes==0.48.1 \\\n    --hash=sha256:" + "0" * 64
                                    + "\n")
    cmds = plan_commands(UBUNTU_2404, {**data, "vllm_lock_dir": str(locks)}, responses=TWO_V100)
    assert any("systemctl start vllm@tiny" in str(c) for c in cmds)


#: The lowest bitsandbytes each release accepts, as its code says (vllm/model_executor/layers/quantization/
#: bitsandbytes.py in each sdist: 0.8.5.post1 "bitsandbytes>=0.45.3", 0.10.2 ">=0.46.1", 0.19.1 ">=0.48.1").
BNB_MINIMUM = {"0.8.5.post1": "0.45.3", "0.10.2": "0.46.1", "0.19.1": "0.48.1"}


@pytest.mark.parametrize("version", sorted(BNB_MINIMUM))
def test_plan_quantization_package_locked_below_the_release_minimum_is_refused(tmp_path, version):
    """A lock that pins bitsandbytes older than the release checks for (bitsandbytes 0.42.0, below each release's
    minimum) would start vLLM and fail at model load ("Please install bitsandbytes>=..."): refused before any
    command, naming the pin, the minimum and the fix. The minimum itself plans."""
    from lab.models import write_tiny_hf
    py312 = Path(__file__).resolve().parents[2] / f"files/vllm/vllm-{version}-py3.12.txt"
    model = write_tiny_hf(tmp_path / "bnb", config={"quantization_config": BNB_4BIT})
    locks = tmp_path / "locks"
    locks.mkdir()
    data = {"vllm_version": version, "vllm_lock_dir": str(locks),
            "vllm_instances": {"tiny": {"model_source": str(model)}}}
    for pin, refused in (("0.42.0", True), (BNB_MINIMUM[version], False)):
        (locks / py312.name).write_text(py312.read_text() + f"bitsandbytes=={pin} \\\n    --hash=sha256:" + "0" * 64
                                        + "\n")
        if refused:
            with pytest.raises(SettingsError) as e:
                plan_commands(UBUNTU_2404, data, responses=TWO_V100)
            text = str(e.value)
            assert f"needs bitsandbytes>={BNB_MINIMUM[version]}" in text and "pins bitsandbytes==0.42.0" in text
            assert "vllm_instances.tiny.model" in text and "tools/lock_vllm.py" in text
        else:
            cmds = plan_commands(UBUNTU_2404, data, responses=TWO_V100)
            assert any("systemctl start vllm@tiny" in str(c) for c in cmds)


def test_plan_quantization_method_the_release_dropped_is_refused(tmp_path):
    """0.19.1's sdist has no vllm/model_executor/layers/quantization/deepspeedfp.py (0.10.2's has, importing
    deepspeed): a deepspeedfp model on 0.19.1 is refused as a method the release lacks."""
    from lab.models import write_tiny_hf
    model = write_tiny_hf(tmp_path / "dsfp", config={"quantization_config": {
        "quant_method": "deepspeedfp", "bits": 8, "group_size": 512}})
    with pytest.raises(SettingsError, match=r"vLLM 0.19.1 has no deepspeedfp method"):
        plan_commands(UBUNTU_2404, {"vllm_version": "0.19.1", "vllm_instances": {"tiny": {"model_source": str(model)}}},
                      responses=TWO_V100)
