"""Plan-level tests (pyinfra's facts in, the preflight's verdict out; nothing runs on a GPU): each instance is planned
on the GPUs it is given, memory in use by processes outside v100kit is subtracted and named, and every claim on a GPU
is summed.

Expected values come from outside the planner: the GPUs' memory from nvidia-smi output (docs/volta.md section 7 for
a V100's 16160 / 32510 MiB, NVIDIA's T4 at 15360 MiB, and an H200 under load as utkuozdemir/nvidia_gpu_exporter's
capture printed it: tests/data/nvidia_smi_captures.txt), the model's weights from its GGUF tensor table (the gguf
package's reader), and its KV cache from llama.cpp's own formula, 2 x n_layers x n_kv_heads x head_dim x tokens x
bytes per element (f16: 2; src/llama-kv-cache.cpp sizes one K and one V tensor per layer of n_embd_k_gqa x kv_size).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import gguf
import pytest

from lab.models import write_llama
from roles.nvidia_driver.facts import APP_FIELDS, GPU_FIELDS
from roles.settings import SettingsError
from tests.plan.harness import UBUNTU_2404, plan_uploads, preflight_cluster
from tests.unit.test_gpu_facts import H200, projected
from v100kit.plan import gpus_summary, table

MIB, GIB = 1 << 20, 1 << 30
V100_16, V100_32, T4 = 16160, 32510, 15360  # nvidia-smi memory.total, MiB
#: The model's shape: 32 layers, 8 KV heads of 128: 2 x 32 x 8 x 128 x 2 bytes = 128 KiB of f16 KV per token.
N_LAYERS, N_KV_HEADS, HEAD_DIM, TRAINED = 32, 8, 128, 131072


def kv_bytes(tokens: int) -> int:
    """llama.cpp's f16 KV cache for `tokens` tokens of this model."""
    return 2 * N_LAYERS * N_KV_HEADS * HEAD_DIM * tokens * 2


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> dict:
    path = write_llama(tmp_path_factory.mktemp("m") / "m.gguf", n_embd=1024, n_head=8, n_head_kv=N_KV_HEADS,
                       n_layer=N_LAYERS, n_ff=2816, n_ctx=TRAINED, header_only=True)
    # on the GPU: every tensor but the token embedding, which llama.cpp keeps in host memory (a row lookup per token:
    # src/llama-model.cpp loads LLM_TENSOR_TOKEN_EMBD with the input layer, on the CPU)
    weights = sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors if t.name != "token_embd.weight")
    return {"path": str(path), "sha": hashlib.sha256(path.read_bytes()).hexdigest(), "weights": weights}


def inst(model: dict, port: int, **kw) -> dict:
    return {"model_source": model["path"], "model_sha256": model["sha"], "port": port, "cache_type_k": "f16",
            "cache_type_v": "f16", **kw}


def smi(gpu_rows: list[str], apps: list[str] = (), units: list[str] = ()) -> dict:
    """The NvidiaGpus fact's answer: nvidia-smi's GPU rows, its compute processes, each PID's unit."""
    return {"nvidia-smi --query-gpu": [*gpu_rows, "#apps", *apps, "#units", *units]}


def planned(data: dict, responses: dict):
    """The read-only preflight (what `v100kit plan` runs) of one fake Ubuntu box: its HostPlan."""
    return preflight_cluster({"box": (UBUNTU_2404, data, responses)}, {}, "box")[1]


# -- a box with two GPU models, an instance on each ------------------------------------------------------------------

MIXED = ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 570.158.01",
         "1, GPU-00000000-0000-0000-0000-000000000001, Tesla T4, 7.5, 15360, 0, 15360, Enabled, 570.158.01"]


def test_a_box_of_a_32gb_v100_and_a_t4_plans_each_instance_on_its_own_gpu(model):
    """A model whose KV cache alone (16 GiB at 131072 tokens) is larger than the T4 is planned on the 32 GB V100
    it is given, not on the smallest GPU of the box; the other instance is planned on the T4's 15360 MiB. The build
    has both GPUs' architectures, and each unit counts GPUs as nvidia-smi does."""
    assert model["weights"] + kv_bytes(TRAINED) > T4 * MIB  # would not fit the T4 (the old plan: smallest GPU)
    data = {"llama_cpp_instances": {"big": inst(model, 8081, gpus=[0], context=TRAINED, parallel=1),
                                    "small": inst(model, 8082, gpus=[1], context=4096, parallel=1)}}
    plan = planned(data, smi(MIXED))
    big, small = plan.llama_cpp.instances
    assert (big.memory.gpu_bytes, big.memory.n_gpus, big.memory.outcome) == (V100_32 * MIB, 1, "fits")
    assert big.memory.kv_bytes == kv_bytes(TRAINED) and big.memory.weight_bytes == model["weights"]
    assert (small.memory.gpu_bytes, small.memory.n_gpus) == (T4 * MIB, 1)
    assert small.memory.kv_bytes == kv_bytes(4096)
    assert plan.llama_cpp.architectures == ("70", "75")
    # each instance claims its own GPU only
    assert [u for u, _ in plan.gpu_claims[0]] == ["llama-server@big"]
    assert [u for u, _ in plan.gpu_claims[1]] == ["llama-server@small"]
    _, files = plan_uploads(UBUNTU_2404, data, smi(MIXED), stops_early=True)
    env = files["/etc/llama-server/big.env"]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in env and "CUDA_VISIBLE_DEVICES=0\n" in env


def test_the_model_too_large_for_the_t4_is_refused_there_naming_its_memory(model):
    with pytest.raises(SettingsError) as e:
        planned({"llama_cpp_instances": {"big": inst(model, 8081, gpus=[1], context=TRAINED, parallel=1)}},
                smi(MIXED))
    assert "llama_cpp_instances.big" in str(e.value) and f"does not fit in 1 x {T4} MiB" in str(e.value)


# -- a GPU with memory in use outside v100kit --------------------------------------------------------------------------

#: The H200 under load (memory.used 32362 MiB: /root/tools/memhog twice and ./gpu_burn) as the fact's command asks.
H200_GPU, H200_APPS = projected(H200, "query-gpu", GPU_FIELDS), projected(H200, "query-compute-apps", APP_FIELDS)
USED, FREE = 32362, 110796  # that capture's memory.used and memory.free, MiB
SLOTS = 7  # x 131072 tokens: 112 GiB of f16 KV


def h200_data(model: dict, **kw) -> dict:
    return {"llama_cpp_instances": {"chat": inst(model, 8081, context=TRAINED, parallel=SLOTS, **kw)}}


def test_memory_in_use_by_others_is_subtracted_and_the_instance_refused_naming_gpu_mib_pids_and_the_setting(model):
    need = model["weights"] + kv_bytes(SLOTS * TRAINED)
    assert FREE * MIB < need < (USED + FREE) * MIB - 8 * GIB  # fits the idle GPU with room for buffers, not beside them
    with pytest.raises(SettingsError) as e:
        planned(h200_data(model), smi(H200_GPU, H200_APPS))
    msg = str(e.value)
    assert "llama_cpp_instances.chat" in msg and "GPU 0 (NVIDIA H200)" in msg and f"{USED} MiB" in msg, msg
    assert all(pid in msg for pid in ("10291", "10293", "10309")) and "allow_gpu_in_use: true" in msg, msg


def test_allow_gpu_in_use_plans_on_the_whole_gpu_and_still_names_the_memory(model):
    plan = planned(h200_data(model, allow_gpu_in_use=True), smi(H200_GPU, H200_APPS))
    (chat,) = plan.llama_cpp.instances
    assert chat.memory.outcome == "fits" and chat.memory.gpu_bytes == (USED + FREE) * MIB
    assert chat.memory.kv_bytes == kv_bytes(SLOTS * TRAINED)
    gpus = gpus_summary(plan)
    assert gpus["0"]["outside_v100kit_mib"] == USED and gpus["0"]["memory_mib"] == USED + FREE
    assert [p["pid"] for p in gpus["0"]["outside_v100kit"]] == [10291, 10293, 10309]
    assert [u for u, _ in plan.gpu_claims[0]] == ["llama-server@chat"]  # accepted: not counted in the sum
    text = table({"box": {"platform": "ubuntu", "driver": "580.95.05", "cuda": [], "llama_cpp": None, "vllm": None,
                          "instances": {}, "gpus": gpus}})
    assert f"GPU 0 (NVIDIA H200): {USED} MiB in use by processes outside v100kit: PIDs 10291 (/root/tools/memhog, " \
           "2566 MiB), 10293 (/root/tools/memhog, 1542 MiB), 10309 (./gpu_burn, 28234 MiB)" in text, text
    assert f"of {USED + FREE} (NVIDIA H200, compute capability 9.0)" in text


def test_a_redeploy_is_not_refused_by_its_own_running_instance(model):
    """The same GPU, the memory held by llama-server@chat's own processes (their cgroup's unit): nothing outside."""
    units = ["10291 llama-server@chat.service", "10293 llama-server@chat.service", "10309 llama-server@chat.service"]
    plan = planned(h200_data(model), smi(H200_GPU, H200_APPS, units))
    (chat,) = plan.llama_cpp.instances
    # 20 MiB of memory.used no process accounts for stay subtracted (32362 - 2566 - 1542 - 28234)
    assert chat.memory.outcome == "fits" and [u for u, _ in plan.gpu_claims[0]] == ["llama-server@chat",
                                                                                    "outside v100kit"]
    assert plan.gpu_claims[0][1][1] == (USED - 2566 - 1542 - 28234) * MIB


# -- two llama-server instances on one GPU -----------------------------------------------------------------------------

V100_16_ROW = ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Enabled, "
               "535.261.03"]


def test_two_llama_servers_that_overfill_one_gpu_together_are_refused_naming_both(model):
    """Each alone fits a 16 GB V100 (8 GiB of KV at 2 x 32768 tokens, plus weights), both together do not."""
    one = model["weights"] + kv_bytes(2 * 32768)
    assert one < V100_16 * MIB - 4 * GIB and 2 * one > V100_16 * MIB
    data = {"llama_cpp_instances": {"a": inst(model, 8081, context=32768, parallel=2),
                                    "b": inst(model, 8082, context=32768, parallel=2)}}
    with pytest.raises(SettingsError) as e:
        planned(data, smi(V100_16_ROW))
    msg = str(e.value)
    assert re.search(r"llama-server@a and llama-server@b claim \d+ MiB of GPU 0's 16160 MiB together", msg), msg
    assert "gpus: [...]" in msg and "shorten a llama-server context" in msg
    # the settings to change are named, and no fix for an engine that is not on the GPU
    assert "llama_cpp_instances.a.gpus, llama_cpp_instances.b.gpus = 'GPU 0'" in msg, msg
    assert "lower a vLLM instance" not in msg


def test_an_automatic_instance_beside_one_that_fills_the_gpu_is_refused_not_a_traceback(model):
    """One instance sized as set (context and parallel) takes more than the whole GPU: it is refused as too large,
    and the automatically sized one beside it, left nothing of the GPU, is refused naming its gpus setting and the
    one that takes the GPU (the planner raised a ValueError here before: a share of 0)."""
    assert model["weights"] + kv_bytes(4 * 32768) > V100_16 * MIB
    data = {"llama_cpp_instances": {"a": inst(model, 8081, context=32768, parallel=4), "b": inst(model, 8082)}}
    with pytest.raises(SettingsError) as e:
        planned(data, smi(V100_16_ROW))
    msg = str(e.value)
    assert "llama_cpp_instances.a = " in msg and "does not fit in 1 x 16160 MiB" in msg, msg
    assert ("llama_cpp_instances.b.gpus = 'unset (every GPU)': nothing of its GPUs is left for it: llama-server@a, "
            "sized as set, claims") in msg and "give it other GPUs with gpus: [...]" in msg, msg


def test_an_instance_that_would_offload_beside_another_is_told_to_move_gpus(model):
    """An automatic instance left 4 % of the GPU by one sized as set (4 x 27000 tokens) would offload its layers:
    the refusal's fix names the other GPUs and the shares as the does-not-fit refusal does, not only a smaller
    quant or allow_offload."""
    data = {"llama_cpp_instances": {"a": inst(model, 8081, context=27000, parallel=4), "b": inst(model, 8082)}}
    with pytest.raises(SettingsError) as e:
        planned(data, smi(V100_16_ROW))
    b = str(e.value).split("llama_cpp_instances.b = ")[1]
    assert "would offload" in b and "llama-server@a, sized as set, claims" in b, b
    assert "or set allow_offload: true, or give the instances different GPUs (gpus: [...] on each)" in b, b


def test_two_llama_servers_that_fit_together_are_planned_each_at_its_own_size(model):
    """One instance needs more than half of the GPU, the other less, together they fit: both are accepted (an even
    split of the GPU would have refused the larger one)."""
    a, b = model["weights"] + kv_bytes(2 * 32768), model["weights"] + kv_bytes(2 * 8192)
    assert a > V100_16 * MIB / 2 and a + b < V100_16 * MIB - 3 * GIB
    plan = planned({"llama_cpp_instances": {"a": inst(model, 8081, context=32768, parallel=2),
                                            "b": inst(model, 8082, context=8192, parallel=2)}}, smi(V100_16_ROW))
    ia, ib = plan.llama_cpp.instances
    assert (ia.memory.kv_bytes, ib.memory.kv_bytes) == (kv_bytes(2 * 32768), kv_bytes(2 * 8192))
    claimed = sum(b or 0 for _, b in plan.gpu_claims[0])
    assert claimed == ia.memory.total_bytes + ib.memory.total_bytes <= V100_16 * MIB


# -- vLLM on the box of two GPU models ---------------------------------------------------------------------------------

#: An AWQ 4-bit build's quantization_config as AutoAWQ writes it (e.g. TheBloke/Llama-2-7B-AWQ's config.json).
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def vllm_data(tmp_path: Path, gpus: list[int], config: dict | None = None) -> dict:
    from lab.models import write_tiny_hf
    model = write_tiny_hf(tmp_path / "hf", config=config)
    return {"vllm_instances": {"tiny": {"model_source": str(model), "gpus": gpus}}}


def vllm_planned(data: dict):
    plan = planned(data, {**smi(MIXED), "sys.version_info": ["3.12"]})
    return plan.engines["vllm"].instances[0]


@pytest.mark.parametrize("gpu, mib", [(0, V100_32), (1, T4)])
def test_a_vllm_instance_is_planned_on_the_memory_of_the_gpu_it_is_given(tmp_path, gpu, mib):
    """vLLM's share is gpu_memory_utilization x the memory of the GPU the instance runs on (vllm/worker: total from
    torch.cuda.mem_get_info of its own device): the 32 GB V100's 32510 MiB on GPU 0, the T4's 15360 on GPU 1, as
    nvidia-smi prints each, not the smallest GPU of the box."""
    inst = vllm_planned(vllm_data(tmp_path, [gpu]))
    assert (inst.memory.gpu_bytes, inst.memory.n_gpus) == (mib * MIB, 1)


def test_an_awq_model_is_planned_on_the_t4_and_refused_on_the_v100_of_one_box(tmp_path):
    """vLLM's AWQ kernels need compute capability 7.5 (vllm/model_executor/layers/quantization/awq.py
    AWQConfig.get_min_capability returns 75; below it vLLM stops with "Minimum capability: 75. Current capability:
    70"). On a box of a V100 (7.0) and a T4 (7.5, as nvidia-smi's compute_cap says) the instance given the T4 plans;
    the one given the V100 is refused with vLLM's own words, before any change."""
    inst = vllm_planned(vllm_data(tmp_path, [1], {"quantization_config": AWQ}))
    assert inst.memory is not None and inst.memory.outcome == "fits"
    with pytest.raises(SettingsError) as e:
        vllm_planned(vllm_data(tmp_path, [0], {"quantization_config": AWQ}))
    assert "vllm_instances.tiny" in str(e.value) and "Minimum capability: 75. Current capability: 70" in str(e.value)


# -- llama.cpp: the attention choice follows the compute capability of the instance's own GPU --------------------------

#: A 32 GB V100 (7.0) and a P100 (6.0) in one box, as nvidia-smi prints them (the P100-PCIE-16GB: 16384 MiB).
V100_P100 = ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 570.158.01",
             "1, GPU-00000000-0000-0000-0000-000000000001, Tesla P100-PCIE-16GB, 6.0, 16384, 0, 16384, Enabled, 570.158.01"]


def test_flash_attention_is_chosen_per_gpu_on_a_box_of_a_v100_and_a_p100(tmp_path):
    """llama.cpp 0.3.16 (llama_cpp_ref pypi-0.3.16) runs flash attention for head size 80 only where fp16 MMA is
    available (ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_device_supports_op, case GGML_OP_FLASH_ATTN_EXT:
    head 80 needs fp16_mma_available, i.e. compute capability 7.0: Volta's tensor cores); elsewhere the op falls back
    to the CPU. The instance given the V100 keeps flash attention on; the one given the P100 gets it off (attention
    stays on the GPU), each decided by its own GPU's compute capability, not the box's lowest."""
    path = write_llama(tmp_path / "h80.gguf", n_embd=640, n_head=8, n_head_kv=8, n_layer=2, n_ff=1024, n_ctx=4096)
    m = {"path": str(path), "sha": hashlib.sha256(path.read_bytes()).hexdigest()}
    data = {"llama_cpp_ref": "pypi-0.3.16",
            "llama_cpp_instances": {"p": inst(m, 8082, gpus=[1], context=4096, parallel=1, cache_type_k=None,
                                              cache_type_v=None),
                                    "v": inst(m, 8081, gpus=[0], context=4096, parallel=1, cache_type_k=None,
                                              cache_type_v=None)}}
    p, v = planned(data, smi(V100_P100)).llama_cpp.instances
    assert (p.name, p.serving.kv.flash_attn) == ("p", False) and (v.name, v.serving.kv.flash_attn) == ("v", True)
    assert (p.serving.kv.cache_type_k, v.serving.kv.cache_type_k) == ("f16", "f16")


# -- vLLM V1's profile run: its token count follows the memory of the GPU it runs on ----------------------------------

#: meta-llama/Llama-3.1-8B-Instruct's config.json (the keys the planner reads) and its safetensors' size in bytes.
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 131072, "vocab_size": 128256, "torch_dtype": "bfloat16", "model_type": "llama"}
LLAMA_8B_BYTES = 16_060_522_496
H100_ROW = "0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 9.0, 81559, 0, 81079, Enabled, 580.159.04"
V100_ROW = MIXED[0]


@pytest.mark.parametrize("row, tokens, more", [(H100_ROW, 8192, {}), (V100_ROW, 2048, {}),
                                              (V100_ROW, 8192, {"max_num_batched_tokens": 8192})])
def test_vllm_0_19_1_profiles_8192_tokens_on_an_h100_and_2048_on_a_v100(row, tokens, more):
    """vLLM 0.19.1's `vllm serve` sizes its V1 profile run by the device's memory (vllm/engine/arg_utils.py
    EngineArgs.get_batch_defaults: default_max_num_batched_tokens[OPENAI_API_SERVER] is 8192 where device_memory >=
    70 GiB, else 2048; the GPU model runner profiles max_num_batched_tokens). An H100 (81559 MiB in all, as
    nvidia-smi prints it) takes 8192, a 32 GB V100 2048: the plan reserves the activation peak of that many tokens,
    so on the H100 it does not plan the V100's smaller peak (more KV cache than vLLM finds). A user's
    max_num_batched_tokens replaces that default in vLLM's profile run, and in the plan."""
    import json

    from roles.planner.models import hf_model_from_config
    from roles.planner.vllm import VLLM_NON_TORCH_BYTES, vllm_activation_bytes

    path = "/srv/models/llama-3.1-8b"
    responses = {**smi([row]), "sys.version_info": ["3.12"],
                 f"test -r {path}/config.json": ["#files", f"{LLAMA_8B_BYTES} model.safetensors", "#index", "",
                                                 "#config", json.dumps(LLAMA_8B)]}
    data = {"vllm_version": "0.19.1", "vllm_instances": {"l": {"model_path": path, "max_model_len": 8192, **more}}}
    inst = planned(data, responses).engines["vllm"].instances[0]
    hf = hf_model_from_config(LLAMA_8B, LLAMA_8B_BYTES)
    # 0.19.1 filters top-k/top-p with its Triton kernel (vllm/v1/sample/ops/topk_topp_sampler.py, from 8 rows)
    assert inst.memory.compute_buffer_bytes == vllm_activation_bytes(hf, 1, tokens, inst.settings.max_num_seqs,
                                                                     sampler_path="triton") + VLLM_NON_TORCH_BYTES


# -- what `v100kit plan` says of the default slots ----------------------------------------------------------------------

def test_the_plan_says_how_many_full_length_requests_fit_at_once_as_the_rendered_arguments_do(model):
    """Issue 26: with slots and context left unset, `v100kit plan` (its JSON and its table) says how many requests
    of the full per-request context run at once; the numbers are those llama-server gets: -np N and -c N x context
    (a KV stream per slot: llama-server's n_ctx_slot = -c / -np), read back from the rendered environment file."""
    import shlex
    from types import SimpleNamespace

    from v100kit.plan import summarize

    data = {"llama_cpp_instances": {"chat": {**inst(model, 8081), "cache_type_k": None, "cache_type_v": None}}}
    gpu = ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Enabled, 570.158.01"]
    plan = planned(data, smi(gpu))
    facts = {"Memory": 64 * 1024, "Cpus": 16}  # MiB, CPUs: the build-jobs line the summary carries
    summary = summarize(SimpleNamespace(name="box", get_fact=lambda f, *a, **k: facts[f.__name__]), plan)
    sv = summary["instances"]["llama-server@chat"]["serving"]
    _, files = plan_uploads(UBUNTU_2404, data, smi(gpu), stops_early=True)
    env = dict(line.split("=", 1) for line in files["/etc/llama-server/chat.env"].splitlines() if "=" in line)
    args = shlex.split(env["LLAMA_SERVER_ARGS"])
    n, pool = int(args[args.index("-np") + 1]), int(args[args.index("-c") + 1])
    assert (sv["slots"], sv["full_length_requests_at_once"], sv["context_per_request"]) == (n, n, pool // n)
    assert n > 1 and "-kvu" not in args
    text = table({"box": summary})
    assert f"llama-server@chat: {n} slot(s): {n} request(s) of up to {pool // n} tokens at once, KV pool -c {pool}" \
        in text, text


# -- the driver: its module follows the GPUs nvidia-smi answers for -----------------------------------------------------

V100_16_ROW = "0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Enabled, 580.95.05"
T4_ROWS = [f"{i}, GPU-00000000-0000-0000-0000-00000000000{i}, Tesla T4, 7.5, 15360, 0, 15360, Enabled, 580.95.05"
           for i in (0, 1)]


def test_the_open_module_is_refused_for_a_v100_that_nvidia_smi_answers_whatever_gpu_compute_capability_says():
    """NVIDIA's open kernel modules need GSP, compute capability 7.5 (NVIDIA/open-gpu-kernel-modules README: Turing
    and later); a V100 (nvidia-smi compute_cap 7.0) disappears under them. With gpu_compute_capability set to 7.5
    by mistake, a V100 that nvidia-smi answers for decides, alone or beside a T4: refused before any change. The
    setting is never raised by nvidia-smi, which lists only the GPUs the loaded driver drives (a V100 under the open
    module is not listed): two T4s under the default 7.0 are still refused, and take the open module at 7.5. Where no
    GPU answers (no driver yet), the setting decides."""
    data = {"gpu_compute_capability": "7.5", "nvidia_driver_kernel_module": "open"}
    second = "1, GPU-00000000-0000-0000-0000-000000000009, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Enabled, 580.95.05"
    for rows in ([V100_16_ROW], [T4_ROWS[0], second]):
        with pytest.raises(SettingsError) as e:
            planned(data, smi(rows))
        assert "nvidia_driver_kernel_module" in str(e.value) and "these GPUs are 7.0" in str(e.value)
    assert planned(data, smi([])).driver is not None
    assert planned(data, smi(T4_ROWS)).driver is not None
    with pytest.raises(SettingsError, match="these GPUs are 7.0"):
        planned({"nvidia_driver_kernel_module": "open"}, smi(T4_ROWS))


def test_vllm_v0_without_chunked_prefill_above_32k_is_planned_with_its_whole_length():
    """vLLM 0.8.5.post1 (V0) under `vllm serve` turns chunked prefill on above a 32k max_model_len and then profiles
    2048 batched tokens (vllm/engine/arg_utils.py; SchedulerConfig's chunked default, vllm/config.py lines 68 and
    1967-1978, tests/data/vllm_source); with
    enable_chunked_prefill: false it profiles max_model_len tokens (max_num_batched_tokens = max(max_model_len,
    2048)). The plan follows the setting: Llama-3.1-8B at 65536 tokens on a 32 GB V100 fits with the default and is
    refused without chunked prefill, its refusal naming the activation peak of 65536 tokens."""
    import json

    from roles.planner.models import hf_model_from_config
    from roles.planner.vllm import VLLM_NON_TORCH_BYTES, vllm_activation_bytes

    path = "/srv/models/llama-3.1-8b"
    responses = {**smi([V100_ROW]), "sys.version_info": ["3.12"],
                 f"test -r {path}/config.json": ["#files", f"{LLAMA_8B_BYTES} model.safetensors", "#index", "",
                                                 "#config", json.dumps(LLAMA_8B)]}
    hf = hf_model_from_config(LLAMA_8B, LLAMA_8B_BYTES)
    inst_ = {"model_path": path, "max_model_len": 65536, "gpu_memory_utilization": 0.95}
    data = {"vllm_version": "0.8.5.post1", "vllm_instances": {"l": inst_}}
    memory = planned(data, responses).engines["vllm"].instances[0].memory
    assert memory.compute_buffer_bytes == vllm_activation_bytes(hf, 1, 2048, 64, True) + VLLM_NON_TORCH_BYTES
    whole = vllm_activation_bytes(hf, 1, 65536, 64, True) + VLLM_NON_TORCH_BYTES
    inst_["enable_chunked_prefill"] = False
    with pytest.raises(SettingsError) as e:
        planned(data, responses)
    assert f"activation peak and non-torch memory {round(whole / MIB):,} MiB" in str(e.value)
