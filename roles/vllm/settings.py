"""vLLM's settings: the `vllm_*` keys and one VllmInstance per `vllm_instances` entry.

SETTINGS is the mixin roles/settings.py composes into Settings (roles/engine_packages.py names this package).
Imports only roles.settings_base, never roles.settings: Settings is built from this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from roles.settings_base import ArgWord, HfModelInstance, HostPath, InstanceName


class VllmInstance(HfModelInstance):
    """One vLLM OpenAI-compatible server (systemd unit vllm@NAME). The model is a Hugging Face directory
    (config.json + *.safetensors): `model_path` on the host, or `model_source` on the control machine, copied to
    the service home."""

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
    # no formula or public log gives a vision encoder's memory on Volta: the user measures it (README), the planner
    # keeps it outside the KV cache (roles/vllm/decide.py encoder_problems)
    encoder_memory_gib: float | None = Field(
        None, ge=0, le=256, description="GiB per GPU a vision-language model's encoder needs for a request's images, "
                                        "kept out of the KV cache; required for such a model (None: refused)")
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
    # None: the release's own default: V0 only above max_model_len 32768 (not for vision, MLA, sliding-window
    # models), 0.10.2 always (false is refused there: ignored), 0.19.1 unless false (arg_utils.py); docs/volta.md §4a
    enable_chunked_prefill: bool | None = Field(
        None, description="--enable-chunked-prefill / --no-enable-chunked-prefill; None: the release's default")
    max_num_batched_tokens: int | None = Field(
        None, ge=16, le=1 << 21, description="--max-num-batched-tokens: tokens per scheduler step; at least "
        "max_num_seqs, and max_model_len without chunked prefill (vLLM refuses less)")
    swap_space: int | None = Field(None, ge=0, le=1024, description="--swap-space: CPU swap GiB per GPU (V0)")
    chat_template: HostPath | None = Field(None, description="--chat-template: Jinja template file on the host")
    tool_call_parser: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="--tool-call-parser, e.g. hermes (with enable_auto_tool_choice)")
    enable_auto_tool_choice: bool = Field(
        False, description="--enable-auto-tool-choice: the model may call tools on its own (needs tool_call_parser)")


class VllmSettings(BaseModel):
    """The `vllm_*` settings (the vllm role: the hash-locked venv and vllm@NAME units)."""

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
    vllm_instances: dict[InstanceName, VllmInstance] = Field(
        default_factory=dict, description="vLLM servers by name; the role installs vLLM when any is set")


SETTINGS = VllmSettings
