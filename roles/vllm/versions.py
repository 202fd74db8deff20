"""The vLLM releases the toolkit supports on Volta, as data: torch build, engine, environment, Python versions.

This is the vLLM part of the Volta compatibility matrix (docs/volta.md §4 "vLLM" and §3 "PyTorch wheels";
confidence H/M as there). The lock files in files/vllm/ are produced from this table by `tools/lock_vllm.py`
(uv, PyPI only, wheels only, a fixed --exclude-newer date), so anyone regenerates the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from roles.vllm.release_source import HeadSizes

LOCK_DIR = Path(__file__).resolve().parents[2] / "files" / "vllm"

#: The newest glibc a chosen wheel may need, where a lock does not say: the locks are resolved for their release's
#: platform (VllmRelease.platform, x86_64-manylinux_2_28 unless the vLLM wheel needs newer), which each lock's first
#: line names (lock_glibc), so every locked package has a wheel at or below it.
MANYLINUX_GLIBC = (2, 28)
_LOCK_PLATFORM = re.compile(r"x86_64[ -]manylinux_(\d+)_(\d+)")


def lock_glibc(lock: Path) -> tuple[int, int]:
    """(major, minor) of the manylinux glibc a lock was resolved for, from its first line ("# vLLM 0.19.1 for Python
    3.10, x86_64 manylinux_2_31, ...", written by tools/lock_vllm.py), else MANYLINUX_GLIBC. Raises OSError."""
    with Path(lock).open() as f:
        m = _LOCK_PLATFORM.search(f.readline())
    return (int(m.group(1)), int(m.group(2))) if m else MANYLINUX_GLIBC


def lock_platform(lock: Path) -> str:
    """The wheel platform tag (PEP 600) a lock was resolved for: "manylinux_2_31_x86_64" from lock_glibc(lock).
    Raises OSError."""
    major, minor = lock_glibc(lock)
    return f"manylinux_{major}_{minor}_x86_64"


def release_data_file(version: str) -> Path:
    """files/vllm/<version>.json: what tools/vllm_pin.py found for a release (locks, sm_70 check, facts from its
    code with their sources, flags)."""
    return LOCK_DIR / f"{version}.json"


@dataclass(frozen=True)
class VllmRelease:
    """One vLLM release as it runs on a V100.

    torch / torch_cuda: the torch build the release pins and the CUDA of that PyPI wheel ("12.4" = cu124).
    engine: "V0" (XFORMERS attention on compute capability < 8.0: tensor cores through xformers) or "V1"
    (from 0.10.2 on Volta through TRITON_ATTN, where Triton uses FMA instead of tensor cores: slower).
    environment: what the service must set for this engine on Volta. pythons: the "3.N" versions whose wheels
    exist for every locked package (a lock file per entry). exclude_newer: the resolution date of the locks.
    kv_cache_dtypes: the --kv-cache-dtype values that work below compute capability 8.9 with this engine.
    refused: why the release cannot be installed from wheels at all (None: installable). platform: uv's
    --python-platform for its locks (the vLLM wheel's manylinux tag, at least 2_28).
    The Volta facts below are read from the release's code by tools/vllm_pin.py (files/vllm/<version>.json, each
    with its file and function; tests/unit/test_vllm_pin.py keeps the two equal): attention_backend: the backend
    the service runs on compute capability 7.0; head_sizes: the head sizes it accepts (vLLM stops at start-up on
    others); profile_tokens: tokens of V1's profile run under `vllm serve` on a V100 (None: V0, whose count follows
    max_model_len). volta_args: flags every instance gets; vision_args: flags for a vision-language model (a
    config.json with vision_config); start_timeout_s: how long a first start may take (weights, compilation, CUDA
    graphs, Triton's first JIT); sources: where each Volta choice comes from.
    """

    version: str
    torch: str
    torch_cuda: str
    engine: str
    pythons: tuple[str, ...]
    exclude_newer: str
    environment: dict[str, str] = field(default_factory=dict)
    kv_cache_dtypes: tuple[str, ...] = ("auto",)
    refused: str | None = None
    platform: str = "x86_64-manylinux_2_28"
    attention_backend: str = ""
    head_sizes: HeadSizes = HeadSizes()
    profile_tokens: int | None = None
    #: (threshold GiB, tokens, device-name substrings): V1's profile tokens on a GPU of at least that much memory
    #: whose lower-cased name has none of the substrings (an H100 or H200 takes arg_utils.py's other branch, an
    #: A100-80GB does not); None: profile_tokens on every GPU
    profile_tokens_large: tuple[int, int, tuple[str, ...]] | None = None
    #: how the V1 sampler filters top-k/top-p in the profile run (release_source.sampler_path): "triton" from
    #: sampler_triton_rows rows on, else "sort"; None (V0): the planner's calibrated default
    sampler_path: str | None = None
    sampler_triton_rows: int | None = None
    volta_args: tuple[str, ...] = ()
    vision_args: tuple[str, ...] = ()
    start_timeout_s: int = 600
    sources: dict[str, str] = field(default_factory=dict)
    #: chunked prefill under `vllm serve` (release_source.chunked_prefill): "long_context" (V0: on by default only
    #: above max_model_len chunked_prefill_above, the setting wins), "always" (on for every generative model, the
    #: setting ignored) or "unless_off" (on by default, off when asked)
    chunked_prefill: str = "unless_off"
    chunked_prefill_above: int | None = None
    #: why vision-language models cannot run on compute capability < 8.0 with this release (None: they can): the
    #: machine code its vision encoder launches there lacks sm_70 (roles/vllm/machine_code.py VOLTA_LIMITS)
    volta_vision: str | None = None
    #: which batch sizes it captures CUDA graphs for (planner.VLLM_GRAPH_RULES, planner.vllm_cuda_graph_sizes: read
    #: from its code, with its flags as the toolkit starts it); None: the planner's rule for its engine
    cuda_graphs: str | None = None

    def lock_file(self, python: str) -> Path:
        """files/vllm/vllm-<version>-py<python>.txt."""
        return LOCK_DIR / f"vllm-{self.version}-py{python}.txt"

    def profile_tokens_on(self, memory_mib: int, name: str = "") -> int | None:
        """V1's profile tokens under `vllm serve` on a GPU of `memory_mib` MiB in all (nvidia-smi's memory.total;
        vLLM compares the device's total memory with threshold x GiB) named `name` (nvidia-smi's; vLLM lower-cases
        it): profile_tokens_large's tokens from its threshold on where the name has none of its substrings, else
        profile_tokens (None: V0, whose count follows max_model_len)."""
        large = self.profile_tokens_large
        if large and memory_mib * (1 << 20) >= large[0] * (1 << 30) and not any(x in name.lower() for x in large[2]):
            return large[1]
        return self.profile_tokens

    def chunks_prefill(self, asked: bool | None, max_model_len: int, long_context: bool = True) -> bool:
        """Whether this release's `vllm serve` chunks prefill for a decoder-only generative model of
        `max_model_len` tokens given --enable-chunked-prefill `asked` (None: not given), by chunked_prefill.
        long_context: False where the model keeps V0's long-context default off (roles/vllm/decide.py
        v0_unchunked_reason: a vision-language model, MLA, a sliding window)."""
        if self.chunked_prefill == "always":
            return True
        if asked is not None:
            return asked
        return self.chunked_prefill != "long_context" or long_context and \
            max_model_len > (self.chunked_prefill_above or 0)

    def sampler_path_for(self, max_num_seqs: int) -> str | None:
        """The profile run's top-k/top-p path for `max_num_seqs` dummy requests (it samples one row each):
        "triton" where the release hands that many rows to its Triton kernel, "sort" where it sorts, None for V0
        (planner.VLLM_SAMPLER_PATHS)."""
        if self.sampler_path == "triton" and max_num_seqs < (self.sampler_triton_rows or 0):
            return "sort"
        return self.sampler_path


#: Supported releases. Python lists are what `uv pip compile --only-binary :all:` resolves (tools/lock_vllm.py).
VLLM_RELEASES: dict[str, VllmRelease] = {
    # torch 2.4.0 (docs/volta.md §4); outlines pulls pyairports, which PyPI has only as an sdist: no wheel-only
    # install, and no cp313 torch 2.4 wheels either.
    "0.6.3.post1": VllmRelease("0.6.3.post1", "2.4.0", "12.1", "V0", (), "2024-11-01", refused=(
        "its dependency pyairports exists only as a source distribution on PyPI, so it cannot be installed from "
        "wheels (and torch 2.4.0 has no Python 3.13 wheels)")),
    # The last release line users run on V100 with the V0 engine (vllm#13398: V1 needs Ampere before 0.10.2, so
    # VLLM_USE_V1=0). torch 2.6.0 cu124 has sm_70 kernels. xformers 0.0.29.post2 has no cp313 wheel.
    "0.8.5.post1": VllmRelease(
        "0.8.5.post1", "2.6.0", "12.4", "V0", ("3.10", "3.11", "3.12"), "2025-05-20",
        environment={"VLLM_USE_V1": "0", "VLLM_ATTENTION_BACKEND": "XFORMERS"},
        chunked_prefill="long_context", chunked_prefill_above=32768, cuda_graphs="v0",
        # fp8_e5m2 KV is storage-only: no FP8 hardware needed (docs/volta.md §4; M)
        kv_cache_dtypes=("auto", "fp8_e5m2"),
        attention_backend="XFORMERS",
        head_sizes=HeadSizes((32, 64, 80, 96, 112, 120, 128, 192, 256), source=(
            "vllm/attention/ops/paged_attn.py PagedAttention.get_supported_head_sizes (checked by "
            "vllm/attention/backends/xformers.py XFormersImpl)")),
        sources={"engine": "vllm/engine/arg_utils.py _is_v1_supported_oracle: compute capability < 8.0 falls back "
                           "to V0", "attention_backend": "vllm/platforms/cuda.py get_attn_backend_cls (V0): not "
                           "has_device_capability(80) -> XFORMERS",
                 "cuda_graphs": "vllm/config.py VllmConfig._set_cudagraph_sizes (not VLLM_USE_V1); "
                                "vllm/worker/model_runner.py capture_model (once per pipeline stage)"}),
    # The first V1 release with a Volta path (PRs #23614, #24022). torch 2.8.0 cu128 keeps sm_70. Its own choice
    # below 8.0 is FlexAttention (vllm/platforms/cuda.py get_attn_backend_cls: "FlexAttention is the default for
    # older GPUs"), so the toolkit pins TRITON_ATTN (docs/volta.md §4) with VLLM_ATTENTION_BACKEND. Its fp8 KV cache
    # is read as e4m3 (`.view(self.fp8_dtype)` in triton_attn.py), which Triton cannot use before sm_89 ("type
    # fp8e4nv not supported"): auto only.
    "0.10.2": VllmRelease(
        "0.10.2", "2.8.0", "12.8", "V1", ("3.10", "3.11", "3.12", "3.13"), "2025-09-30",
        environment={"VLLM_ATTENTION_BACKEND": "TRITON_ATTN_VLLM_V1"},
        attention_backend="TRITON_ATTN",
        volta_vision=("below 8.0 its vision encoders run ViT attention through xformers (vllm/platforms/cuda.py "
                      "get_vit_attn_backend: 'Fallback for Volta/Turing GPUs' -> XFORMERS), and its xformers "
                      "0.0.32.post1 xformers/_C.so has no sm_70 code (built for '7.5 8.0+PTX 9.0a': files/vllm/"
                      "vllm-0.10.2-py3.12.sm70.json, docs/vllm-sm70.md)"),
        head_sizes=HeadSizes((32, 64, 96, 128, 160, 192, 224, 256), source=(
            "vllm/v1/attention/backends/triton_attn.py TritonAttentionBackend.get_supported_head_sizes")),
        profile_tokens=2048, profile_tokens_large=(70, 8192, ("a100",)), sampler_path="sort",
        chunked_prefill="always", cuda_graphs="v1_piecewise",
        sources={"attention_backend": "vllm/platforms/cuda.py get_attn_backend_cls: VLLM_ATTENTION_BACKEND "
                                      "TRITON_ATTN_VLLM_V1 -> triton_attn.TritonAttentionBackend (the default below "
                                      "8.0 is flex_attention.FlexAttentionBackend)",
                 "profile_tokens": "vllm/engine/arg_utils.py default_max_num_batched_tokens[OPENAI_API_SERVER] "
                                   "for device memory < 70 GiB, 8192 from 70 GiB but on an A100",
                 "cuda_graphs": "vllm/config/scheduler.py SchedulerConfig.__post_init__ cuda_graph_sizes; "
                                "vllm/config/__init__.py VllmConfig._set_cudagraph_sizes; cudagraph_mode PIECEWISE "
                                "by default"}),
    # The newest release that installs from PyPI wheels with an sm_70 torch (tools/vllm_pin.py --survey: 0.20.0 and
    # later pin torch 2.11+, whose PyPI wheels are cu130 without sm_70, and their vLLM _C has no sm_70 either). V100
    # owners run ~0.19 (KumphanartDansiri/v100-vllm-2026). torch 2.10.0 cu128 keeps sm_70 (TORCH_SM70); the wheel is
    # manylinux_2_31 (glibc 2.31+: Debian 11+, Ubuntu 20.04+). On 7.0 it selects TRITON_ATTN itself (FLASH_ATTN
    # needs 8.0, FLASHINFER 7.5), pinned with --attention-backend (VLLM_ATTENTION_BACKEND is gone from vllm/envs.py)
    # so a head size below 32 is refused at start-up as the planner refuses it, instead of falling to FlexAttention.
    # CUDA graphs FULL_DECODE_ONLY and --skip-mm-profiling for vision models as the v100-vllm-2026 owners run it
    # (dotted form: no quotes for systemd's $VLLM_ARGS; parsed by 0.19.1's own parser to cudagraph_mode
    # FULL_DECODE_ONLY). The engine must be ready within VLLM_ENGINE_READY_TIMEOUT_S (vllm/envs.py, default 600):
    # the first start compiles (torch.compile, Triton's kernels: minutes on V100, humanjesse/vllm-v100), so 1800.
    # Triton and compile caches persist under the unit's CacheDirectory (TRITON_CACHE_DIR, VLLM_CACHE_ROOT).
    "0.19.1": VllmRelease(
        "0.19.1", "2.10.0", "12.8", "V1", ("3.10", "3.11", "3.12", "3.13"), "2026-05-02",
        platform="x86_64-manylinux_2_31",
        environment={"VLLM_ENGINE_READY_TIMEOUT_S": "1800"},
        kv_cache_dtypes=("auto", "float16"),
        attention_backend="TRITON_ATTN",
        head_sizes=HeadSizes(minimum=32, source=(
            "vllm/v1/attention/backends/triton_attn.py TritonAttentionBackend.supports_head_size")),
        profile_tokens=2048, profile_tokens_large=(70, 8192, ("a100",)), sampler_path="triton", sampler_triton_rows=8,
        chunked_prefill="unless_off", cuda_graphs="v1_full_decode",
        volta_args=("--attention-backend", "TRITON_ATTN", "--compilation-config.cudagraph_mode=FULL_DECODE_ONLY"),
        vision_args=("--skip-mm-profiling",),
        start_timeout_s=1800,
        sources={"attention_backend": "vllm/platforms/cuda.py _get_backend_priorities filtered by "
                                      "supports_compute_capability at 7.0; --attention-backend "
                                      "(vllm/engine/arg_utils.py)",
                 "cuda_graph_mode": "KumphanartDansiri/v100-vllm-2026 (FULL_DECODE_ONLY); CUDAGraphMode in "
                                    "vllm/config/compilation.py",
                 "cuda_graphs": "vllm/config/vllm.py VllmConfig._set_cudagraph_sizes; "
                                "vllm/v1/cudagraph_dispatcher.py initialize_cudagraph_keys (FULL_DECODE_ONLY: full "
                                "graphs for sizes up to max_num_seqs)",
                 "skip_mm_profiling": "KumphanartDansiri/v100-vllm-2026; --skip-mm-profiling in "
                                      "vllm/engine/arg_utils.py",
                 "start_timeout_s": "vllm/envs.py VLLM_ENGINE_READY_TIMEOUT_S (600); humanjesse/vllm-v100 (first "
                                    "requests JIT Triton kernels for minutes)",
                 "profile_tokens": "vllm/engine/arg_utils.py get_batch_defaults: OPENAI_API_SERVER 2048 below 70 GiB, "
                                   "8192 from 70 GiB but on an A100"}),
}

#: The first vLLM release whose PyPI wheels lack sm_70 machine code, and what the check found (major, minor). From
#: 0.20.0 vLLM pins torch 2.11+, whose PyPI wheels are cu130 (no sm_70: pytorch#172352), and its own kernels are
#: built with CUDA 12.8+, where vLLM's CMakeLists drops 7.0 (PR #39878); docs/vllm-releases.md surveys 0.20.0-0.33.0.
#: The cuobjdump evidence of 0.21.0's lock: tests/data/sm70/vllm-0.21.0-py3.12.sm70.json (docs/vllm-sm70.md).
NO_SM70_WHEELS_FROM = (0, 20)
NO_SM70_WHEELS_WHY = (
    "PyPI's wheels of vLLM 0.20.0 and later have no sm_70 machine code: the sm_70 check of 0.21.0's lock found 30 of "
    "39 CUDA binaries without code for 7.0, among them vLLM's own vllm/_C.abi3.so (SASS sm_75 and newer) and torch "
    "2.11.0's libtorch_cuda.so (CUDA 13.0 wheel; torch keeps Volta only in its cu126 builds, pytorch#172352) "
    "(tests/data/sm70/vllm-0.21.0-py3.12.sm70.json, docs/vllm-sm70.md, docs/vllm-releases.md)")


def release_after_sm70_wheels(version: str) -> bool:
    """True for a vLLM version ('0.21.0', '0.20.0rc1') at or after NO_SM70_WHEELS_FROM; False for older ones and
    for a string that does not start with major.minor."""
    m = re.match(r"^(\d+)\.(\d+)", version)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= NO_SM70_WHEELS_FROM


#: The default: 0.8.5.post1, kept after checking 0.19.1 (tools/vllm_pin.py, files/vllm/<version>.json). Speed: on a
#: V100 the V0 engine's XFORMERS attention uses the tensor cores, while every V1 release runs TRITON_ATTN, where
#: Triton uses FMA instead of tensor cores below 8.0 (docs/volta.md §4 "slow"; no field report measures V1 faster
#: on Volta), and V1 pays a first-start compile (torch.compile, Triton JIT: minutes, humanjesse/vllm-v100) that V0
#: does not. What it loads: 0.8.5.post1 takes head sizes 32-256 as PagedAttention lists them (80, 112 and 120
#: included, where 0.10.2's TRITON_ATTN list has none of those) and fp8_e5m2 KV, which no V1 release can use on 7.0
#: (their Triton kernels read every fp8 cache as e4m3). What it cannot: Python 3.13 (Debian 13: refused, the fix
#: names the newest release with a py3.13 lock) and architectures newer than its model registry; 0.19.1 takes any
#: head size from 32 and newer models, at V1's speed, and its sm_70 verdict waits on machine_code's list of binaries
#: never launched on 7.0 (files/vllm/vllm-0.19.1-py3.*.sm70.json: every lock passes). So V0's tensor-core speed wins as the default; 0.19.1 is
#: the choice for newer models and Python 3.13.
DEFAULT_VERSION = "0.8.5.post1"

#: PyTorch wheels and whether they contain sm_70 kernels: (torch major.minor, CUDA major.minor) -> bool.
#: (docs/volta.md §3 "PyTorch wheels that contain sm_70 kernels": 2.4/2.6 H-M, 2.7 cu128 NO, 2.8 cu128 yes M-H,
#: 2.9/2.10 cu130 no, 2.11+ cu128 no.) The installed venv is checked on the host as well.
TORCH_SM70: dict[tuple[str, str], bool] = {
    ("2.4", "12.1"): True, ("2.4", "12.4"): True, ("2.5", "12.1"): True, ("2.5", "12.4"): True,
    ("2.6", "12.4"): True, ("2.6", "12.6"): True, ("2.7", "12.6"): True, ("2.7", "12.8"): False,
    ("2.8", "12.6"): True, ("2.8", "12.8"): True, ("2.9", "12.8"): True, ("2.9", "13.0"): False,
    ("2.10", "12.8"): True, ("2.10", "13.0"): False, ("2.11", "12.8"): False, ("2.11", "12.6"): True,
}

#: Minimum compute capability of vLLM's quantization methods (quant_method in config.json), as vLLM's
#: get_min_capability() returns them: AWQ 7.5 (vllm#4202 "Minimum capability: 75. Current capability: 70"),
#: GPTQ 6.0, Marlin kernels and compressed-tensors w4a16 8.0, FP8 weights 8.9. (docs/volta.md §4; M)
QUANT_MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "awq": (7, 5), "awq_marlin": (8, 0), "marlin": (8, 0), "gptq_marlin": (8, 0), "gptq_marlin_24": (8, 0),
    "compressed-tensors": (8, 0), "compressed_tensors": (8, 0), "fp8": (8, 9), "fbgemm_fp8": (8, 9),
    "modelopt": (8, 9), "gptq": (6, 0), "bitsandbytes": (7, 0), "gguf": (6, 0),
    # read in the releases' code (vllm/model_executor/layers/quantization/<method>.py get_min_capability, the same
    # in 0.8.5.post1 and 0.10.2); (H)
    "torchao": (7, 5), "bitblas": (7, 0), "deepspeedfp": (6, 0),
}

#: The Python package vLLM imports for a quantization method (config.json quantization_config.quant_method, which
#: vLLM lower-cases: 0.8.5.post1 vllm/config.py:766, 0.10.2 vllm/config/__init__.py:1148), per release: method ->
#: (package as a lock names it, the lowest version vLLM accepts, where the release imports it). Read in each
#: release's source distribution on PyPI (vllm-<version>.tar.gz, sha256 57608f44... for 0.10.2, 9fb88ce6... for
#: 0.19.1, 5e5be78e... for 0.8.5.post1), vllm/model_executor/layers/quantization/. Without the package in the venv
#: the instance starts and fails at model load ("Please install bitsandbytes>=... via `pip install ...`"). A
#: method vLLM implements with its own kernels (gptq, awq, fp8, gguf's reader, compressed-tensors: a locked
#: dependency) is not listed. None as the package: the release has no such method (its file is gone). (H)
QUANT_PACKAGES: dict[str, dict[str, tuple[str | None, str, str]]] = {
    "0.8.5.post1": {
        "bitsandbytes": ("bitsandbytes", "0.45.3", "bitsandbytes.py:158, BitsAndBytesLinearMethod.__init__"),
        "torchao": ("torchao", "0.10.0", "torchao.py:41, TorchAOConfig.from_config"),
        "bitblas": ("bitblas", "0.1.0", "bitblas.py:45, BitBLASConfig.__init__ (utils/bitblas_utils.py:9)"),
        "gptq_bitblas": ("bitblas", "0.1.0", "gptq_bitblas.py:62, GPTQBitBLASConfig.__init__"),
        "deepspeedfp": ("deepspeed", "0.14.2", "deepspeedfp.py:145, DeepSpeedFPParameter.__new__"),
    },
    "0.10.2": {
        "bitsandbytes": ("bitsandbytes", "0.46.1", "bitsandbytes.py:173, BitsAndBytesLinearMethod.__init__"),
        "torchao": ("torchao", "0.10.0", "torchao.py:83, TorchAOConfig.from_config"),
        "bitblas": ("bitblas", "0.1.0", "bitblas.py:48, BitBLASConfig.__init__ (utils/bitblas_utils.py:11)"),
        "gptq_bitblas": ("bitblas", "0.1.0", "gptq_bitblas.py:66, GPTQBitBLASConfig.__init__"),
        "deepspeedfp": ("deepspeed", "0.14.2", "deepspeedfp.py:148, DeepSpeedFPParameter.__new__"),
    },
    "0.19.1": {
        "bitsandbytes": ("bitsandbytes", "0.48.1", "bitsandbytes.py:31-34, _check_bitsandbytes_version (CUDA)"),
        "torchao": ("torchao", "0.10.0", "torchao.py:143, TorchAOConfig.from_config"),
        "bitblas": (None, "", "no bitblas.py in 0.19.1's quantization package"),
        "gptq_bitblas": (None, "", "no gptq_bitblas.py in 0.19.1's quantization package"),
        "deepspeedfp": (None, "", "no deepspeedfp.py in 0.19.1's quantization package"),
    },
}

#: bf16 needs compute capability 8.0; below it vLLM fails or silently uses float32: pass --dtype half. (vllm#946; H)
BF16_MIN_CAPABILITY = (8, 0)
#: Attention logit soft-capping (Gemma-2: attn_logit_softcapping) needs FlashAttention/FlashInfer. (vllm#6173; H)
SOFTCAP_MIN_CAPABILITY = (8, 0)

#: uv on the hosts: the PyPI wheel (binary inside), pinned by sha256 (PyPI simple index, checked 2026-11-29).
UV_VERSION = "0.13.8"
UV_WHEEL_URL = ("https://files.pythonhosted.org/packages/c5/32/52ee34636aea1ab3f8baeeae1c3599461b8cddfb379862cc72ac61b8d91c/"
                "uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
UV_WHEEL_SHA256 = "e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984"
