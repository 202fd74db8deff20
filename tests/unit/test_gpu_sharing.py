"""GPUs shared by llama-server and vLLM instances: what each claims is summed per GPU, across engines
(roles/engines.py gpu_claims, shared_gpu_problems), and a GPU they overfill together is refused before any change."""

from __future__ import annotations

import hashlib

import pytest

from lab.data import tiny_hf_model
from lab.models import write_tiny_llama
from roles.engines import gpu_claims, shared_gpu_problems
from roles.settings import SettingsError
from tests.plan.harness import UBUNTU_2404, plan_commands

GB, MIB = 10**9, 1 << 20
V100_32GB_MIB = 32510  # nvidia-smi's total for a 32 GB V100 (docs/volta.md §7)


def test_issue_example_llama_14_5_gb_plus_vllm_0_9_on_one_32gb_v100_is_refused():
    claims = gpu_claims([("llama-server@a", None, int(14.5 * GB))], [("vllm@b", None, 1, 0.9, 0)], 1, V100_32GB_MIB)
    (p,) = shared_gpu_problems(claims, V100_32GB_MIB)
    # 14.5 GB = 13828 MiB; 0.9 x 32510 MiB = 29259 MiB; together 43087 MiB > 32510 MiB
    assert "GPU 0" in p and "43087 MiB of its 32510 MiB" in p and "gpus: [...]" in p


def test_llama_server_spreads_over_every_gpu_it_sees():
    claims = gpu_claims([("llama-server@a", None, int(7.25 * GB))], [("vllm@b", [1], 1, 0.9, 0)], 2, V100_32GB_MIB)
    assert [u for u, _ in claims[0]] == ["llama-server@a"]
    assert [u for u, _ in claims[1]] == ["llama-server@a", "vllm@b"]
    assert shared_gpu_problems(claims, V100_32GB_MIB)  # 6914 + 29259 MiB on GPU 1


def test_each_engine_on_its_own_gpu_is_accepted():
    claims = gpu_claims([("llama-server@a", [0], int(14.5 * GB))], [("vllm@b", [1], 1, 0.9, 0)], 2, V100_32GB_MIB)
    assert shared_gpu_problems(claims, V100_32GB_MIB) == []


def test_vllm_claims_its_cuda_context_and_graphs_outside_its_share():
    # a new user's case: a 16 GB V100 (16160 MiB), llama-server planned at 1585 MiB and vLLM at the default 0.9
    # (14544 MiB): 31 MiB are left, but vLLM's CUDA context and graphs live outside its share (vllm#11251 ran out of
    # memory capturing graphs with 0.79 GiB outside) - so with 900 MiB outside counted, the GPU is overfilled
    v100_16gb = 16160
    inside_only = gpu_claims([("llama-server@a", None, 1585 * MIB)], [("vllm@b", None, 1, 0.9, 0)], 1, v100_16gb)
    assert shared_gpu_problems(inside_only, v100_16gb) == []
    outside = gpu_claims([("llama-server@a", None, 1585 * MIB)], [("vllm@b", None, 1, 0.9, 900 * MIB)], 1,
                         v100_16gb)
    (p,) = shared_gpu_problems(outside, v100_16gb)
    assert "GPU 0" in p and f"{1585 + int(0.9 * v100_16gb) + 900} MiB of its 16160 MiB" in p


def test_one_engine_alone_is_left_to_its_own_role():
    claims = gpu_claims([], [("vllm@a", None, 1, 0.6, 0), ("vllm@b", None, 1, 0.6, 0)], 1, V100_32GB_MIB)
    assert shared_gpu_problems(claims, V100_32GB_MIB) == []  # roles/vllm/decide.py shared_gpu_problems refuses it


@pytest.fixture
def models(tmp_path):
    gguf = write_tiny_llama(tmp_path / "tiny.gguf")
    return str(gguf), hashlib.sha256(gguf.read_bytes()).hexdigest(), str(tiny_hf_model(tmp_path / "cache"))


def data(models, utilization: float) -> dict:
    gguf, sha, hf = models
    return {"gpu_memory_mib": 4096,  # a small GPU, so that the tiny llama-server's buffers matter
            "llama_cpp_instances": {"a": {"model_source": gguf, "model_sha256": sha, "port": 8081}},
            # enforce_eager: no CUDA graphs to keep room for outside vLLM's share on this small GPU
            "vllm_instances": {"b": {"model_source": hf, "gpu_memory_utilization": utilization,
                                     "enforce_eager": True}}}


def test_plan_level_shared_gpu_overfilled_by_both_engines_is_refused_before_any_command(models):
    with pytest.raises(SettingsError) as e:  # the tiny llama-server's buffers and CUDA context + 0.85 of the GPU
        plan_commands(UBUNTU_2404, data(models, 0.85), responses={"sys.version_info": ["3.12"]})
    # llama-server@a is planned within what vllm@b leaves of GPU 0 (its context is sized to that share), so the
    # refusal is the llama instance's own, naming the vLLM claim and the fixes across both engines
    msg = str(e.value)
    assert "llama_cpp_instances.a" in msg and "vllm@b claim 3882 MiB" in msg, msg  # 0.85 x 4096 + 400 MiB context
    assert "different GPUs" in msg and "gpu_memory_utilization" in msg
    # fits together (1011 MiB + 0.6 x 4096 MiB + vLLM's 400 MiB CUDA context outside its share): the preflight
    # passes and the deploy's commands are recorded
    sha = models[1]
    cmds = plan_commands(UBUNTU_2404, data(models, 0.6), responses={"sys.version_info": ["3.12"],
                                                                    "sha256": [f"{sha}  /var/lib/llm/models/tiny.gguf"]},
                         stops_early=True)
    assert [c for c in cmds if "llama-server@a" in str(c)]
