"""GPUs shared by llama-server and vLLM instances: what each claims is summed per GPU, across engines
(roles/engines.py gpu_claims, gpu_sum_problems), and a GPU they overfill together is refused before any change."""

from __future__ import annotations

import hashlib

import pytest

from lab.data import tiny_hf_model
from lab.models import write_tiny_llama
from roles.engines import OUTSIDE, gpu_claims, gpu_sum_problems
from roles.settings import SettingsError
from tests.plan.harness import UBUNTU_2404, plan_commands

GB, MIB = 10**9, 1 << 20
V100_32GB_MIB = 32510  # nvidia-smi's total for a 32 GB V100 (docs/volta.md §7)


def one(mib: int) -> dict[int, int]:
    return {0: mib}


def test_issue_example_llama_14_5_gb_plus_vllm_0_9_on_one_32gb_v100_is_refused():
    claims = gpu_claims([("llama-server@a", None, int(14.5 * GB))], [("vllm@b", None, 1, 0.9, 0)], one(V100_32GB_MIB))
    (p,) = gpu_sum_problems(claims, one(V100_32GB_MIB))
    # 14.5 GB = 13828 MiB; 0.9 x 32510 MiB = 29259 MiB; together 43087 MiB > 32510 MiB
    assert "GPU 0's 32510 MiB" in p and "43087 MiB" in p and "gpus: [...]" in p
    assert "llama-server@a and vllm@b" in p


def test_llama_server_spreads_over_every_gpu_it_sees():
    two = {0: V100_32GB_MIB, 1: V100_32GB_MIB}
    claims = gpu_claims([("llama-server@a", None, int(7.25 * GB))], [("vllm@b", [1], 1, 0.9, 0)], two)
    assert [u for u, _ in claims[0]] == ["llama-server@a"]
    assert [u for u, _ in claims[1]] == ["llama-server@a", "vllm@b"]
    assert gpu_sum_problems(claims, two)  # 6914 + 29259 MiB on GPU 1


def test_each_engine_on_its_own_gpu_is_accepted():
    two = {0: V100_32GB_MIB, 1: V100_32GB_MIB}
    claims = gpu_claims([("llama-server@a", [0], int(14.5 * GB))], [("vllm@b", [1], 1, 0.9, 0)], two)
    assert gpu_sum_problems(claims, two) == []


def test_vllm_share_is_of_its_own_gpu_on_a_box_of_two_sizes():
    # a 32 GB and a 16 GB V100 (docs/volta.md section 7: 32510 and 16160 MiB): 0.9 of each GPU it runs on
    mixed = {0: V100_32GB_MIB, 1: 16160}
    claims = gpu_claims([], [("vllm@a", [0], 1, 0.9, 0), ("vllm@b", [1], 1, 0.9, 0)], mixed)
    assert claims[0] == [("vllm@a", int(0.9 * 32510 * MIB))] and claims[1] == [("vllm@b", int(0.9 * 16160 * MIB))]


def test_vllm_claims_its_cuda_context_and_graphs_outside_its_share():
    # a new user's case: a 16 GB V100 (16160 MiB), llama-server planned at 1585 MiB and vLLM at the default 0.9
    # (14544 MiB): 31 MiB are left, but vLLM's CUDA context and graphs live outside its share (vllm#11251 ran out of
    # memory capturing graphs with 0.79 GiB outside) - so with 900 MiB outside counted, the GPU is overfilled
    v100_16gb = one(16160)
    inside_only = gpu_claims([("llama-server@a", None, 1585 * MIB)], [("vllm@b", None, 1, 0.9, 0)], v100_16gb)
    assert gpu_sum_problems(inside_only, v100_16gb) == []
    outside = gpu_claims([("llama-server@a", None, 1585 * MIB)], [("vllm@b", None, 1, 0.9, 900 * MIB)], v100_16gb)
    (p,) = gpu_sum_problems(outside, v100_16gb)
    assert f"{1585 + int(0.9 * 16160) + 900} MiB of GPU 0's 16160 MiB" in p


def test_two_llama_servers_on_one_gpu_are_summed():
    """Within one engine too: two llama-server instances of 8776 MiB each on a 16 GB V100 (16160 MiB) claim
    17552 MiB together, and the second to start would run out of memory."""
    claims = gpu_claims([("llama-server@a", None, 8776 * MIB), ("llama-server@b", None, 8776 * MIB)], [], one(16160))
    (p,) = gpu_sum_problems(claims, one(16160))
    assert "llama-server@a and llama-server@b claim 17552 MiB of GPU 0's 16160 MiB together" in p
    assert "shorten a llama-server context" in p and "gpus: [...]" in p
    # 8000 MiB each: 16000 <= 16160, accepted
    fits = gpu_claims([("llama-server@a", None, 8000 * MIB), ("llama-server@b", None, 8000 * MIB)], [], one(16160))
    assert gpu_sum_problems(fits, one(16160)) == []


def test_two_vllm_instances_are_summed_with_their_contexts_outside_the_shares():
    # 0.45 + 0.45 of a 16160 MiB GPU is 14544 MiB, under 1 (roles/vllm/decide.py accepts the shares); with each
    # instance's 900 MiB of CUDA context and graphs outside its share, 16344 MiB: over
    claims = gpu_claims([], [("vllm@a", None, 1, 0.45, 900 * MIB), ("vllm@b", None, 1, 0.45, 900 * MIB)], one(16160))
    (p,) = gpu_sum_problems(claims, one(16160))
    assert f"{2 * int(0.45 * 16160) + 1800} MiB" in p and "vllm@a and vllm@b" in p


def test_memory_in_use_outside_v100kit_counts_on_its_gpu_only():
    """One instance alone on a GPU is its own role's business, unless memory outside v100kit is in use there: the
    H200 capture's 32362 MiB (utkuozdemir/nvidia_gpu_exporter, linux-x86_64__nvidia-h200__590.48.01.txt, load)."""
    h200 = {0: 143158, 1: 143158}  # memory.used + memory.free of that capture
    claims = gpu_claims([("llama-server@a", None, 120000 * MIB)], [], h200, outside={0: 32362})
    assert claims[0][-1] == (OUTSIDE, 32362 * MIB) and claims[1] == [("llama-server@a", 120000 * MIB)]
    (p,) = gpu_sum_problems(claims, h200, {0: "GPU 0 (NVIDIA H200): 32362 MiB in use by processes outside "
                                           "v100kit: PIDs 10291, 10293, 10309"})
    assert "152362 MiB of GPU 0's 143158 MiB" in p and "PIDs 10291, 10293, 10309" in p
    assert "allow_gpu_in_use: true" in p
    # without that memory counted (every instance there allows it), nothing to refuse
    assert gpu_sum_problems(gpu_claims([("llama-server@a", None, 120000 * MIB)], [], h200), h200) == []


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


def test_the_refusal_says_what_each_engine_on_the_gpu_claims_and_only_those():
    """Each engine's words (Engine.claim_words) for the instances on the over-claimed GPU: two LMDeploy instances
    are explained by LMDeploy's rule, not by llama-server's and vLLM's."""
    claims = {0: [("lmdeploy@a", 20 * 2**30), ("lmdeploy@b", 20 * 2**30)]}
    (p,) = gpu_sum_problems(claims, one(V100_32GB_MIB))
    assert "cache_max_entry_count of what is free" in p and "gpu_memory_utilization" not in p
    assert "llama-server's planned total" not in p
    claims = gpu_claims([("llama-server@a", None, int(14.5 * GB))], [("vllm@b", None, 1, 0.9, 0)], one(V100_32GB_MIB))
    (p,) = gpu_sum_problems(claims, one(V100_32GB_MIB))
    assert "(llama-server's planned total, vLLM's gpu_memory_utilization share" in p


def test_llama_cpp_leaves_room_for_the_graphs_vllm_captures_at_its_max_num_seqs():
    """Issue 27: beside a vLLM 0.10.2 instance at max_num_seqs 256 (67 PIECEWISE graphs: vLLM's code, run by
    tests/unit/test_vllm_pin.py), llama.cpp's share of the GPU leaves vLLM's 0.9 share, its CUDA context and the
    graphs of up to 80 layers (80 x 67 x 0.5 MiB = 2680 MiB), not the flat 512 MiB of before; at max_num_seqs 16
    (11 graphs: 440 MiB) the flat estimate stays."""
    from roles.llama_cpp.decide import gpu_shares
    from roles.settings import Settings

    gpu = {"index": 0, "name": "Tesla V100-SXM2-32GB", "compute_cap": "7.0", "memory_mib": V100_32GB_MIB,
           "persistence_mode": True, "driver_version": "535.261.03"}

    def fraction(seqs: int, **more) -> float:
        s = Settings(vllm_version="0.10.2", llama_cpp_instances={"a": {"model_source": "/m/a.gguf"}},
                     vllm_instances={"b": {"model_source": "/m/b", "max_num_seqs": seqs, "gpu_memory_utilization":
                                           0.5, **more}})
        return gpu_shares(s, [gpu])["a"].fraction

    left = V100_32GB_MIB * MIB - int(V100_32GB_MIB * MIB * 0.5) - 400 * MIB
    assert fraction(256) * V100_32GB_MIB * MIB == pytest.approx(left - 2680 * MIB, abs=2 * MIB)
    assert fraction(16) * V100_32GB_MIB * MIB == pytest.approx(left - 512 * MIB, abs=2 * MIB)
    # no size above max_num_batched_tokens is captured: 35 of them up to 256, 80 x 35 x 0.5 MiB
    assert fraction(256, max_num_batched_tokens=256) * V100_32GB_MIB * MIB == pytest.approx(left - 1400 * MIB,
                                                                                         abs=2 * MIB)


def test_a_vllm_instance_planned_without_its_model_claims_the_unread_graph_estimate():
    """roles/vllm/engine.py: a vLLM instance whose model was not read (no memory plan) claims its share, the CUDA
    context and the graphs llama.cpp's plan leaves room for (80 layers x 0.10.2's 67 graphs at max_num_seqs 256 x
    0.5 MiB), so both engines' sums count the same bytes for it."""
    from types import SimpleNamespace as NS

    from roles.vllm.engine import _claims
    from roles.vllm.versions import VLLM_RELEASES

    inst = NS(gpus=None, tensor_parallel_size=1, gpu_memory_utilization=0.5, enforce_eager=False, max_num_seqs=256,
              max_num_batched_tokens=None, extra_args=[])
    p = NS(release=VLLM_RELEASES["0.10.2"], instances=[NS(name="b", settings=inst, memory=None)])
    ((unit, claimed),) = _claims(p, one(V100_32GB_MIB))[0]
    assert claimed == int(V100_32GB_MIB * MIB * 0.5) + 400 * MIB + 2680 * MIB
    # 0.19.1 with --enable-lora: its 35 full decode graphs at 256 captured again with an adapter, 80 x 70 x 0.5 MiB
    lora = NS(release=VLLM_RELEASES["0.19.1"], instances=[NS(name="b", settings=NS(**{**vars(inst), "extra_args": [
        "--enable-lora"]}), memory=None)])
    ((unit, claimed),) = _claims(lora, one(V100_32GB_MIB))[0]
    assert claimed == int(V100_32GB_MIB * MIB * 0.5) + 400 * MIB + 2800 * MIB
