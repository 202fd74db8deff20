"""The vLLM part of the Volta matrix, decided from settings, the host's Python, its GPUs and the model's own
config.json, before any change (roles/vllm.plan). Models are written here with exactly the shapes needed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from lab.models import write_tiny_hf
from roles.vllm import decide as vllm
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
    # the fix names the newest release with cp313 wheels for its whole lock (0.19.1: files/vllm/vllm-0.19.1-py3.13.txt)
    assert "Python 3.13" in why and "vllm_version: 0.19.1" in why
    p, problems = plan(model(), python="3.13", vllm_version="0.10.2")
    assert problems == [] and p.lock.name == "vllm-0.10.2-py3.13.txt" and "VLLM_USE_V1" not in p.release.environment


def test_memory_refusal_from_the_planner(model):
    # 40 layers x 40 KV heads x 128: a 14B-class shape; the file itself is tiny, so shrink the GPU instead
    why = refused(plan(model(), gpus=({**V100, "memory_mib": 1024},), instance={"gpu_memory_utilization": 0.5}))
    assert "does not fit" in why


def test_network_listener_needs_an_api_key_and_ports_are_unique(model, tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret-0123456789\n")
    # vLLM checks the key on /v1 only: a network listener needs the key and an explicit opt-in
    assert "/invocations" in refused(plan(model(), instance={"listen": "0.0.0.0"}))
    assert "/invocations" in refused(plan(model(), instance={"listen": "0.0.0.0", "api_key_file": str(key)}))
    assert "llama-server@a already uses it" in refused(plan(model(), ports={8000: "llama-server@a"}))
    p, problems = plan(model(), instance={"listen": "0.0.0.0", "api_key_file": str(key), "expose_to_network": True})
    assert problems == [] and p.instances[0].api_key == "s3cret-0123456789"
    assert "s3cret" not in vllm.environment(p, p.instances[0]) and "s3cret" not in repr(p)


def test_a_lock_dir_without_the_lock_is_refused(model, tmp_path):
    assert "no readable lock file vllm-0.8.5.post1-py3.11.txt" in refused(plan(model(), vllm_lock_dir=str(tmp_path)))


def test_missing_model_directory_is_refused(tmp_path):
    assert "not a readable Hugging Face model directory" in refused(plan(str(tmp_path / "nothing")))


def test_a_release_whose_torch_lacks_sm70_is_refused(model, monkeypatch):
    """torch 2.7 cu128 wheels have no sm_70 kernels (TORCH_SM70): such a release entry is refused."""
    from dataclasses import replace

    bad = replace(VLLM_RELEASES[DEFAULT_VERSION], torch="2.7.0", torch_cuda="12.8")
    monkeypatch.setitem(VLLM_RELEASES, DEFAULT_VERSION, bad)
    assert "torch 2.7.0 (CUDA 12.8) has no sm_70 kernels" in refused(plan(model()))


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"x"', "{not json"])
def test_a_config_json_that_is_not_an_object_is_refused_not_a_traceback(model, text):
    m = model()
    (Path(m) / "config.json").write_text(text)
    assert "vllm_instances.m.model_source" in refused(plan(m))


def test_a_quantization_config_that_is_not_an_object_is_refused(model):
    assert "quantization_config is not an object" in refused(plan(model(quantization_config="awq")))


def test_a_model_source_that_is_a_file_is_refused(model, tmp_path):
    f = tmp_path / "weights.safetensors"
    f.write_bytes(b"x")
    assert "not a directory" in refused(plan(str(f)))


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"", b"two\nlines", b"has space key", b"short"])
def test_api_key_files_systemd_would_mangle_or_cannot_be_read_are_refused(model, tmp_path, content):
    key = tmp_path / "key"
    key.write_bytes(content)
    why = refused(plan(model(), instance={"api_key_file": str(key)}))
    assert "vllm_instances.m.api_key_file" in why and "Fix:" in why
    assert content.decode(errors="replace").strip() not in why or not content.strip()


def test_gpu_indices_are_unique_and_exist(model):
    with pytest.raises(ValueError, match="lists a GPU twice"):
        Settings(vllm_instances={"m": {"model_path": "/m", "gpus": [0, 0]}})
    # no driver answers yet: checked against gpu_count
    assert "vllm_instances.m.gpus = [5]" in refused(plan(model(), gpus=(), instance={"gpus": [5]}))


def test_instances_sharing_a_gpu_cannot_claim_more_than_all_of_it(model):
    two_gpus = (V100, {**V100, "index": 1})
    s = Settings(vllm_instances={"a": {"model_source": model()}, "b": {"model_source": model(), "port": 8001}})
    p, problems = vllm.plan(s, "3.11", [V100], "535.261.03", lambda path: None, {})
    assert p is None and "share GPU 0 and claim 1.8" in "\n".join(problems)
    s = Settings(vllm_instances={"a": {"model_source": model(), "gpus": [0]},
                                 "b": {"model_source": model(), "port": 8001, "gpus": [1]}})
    assert vllm.plan(s, "3.11", list(two_gpus), "535.261.03", lambda path: None, {})[1] == []
    s = Settings(vllm_instances={"a": {"model_source": model(), "gpu_memory_utilization": 0.45},
                                 "b": {"model_source": model(), "port": 8001, "gpu_memory_utilization": 0.45}})
    assert vllm.plan(s, "3.11", [V100], "535.261.03", lambda path: None, {})[1] == []


@pytest.mark.parametrize("version, kv, ok", [
    ("0.8.5.post1", "fp8_e5m2", True), ("0.8.5.post1", "fp8", False), ("0.8.5.post1", "fp8_e4m3", False),
    ("0.10.2", "fp8_e5m2", False), ("0.10.2", "auto", True)])
def test_fp8_kv_cache_on_volta_follows_the_release_table(model, version, kv, ok):
    p, problems = plan(model(), python="3.12", vllm_version=version, instance={"kv_cache_dtype": kv})
    assert (problems == []) is ok, problems
    if not ok:
        assert "vllm_instances.m.kv_cache_dtype" in problems[0]


def test_float32_is_planned_at_four_bytes_per_element(model):
    half = plan(model())[0].instances[0].memory
    full = plan(model(), instance={"dtype": "float32"})[0].instances[0].memory
    assert full.weight_bytes == 2 * half.weight_bytes and full.kv_bytes_per_token == 2 * half.kv_bytes_per_token


def test_each_instance_gets_its_own_model_directory_and_snapshot_links_are_followed(tmp_path):
    a, b = write_tiny_hf(tmp_path / "a" / "model"), write_tiny_hf(tmp_path / "b" / "model", seed=1)
    snap = tmp_path / "snapshot"
    snap.mkdir()
    for f in a.iterdir():  # a Hugging Face cache snapshot: every file a symlink to a blob
        (snap / f.name).symlink_to(f)
    (snap / ".cache").mkdir()
    (snap / ".cache" / "junk").write_text("x")
    s = Settings(vllm_instances={"x": {"model_source": str(b), "gpu_memory_utilization": 0.4},
                                 "y": {"model_source": str(snap), "port": 8001, "gpu_memory_utilization": 0.4}})
    p, problems = vllm.plan(s, "3.11", [V100], "535.261.03", lambda path: None, {})
    assert problems == []
    x, y = p.instances
    assert (x.model_path, y.model_path) == ("/var/lib/llm/models/x", "/var/lib/llm/models/y")
    assert sorted(rel for _, rel in y.model_files) == sorted(f.name for f in a.iterdir())
    assert all(Path(src).parent == a and not Path(src).is_symlink() for src, _ in y.model_files)


def test_the_venv_name_ignores_the_lock_generator_line():
    text = VLLM_RELEASES[DEFAULT_VERSION].lock_file("3.11").read_text()
    newer_uv = text.replace("with uv 0.13.8", "with uv 0.99.0")
    assert newer_uv != text and vllm.lock_digest(newer_uv) == vllm.lock_digest(text)
    assert vllm.lock_digest(text + "# another comment\n") != vllm.lock_digest(text)


def test_host_model_dir_fact_follows_the_index_and_skips_consolidated_duplicates():
    from roles.vllm.facts import HfModelDir

    fact = HfModelDir()
    out = ["#files", "100 model-00001-of-00002.safetensors", "200 model-00002-of-00002.safetensors",
           "300 consolidated.safetensors", "#index", "", "#config", '{"num_hidden_layers": 2}']
    assert fact.process(out) == {"config": {"num_hidden_layers": 2}, "safetensors_bytes": 300}
    out[5] = '{"weight_map": {"a": "consolidated.safetensors"}}'
    assert fact.process(out)["safetensors_bytes"] == 300 and fact.process([]) is None


def test_batched_tokens_vllm_would_refuse_are_refused_before_any_change(model):
    """Issue 27: vLLM 0.8.5.post1 (V0) chunks prefill by default only above 32768 tokens, and its SchedulerConfig
    raises "max_num_batched_tokens (1024) is smaller than max_model_len (8192)" (vllm/config.py _verify_args,
    tests/data/vllm_source); every pinned release raises on fewer batched tokens than max_num_seqs."""
    why = refused(plan(model(), instance={"max_num_batched_tokens": 1024}))
    assert "vllm_instances.m.max_num_batched_tokens = 1024" in why and "below max_model_len 8192" in why
    assert "only above max_model_len 32768" in why and "raise it to at least 8192, or leave it unset" in why
    # V0's chunked prefill has failed on V100 (docs/volta.md §4a): not offered as the fix there, but on V1
    assert "enable_chunked_prefill: true" not in why
    assert "set enable_chunked_prefill: true" in refused(plan(model(), vllm_version="0.19.1", instance={
        "max_num_batched_tokens": 1024, "enable_chunked_prefill": False}))
    assert plan(model(), instance={"max_num_batched_tokens": 1024, "enable_chunked_prefill": True})[1] == []
    why = refused(plan(model(), instance={"max_num_batched_tokens": 32, "enable_chunked_prefill": True}))
    assert "below max_num_seqs 64" in why and "raise it to at least 64, or lower max_num_seqs" in why
    # unset, vLLM batches its own default (V1 on a V100: 2048, vllm/engine/arg_utils.py get_batch_defaults), and
    # refuses more sequences than that
    why = refused(plan(model(), vllm_version="0.19.1", instance={"max_num_seqs": 4096}))
    assert "vllm_instances.m.max_num_seqs = 4096" in why and "above the 2048 tokens" in why
    assert "set max_num_batched_tokens to at least 4096, or lower max_num_seqs to 2048" in why
    # 0.10.2 chunks whatever is asked: an explicit false would be silently ignored
    why = refused(plan(model(), vllm_version="0.10.2", instance={"enable_chunked_prefill": False}))
    assert "vllm_instances.m.enable_chunked_prefill = False" in why and "no effect" in why
    assert "set vllm_version: 0.8.5.post1 or 0.19.1" in why
    # LoRA keeps V0's long-context default off (_set_default_args_v0)
    long = {"max_model_len": 65536, "max_num_batched_tokens": 40000}
    m = model(max_position_embeddings=65536)
    assert plan(m, instance=long)[1] == []
    why = refused(plan(m, instance={**long, "extra_args": ["--enable-lora"]}))
    assert "for LoRA adapters (--enable-lora)" in why


def test_tensor_parallel_over_mixed_gpus_profiles_what_the_largest_would(model, monkeypatch):
    """Issue 27: V1's `vllm serve` profiles 8192 tokens on a GPU of 70 GiB or more that is not an A100 and 2048 on
    a V100 (vllm/engine/arg_utils.py get_batch_defaults, tests/data/vllm_source/0.19.1); which rank's device decides
    is not read, so tensor parallel over an H100 and a V100 plans the larger profile run (the side that leaves
    less KV cache): the same activation peak as two H100s, more than two V100s, in either order."""
    from roles.planner import vllm as vllm_planner

    # the tiny model's per-token activations are below the planner's floor: without it the profiled tokens show
    monkeypatch.setattr(vllm_planner, "VLLM_ACTIVATION_FLOOR_BYTES", 0)
    h100 = {**V100, "name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "memory_mib": 81559}

    def buffer(*gpus):
        gpus = [{**g, "index": i} for i, g in enumerate(gpus)]
        p, problems = plan(model(), gpus=gpus, vllm_version="0.19.1", instance={"tensor_parallel_size": 2})
        assert problems == [], problems
        return p.instances[0].memory.compute_buffer_bytes

    two_v100, two_h100 = buffer(V100, V100), buffer(h100, h100)
    assert two_v100 < two_h100 == buffer(V100, h100) == buffer(h100, V100)


def test_v0_keeps_chunked_prefill_off_for_a_sliding_window_model_and_plans_its_whole_prompt(model, monkeypatch):
    """Issue 27: vLLM 0.8.5.post1's V0 default turns chunked prefill on above 32768 tokens, but not for a model
    with a sliding window (vllm/engine/arg_utils.py _set_default_args_v0, `not use_sliding_window`; the window as
    ModelConfig.get_hf_config_sliding_window reads config.json; tests/data/vllm_source): its profile run then covers
    the whole max_model_len, and fewer batched tokens than that are refused. `use_sliding_window: false` (Qwen2's
    configs) turns the window off, and 0.19.1 chunks either way."""
    from roles.planner import vllm as vllm_planner

    monkeypatch.setattr(vllm_planner, "VLLM_ACTIVATION_FLOOR_BYTES", 0)  # the tiny model's activations show
    long = {"max_position_embeddings": 65536}
    windowed = model(**long, sliding_window=4096)

    def buffer(m, **inst):
        p, problems = plan(m, instance={"max_model_len": 65536, **inst})
        assert problems == [], problems
        return p.instances[0].memory.compute_buffer_bytes

    plain, off = buffer(model(**long)), buffer(model(**long, sliding_window=4096, use_sliding_window=False))
    assert plain == off < buffer(windowed) == buffer(windowed, enable_chunked_prefill=False)
    assert buffer(windowed, enable_chunked_prefill=True) == plain
    why = refused(plan(windowed, instance={"max_model_len": 65536, "max_num_batched_tokens": 40000}))
    assert "vllm_instances.m.max_num_batched_tokens = 40000" in why and "sliding window (4096 tokens)" in why
    assert plan(model(**long), instance={"max_model_len": 65536, "max_num_batched_tokens": 40000})[1] == []
    assert plan(windowed, vllm_version="0.19.1",
                instance={"max_model_len": 65536, "max_num_batched_tokens": 40000})[1] == []


@pytest.mark.parametrize("version,graphs,starts,more", [
    ("0.8.5.post1", 11, True, {}), ("0.10.2", 19, False, {}), ("0.19.1", 11, True, {}),
    ("0.10.2", 11, True, {"max_num_batched_tokens": 64}), ("0.19.1", 22, False, {"extra_args": ["--enable-lora"]}),
    ("0.19.1", 11, True, {"extra_args": ["--enable-lora", "--no-enable-lora"]})])
def test_cuda_graphs_outside_the_share_are_those_the_release_captures(model, version, graphs, starts, more):
    """Issue 27: a 32-layer model at the default max_num_seqs 64 on a V100-16GB at gpu_memory_utilization 0.96
    (646 MiB outside). vLLM's code captures 11 graphs in V0 (1, 2, 4, 8, ..., 64), 19 in 0.10.2's PIECEWISE mode
    (up to 2 x 64) and 11 in 0.19.1 with the toolkit's FULL_DECODE_ONLY (the sizes up to 64; its own default
    FULL_AND_PIECEWISE would add the 19 piecewise ones): tests/unit/test_vllm_pin.py runs that code. The plan counts
    those graphs per layer outside the share, so 0.10.2 is refused for the graphs and the others start; 0.10.2 with
    max_num_batched_tokens 64 captures none above 64 (11) and starts; 0.19.1 with --enable-lora captures each graph
    again with an adapter (22: cudagraph_dispatcher.py _get_lora_cases) and is refused, unless --no-enable-lora
    follows."""
    from roles import planner

    p, problems = plan(model(num_hidden_layers=32), vllm_version=version,
                       instance={"gpu_memory_utilization": 0.96, "max_model_len": 2048, **more})
    # 400 MiB of CUDA context + 32 layers x 11 graphs x 0.5 MiB = 576 MiB fit in 646; with 19 graphs, 704 do not
    if starts:
        assert problems == [], problems
        assert p.instances[0].memory.outside_bytes == (400 + 32 * graphs // 2) * planner.MiB
    else:
        assert "capturing CUDA graphs" in refused((p, problems))


def test_a_gpu_index_nvidia_smi_does_not_list_is_refused(model):
    """GPU 1 gone from nvidia-smi's list (0 and 2 remain): vllm_instances.m.gpus [1] is refused naming the GPUs
    there are, [2] is planned on that card."""
    gap = [V100, {**V100, "index": 2, "name": "Tesla V100-SXM2-32GB", "memory_mib": 32510}]
    why = refused(plan(model(), gpus=gap, instance={"gpus": [1]}))
    assert ("vllm_instances.m.gpus = [1]: this host has GPUs 0, 2: nvidia-smi lists no GPU 1. Fix: list existing "
            "GPU indices, or leave gpus unset") in why
    p, problems = plan(model(), gpus=gap, instance={"gpus": [2]})
    assert problems == [], problems
