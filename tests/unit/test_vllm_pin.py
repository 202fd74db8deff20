"""tools/vllm_pin.py and roles/vllm/release_source.py: the Volta facts of a vLLM release read from its own code.

The inputs are excerpts of the real wheels' sources (tests/data/vllm_source/<version>/<path>, each with the wheel's
name and sha256 and the original line numbers). The expected values were read by hand from those lines:
- 0.8.5.post1: vllm/attention/ops/paged_attn.py lines 38-39 `return [32, 64, 80, 96, 112, 120, 128, 192, 256]`;
  vllm/platforms/cuda.py line 238-243 `if not cls.has_device_capability(80): ... target_backend =
  _Backend.XFORMERS`; vllm/engine/arg_utils.py 1352-1354 falls back on "Compute Capability < 8.0";
  vllm/config.py 1291 `CacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]`.
- 0.10.2: vllm/platforms/cuda.py "FlexAttention is the default for older GPUs" (`else: return FLEX_ATTENTION_V1`);
  triton_attn.py 150-151 `return [32, 64, 96, 128, 160, 192, 224, 256]`; triton_attn.py 361-362 views every fp8
  cache as `self.fp8_dtype` (current_platform.fp8_dtype(), e4m3); arg_utils.py: OPENAI_API_SERVER 2048 below
  70 GiB.
- 0.19.1: vllm/platforms/cuda.py _get_backend_priorities `[FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION]`;
  flash_attn.py `capability >= DeviceCapability(8, 0)`, flashinfer.py `>= DeviceCapability(7, 5)`;
  triton_attn.py 327-328 `return head_size >= 32`; arg_utils.py get_batch_defaults OPENAI_API_SERVER 2048 for
  device memory below 70 GiB (8192 above); envs.py VLLM_ENGINE_READY_TIMEOUT_S default "600".
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from roles.vllm import release_source as rs
from roles.vllm.versions import DEFAULT_VERSION, VLLM_RELEASES, release_data_file
from tools import vllm_pin

SOURCES = Path(__file__).resolve().parents[1] / "data" / "vllm_source"


def files(version: str) -> dict[str, str]:
    root = SOURCES / version
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")}


def test_v0_release_xformers_and_paged_attention_head_sizes():
    f = rs.derive(files("0.8.5.post1"))
    assert (f.v0_present, f.engine, f.default_backend) == (True, "V0", "XFORMERS")
    heads = f.head_sizes["XFORMERS"]
    assert heads.sizes == (32, 64, 80, 96, 112, 120, 128, 192, 256) and heads.minimum is None
    assert "paged_attn.py PagedAttention.get_supported_head_sizes" in heads.source
    assert f.kv_cache_dtypes == ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
    assert f.volta_kv_cache_dtypes["XFORMERS"] == ("auto", "fp8_e5m2")
    assert f.profile_tokens is None  # V0: the count follows max_model_len


def test_0_10_2_selects_flex_attention_below_8_0_and_triton_takes_a_list_of_head_sizes():
    f = rs.derive(files("0.10.2"))
    assert (f.v0_present, f.engine, f.default_backend) == (True, "V1", "FLEX_ATTENTION")
    assert "flex_attention.FlexAttentionBackend" in f.default_backend_source
    assert f.backend_chain == ("FLEX_ATTENTION", "TRITON_ATTN")
    assert f.head_sizes["TRITON_ATTN"].sizes == (32, 64, 96, 128, 160, 192, 224, 256)
    assert not f.head_sizes["TRITON_ATTN"].supports(80) and f.head_sizes["FLEX_ATTENTION"].supports(80)
    # every fp8 cache is read as e4m3 by its Triton kernels: nothing but auto on Volta
    assert f.volta_kv_cache_dtypes["TRITON_ATTN"] == ("auto",)
    assert f.profile_tokens == 2048 and "< 70 GiB" in f.profile_tokens_source


def test_0_19_1_priorities_filtered_at_7_0_and_a_minimum_head_size():
    f = rs.derive(files("0.19.1"))
    assert (f.v0_present, f.engine) == (False, "V1")
    assert f.backend_chain == ("TRITON_ATTN", "FLEX_ATTENTION")  # FLASH_ATTN needs 8.0, FLASHINFER 7.5
    heads = f.head_sizes["TRITON_ATTN"]
    assert (heads.minimum, heads.supports(32), heads.supports(31), heads.supports(80)) == (32, True, False, True)
    assert heads.describe() == ">= 32"
    assert f.volta_kv_cache_dtypes["TRITON_ATTN"] == ("auto", "float16")
    assert f.env["VLLM_ENGINE_READY_TIMEOUT_S"] == "600" and "VLLM_ATTENTION_BACKEND" not in f.env
    assert f.profile_tokens == 2048


def test_profile_tokens_follow_the_memory_branch():
    """The same code on a GPU of 80 GiB takes the other branch: 8192 (arg_utils.py get_batch_defaults)."""
    assert rs.profile_tokens(files("0.19.1"), memory_gib=80)[0] == 8192
    assert rs.profile_tokens(files("0.19.1"), memory_gib=16)[0] == 2048
    # `if device_memory >= 70 * GiB_bytes and "a100" not in device_name:` (excerpt line 36)
    assert rs.large_gpu_profile_tokens(files("0.19.1")) == (70, 8192, ("a100",))
    rel = VLLM_RELEASES["0.19.1"]
    assert [rel.profile_tokens_on(m, n) for m, n in ((81559, "NVIDIA H100 80GB HBM3"), (71680, "x"), (71679, "x"),
            (81920, "NVIDIA A100-SXM4-80GB"), (32510, "Tesla V100-SXM2-32GB"))] == [8192, 8192, 2048, 2048, 2048]
    g = files("0.19.1")
    g["vllm/engine/arg_utils.py"] = g["vllm/engine/arg_utils.py"].replace('and "a100" not in device_name',
                                                                          "and device_memory > 0")
    with pytest.raises(rs.SourceShapeError, match="unknown device memory test"):
        rs.large_gpu_profile_tokens(g)
    assert rs.profile_tokens(files("0.19.1"), memory_gib=69)[0] == 2048  # the branch is ">= 70 * GiB_bytes"


def test_the_sampler_path_of_each_v1_release():
    """0.19.1's apply_top_k_top_p hands 8 rows or more to its Triton kernel (excerpt lines 251-252); 0.10.2's sorts
    a copy of the logits (line 145). Code of neither shape is an error, not a guess."""
    assert rs.sampler_path(files("0.19.1"))[:2] == ("triton", 8)
    assert rs.sampler_path(files("0.10.2"))[:2] == ("sort", None)
    g = files("0.19.1")
    path = "vllm/v1/sample/ops/topk_topp_sampler.py"
    g[path] = g[path].replace("return apply_top_k_top_p_triton(logits, k, p)", "return logits").replace(
        "if HAS_TRITON and logits.shape[0] >= 8:", "if HAS_TRITON:")
    with pytest.raises(rs.SourceShapeError, match="neither sorts nor calls the Triton kernel"):
        rs.sampler_path(g)
    rel = VLLM_RELEASES["0.19.1"]
    assert (rel.sampler_path_for(64), rel.sampler_path_for(8), rel.sampler_path_for(4)) == ("triton", "triton", "sort")
    assert VLLM_RELEASES["0.10.2"].sampler_path_for(64) == "sort" and VLLM_RELEASES["0.8.5.post1"].sampler_path_for(
        64) is None


def test_capability_evaluation_of_the_backends():
    f = files("0.19.1")
    flash = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    infer = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
    assert [rs.supports_capability(f, flash, cc) for cc in ((7, 0), (8, 0))] == [False, True]
    assert [rs.supports_capability(f, infer, cc) for cc in ((7, 0), (7, 5), (12, 1), (12, 2))] == \
        [False, True, True, False]


def test_an_unknown_code_shape_is_an_error_not_a_guess():
    f = files("0.19.1")
    path = "vllm/v1/attention/backends/triton_attn.py"
    f[path] = f[path].replace("return head_size >= 32", "return head_size % 16 == 0")
    with pytest.raises(rs.SourceShapeError, match="supports_head_size"):
        rs.derive(f)
    g = files("0.8.5.post1")
    del g["vllm/attention/ops/paged_attn.py"]
    with pytest.raises(rs.SourceShapeError, match="paged_attn.py"):
        rs.derive(g)


def test_the_release_table_holds_what_the_code_says():
    """roles/vllm/versions.py against the derivation from each release's excerpts and files/vllm/<version>.json."""
    for version in ("0.8.5.post1", "0.10.2", "0.19.1"):
        if version not in VLLM_RELEASES:
            continue
        rel, f = VLLM_RELEASES[version], rs.derive(files(version))
        data = json.loads(release_data_file(version).read_text())
        assert data["attention_backend"] == rel.attention_backend == vllm_pin.toolkit_backend(f.as_dict())
        heads = f.head_sizes[rel.attention_backend]
        assert (rel.head_sizes.sizes, rel.head_sizes.minimum, rel.head_sizes.source) == \
            (heads.sizes, heads.minimum, heads.source)
        assert rel.kv_cache_dtypes == f.volta_kv_cache_dtypes[rel.attention_backend]
        assert rel.profile_tokens == f.profile_tokens == data["facts"]["profile_tokens"]
        large = data["facts"]["profile_tokens_large"]
        assert rel.profile_tokens_large == f.profile_tokens_large == (
            (large[0], large[1], tuple(large[2])) if large else None)
        assert (rel.sampler_path, rel.sampler_triton_rows) == (f.sampler_path, f.sampler_triton_rows) \
            == (data["facts"]["sampler_path"], data["facts"]["sampler_triton_rows"])
        assert rel.engine == f.engine == data["facts"]["engine"]
        assert (rel.chunked_prefill, rel.chunked_prefill_above) == (f.chunked_prefill, f.chunked_prefill_above) \
            == (data["facts"]["chunked_prefill"], data["facts"]["chunked_prefill_above"])
        assert f.batched_tokens_source == data["facts"]["batched_tokens_source"]


def test_what_changed_names_each_difference():
    old = json.loads(release_data_file("0.8.5.post1").read_text())
    new = json.loads(release_data_file("0.10.2").read_text())
    lines = vllm_pin.changes(old, new)
    assert "engine on 7.0: V0 -> V1" in lines
    assert "attention backend vLLM selects on 7.0: XFORMERS -> FLEX_ATTENTION" in lines
    assert "attention backend the toolkit uses: XFORMERS -> TRITON_ATTN" in lines
    assert "head sizes: 32, 64, 80, 96, 112, 120, 128, 192, 256 -> 32, 64, 96, 128, 160, 192, 224, 256" in lines
    assert "--kv-cache-dtype on Volta: ['auto', 'fp8_e5m2'] -> ['auto']" in lines
    assert "profile tokens (vllm serve, V1): None -> 2048" in lines
    assert "profile tokens on large GPUs ([GiB, tokens, names kept below]): None -> [70, 8192, ['a100']]" in lines
    assert "V1 sampler's top-k/top-p: None -> sort" in lines
    assert "chunked prefill under vllm serve: long_context -> always" in lines
    flags = next(line for line in lines if line.startswith("flags:"))
    assert "--skip-mm-profiling" in flags.split("removed")[0] and vllm_pin.changes(old, old) == []


def test_torch_pins_that_cannot_be_locked_with_sm70_from_pypi():
    assert vllm_pin.torch_verdict("==2.10.0") is None
    assert "cu130" in vllm_pin.torch_verdict("==2.11.0") and "download.pytorch.org" in vllm_pin.torch_verdict("==2.14.0")
    assert vllm_pin.pythons_allowed("<3.14,>=3.10") == ["3.10", "3.11", "3.12", "3.13"]
    assert vllm_pin.pythons_allowed(">=3.11,<3.15") == ["3.11", "3.12", "3.13", "3.14"]
    assert [vllm_pin.lock_platform(t) for t in ("manylinux1", "manylinux_2_24", "manylinux_2_31", None)] == \
        ["x86_64-manylinux_2_28", "x86_64-manylinux_2_28", "x86_64-manylinux_2_31", "x86_64-manylinux_2_28"]


class FakeBinary:
    """A stand-in for roles/vllm/machine_code.py's CudaBinary in the orchestration test below only."""

    def __init__(self, wheel, member, sass):
        self.wheel, self.member, self.sass, self.ptx = wheel, member, sass, ()


class FakeLockCheck:
    """A stand-in for roles/vllm/machine_code.py's LockCheck in the orchestration test below only."""

    def __init__(self, failing):
        self.failing, self.binaries, self.ok = failing, ["a", "b", *failing], not failing


def test_orchestration_refuses_on_failing_binaries_with_a_fake_check(monkeypatch, tmp_path):
    """The tool's own logic with every network step and the sm_70 check replaced (named fakes): a failing binary
    makes the verdict "refused" and is named; a passing check keeps the Python."""
    project = {"releases": {"9.9.9": [{"packagetype": "bdist_wheel", "filename":
                                       "vllm-9.9.9-cp38-abi3-manylinux_2_31_x86_64.whl", "url": "https://x/v.whl",
                                       "digests": {"sha256": "0" * 64}, "upload_time": "2026-04-18T00:00:00"}]}}
    lock = ("torch==2.10.0 \\\n    --hash=sha256:00\nnvidia-cuda-runtime-cu12==12.8.90 \\\n    --hash=sha256:00\n")
    monkeypatch.setattr(vllm_pin, "project_json", lambda: project)
    monkeypatch.setattr(vllm_pin, "wheel_metadata", lambda w, c=None: "Requires-Dist: torch==2.10.0\n"
                                                                       "Requires-Python: <3.12,>=3.10\n")
    monkeypatch.setattr(vllm_pin, "compile_lock", lambda rel, py: lock)
    monkeypatch.setattr(vllm_pin, "download", lambda url, sha, cache: tmp_path / "w.whl")
    monkeypatch.setattr(vllm_pin, "python_sources", lambda wheel: files("0.19.1"))
    failing = [FakeBinary("x-1-py3-none-any.whl", f"x/libx{i}.so", ("sm_80",)) for i in range(3)]
    checks = {"3.10": FakeLockCheck([]), "3.11": FakeLockCheck(failing)}
    monkeypatch.setattr(vllm_pin, "sm70_check", lambda path, cache: checks[path.name.split("-py")[1][:-4]])
    data = vllm_pin.pin("9.9.9", None, True, tmp_path, False)
    assert data["verdict"] == "refused" and data["pythons"] == ["3.10"]
    assert any("x-1-py3-none-any.whl: 3 binaries without sm_70 (e.g. x/libx0.so SASS sm_80 PTX -)" in r
               for r in data["refused"]) and data["platform"] == "x86_64-manylinux_2_31"
    assert data["attention_backend"] == "TRITON_ATTN" and data["exclude_newer"] == "2026-05-02"


def test_default_release_data_exists():
    assert release_data_file(DEFAULT_VERSION).is_file()


# --- chunked prefill and max_num_batched_tokens: vLLM's own code run on the toolkit's settings --------------------

#: the methods read by hand in each release's excerpt: the one that sets enable_chunked_prefill under `vllm serve`
#: on Volta, and SchedulerConfig's check of max_num_batched_tokens
CHUNKED_DEFAULT = {"0.8.5.post1": "_set_default_args_v0", "0.10.2": "_set_default_args_v1",
                   "0.19.1": "_set_default_chunked_prefill_and_prefix_caching_args"}
SCHEDULER_CHECK = {"0.8.5.post1": "_verify_args", "0.10.2": "_verify_args", "0.19.1": "verify_max_model_len"}


def _method_code(source: str, cls: str, name: str, upto_chunked: bool):
    """A function object from a method of the excerpt, annotations dropped, with the excerpt's module-level integer
    constants in its globals; upto_chunked: only its statements up to the last one that assigns
    self.enable_chunked_prefill (the rest needs a device)."""
    import ast

    tree = ast.parse(source)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)
    if upto_chunked:
        last = max(i for i, s in enumerate(fn.body) for n in ast.walk(s)
                   if isinstance(n, ast.Attribute) and n.attr == "enable_chunked_prefill"
                   and isinstance(n.ctx, ast.Store))
        fn.body = fn.body[:last + 1]
    fn.returns = None
    for a in fn.args.args:
        a.annotation = None
    fn.decorator_list = []
    constants = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                 and isinstance(n.value.value, int)]  # _DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
    module = ast.Module([*constants, fn], [])
    ast.fix_missing_locations(module)
    quiet = type("Logger", (), {k: staticmethod(lambda *a, **k: None)
                                for k in ("debug", "info", "warning", "warning_once")})
    scope = {"logger": quiet}
    exec(compile(module, "<vllm excerpt>", "exec"), scope)
    return scope[fn.name]


@functools.lru_cache(maxsize=None)
def _oracle(version: str):
    """(chunked-prefill default, ModelConfig.get_hf_config_sliding_window or None, SchedulerConfig.__post_init__'s
    default batch or None, the scheduler check, V1's `vllm serve` default batch below 70 GiB or None) of one
    release's excerpts."""
    src = files(version)
    path = "vllm/config.py" if "vllm/config.py" in src and "class SchedulerConfig" in src["vllm/config.py"] \
        else "vllm/config/scheduler.py"
    window = post = None
    if "class ModelConfig" in src.get("vllm/config.py", ""):
        window = _method_code(src["vllm/config.py"], "ModelConfig", "get_hf_config_sliding_window", False)
    if "def __post_init__" in src[path] and VLLM_RELEASES[version].engine == "V0":  # V1: cuda_graph_sizes only
        post = _method_code(src[path], "SchedulerConfig", "__post_init__", False)
    return (_method_code(src["vllm/engine/arg_utils.py"], "EngineArgs", CHUNKED_DEFAULT[version], True), window,
            post, _method_code(src[path], "SchedulerConfig", SCHEDULER_CHECK[version], False),
            rs.derive(src).profile_tokens)


#: config.json variants of a generative model: text-only, a vision-language model (vLLM's is_multimodal_model:
#: the toolkit's reading of a vision_config), MLA (vllm/config.py ModelConfig.is_deepseek_mla, 0.8.5.post1 lines
#: 979-985: model_type deepseek_v2/v3 with a kv_lora_rank), and a sliding window on and off (vLLM's own
#: get_hf_config_sliding_window runs on them where the release has it)
MODEL_VARIANTS = {"text": {}, "vision": {"vision_config": {"hidden_size": 64}},
                  "mla": {"model_type": "deepseek_v2", "kv_lora_rank": 512},
                  "sliding": {"sliding_window": 4096}, "sliding off": {"sliding_window": 4096,
                                                                      "use_sliding_window": False}}
#: extra_args variants: nothing, LoRA (V0 keeps chunked prefill off by default with it), LoRA asked and then
#: turned off again, and --disable-sliding-window (ModelConfig.get_sliding_window: None with it)
ARG_VARIANTS = {"none": (), "lora": ("--enable-lora",), "lora off": ("--enable-lora", "--no-enable-lora"),
                "adapter": ("--enable-prompt-adapter",),
                "no window": ("--disable-sliding-window",)}


def vllm_verdict(version: str, asked: bool | None, max_model_len: int, batched: int | None, seqs: int,
                 config: dict, extra_args: tuple[str, ...]):
    """(chunked prefill as the release sets it, the batch it takes, SchedulerConfig's ValueError or None) for a
    decoder-only generative model of config.json `config` served by `vllm serve` on a V100 with `extra_args`, by
    running the release's own excerpted code. V1's default batch where unset is the release's `vllm serve` default
    below 70 GiB as release_source.profile_tokens reads it from the same code, max(max_model_len, that) without
    chunked prefill (0.19.1 arg_utils.py 2217-2222, read by hand), then at most max_num_seqs x max_model_len
    (2226-2229)."""
    from types import SimpleNamespace

    default, read_window, post, check, v1_default = _oracle(version)
    lora = [a for a in extra_args if a.endswith("enable-lora")]
    engine_args = SimpleNamespace(enable_chunked_prefill=asked, enable_prefix_caching=None,
                                  speculative_config=None,  # its JSON value is outside extra_args' characters
                                  enable_lora=bool(lora) and lora[-1] == "--enable-lora",
                                  enable_prompt_adapter="--enable-prompt-adapter" in extra_args)
    window = None
    if read_window and "--disable-sliding-window" not in extra_args:
        window = read_window(SimpleNamespace(hf_text_config=SimpleNamespace(**config)))
    model_config = SimpleNamespace(max_model_len=max_model_len, is_multimodal_model="vision_config" in config,
                                   use_mla=config.get("model_type") in ("deepseek_v2", "deepseek_v3")
                                   and config.get("kv_lora_rank") is not None, runner_type="generate",
                                   get_sliding_window=lambda: window,
                                   is_chunked_prefill_supported=True, is_prefix_caching_supported=True)
    if version == "0.10.2":
        default(engine_args, None, model_config)
    else:
        default(engine_args, model_config)
    chunked = engine_args.enable_chunked_prefill
    sched = SimpleNamespace(max_num_batched_tokens=batched, max_model_len=max_model_len, max_num_seqs=seqs,
                            chunked_prefill_enabled=chunked, enable_chunked_prefill=chunked, num_scheduler_steps=1)
    if batched is None and post is not None:  # V0: SchedulerConfig's own default
        post(sched)
    elif batched is None:
        sched.max_num_batched_tokens = min(seqs * max_model_len,
                                           v1_default if chunked else max(max_model_len, v1_default))
    try:
        check(sched, max_model_len) if check.__code__.co_argcount == 2 else check(sched)
    except ValueError as e:
        return chunked, sched.max_num_batched_tokens, str(e)
    return chunked, sched.max_num_batched_tokens, None


@pytest.mark.parametrize("version", ["0.8.5.post1", "0.10.2", "0.19.1"])
def test_max_num_batched_tokens_is_refused_exactly_where_vllm_refuses_it(version, monkeypatch):
    """Issue 27: the toolkit's checks of max_num_batched_tokens, max_num_seqs and enable_chunked_prefill
    (roles/vllm/flags.py typed_problems, with roles/vllm/decide.py's reading of the model and extra_args and the
    planner's default batch) against the release's own code, run here on the same settings (its chunked-prefill
    default in EngineArgs, SchedulerConfig's default batch, then its checks): the planner's default batch is the
    one vLLM takes, a refusal comes exactly where vLLM raises, and enable_chunked_prefill is refused exactly where
    the release overrides what was asked."""
    import sys
    from types import ModuleType, SimpleNamespace

    from roles.planner.vllm import vllm_profiled_tokens
    from roles.vllm import flags as vf
    from roles.vllm.decide import planned_chunked, v0_unchunked_reason
    from roles.vllm.settings import VllmInstance

    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cuda=lambda: True)  # V0's long-context default is GPU-only
    monkeypatch.setitem(sys.modules, "vllm", ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    rel, seen = VLLM_RELEASES[version], set()
    v100 = rel.profile_tokens_on(16160, "Tesla V100-SXM2-16GB")
    grid = [(v, x, a, n, b, q) for v in MODEL_VARIANTS for x in ARG_VARIANTS for a in (None, True, False)
            for n in (2048, 4096, 32768, 32769, 65536) for b in (None, 63, 64, 4096, 40000, 65536)
            for q in (64, 4096)]
    for variant, args, asked, length, batched, seqs in grid:
        config, extra = MODEL_VARIANTS[variant], ARG_VARIANTS[args]
        chunked, vllm_batch, error = vllm_verdict(version, asked, length, batched, seqs, config, extra)
        inst = VllmInstance(model_path="/m", max_model_len=length, max_num_batched_tokens=batched,
                            max_num_seqs=seqs, enable_chunked_prefill=asked, extra_args=list(extra))
        # as roles/vllm/decide.py instance() reads them for the release
        unchunked = v0_unchunked_reason(config, extra) if rel.chunked_prefill == "long_context" else None
        planned = planned_chunked(inst, rel, unchunked is None)
        default = vllm_profiled_tokens(length, rel.engine, planned, v100, None, rel.version)
        problems = vf.typed_problems("vllm_instances.m", inst, None, rel, unchunked, default)
        case = (variant, args, asked, length, batched, seqs, error, problems)
        ignored = asked is not None and chunked != asked
        if not ignored:
            assert rel.chunks_prefill(asked, length, unchunked is None) == chunked, case
        if batched is None and not ignored:  # (an ignored setting is refused, its batch never planned)
            assert min(seqs * length, default) == vllm_batch, case
        ours = [p for p in problems if p.startswith(("vllm_instances.m.max_num_batched_tokens",
                                                     "vllm_instances.m.max_num_seqs"))]
        assert bool(ours) == (error is not None), case
        if error and "smaller than max_model_len" in error:
            assert any(f"below max_model_len {length}" in p for p in ours), case
        if error and "max_num_seqs" in error:
            assert any(f"below max_num_seqs {seqs}" in p or f"max_num_seqs = {seqs}" in p for p in ours), case
        assert any(p.startswith("vllm_instances.m.enable_chunked_prefill") for p in problems) == ignored, case
        seen.add((error is not None, ignored, batched is None))
    # the grid reaches both sides (a test that only ever accepts proves nothing), with the default batch too
    assert {(True, False, False), (False, False, False), (True, False, True), (False, False, True)} <= seen
    assert any(x[1] for x in seen) == (version == "0.10.2")


def test_the_chunked_prefill_rule_of_each_release_and_an_unknown_shape():
    """Read by hand: 0.8.5.post1 arg_utils.py 1505 `use_long_context = max_model_len > 32768`; 0.10.2 1622-1623
    `if model_config.runner_type != "pooling": self.enable_chunked_prefill = True`; 0.19.1 2113-2114 `if
    self.enable_chunked_prefill is None: self.enable_chunked_prefill = default_chunked_prefill`."""
    from roles.planner.vllm import VLLM_CHUNKED_PREFILL_ABOVE

    got = {v: rs.derive(files(v)) for v in ("0.8.5.post1", "0.10.2", "0.19.1")}
    assert {v: (f.chunked_prefill, f.chunked_prefill_above) for v, f in got.items()} == {
        "0.8.5.post1": ("long_context", 32768), "0.10.2": ("always", None), "0.19.1": ("unless_off", None)}
    assert got["0.19.1"].batched_tokens_source == "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len"
    assert got["0.8.5.post1"].batched_tokens_source == "vllm/config.py SchedulerConfig._verify_args"
    # the planner's V0 profile rule uses the same threshold
    assert VLLM_CHUNKED_PREFILL_ABOVE == got["0.8.5.post1"].chunked_prefill_above
    f = files("0.8.5.post1")
    f["vllm/engine/arg_utils.py"] = f["vllm/engine/arg_utils.py"].replace("use_long_context = max_model_len > 32768",
                                                                          "use_long_context = is_long(max_model_len)")
    with pytest.raises(rs.SourceShapeError, match="use_long_context"):
        rs.derive(f)
    g = files("0.19.1")
    g["vllm/config/scheduler.py"] = g["vllm/config/scheduler.py"].replace("< self.max_num_seqs", "< 1")
    with pytest.raises(rs.SourceShapeError, match="max_num_seqs"):
        rs.derive(g)


@pytest.mark.parametrize("version, path, old, new, says", [
    # a default that reads `== "pooling"`, sets False, or never sets the setting is not the shape the rule was read from
    ("0.10.2", "vllm/engine/arg_utils.py", 'runner_type != "pooling"', 'runner_type == "pooling"', "chunked-prefill"),
    ("0.10.2", "vllm/engine/arg_utils.py", "            self.enable_chunked_prefill = True",
     "            self.enable_chunked_prefill = False", "chunked-prefill"),
    ("0.19.1", "vllm/engine/arg_utils.py", "self.enable_chunked_prefill = default_chunked_prefill",
     "default_chunked_prefill = None", "chunked-prefill"),
    ("0.8.5.post1", "vllm/engine/arg_utils.py", "use_long_context = max_model_len > 32768",
     "long_context = max_model_len > 32768", "use_long_context"),
    # a check that warns instead of raising, or compares the other way, is no refusal
    ("0.19.1", "vllm/config/scheduler.py",
     "            raise ValueError(\n                f\"max_num_batched_tokens ({self.max_num_batched_tokens}) must \"",
     "            logger.warning(\n                f\"max_num_batched_tokens ({self.max_num_batched_tokens}) must \"",
     "max_num_seqs"),
    ("0.19.1", "vllm/config/scheduler.py", "self.max_num_batched_tokens < max_model_len",
     "self.max_num_batched_tokens > max_model_len", "max_model_len"),
    ("0.10.2", "vllm/config/scheduler.py", "if (self.max_num_batched_tokens < self.max_model_len",
     "if (self.max_num_seqs < self.max_model_len", "max_model_len"),
])
def test_a_chunked_prefill_or_scheduler_check_of_another_shape_is_an_error(version, path, old, new, says):
    f = files(version)
    assert old in f[path]
    f[path] = f[path].replace(old, new, 1)
    with pytest.raises(rs.SourceShapeError, match=says):
        rs.derive(f)


def _excerpt_method(source: str, cls: str, name: str, scope: dict):
    """A method of a class in an excerpt as a plain function, annotations and decorators dropped, run in `scope`."""
    import ast

    tree = ast.parse(source)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.returns, fn.decorator_list = None, []
    for a in fn.args.args:
        a.annotation = None
    module = ast.fix_missing_locations(ast.Module([fn], []))
    exec(compile(module, f"<vllm excerpt {cls}.{name}>", "exec"), scope)
    return scope[fn.name]


def _field_default(source: str, cls: str, name: str):
    """The default of a dataclass field in an excerpt (`name: T = value` or `= Field(default=value, ...)`)."""
    import ast

    klass = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    value = next(n.value for n in klass.body if isinstance(n, ast.AnnAssign) and n.target.id == name)
    if isinstance(value, ast.Call):
        value = next(k.value for k in value.keywords if k.arg == "default")
    return ast.literal_eval(value)


def vllm_captured_sizes(version: str, seqs: int, batched: int, mode: str | None = None,
                        lora: bool = False) -> list[int]:
    """The batch sizes a release captures CUDA graphs for, ascending (a size with a piecewise and a full graph
    twice), from its own excerpted code: VllmConfig._set_cudagraph_sizes on a V100 without sequence parallelism
    (0.8.5.post1 with VLLM_USE_V1=0 as the toolkit runs it; 0.10.2 after SchedulerConfig.__post_init__'s default
    cuda_graph_sizes), and in 0.19.1 the dispatcher's keys (CudagraphDispatcher.initialize_cudagraph_keys, no LoRA)
    for cudagraph_mode `mode` (its CUDAGraphMode excerpt; None: the mode the toolkit's volta_args set), with
    `--enable-lora` at LoRAConfig's and CompilationConfig's defaults where lora (its _get_lora_cases and
    vllm/lora/utils.py get_captured_lora_counts; the dispatcher's specialize_lora_count is
    lora_config.specialize_active_lora, cudagraph_dispatcher.py 63-67)."""
    import dataclasses
    import enum
    import itertools
    from types import SimpleNamespace as NS

    src = files(version)
    captured: list[int] = []
    quiet = NS(**{k: (lambda *a, **k: None) for k in ("debug", "info", "warning", "warning_once")})
    sched = NS(max_num_seqs=seqs, max_num_batched_tokens=batched, cuda_graph_sizes=[])
    comp = NS(pass_config=NS(enable_sequence_parallelism=False, enable_sp=False),
              init_with_cudagraph_sizes=captured.extend, post_init_cudagraph_sizes=lambda: None,
              max_cudagraph_capture_size=None, cudagraph_capture_sizes=None)
    config = NS(scheduler_config=sched, model_config=NS(enforce_eager=False), compilation_config=comp,
                parallel_config=NS(tensor_parallel_size=1), speculative_config=None, performance_mode="balanced")
    if version == "0.10.2":
        _excerpt_method(src["vllm/config/scheduler.py"], "SchedulerConfig", "__post_init__", {})(sched)
    if version != "0.19.1":
        path = "vllm/config.py" if version == "0.8.5.post1" else "vllm/config/__init__.py"
        envs = NS(VLLM_USE_V1=VLLM_RELEASES[version].engine == "V1")
        _excerpt_method(src[path], "VllmConfig", "_set_cudagraph_sizes", {"envs": envs, "logger": quiet})(config)
        return sorted(captured)
    scope = {"enum": enum}
    exec(compile(src["vllm/config/compilation.py"], "<vllm excerpt compilation.py>", "exec"), scope)
    modes = scope["CUDAGraphMode"]
    if mode is None:
        mode = next(a.split("=", 1)[1] for a in VLLM_RELEASES[version].volta_args if "cudagraph_mode=" in a)
    comp.cudagraph_mode = modes[mode]
    _excerpt_method(src["vllm/config/vllm.py"], "VllmConfig", "_set_cudagraph_sizes",
                    {"CUDAGraphMode": modes, "logger": quiet})(config)

    @dataclasses.dataclass(frozen=True)
    class BatchDescriptor:  # vllm/forward_context.py 30-51: its fields
        num_tokens: int
        num_reqs: int | None = None
        uniform: bool = False
        has_lora: bool = False
        num_active_loras: int = 0

    keys: set = set()
    lora_src = src["vllm/config/lora.py"]
    config.lora_config = NS(max_loras=_field_default(lora_src, "LoRAConfig", "max_loras"),
                            specialize_active_lora=_field_default(lora_src, "LoRAConfig",
                                                                  "specialize_active_lora")) if lora else None
    comp.cudagraph_specialize_lora = _field_default(src["vllm/config/compilation.py"], "CompilationConfig",
                                                    "cudagraph_specialize_lora")
    utils: dict = {}
    exec(compile(src["vllm/lora/utils.py"], "<vllm excerpt lora/utils.py>", "exec"), utils)
    dispatcher = NS(vllm_config=config, compilation_config=comp, _compute_bs_to_padded_graph_size=lambda: None,
                    specialize_lora_count=config.lora_config.specialize_active_lora if lora else False,
                    add_cudagraph_key=lambda m, d: keys.add((m, d)),
                    _create_padded_batch_descriptor=lambda bs, uniform, has_lora, n: BatchDescriptor(
                        bs, bs if uniform else None, uniform, has_lora, n))
    dispatcher._get_lora_cases = functools.partial(_excerpt_method(
        src["vllm/v1/cudagraph_dispatcher.py"], "CudagraphDispatcher", "_get_lora_cases",
        {"get_captured_lora_counts": utils["get_captured_lora_counts"]}), dispatcher)
    _excerpt_method(src["vllm/v1/cudagraph_dispatcher.py"], "CudagraphDispatcher", "initialize_cudagraph_keys",
                    {"CUDAGraphMode": modes, "product": itertools.product, "replace": dataclasses.replace})(
        dispatcher, modes[mode], 1)
    return sorted(d.num_tokens for _, d in keys)


#: max_num_seqs around every step of the capture lists (V0's 8, 0.19.1's 16 from 256, the caps at 256 and 512)
GRAPH_SEQS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 128, 129, 255, 256, 257, 264, 300, 511, 512, 513,
              1024, 1025, 4096)
#: max_num_batched_tokens: below and between the sizes, 0.19.1's and 0.10.2's default on a V100 (2048), 8192
GRAPH_BATCHED = (1, 5, 16, 100, 300, 2048, 8192)


@pytest.mark.parametrize("version,mode,rule", [("0.8.5.post1", None, "v0"), ("0.10.2", None, "v1_piecewise"),
                                               ("0.19.1", None, "v1_full_decode"),
                                               ("0.19.1", "FULL_AND_PIECEWISE", "v1_full_and_piecewise")])
def test_cuda_graph_sizes_are_those_vllm_captures(version, mode, rule):
    """Issue 27: the planner's capture list (planner.vllm_cuda_graph_sizes, the graphs counted outside
    gpu_memory_utilization) equals the release's own, computed here by its excerpted code on a grid of max_num_seqs
    and max_num_batched_tokens; the table's rule is the release's (0.19.1: the cudagraph_mode of the toolkit's own
    --compilation-config), and vLLM's own V1 default, FULL_AND_PIECEWISE, is the planner's rule for a V1 release
    outside the table."""
    from roles import planner

    if mode is None:
        assert VLLM_RELEASES[version].cuda_graphs == rule
    for seqs in GRAPH_SEQS:
        for batched in GRAPH_BATCHED:
            assert planner.vllm_cuda_graph_sizes(rule, seqs, batched) == vllm_captured_sizes(
                version, seqs, batched, mode), (seqs, batched)
            if version == "0.19.1":  # LoRA's graphs: the dispatcher's keys with an adapter beside those without
                assert planner.vllm_cuda_graph_sizes(rule, seqs, batched, lora=True) == vllm_captured_sizes(
                    version, seqs, batched, mode, lora=True), (seqs, batched)
            else:  # V0 (worker/model_runner.py 1490-1530) and 0.10.2 capture their one list with LoRA active too
                assert planner.vllm_cuda_graph_sizes(rule, seqs, batched, lora=True) == vllm_captured_sizes(
                    version, seqs, batched, mode), (seqs, batched)
    # the counts vLLM's users see at its default max_num_seqs 256: 35 graphs in V0, "by default, vLLM captures 67
    # graphs" (vllm RFC #20098, V1 PIECEWISE), 0.19.1's 51 piecewise sizes and 35 full ones
    assert len(vllm_captured_sizes(version, 256, 8192, mode)) == {"v0": 35, "v1_piecewise": 67, "v1_full_decode": 35,
                                                                  "v1_full_and_piecewise": 86}[rule]
