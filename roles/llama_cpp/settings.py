"""llama.cpp's settings: the `llama_cpp_*` keys and one LlamaCppInstance per `llama_cpp_instances` entry.

SETTINGS is the mixin roles/settings.py composes into Settings (roles/engine_packages.py names this package).
Imports only roles.settings_base, never roles.settings: Settings is built from this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from roles.settings_base import (ArgWord, CudaVersion, HostPath, InstanceName, InstanceOnGpus, Sha256,
                                 hub_source_check)

#: llama.cpp KV cache types (`-ctk/-ctv`), ggml type names (llama.cpp common/arg.cpp kv_cache_types).
LlamaCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


class LlamaCppInstance(InstanceOnGpus):
    """One llama-server instance (systemd unit llama-server@NAME). The model is either `model_path` on the host,
    or `model_source` (URL or path on the control machine) with `model_sha256`, placed under the service home."""

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
                          "(--kv-unified-per-slot; needs both flags in the pinned tree); None/false: -c split "
                          "evenly, a KV stream per slot (measured faster with long prompts: "
                          "roles/llama_cpp/slots.py)")
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
                                          "the pinned tree's server accepts (files/llama_cpp/<ref>.json "
                                          "server_flag_values) "
                                          "and not one a setting owns; a value is the next word, not --flag=value, "
                                          "and an integer flag's a whole number (server_int_flags)")
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

    _hub_source = field_validator("model_source")(lambda v: hub_source_check(v, needs_file=True))


class LlamaCppSettings(BaseModel):
    """The `llama_cpp_*` settings (the llama_cpp role: build, install and llama-server@NAME units)."""

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
                          "(bare -fa, older builds); None: the pinned source's own style (files/llama_cpp/<ref>.json), read "
                          "from common/arg.cpp for another control-machine archive, value for a URL; refused where it "
                          "contradicts a pinned or read tree")
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
        False, description="write each request's prompt to a file in /var/log/llama-server/NAME/ (llama-server "
                           "--log-prompts-dir; the directory 0700, the service user's; pins that have the flag: "
                           "pypi-0.3.36); either way the journal gets no request text from a pin (-lv: the pin's own, "
                           "files/llama_cpp/<ref>.json log_verbosity); a source given by URL runs at -lv 4, where an "
                           "older tree logs each request body (v100kit plan says so)")
    llama_cpp_instances: dict[InstanceName, LlamaCppInstance] = Field(
        default_factory=dict, description="llama-server instances by name; the role builds llama.cpp when any is set")

    @field_validator("llama_cpp_source_subdir")
    @classmethod
    def _inside_archive(cls, v: str | None) -> str | None:
        if v and ".." in v.split("/"):
            raise ValueError(f"{v!r} leaves the archive")
        return v


SETTINGS = LlamaCppSettings
