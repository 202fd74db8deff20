"""The vllm role's refusal functions (roles/vllm/decide.py), called directly. Expected values come from the rules'
sources: CUDA minor-version compatibility and toolkit driver minimums (docs/volta.md §1), PyTorch wheels with sm_70
kernels (docs/volta.md §3), vLLM's releases on Volta (docs/volta.md §4)."""

from __future__ import annotations

from dataclasses import replace

from roles.settings import Settings
from roles.vllm.settings import VllmInstance
from roles.vllm.decide import (driver_problems, gpu_problems, lock, missing_python, python_problems, release,
                               shared_gpu_problems, torch_problems)
from roles.vllm.versions import VLLM_RELEASES

V085 = VLLM_RELEASES["0.8.5.post1"]  # torch 2.6.0 cu124, wheels for Python 3.10-3.12


def test_release_outside_the_table_or_without_wheels_is_refused():
    assert release(Settings(vllm_version="0.8.5.post1")) == (V085, [])
    rel, problems = release(Settings(vllm_version="0.11.0"))  # V0 removed in 0.11.0: not verified on Volta
    assert rel is None and "not a release the toolkit has verified on Volta" in problems[0]
    rel, problems = release(Settings(vllm_version="0.6.3.post1"))  # pyairports: sdist only on PyPI
    assert rel is None and "pyairports" in problems[0] and "0.6.3.post1" not in problems[0].split("Fix:")[1]


def test_a_missing_host_python_is_refused():
    assert missing_python(Settings(), "3.11") == []
    assert "vllm_python = '/usr/bin/python3': no such Python executable on the host" in missing_python(Settings(), None)[0]


def test_the_host_python_needs_wheels_of_the_release():
    assert python_problems(Settings(), V085, "3.12") == []
    (why,) = python_problems(Settings(), V085, "3.13")  # no cp313 xformers wheel for 0.8.5.post1; 0.10.2 has one
    assert "cannot be installed from wheels on Python 3.13" in why and "vllm_version: 0.19.1 (V1 engine)" in why  # the newest release with a py3.13 lock
    (why,) = python_problems(Settings(), V085, "3.9")
    assert "vllm_version:" not in why and "set vllm_python to a Python 3.10-3.12 on the host" in why


def test_a_torch_without_sm70_kernels_is_refused():
    assert torch_problems(V085) == []
    (why,) = torch_problems(replace(V085, torch="2.7.0", torch_cuda="12.8"))  # 2.7 cu128 dropped sm_70
    assert "its torch 2.7.0 (CUDA 12.8) has no sm_70 kernels" in why


def test_the_driver_must_run_the_cuda_of_the_torch_wheel():
    # CUDA 12.x runs on >= 525.60.13 with minor-version compatibility; 12.4 itself needs 550.54.14
    assert driver_problems(V085, None) == []
    assert driver_problems(V085, "525.60.13") == [] and driver_problems(V085, "580.95.05") == []
    (why,) = driver_problems(V085, "520.61.05")
    assert ("torch 2.6.0 is built with CUDA 12.4, which needs driver 550.54.14 (at least 525.60.13 with minor-version "
            "compatibility); the pin is 520.61.05") in why


def test_the_lock_of_the_host_python_must_be_readable(tmp_path):
    path, digest, problems = lock(Settings(), V085, "3.11")
    assert path.name == "vllm-0.8.5.post1-py3.11.txt" and len(digest) == 64 and problems == []
    path, digest, problems = lock(Settings(vllm_lock_dir=str(tmp_path)), V085, "3.11")
    assert digest == "" and "no readable lock file vllm-0.8.5.post1-py3.11.txt" in problems[0]


def test_gpu_indices_must_exist_and_tensor_parallel_needs_a_gpu_per_rank():
    assert gpu_problems("k", VllmInstance(model_path="/m", gpus=[1], tensor_parallel_size=1), 2, True) == []
    (why,) = gpu_problems("k", VllmInstance(model_path="/m", gpus=[2]), 2, True)
    assert "k.gpus = [2]: this host has GPUs 0..1." in why
    (why,) = gpu_problems("k", VllmInstance(model_path="/m", gpus=[2]), 1, False)
    assert "this host has GPUs 0..0 (gpu_count; no driver answers yet)" in why
    (why,) = gpu_problems("k", VllmInstance(model_path="/m", tensor_parallel_size=4), 2, True)
    assert "the instance sees 2" in why and "at most 2" in why


def test_instances_sharing_a_gpu_cannot_claim_more_than_all_of_it():
    a = VllmInstance(model_path="/a", gpu_memory_utilization=0.6)
    b = VllmInstance(model_path="/b", port=8001, gpu_memory_utilization=0.5)
    (why,) = shared_gpu_problems({"a": a, "b": b}, 1)
    assert "share GPU 0 and claim 1.1 of its memory" in why
    assert shared_gpu_problems({"a": a, "b": b.model_copy(update={"gpus": [1]})}, 2) == []
    assert shared_gpu_problems({"a": a, "b": b.model_copy(update={"gpu_memory_utilization": 0.4})}, 1) == []


def test_memory_refuses_a_model_that_leaves_no_room_for_the_kv_cache(tmp_path):
    from lab.models import write_tiny_hf
    from roles.planner import read_hf
    from roles.vllm.decide import memory

    hf = read_hf(write_tiny_hf(tmp_path / "m"))
    inst = VllmInstance(model_path="/m", gpu_memory_utilization=0.5)
    plan, problems = memory("k", inst, hf, 16160, 1)  # a V100 16 GB
    assert plan.fits and problems == []
    plan, problems = memory("k", inst, hf, 1024, 1)  # half of 1 GiB cannot hold the activations
    assert not plan.fits and problems[0].startswith("k.max_model_len = 8192: does not fit: ")
    full = memory("k", inst.model_copy(update={"dtype": "float32"}), hf, 16160, 1)[0]
    assert full.weight_bytes == 2 * memory("k", inst, hf, 16160, 1)[0].weight_bytes  # 4 bytes per element, not 2


# -- each refusal names the setting it is about (issue 12) ------------------------------------------------------
from roles import planner as _planner  # noqa: E402
from roles.vllm.settings import VllmInstance as _VllmInstance  # noqa: E402
from roles.vllm.decide import memory as _memory  # noqa: E402

#: Qwen2.5-7B-Instruct's config.json shape (28 layers, 28 heads, 4 KV heads of 128, hidden 3584, MLP 18944,
#: vocab 152064, max_position_embeddings 32768); with vllm#8793's YaRN factor 4 vLLM derives 131072.
QWEN7B = _planner.HfModel("Qwen2ForCausalLM", 28, 28, 4, 128, 32768, int(15.23e9), hidden_size=3584,
                          intermediate_size=18944, vocab_size=152064, derived_max_len=131072)


def test_a_length_beyond_the_derived_max_len_is_a_length_refusal_not_memory():
    _, problems = _memory("k", _VllmInstance(model_path="/m", max_model_len=140000), QWEN7B, 81559, 1)
    (p,) = problems
    assert p.startswith("k.max_model_len = 140000") and "derived max model len 131072" in p
    assert "does not fit" not in p and "No available memory" not in p


def test_no_room_for_cuda_graphs_names_gpu_memory_utilization_and_enforce_eager():
    _, problems = _memory("k", _VllmInstance(model_path="/m", max_model_len=4096, gpu_memory_utilization=0.99),
                          QWEN7B, 32510, 1)
    assert any(p.startswith("k.gpu_memory_utilization = 0.99") and "enforce_eager: true" in p for p in problems)


def test_heads_not_divisible_names_tensor_parallel_size():
    _, problems = _memory("k", _VllmInstance(model_path="/m", tensor_parallel_size=3), QWEN7B, 32510, 4)
    assert problems and problems[0].startswith("k.tensor_parallel_size = 3") and "divisible" in problems[0]


def test_a_bf16_trained_model_served_in_fp16_below_8_0_is_warned_about(tmp_path):
    from lab.models import write_tiny_hf
    from roles.settings import Settings
    from roles.vllm.settings import VllmInstance
    from roles.vllm.decide import half_precision_warnings, instance
    from roles.vllm.versions import VLLM_RELEASES

    bf16 = {"torch_dtype": "bfloat16"}
    assert "overflow" in half_precision_warnings("q", bf16, "half", (7, 0))[0]
    assert half_precision_warnings("q", bf16, "half", (8, 0)) == []
    assert half_precision_warnings("q", {"torch_dtype": "float16"}, "half", (7, 0)) == []
    assert half_precision_warnings("q", {"text_config": {"dtype": "bfloat16"}}, "float16", (7, 0))
    assert half_precision_warnings("q", bf16, "float32", (7, 0)) == []

    model = write_tiny_hf(tmp_path / "m", config=bf16)
    inst = VllmInstance(model_source=str(model), max_model_len=1024)
    settings = Settings(vllm_instances={"q": inst})
    resolved, problems = instance("q", inst, settings, VLLM_RELEASES["0.8.5.post1"], [], lambda p: None)
    assert resolved.dtype == "half" and len(resolved.warnings) == 1 and "vllm@q" in resolved.warnings[0]

    from v100kit.plan import table as plan_table
    shown = plan_table({"gpu-01": {"platform": "debian12", "driver": "535", "cuda": ["11.8"], "llama_cpp": None,
                                   "vllm": None, "instances": {"vllm@q": {"model": "m", "dtype": "half", "plan": None,
                                                                          "warnings": list(resolved.warnings)}}}})
    assert "WARNING vllm@q: the model was trained in bfloat16" in shown


def test_gpu_indices_are_those_nvidia_smi_lists_for_vllm_and_lmdeploy_too():
    """The vLLM and LMDeploy roles read the same rule (roles/engines.py gpu_index_problems): nvidia-smi listing
    GPUs 0 and 2, gpus: [1] is refused naming them, [2] accepted, [0, 1] refused for 1 only."""
    from roles.engines import gpu_index_problems

    assert gpu_problems("k", VllmInstance(model_path="/m", gpus=[2]), 2, True, [0, 2]) == []
    (why,) = gpu_problems("k", VllmInstance(model_path="/m", gpus=[1]), 2, True, [0, 2])
    assert why == ("k.gpus = [1]: this host has GPUs 0, 2: nvidia-smi lists no GPU 1. Fix: list existing GPU "
                   "indices, or leave gpus unset")
    (why,) = gpu_index_problems("lmdeploy_instances.q", [0, 1], [0, 2], True)
    assert why.startswith("lmdeploy_instances.q.gpus = [0, 1]: this host has GPUs 0, 2: nvidia-smi lists no GPU 1.")
