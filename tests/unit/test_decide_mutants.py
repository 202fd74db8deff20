"""Decisions that mutation testing (docs/mutation.md) showed no fast test could tell apart from a broken version:
the V cache type flash attention is checked with, the model-path check's subject and fix, and the build
architectures taken from the GPUs nvidia-smi lists. Independent expectations: llama.cpp's defaults (common/arg.cpp:
-ctk and -ctv default to f16; a quantized V cache needs flash attention, docs/volta.md §5), nvidia-smi's
compute_cap format ("7.0", "7.5") and CMake's CUDA_ARCHITECTURES format ("70", "75")."""

from __future__ import annotations

import pytest

from roles.cuda.versions import Toolkit
from roles.llama_cpp.choices import KvChoice
from roles.llama_cpp.decide import Instance, flash_attn_problems, host_model_problems, plan
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import load_settings

CUDA_124 = Toolkit("12.4", "distro", {}, "/usr/bin/nvcc", None, "g++-13")


def _inst(kv: KvChoice | None = None, **kw) -> Instance:
    return Instance("m", LlamaCppInstance(model_path="/m.gguf", **kw), "/m.gguf", None, None, kv=kv)


def test_flash_attention_off_with_no_v_type_set_runs_llama_cpps_default_f16_v_cache():
    assert flash_attn_problems([_inst(flash_attn="off")]) == []


def test_the_v_type_checked_is_the_one_the_instance_runs_with_not_the_setting():
    chosen_q4 = KvChoice("f16", "q4_0", False, "chosen")
    (why,) = flash_attn_problems([_inst(chosen_q4, flash_attn="off")])
    assert "a quantized V cache (q4_0) needs flash attention" in why
    chosen_f16 = KvChoice("q8_0", "f16", False, "chosen")
    assert flash_attn_problems([_inst(chosen_f16, flash_attn="off", cache_type_v="q8_0")]) == []


def test_the_model_path_check_asks_about_that_path_and_names_the_fix():
    on_host = {"/srv/m.gguf"}.__contains__
    assert host_model_problems("k", "/srv/m.gguf", on_host) == []
    (why,) = host_model_problems("k", "/srv/other.gguf", on_host)
    assert why.startswith("k.model_path = '/srv/other.gguf': no such file on the host")
    assert "Fix: copy the model there, or use model_source with model_sha256" in why


def _gpu(index: int, compute_cap: str) -> dict:
    return {"index": index, "name": "GPU", "compute_cap": compute_cap, "memory_mib": 16160}


@pytest.mark.parametrize("caps, archs", [(["7.0", "7.0"], ("70",)), (["7.5"], ("75",)), (["8.0", "7.0"], ("70", "80"))])
def test_the_build_targets_the_visible_gpus_architectures(caps, archs):
    settings = load_settings("box", {"llama_cpp_instances": {"m": {"model_path": "/m.gguf"}}})
    p, problems = plan(settings, [CUDA_124], [_gpu(i, c) for i, c in enumerate(caps)], lambda path: True)
    assert problems == []
    assert p.architectures == archs
    assert f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}" in p.cmake_args
    assert f"-sm{'-'.join(archs)}-cuda12.4-" in p.prefix
