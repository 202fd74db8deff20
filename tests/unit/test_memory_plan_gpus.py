"""roles/llama_cpp/decide.memory_plan with GPUs that nvidia-smi lists (issue 14: the mutation run found that no fast
test gave it any, so the VRAM and GPU count of every real GPU host came from code no test ran). Expected values: the
nvidia-smi rows of the case (memory.total in MiB, one row per GPU) and the instance's own `gpus` list."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.models import write_tiny_llama
from roles.llama_cpp.choices import KvChoice
from roles.llama_cpp.decide import memory_plan
from roles.llama_cpp.slots import Serving
from roles.planner import read_gguf
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import load_settings

MIB = 1024 * 1024
KV = KvChoice("f16", "f16", True, "test")
SERVING = Serving(slots=4, context=2048, unified=True, kv=KV)


def gpu(index: int, name: str, mib: int, cc: str) -> dict:
    return {"index": index, "name": name, "compute_cap": cc, "memory_mib": mib, "driver_version": "550.163.01",
            "persistence_mode": True}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[str, object]:
    path = write_tiny_llama(tmp_path_factory.mktemp("m") / "tiny.gguf")
    return str(path), read_gguf(path)


@pytest.mark.parametrize("gpus, inst_gpus, mib, count", [
    ([gpu(0, "Tesla V100-SXM2-16GB", 16160, "7.0")], None, 16160, 1),
    ([gpu(i, "Tesla V100-SXM2-32GB", 32510, "7.0") for i in range(4)], None, 32510, 4),
    ([gpu(i, "Tesla V100-SXM2-32GB", 32510, "7.0") for i in range(4)], [1, 3], 32510, 2),
    ([gpu(0, "NVIDIA H200", 143771, "9.0")], None, 143771, 1),
])
def test_vram_and_gpu_count_come_from_nvidia_smi_over_the_settings(model, gpus, inst_gpus, mib, count):
    path, m = model
    settings = load_settings("h", {"gpu_memory_mib": 8192, "gpu_count": 8})  # what nvidia-smi overrules
    inst = LlamaCppInstance(model_source=path, gpus=inst_gpus)
    plan, problems = memory_plan("llama_cpp_instances.chat", inst, m, path, SERVING, settings, gpus, "12.4")
    assert problems == [] and plan.outcome == "fits"
    assert (plan.gpu_bytes, plan.n_gpus) == (mib * MIB, count)
    assert plan.reasons[0] == "KV cache f16/f16: test"
    # 4 slots x 2048 tokens, K and V of n_kv_heads x head_dim f16 per layer, split over the GPUs (kv_bytes: per GPU)
    assert plan.context == 2048 and plan.kv_bytes == -(-4 * 2048 * m.n_layers * 2 * m.n_kv_heads * m.head_dim * 2
                                                       // count)


def test_without_nvidia_smi_the_settings_stand_in(model):
    path, m = model
    settings = load_settings("h", {"gpu_memory_mib": 8192, "gpu_count": 2})
    plan, problems = memory_plan("k", LlamaCppInstance(model_source=path), m, path, SERVING, settings, [], None)
    assert problems == [] and (plan.gpu_bytes, plan.n_gpus) == (8192 * MIB, 2)
