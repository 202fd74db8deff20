"""The vLLM part of the Volta matrix, decided from settings, the host's Python, its GPUs and the model's own
config.json, before any change (roles/vllm.plan). Models are written here with exactly the shapes needed."""

from __future__ import annotations

import re
import shlex

import pytest

from lab.models import write_tiny_hf
from roles import vllm
from roles.settings import Settings
from roles.vllm.versions import DEFAULT_VERSION, LOCK_DIR, TORCH_SM70, VLLM_RELEASES

V100 = {"index": 0, "name": "Tesla V100-SXM2-16GB", "compute_cap": "7.0", "memory_mib": 16160,
        "persistence_mode": True, "driver_version": "535.261.03"}
A100 = {**V100, "name": "NVIDIA A100-SXM4-40GB", "compute_cap": "8.0", "memory_mib": 40960}


@pytest.fixture
def model(tmp_path):
    def make(**config):
        return str(write_tiny_hf(tmp_path / f"m{len(list(tmp_path.iterdir()))}", config=config))
    return make


def plan(model_dir: str, python: str = "3.11", gpus=(V100,), ports=None, **settings):
    inst = settings.pop("instance", {})
    s = Settings(vllm_instances={"m": {"model_source": model_dir, **inst}}, **settings)
    return vllm.plan(s, python, list(gpus), "535.261.03", lambda path: None, ports or {})


def refused(result) -> str:
    p, problems = result
    assert p is None and problems, "expected a refusal"
    return "\n".join(problems)


def test_default_release_is_the_settings_default_and_has_locks():
    assert Settings().vllm_version == DEFAULT_VERSION
    for release in VLLM_RELEASES.values():
        for python in release.pythons:
            text = release.lock_file(python).read_text()
            assert f"vllm=={release.version} " in text and "--hash=sha256:" in text
            torch = re.search(r"^torch==(\d+\.\d+)", text, re.M).group(1)
            cuda = re.search(r"^nvidia-cuda-runtime-cu12==(\d+\.\d+)", text, re.M).group(1)
            assert (torch, cuda) == (release.torch.rsplit(".", 1)[0], release.torch_cuda)
            assert TORCH_SM70[(torch, cuda)], "every lock holds a torch with sm_70 kernels"
    assert sorted(p.name for p in LOCK_DIR.glob("*.txt")) == sorted(
        r.lock_file(py).name for r in VLLM_RELEASES.values() for py in r.pythons)


def test_v100_fp16_model_plans_with_dtype_half_and_the_v0_engine(model):
    p, problems = plan(model())
    assert problems == [] and p.venv.startswith(f"/opt/vllm/{DEFAULT_VERSION}-py3.11-")
    (inst,) = p.instances
    assert inst.memory.fits
    env = vllm.environment(p, inst)
    args = shlex.split(env.splitlines()[0].split("=", 1)[1])
    assert args[args.index("--dtype") + 1] == "half"
    assert "VLLM_USE_V1=0\n" in env
    assert "--api-key" not in env


def test_auto_dtype_stays_auto_on_ampere(model):
    p, _ = plan(model(), gpus=(A100,))
    assert "--dtype auto" in vllm.server_args(p.instances[0])


@pytest.mark.parametrize("method, need", [("awq", "75"), ("awq_marlin", "80"), ("compressed-tensors", "80"),
                                          ("gptq_marlin", "80"), ("fp8", "89")])
def test_quantization_that_needs_a_newer_gpu_is_refused(model, method, need):
    why = refused(plan(model(quantization_config={"quant_method": method, "bits": 4})))
    assert f"Minimum capability: {need}. Current capability: 70" in why and "GPTQ" in why


def test_gptq_is_accepted_on_volta(model):
    p, problems = plan(model(quantization_config={"quant_method": "gptq", "bits": 4}))
    assert problems == [] and p is not None


def test_bf16_refused_on_v100_but_not_on_ampere(model):
    m = model(torch_dtype="bfloat16")
    assert "vllm_instances.m.dtype = 'bfloat16'" in refused(plan(m, instance={"dtype": "bfloat16"}))
    assert plan(m, gpus=(A100,), instance={"dtype": "bfloat16"})[1] == []
    assert plan(m)[1] == [], "a bf16 checkpoint is served as half with dtype auto"


def test_gemma2_soft_capping_refused_on_volta(model):
    assert "soft-capping" in refused(plan(model(attn_logit_softcapping=50.0)))


def test_tensor_parallel_larger_than_the_gpu_count_is_refused(model):
    why = refused(plan(model(), instance={"tensor_parallel_size": 2}))
    assert "vllm_instances.m.tensor_parallel_size = 2" in why and "at most 1" in why
    assert plan(model(), gpus=(V100, {**V100, "index": 1}), instance={"tensor_parallel_size": 2})[1] == []


@pytest.mark.parametrize("version, says", [("0.11.0", "not a release the toolkit has verified"),
                                           ("0.6.3.post1", "pyairports")])
def test_versions_outside_the_table_or_without_wheels_are_refused(model, version, says):
    why = refused(plan(model(), vllm_version=version))
    assert f"vllm_version = '{version}'" in why and says in why and "0.8.5.post1" in why


def test_python_313_refuses_the_default_and_names_the_release_that_installs(model):
    why = refused(plan(model(), python="3.13"))
    assert "Python 3.13" in why and "vllm_version: 0.10.2" in why
    p, problems = plan(model(), python="3.13", vllm_version="0.10.2")
    assert problems == [] and p.lock.name == "vllm-0.10.2-py3.13.txt" and "VLLM_USE_V1" not in p.release.environment


def test_memory_refusal_from_the_planner(model):
    # 40 layers x 40 KV heads x 128: a 14B-class shape; the file itself is tiny, so shrink the GPU instead
    why = refused(plan(model(), gpus=({**V100, "memory_mib": 1024},), instance={"gpu_memory_utilization": 0.5}))
    assert "does not fit" in why


def test_network_listener_needs_an_api_key_and_ports_are_unique(model, tmp_path):
    assert "without an API key" in refused(plan(model(), instance={"listen": "0.0.0.0"}))
    assert "llama-server@a already uses it" in refused(plan(model(), ports={8000: "llama-server@a"}))
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    p, problems = plan(model(), instance={"listen": "0.0.0.0", "api_key_file": str(key)})
    assert problems == [] and p.instances[0].api_key == "s3cret"
    assert "s3cret" not in vllm.environment(p, p.instances[0])


def test_a_lock_dir_without_the_lock_is_refused(model, tmp_path):
    assert "no lock file vllm-0.8.5.post1-py3.11.txt" in refused(plan(model(), vllm_lock_dir=str(tmp_path)))


def test_missing_model_directory_is_refused(tmp_path):
    assert "not a readable Hugging Face model directory" in refused(plan(str(tmp_path / "nothing")))


def test_a_release_whose_torch_lacks_sm70_is_refused(model, monkeypatch):
    """torch 2.7 cu128 wheels have no sm_70 kernels (TORCH_SM70): such a release entry is refused."""
    from dataclasses import replace

    bad = replace(VLLM_RELEASES[DEFAULT_VERSION], torch="2.7.0", torch_cuda="12.8")
    monkeypatch.setitem(VLLM_RELEASES, DEFAULT_VERSION, bad)
    assert "torch 2.7.0 (CUDA 12.8) has no sm_70 kernels" in refused(plan(model()))
