"""The one typed settings model: every setting of every role, its default and a one-line explanation.

Settings come from pyinfra host data (inventory, group_data/*.py, --data). They are validated once per host,
before any operation is added, by `load_settings`; a wrong type, an out-of-range value or an unknown key (a
typo) raises `SettingsError`, which stops the whole deploy before the first change to any host. Each setting is
prefixed by the role that reads it. The README's settings table is generated from this module
(`python -m roles.settings --write-readme`) and a test keeps the two in sync.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

import ipaddress

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from roles.hub_source import is_hub_source, source_problem

# Host data keys that belong to pyinfra and its connectors, not to this toolkit.
_PYINFRA_PREFIXES = ("ssh_", "_", "winrm_", "docker_", "dockerssh_", "chroot_", "local_", "terraform_",
                     "vagrant_", "fake_")

CudaVersion = Annotated[str, Field(pattern=r"^\d{2}\.\d$", description="major.minor, e.g. '12.4'")]
Sha256 = Annotated[str, BeforeValidator(lambda v: v.strip().lower() if isinstance(v, str) else v),
                   Field(pattern=r"^[0-9a-f]{64}$")]
#: Absolute paths of characters that need no quoting anywhere: systemd splits $VAR arguments on whitespace and
#: its EnvironmentFile parser strips quotes and backslashes, so a path must pass through both unchanged.
HostPath = Annotated[str, Field(pattern=r"^/[A-Za-z0-9._+@:,=/-]*$")]
#: Where the toolkit must never put the service home or the swapfile.
SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev", "/run", "/var/lib/dpkg",
               "/var/lib/apt")
#: llama.cpp KV cache types (`-ctk/-ctv`), ggml type names (llama.cpp common/arg.cpp kv_cache_types).
LlamaCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
#: One command-line word of extra_args: only characters that shlex.quote leaves bare and that pass systemd's
#: EnvironmentFile parser and its whitespace split of $VAR unchanged (no spaces, quotes, backslashes, $ or braces).
ArgWord = Annotated[str, Field(pattern=r"^[A-Za-z0-9_@%+=:,./-]+$")]


def _once_each(values: list | None, what: str) -> list | None:
    """Validator body: `values` unchanged, or ValueError when an entry repeats."""
    if values and len(set(values)) != len(values):
        raise ValueError(f"{values} lists a {what} twice")
    return values


class _InstanceOnGpus(BaseModel):
    """The settings both engines' instances share, declared once."""

    allow_gpu_in_use: bool = Field(
        False, description="plan on the GPUs' whole memory although processes outside v100kit use some of it now "
                           "(they must have stopped before the instance starts); refused otherwise where the "
                           "instance does not fit beside them")


class LlamaCppInstance(_InstanceOnGpus):
    """One llama-server instance (systemd unit llama-server@NAME). The model is either `model_path` on the host,
    or `model_source` (URL or path on the control machine) with `model_sha256`, placed under the service home."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: HostPath | None = Field(None, description="GGUF file already on the host")
    model_source: str | None = Field(
        None, pattern=r"^\S+$", description="URL or control-machine path of the GGUF file, or one GGUF file of a "
                                           "Hugging Face repository at a commit: hf://ORG/REPO@COMMIT/FILE.gguf "
                                           "(fetched on the control machine, HF_ENDPOINT for a mirror)")
    model_sha256: Sha256 | None = Field(None, description="sha256 of model_source (required with it; for hf:// "
                                                          "the hub's, which a value set here must equal)")
    model_parts_sha256: list[Sha256] | None = Field(
        None, description="sha256 of parts 2..N, in order, of a split GGUF model_source (NAME-00001-of-0000N.gguf, "
                          "whose own is model_sha256); each part is placed beside the first and checked")
    port: int = Field(8080, ge=1024, le=65535, description="TCP port (>= 1024: the service user cannot bind lower)")
    listen: str = Field("127.0.0.1", description="address to listen on (--host)")
    n_gpu_layers: int = Field(99, ge=0, le=999, description="-ngl: layers on the GPU (99 = all)")
    context: int | None = Field(
        None, ge=256, le=1 << 21, description="tokens one request may use, prompt and output (each slot's share; the "
                                             "KV cache pool -c is parallel x context); None: the model's trained "
                                             "context as far as the GPU holds it for every slot (at least "
                                             "min(trained, 8192), else a smaller KV type or fewer slots)")
    cache_type_k: LlamaCacheType | None = Field(
        None, description="-ctk: K cache type; None: f16 where the context fits with it, else q8_0, each only "
                          "where it keeps attention on the GPU for the model's head size (the plan says which, why "
                          "and what it costs)")
    cache_type_v: LlamaCacheType | None = Field(
        None, description="-ctv: V cache type (quantized V needs flash attention); None: chosen like cache_type_k")
    allow_cpu_attention: bool = Field(
        False, description="accept cache types / flash attention that llama.cpp runs on the CPU for this model's "
                           "head size (tens of times slower); refused otherwise")
    rope_scaling: Literal["linear", "yarn"] | None = Field(
        None, description="--rope-scaling, to serve a context longer than the model was trained for")
    rope_scale: float | None = Field(None, gt=0, description="--rope-scale: context scaling factor (with rope_scaling)")
    yarn_orig_ctx: int | None = Field(
        None, ge=256, description="--yarn-orig-ctx: the model's original context (with rope_scaling: yarn)")
    allow_context_beyond_training: bool = Field(
        False, description="accept a context per slot above the model's trained context without rope scaling "
                           "(quality degrades); refused otherwise")
    parallel: int | None = Field(
        None, ge=1, le=256, description="-np: slots, requests served at once; None: 8 where they fit with "
                                        "the context, else 4, 2, 1 (roles/llama_cpp/slots.py: measured)")
    kv_unified: bool | None = Field(
        None, description="-kvu: one KV cache pool shared by the slots, each capped at context "
                          "(--kv-unified-per-slot); None: on with more than one slot where the pinned tree has "
                          "both flags; false: -c split evenly per slot")
    flash_attn: Literal["on", "off", "auto"] = Field("auto", description="-fa")
    metrics: bool = Field(True, description="--metrics: Prometheus endpoint")
    allow_offload: bool = Field(
        False, description="accept a plan that runs layers on the CPU (single-digit tokens/s); refused otherwise")
    gpus: list[Annotated[int, Field(ge=0, le=15)]] | None = Field(
        None, min_length=1, description="CUDA_VISIBLE_DEVICES indices, each once; None: all GPUs (layers are "
                                        "split over them)")
    api_key_file: str | None = Field(
        None, min_length=1,
        description="control-machine file holding the API key (installed 0600, never on the command line)")
    # -- llama-server flags (roles/llama_cpp/flags.py renders them; None: llama-server's own default) --
    extra_args: list[ArgWord] = Field(
        default_factory=list, description="further llama-server arguments, appended as given; each flag must be one "
                                          "the pinned tree's server accepts (files/llama_cpp/<ref>.json server_flags) "
                                          "and not one a setting owns; a value is the next word, not --flag=value")
    jinja: bool | None = Field(None, description="--jinja (true) / --no-jinja (false): Jinja chat templates")
    chat_template: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]+$", description="--chat-template: a built-in template name such as chatml "
                                                       "(a custom template: chat_template_file)")
    chat_template_file: HostPath | None = Field(None, description="--chat-template-file: Jinja template on the host")
    batch_size: int | None = Field(None, ge=1, le=1 << 20, description="-b: logical batch size (>= ubatch_size)")
    ubatch_size: int | None = Field(None, ge=1, le=1 << 20, description="-ub: physical batch size")
    mlock: bool = Field(False, description="keep the model in RAM (--mlock, or --load-mode with mlock in newer trees)")
    mmap: bool = Field(True, description="memory-map the model; false: --no-mmap (or --load-mode none/mlock)")
    split_mode: Literal["none", "layer", "row"] | None = Field(None, description="-sm: how to split over GPUs")
    tensor_split: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, min_length=2, description="-ts: share of the model per GPU, e.g. [3, 1] (needs more than one GPU)")
    main_gpu: int | None = Field(None, ge=0, le=15, description="-mg: GPU (index among the visible ones) for "
                                                                "split_mode none / row's intermediate results")
    threads: int | None = Field(None, ge=1, le=1024, description="-t: CPU threads for generation")
    draft_model_path: HostPath | None = Field(None, description="-md: draft GGUF on the host (speculative decoding)")
    draft_max: int | None = Field(None, ge=1, le=1024, description="tokens to draft per step (--draft-max, "
                                                                   "--spec-draft-n-max in newer trees); needs "
                                                                   "draft_model_path")

    @field_validator("listen")
    @classmethod
    def _listen_address(cls, v: str) -> str:
        ipaddress.ip_address(v)  # ValueError names the value: an IP address, no port, no host name
        return v

    _unique_gpus = field_validator("gpus")(lambda v: _once_each(v, "GPU"))
    _hub_source = field_validator("model_source")(lambda v: _hub_source(v, needs_file=True))


def _hub_source(value: str | None, needs_file: bool) -> str | None:
    """Validator body: `value` unchanged, or ValueError for an hf:// source in the wrong form (roles/hub.py)."""
    if is_hub_source(value) and (why := source_problem(value, needs_file)):
        raise ValueError(why)
    return value


class VllmInstance(_InstanceOnGpus):
    """One vLLM OpenAI-compatible server (systemd unit vllm@NAME). The model is a Hugging Face directory
    (config.json + *.safetensors): `model_path` on the host, or `model_source` on the control machine, copied to
    the service home."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: HostPath | None = Field(None, description="model directory already on the host")
    model_source: str | None = Field(
        None, pattern=r"^\S+$", description="model directory on the control machine, or a Hugging Face repository at "
                                           "a commit: hf://ORG/REPO@COMMIT (its safetensors snapshot, fetched on "
                                           "the control machine, HF_ENDPOINT for a mirror)")
    served_model_name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._/:-]+$", description="--served-model-name; None: the instance name")
    port: int = Field(8000, ge=1024, le=65535, description="TCP port (>= 1024: the service user cannot bind lower)")
    listen: str = Field("127.0.0.1", description="address to listen on (--host)")
    dtype: Literal["auto", "half", "float16", "bfloat16", "float32"] = Field(
        "auto", description="--dtype; auto: half below compute capability 8.0 (V100 has no bf16)")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="--gpu-memory-utilization: share of VRAM")
    max_model_len: int = Field(8192, ge=16, le=1 << 21, description="--max-model-len: tokens per sequence")
    # vLLM's own default is 256 (arg_utils.py); 64 keeps the profile run's sampler memory low: docs/volta.md §4a
    max_num_seqs: int = Field(64, ge=1, le=4096, description="--max-num-seqs: sequences batched together")
    tensor_parallel_size: int = Field(1, ge=1, le=16, description="--tensor-parallel-size (at most the GPU count)")
    kv_cache_dtype: Literal["auto", "float16", "fp8", "fp8_e5m2", "fp8_e4m3"] = Field(
        "auto", description="--kv-cache-dtype; on Volta fp8_e5m2 only with a V0 release, float16 (= auto on Volta) "
                            "from 0.19.1 (roles/vllm/versions.py kv_cache_dtypes)")
    enforce_eager: bool = Field(False, description="--enforce-eager: no CUDA graphs (less VRAM, slower decode)")
    gpus: list[Annotated[int, Field(ge=0, le=15)]] | None = Field(
        None, min_length=1, description="CUDA_VISIBLE_DEVICES indices, each once; None: all GPUs")
    api_key_file: str | None = Field(
        None, min_length=1,
        description="control-machine file holding the API key (installed 0600 as VLLM_API_KEY, never in argv)")
    expose_to_network: bool = Field(
        False, description="accept a listen address other than loopback; vLLM checks the API key on /v1 only "
                            "(/invocations, /tokenize, /metrics answer without it): prefer a proxy in front")
    # -- vLLM flags (roles/vllm/flags.py renders them; None: vLLM's own default for the release) --
    extra_args: list[ArgWord] = Field(
        default_factory=list, description="further vLLM arguments, appended as given; each flag must be one the "
                                          "locked release's parser has (files/vllm/<version>.flags.json) and not one "
                                          "a setting owns")
    # None: the release's own default, off with V0 (0.8.5.post1), on with V1 (0.10.2), arg_utils.py; docs/volta.md §4a
    enable_prefix_caching: bool | None = Field(
        None, description="--enable-prefix-caching / --no-enable-prefix-caching; None: the release's default")
    # None: the release's own default, V0 only above max_model_len 32768, V1 always (arg_utils.py); docs/volta.md §4a
    enable_chunked_prefill: bool | None = Field(
        None, description="--enable-chunked-prefill / --no-enable-chunked-prefill; None: the release's default")
    max_num_batched_tokens: int | None = Field(
        None, ge=16, le=1 << 21, description="--max-num-batched-tokens: tokens per scheduler step")
    swap_space: int | None = Field(None, ge=0, le=1024, description="--swap-space: CPU swap GiB per GPU (V0)")
    chat_template: HostPath | None = Field(None, description="--chat-template: Jinja template file on the host")
    tool_call_parser: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="--tool-call-parser, e.g. hermes (with enable_auto_tool_choice)")
    enable_auto_tool_choice: bool = Field(
        False, description="--enable-auto-tool-choice: the model may call tools on its own (needs tool_call_parser)")

    _listen_address = field_validator("listen")(LlamaCppInstance._listen_address.__func__)

    _unique_gpus = field_validator("gpus")(lambda v: _once_each(v, "GPU"))
    _hub_source = field_validator("model_source")(lambda v: _hub_source(v, needs_file=False))


class Settings(BaseModel):
    """All settings. Units are in the names (_gib = GiB, _s = seconds). None means "chosen per OS" as described."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # -- GPU --------------------------------------------------------------------------------------------
    gpu_compute_capability: Annotated[str, BeforeValidator(lambda v: f"{v:.1f}" if isinstance(v, float) else v)] = Field(
        "7.0", pattern=r"^\d+\.\d$",
        description="compute capability of the box's GPUs, used where no driver is loaded yet (V100: 7.0)")

    gpu_memory_mib: int = Field(
        16160, ge=1024, le=1 << 20,
        description="VRAM per GPU in MiB for the planner where nvidia-smi cannot tell yet (before the first driver "
                    "install); 16 GB V100: 16160, 32 GB: 32510")
    gpu_count: int = Field(1, ge=1, le=16, description="GPUs per box for the planner where nvidia-smi cannot tell yet")
    gpu_usable_fraction: float = Field(
        1.0, gt=0, le=1, description="share of VRAM the planner may fill; CUDA context and compute buffers are "
                                     "already counted, so below 1 is extra margin")

    # -- base -------------------------------------------------------------------------------------------
    base_apt_mirror: str | None = Field(
        None, pattern=r"^https?://\S+$", description="distribution mirror URL; None: deb.debian.org / archive.ubuntu.com")
    base_apt_security_mirror: str | None = Field(
        None, pattern=r"^https?://\S+$", description="mirror of the distribution's security archive (CODENAME-security); "
                                                  "None: security.debian.org/debian-security / security.ubuntu.com")
    base_extra_packages: list[str] = Field(
        default_factory=list, description="extra apt packages to install on every host")
    base_service_user: str = Field(
        "llm", pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
        description="unprivileged system user that the inference services run as")
    base_service_home: HostPath = Field(
        "/var/lib/llm", description="home of the service user (models and venvs live here); not under /home or /root")
    base_ca_certificates: list[str] = Field(
        default_factory=list, description="control-machine PEM files the hosts must trust as well (a TLS-inspecting "
                                          "proxy's CA); installed under /usr/local/share/ca-certificates")
    base_apt_lock_timeout_s: int = Field(
        300, ge=0, le=3600, description="how long apt waits for a dpkg lock held by another apt run")

    # -- tuning -----------------------------------------------------------------------------------------
    tuning_swappiness: int = Field(10, ge=0, le=200, description="vm.swappiness")
    tuning_nr_hugepages: int = Field(0, ge=0, le=1_000_000, description="vm.nr_hugepages (2 MiB pages reserved)")
    tuning_sysctl_extra: dict[str, int | str] = Field(
        default_factory=lambda: {"vm.max_map_count": 1048576, "net.core.somaxconn": 4096},
        description="further kernel settings written to the same sysctl.d file")
    tuning_swap_size_gib: float = Field(8, ge=0, le=4096, description="swapfile size in GiB; 0: no swapfile")
    tuning_swap_file: HostPath = Field("/swapfile", description="swapfile path")
    tuning_thp_mode: Literal["always", "madvise", "never"] = Field(
        "madvise", description="transparent hugepage mode, applied at every boot")
    tuning_nofile_limit: int = Field(
        1048576, ge=1024, le=1073741816, description="open-file limit (soft and hard) of the service user")

    # -- nvidia_driver ----------------------------------------------------------------------------------
    nvidia_driver_source: Literal["distro", "nvidia", "runfile"] = Field(
        "distro", description="distro: Debian non-free / Ubuntu restricted (-server); nvidia: NVIDIA's CUDA repo; "
                              "runfile: NVIDIA's .run installer with DKMS (Debian 13: the only R580 there)")
    nvidia_driver_runfile_url: str | None = Field(
        None, pattern=r"^https?://\S+\.run$",
        description="URL of the pinned NVIDIA-Linux-x86_64-<version>.run on a mirror (nvidia_driver_source: runfile); "
                    "None: NVIDIA's download server; its pinned sha256 is checked whatever the source")
    nvidia_driver_allow_untested_kernel: bool = Field(
        False, description="accept a running or installed kernel of a series newer than any the pinned driver "
                           "branch is known to build on (roles/nvidia_driver/versions.py KERNEL_NEWEST_KNOWN); "
                           "refused otherwise")
    nvidia_driver_version: str | None = Field(
        None, pattern=r"^\d{3}\.\d{2,3}(\.\d{2})?$",
        description="exact driver version; None: the pinned default for the OS and source (README table)")
    nvidia_driver_kernel_module: Literal["proprietary", "open"] = Field(
        "proprietary", description="kernel module flavour; open needs compute capability >= 7.5 (refused on V100)")
    nvidia_driver_headers_package: str | None = Field(
        None, pattern=r"^linux-headers-[a-z0-9.+-]+$", description="kernel headers metapackage; None: that of the kernel metapackage the booted kernel belongs to")
    nvidia_driver_secure_boot: Literal["refuse", "enroll"] = Field(
        "refuse", description="with Secure Boot on and no DKMS signing key enrolled: refuse the deploy (naming the "
                              "fixes), or enroll: make the DKMS key and queue it for MokManager at the next boot")
    nvidia_driver_reboot: bool = Field(
        False, description="reboot when the running module must change (else the deploy says a reboot is due)")

    # -- gpu_policy -------------------------------------------------------------------------------------
    gpu_policy_power_limit_w: float | None = Field(
        None, gt=0, le=2000, description="power limit of every GPU in W (nvidia-smi -pl), set at each boot; checked "
                                         "against each card's Min..Max Power Limit (V100 PCIe 100..250, SXM2 "
                                         "150..300); None: leave the card's")
    gpu_policy_application_clocks: str | None = Field(
        None, pattern=r"^\d{2,5},\d{2,5}$", description="application clocks 'MEMORY,GRAPHICS' in MHz (nvidia-smi "
                                                        "-ac), set at each boot; must be a pair nvidia-smi -q -d "
                                                        "SUPPORTED_CLOCKS lists (V100 PCIe: 877,1380 at most); "
                                                        "None: leave the card's")
    gpu_policy_compute_mode: Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"] | None = Field(
        None, description="compute mode (nvidia-smi -c), set at each boot; None: leave the card's")
    gpu_policy_ecc: bool | None = Field(
        None, description="ECC on or off (nvidia-smi -e); a change becomes current only at a reboot "
                          "(gpu_policy_reboot); None: leave the card's")
    gpu_policy_reboot: bool = Field(
        False, description="reboot when the ECC mode must change (else the deploy sets it pending and says a reboot "
                           "is due)")

    # -- cuda -------------------------------------------------------------------------------------------
    cuda_source: Literal["distro", "nvidia"] | None = Field(
        None, description="distro: nvidia-cuda-toolkit (Debian); nvidia: NVIDIA's repo; None: distro on Debian, "
                          "nvidia on Ubuntu")
    cuda_versions: list[CudaVersion] | None = Field(
        None, min_length=1, description="toolkits to install side by side; None: the source's default for the OS")
    cuda_default_version: CudaVersion | None = Field(
        None, description="toolkit that /usr/local/cuda and login shells use; None: the first of cuda_versions")
    cuda_nvidia_repo_url: str = Field(
        "https://developer.download.nvidia.com/compute/cuda/repos/", pattern=r"^https?://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~%+:-]+)*/$",
        description="root of NVIDIA's CUDA repository, or of a mirror of it (ends in '/'; the OS directory such as "
                    "ubuntu2204/x86_64/ is appended); the signing key's fingerprint is checked whatever the source")
    cuda_allow_minor_version_compat: bool = Field(
        False, description="allow a toolkit newer than the driver through CUDA minor-version compatibility")

    # -- llama_cpp --------------------------------------------------------------------------------------
    llama_cpp_ref: str = Field(
        "pypi-0.3.36", pattern=r"^[A-Za-z0-9._-]+$",
        description="name of the pinned llama.cpp source; part of the install prefix (roll back by setting it back)")
    llama_cpp_source: str | None = Field(
        None, description="URL or control-machine path of a llama.cpp source .tar.gz; None: the pinned default "
                          "(llama.cpp as vendored in the llama_cpp_ref release's llama-cpp-python sdist on PyPI)")
    llama_cpp_source_sha256: Sha256 | None = Field(
        None, description="sha256 of llama_cpp_source (required with it; the default source's is built in)")
    llama_cpp_source_subdir: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_+-][A-Za-z0-9_.+/-]*$", description="directory inside the archive that holds llama.cpp's CMakeLists.txt; None: found")
    llama_cpp_cuda_version: CudaVersion | None = Field(
        None, description="toolkit to build with (one of cuda_versions); None: the default toolkit, or 12.8 in "
                          "place of a default 12.9 where 12.8 is installed too (Volta builds)")
    llama_cpp_allow_cuda_12_9: bool = Field(
        False, description="build llama.cpp for Volta with CUDA 12.9 although such builds fail to allocate their "
                           "weights on a V100 (ggml-org/llama.cpp#28416); refused otherwise")
    llama_cpp_cuda_architectures: list[Annotated[str, Field(pattern=r"^\d{2,3}$")]] | None = Field(
        None, description="CMAKE_CUDA_ARCHITECTURES; None: the GPUs' compute capability, 70 where none is visible")
    llama_cpp_fa_all_quants: bool = Field(
        False, description="GGML_CUDA_FA_ALL_QUANTS: flash-attention kernels for every KV type pair (slower build)")
    llama_cpp_flash_attn_style: Literal["value", "flag"] | None = Field(
        None, description="how this llama.cpp takes -fa: value (-fa on|off|auto, builds since about b6327) or flag "
                          "(bare -fa, older builds); None: the pinned source's own style (files/llama_cpp/<ref>.json), value "
                          "for another source")
    llama_cpp_model_mirror: str | None = Field(
        None, pattern=r"^https?://\S+$",
        description="URL of a directory holding the models given as URLs as SHA256/FILE (their model_sha256 and file "
                    "name; `v100kit offline fill` makes one); the host downloads them from there, still checked "
                    "against model_sha256; None: from each model_source URL")
    llama_cpp_build_jobs: int | None = Field(
        None, ge=1, le=256, description="parallel compile jobs (cmake --build -j); None: from the host's CPUs and "
                                        "memory, min(CPUs, (memory - 2 GiB reserve) / one nvcc job's peak memory, "
                                        "NVCC_JOB_BYTES in roles/llama_cpp/jobs.py), at least 1; 2 when they cannot "
                                        "be read. Not part of the install prefix: changing it never rebuilds")
    llama_cpp_start_timeout_s: int = Field(
        600, ge=10, le=7200, description="after a (re)start on a GPU host, how long the deploy waits for /health "
                                         "before it checks that the server runs on the GPU (loading reads the model)")
    llama_cpp_log_requests: bool = Field(
        False, description="write each request's prompt and generated tokens to the journal (llama-server -lv 5, "
                           "debug: its 'launching slot' line carries the prompt); false: -lv 4, which logs no "
                           "request text (tests/unit/test_prompt_logging.py reads each pinned tree)")
    llama_cpp_instances: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")], LlamaCppInstance] = Field(
        default_factory=dict, description="llama-server instances by name; the role builds llama.cpp when any is set")

    # -- vllm -------------------------------------------------------------------------------------------
    vllm_version: str = Field(
        "0.8.5.post1", pattern=r"^[0-9][0-9A-Za-z.+-]*$",
        description="vLLM release, one of roles/vllm/versions.py (0.8.5.post1: V0 engine, tensor cores on Volta; "
                    "0.10.2: V1, also Python 3.13; 0.19.1: V1, newer models, glibc 2.31+)")
    vllm_python: HostPath = Field(
        "/usr/bin/python3", description="host Python the venv is built on; its version picks the lock file")
    vllm_index_url: str = Field(
        "https://pypi.org/simple", pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="PyPI simple index the venv's wheels come from, or a mirror of it (uv --index-url); every "
                    "wheel's sha256 in the lock is still required, so a mirror cannot change what is installed")
    vllm_uv_wheel_url: str | None = Field(
        None, pattern=r"^https?://\S+\.whl$",
        description="URL of the pinned uv wheel (uv 0.13.8, manylinux x86_64) on a mirror; None: PyPI's file; its "
                    "pinned sha256 is checked whatever the source")
    vllm_lock_dir: str | None = Field(
        None, description="control-machine directory of lock files; None: files/vllm (tools/lock_vllm.py)")
    vllm_log_requests: bool = Field(
        False, description="write each request's prompt to the journal (vLLM's request logger: "
                           "--enable-log-requests, or no --disable-log-requests where the release has only that "
                           "flag); false: the release's flag that turns it off")
    vllm_instances: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")], VllmInstance] = Field(
        default_factory=dict, description="vLLM servers by name; the role installs vLLM when any is set")

    # -- ray (vLLM across several boxes) ------------------------------------------------------------------
    ray_cluster: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="inventory group whose hosts form this host's Ray cluster; every vLLM instance of its hosts "
                    "then spans all of them (pipeline parallel across the nodes, tensor parallel inside each); "
                    "None: no cluster")
    ray_head: str | None = Field(
        None, min_length=1, description="inventory name of the cluster's head host (required with ray_cluster)")
    ray_interface: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.:@-]{1,15}$",
        description="network interface between the nodes (required with ray_cluster): its IPv4 address is the "
                    "node's Ray address; NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME")
    ray_port: int = Field(
        6379, ge=1024, le=65000, description="Ray's GCS port on the head; the node manager, object manager and agents "
                                             "use the next six on every node (README: firewall)")
    ray_min_worker_port: int = Field(10002, ge=1024, le=65535, description="first port of Ray's worker processes")
    ray_max_worker_port: int = Field(10999, ge=1024, le=65535, description="last port of Ray's worker processes")

    # -- monitoring (roles/monitoring: node exporter, GPU exporter and doctor timers, scrape configuration) ------
    monitoring_enabled: bool = Field(
        False, description="install prometheus-node-exporter (the distribution's) with its textfile collector, and "
                           "the timers that write the GPU exporter's and the doctor's metrics there; false: remove "
                           "the timers and the exporter's configuration an earlier deploy set up")
    monitoring_listen_address: str = Field(
        "127.0.0.1", description="address the node exporter listens on (it has no authentication: loopback unless "
                                 "monitoring_scrapers names who may connect)")
    monitoring_node_exporter_port: int = Field(
        9100, ge=1024, le=65535, description="the node exporter's TCP port (9100: Prometheus' registered port)")
    monitoring_scrapers: list[str] = Field(
        default_factory=list, description="IP addresses or networks (CIDR) of the Prometheus servers that may "
                                          "connect to the node exporter (systemd IPAddressAllow, all others "
                                          "denied); required with a listen address other than loopback")
    monitoring_gpu_interval_s: int = Field(
        15, ge=5, le=900, description="seconds between two runs of the GPU exporter (nvidia-smi into the "
                                      "textfile directory); at most 900: V100kitGpuExporterStale fires after 1800 s")
    monitoring_doctor_interval_s: int = Field(
        300, ge=30, le=900, description="seconds between two runs of the doctor's host-local checks on the box "
                                        "(v100kit_check_ok metrics); at most 900: the V100kitDoctorStale alert "
                                        "fires after 1800 s without a run")
    monitoring_textfile_dir: HostPath = Field(
        "/var/lib/prometheus/node-exporter", description="the node exporter's textfile collector directory, passed "
                                                         "to it explicitly (the default of Debian's package, which "
                                                         "ships the directory)")
    monitoring_credentials_dir: str = Field(
        "/etc/prometheus/v100kit", pattern=r"^/[A-Za-z0-9._+@:,=/-]*$",
        description="directory on the Prometheus server holding each keyed engine instance's API key "
                    "(HOST_UNIT.key, 0600): the generated scrape configuration's credentials_file; "
                    "`v100kit monitoring scrape-config --write-credentials` fills it")

    @field_validator("tuning_sysctl_extra")
    @classmethod
    def _sysctl_keys(cls, v: dict[str, int | str]) -> dict[str, int | str]:
        for key, value in v.items():
            if not re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_-]+)+", key):
                raise ValueError(f"{key!r} is not a sysctl key like 'vm.max_map_count'")
            if key in ("vm.swappiness", "vm.nr_hugepages"):
                raise ValueError(f"{key!r} has its own setting (tuning_{key.split('.')[1]})")
            if "\n" in str(value):
                raise ValueError(f"value of {key!r} contains a newline")
        return v

    @field_validator("base_service_home", "tuning_swap_file")
    @classmethod
    def _not_system_dirs(cls, v: str, info) -> str:
        if v == "/" or v.startswith(("/home/", "/root/")) or v in ("/home", "/root") or \
                any(v == d or v.startswith(d + "/") for d in SYSTEM_DIRS):
            example = "/swapfile" if info.field_name == "tuning_swap_file" else "/var/lib/llm"
            raise ValueError(f"{v!r} is a system or login-home location; use a dedicated path such as {example}")
        return v

    @field_validator("monitoring_listen_address")
    @classmethod
    def _monitoring_address(cls, v: str) -> str:
        ipaddress.ip_address(v)  # ValueError names the value: an IP address, no port, no host name
        return v

    @field_validator("monitoring_scrapers")
    @classmethod
    def _scraper_networks(cls, v: list[str]) -> list[str]:
        for item in v:
            ipaddress.ip_network(item, strict=False)  # ValueError names the value
        return _once_each(v, "scraper")

    @field_validator("llama_cpp_source_subdir")
    @classmethod
    def _inside_archive(cls, v: str | None) -> str | None:
        if v and ".." in v.split("/"):
            raise ValueError(f"{v!r} leaves the archive")
        return v

    _no_duplicates = field_validator("cuda_versions")(lambda v: _once_each(v, "version"))

    @field_validator("base_extra_packages")
    @classmethod
    def _package_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?", name):
                raise ValueError(f"{name!r} is not an apt package name (optionally name=version)")
        return v


class SettingsError(Exception):
    """A setting is invalid or impossible for this host. Raised before any operation runs.

    The message names the host, each offending key, its value, what is allowed and the fix. Not a pyinfra error, so
    that the decision modules import nothing of pyinfra: roles.preflight raises it as HostRefused, a PyinfraError
    too, which pyinfra's command line prints without a traceback.
    """

    def __init__(self, host_name: str, problems: list[str]) -> None:
        self.host_name, self.problems = host_name, problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid settings for host {host_name}, nothing was changed:\n{lines}")


def problem(key: str, value: Any, why: str, fix: str) -> str:
    """One line of a SettingsError: `key = value: why. fix: ...`."""
    return f"{key} = {value!r}: {why}. Fix: {fix}"


def load_settings(host_name: str, data: dict[str, Any]) -> Settings:
    """Validate a host's data into Settings.

    `data` is the host's pyinfra data as a dict (all groups merged). Keys owned by pyinfra (ssh_*, _*, ...) are
    ignored. Raises SettingsError listing every problem at once.
    """
    ours = {k: v for k, v in data.items() if not k.startswith(_PYINFRA_PREFIXES)}
    problems = pyinfra_key_problems(data)
    try:
        settings = Settings(**ours)
    except ValidationError as e:
        raise SettingsError(host_name, problems + [_explain(err) for err in e.errors()]) from None
    if problems:
        raise SettingsError(host_name, problems)
    return settings


def pyinfra_key_problems(data: dict[str, Any]) -> list[str]:
    """The `ssh_*` and `_*` keys of `data` that neither pyinfra's SSH connector (SSHConnector.data_meta) nor its
    global arguments (all_global_arguments) know: a typo there (`ssh_usr`, `_sudoo`) would otherwise be ignored by
    pyinfra and by the toolkit alike. One problem per key, with the closest known key."""
    from pyinfra.api.arguments import all_global_arguments
    from pyinfra.connectors.ssh import SSHConnector

    known = {"ssh_": set(SSHConnector.data_meta), "_": {name for name, _ in all_global_arguments()}}
    problems = []
    for key in sorted(data):
        prefix = "ssh_" if key.startswith("ssh_") else "_" if key.startswith("_") else None
        if prefix is None or key in known[prefix]:
            continue
        close = difflib.get_close_matches(key, known[prefix], n=1)
        fix = f"did you mean {close[0]!r}? Rename it" if close else "remove it"
        problems.append(problem(key, data[key], "not a key pyinfra knows either (its SSH connector's data or its "
                                "global arguments)", fix))
    return problems


#: Common spellings of pyinfra's own host data keys.
PYINFRA_HINTS = {"sudo": "_sudo", "sudo_user": "_sudo_user", "user": "ssh_user", "port": "ssh_port",
                 "hostname": "ssh_hostname", "key": "ssh_key", "su_user": "_su_user"}


def _explain(err: dict) -> str:
    """One SettingsError line for one pydantic error: the dotted key, the value, why, and the fix."""
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    model: type[BaseModel] = Settings
    field_name = loc[0]
    for part in loc[:-1]:  # walk into nested models (llama_cpp_instances.NAME.port)
        ann = model.model_fields[part].annotation if part in model.model_fields else None
        nested = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        if nested:
            model = nested[0]
        if part in model.model_fields:
            field_name = part
    if loc[-1] in model.model_fields:
        field_name = loc[-1]
    if err["type"] == "extra_forbidden":
        if loc[-1] in PYINFRA_HINTS:
            return problem(key, err.get("input"), "not a toolkit setting",
                           f"did you mean pyinfra's {PYINFRA_HINTS[loc[-1]]!r}? Rename it")
        close = difflib.get_close_matches(loc[-1], model.model_fields, n=1)
        fix = f"did you mean {close[0]!r}? Rename it" if close else "remove it"
        return problem(key, err.get("input"), "unknown setting", fix + " (settings are listed in README.md)")
    if "[key]" in loc:  # a dict key (an instance name) failed its pattern
        return problem(key.replace(".[key]", ""), err.get("input"), "instance names are lower-case letters, digits, "
                       "'-' and '_' (they become systemd unit names)", "rename the instance, e.g. 'gemma27b'")
    f = model.model_fields.get(field_name) or Settings.model_fields[loc[0]]
    default = f.get_default(call_default_factory=True)
    value, why = err.get("input"), err["msg"]
    pattern = (err.get("ctx") or {}).get("pattern", "")
    if err["type"] == "string_pattern_mismatch" and pattern.startswith("^https?://"):  # a URL setting
        if not re.match(r"https?://", str(value)):
            why = "not an http:// or https:// URL (those are the only ones the hosts fetch)"
        elif re.match(pattern, f"{value}/"):
            why = "the URL must end in '/'"
    return problem(key, value, why, f"set {key} to a valid value ({f.description}; default {default!r})")


def settings_table() -> str:
    """The README's settings table (markdown): setting, default, meaning."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    fields = [(n, f) for n, f in Settings.model_fields.items()]
    fields += [(f"llama_cpp_instances.NAME.{n}", f) for n, f in LlamaCppInstance.model_fields.items()]
    fields += [(f"vllm_instances.NAME.{n}", f) for n, f in VllmInstance.model_fields.items()]
    for name, f in fields:
        default = f.get_default(call_default_factory=True)
        rows.append(f"| `{name}` | `{default!r}` | {f.description.replace('|', '&#124;')} |")
    return "\n".join(rows)


def write_readme_table(readme: str = "README.md") -> None:
    """Replace the table between the settings markers in the README."""
    text = open(readme).read()
    start, end = "<!-- settings:start -->\n", "<!-- settings:end -->"
    head, rest = text.split(start, 1)
    open(readme, "w").write(head + start + settings_table() + "\n" + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write-readme"]:
        write_readme_table()
    else:
        print(settings_table())
