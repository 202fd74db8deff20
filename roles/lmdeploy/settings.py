"""The lmdeploy role's settings: LmdeployInstance (one `lmdeploy serve api_server`, unit lmdeploy@NAME) and the
mixin SETTINGS that the settings model composes (its lmdeploy_* keys). Defaults are LMDeploy 0.15.0's own where it
has one (lmdeploy/messages.py TurbomindEngineConfig, lmdeploy/cli/utils.py), so that an unset setting means what
LMDeploy would do."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from roles.lmdeploy.planner import DEFAULT_CACHE_BLOCK_SEQ_LEN, DEFAULT_CACHE_MAX_ENTRY_COUNT
from roles.lmdeploy.versions import DEFAULT_VERSION
from roles.settings_base import ArgWord, HfModelInstance, HostPath, InstanceName

#: LMDeploy's own api_server port (lmdeploy/cli/serve.py --server-port default 23333)
DEFAULT_PORT = 23333


class LmdeployInstance(HfModelInstance):
    """One LMDeploy OpenAI-compatible server on its TurboMind engine (systemd unit lmdeploy@NAME). The model is a
    Hugging Face directory (config.json + *.safetensors), 4-bit AWQ/GPTQ or float16: `model_path` on the host, or
    `model_source` on the control machine, copied to the service home."""

    served_model_name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._/:-]+$", description="--model-name (the OpenAI model name); None: the instance name")
    port: int = Field(DEFAULT_PORT, ge=1024, le=65535,
                      description="--server-port (>= 1024: the service user cannot bind lower; 23333: LMDeploy's own)")
    listen: str = Field("127.0.0.1", description="address to listen on (--server-name)")
    gpus: list[Annotated[int, Field(ge=0, le=15)]] | None = Field(
        None, min_length=1, description="CUDA_VISIBLE_DEVICES indices, each once; None: all GPUs")
    tp: int = Field(1, ge=1, le=16, description="--tp: tensor-parallel GPUs (the first tp the instance sees)")
    session_len: int | None = Field(
        None, ge=64, le=1 << 21, description="--session-len: tokens per sequence; None: the model's "
                                            "max_position_embeddings, at most 8192")
    cache_max_entry_count: float = Field(
        DEFAULT_CACHE_MAX_ENTRY_COUNT, gt=0, lt=1,
        description="--cache-max-entry-count: share of the GPU memory free after the weights for the KV cache")
    cache_block_seq_len: int = Field(
        DEFAULT_CACHE_BLOCK_SEQ_LEN, ge=16, le=1024, multiple_of=16,
        description="--cache-block-seq-len: tokens per KV block")
    quant_policy: Literal[0, 4, 8] = Field(0, description="--quant-policy: KV cache 0 float16, 4 int4, 8 int8")
    max_batch_size: int | None = Field(
        None, ge=1, le=4096, description="--max-batch-size: sequences batched together; None: LMDeploy's own choice")
    api_key_file: str | None = Field(
        None, min_length=1, description="control-machine file holding the API key (installed 0600, handed to the "
                                        "service by LoadCredential, never in argv)")
    expose_to_network: bool = Field(
        False, description="accept a listen address other than loopback (needs api_key_file): LMDeploy checks the "
                           "key on its API routes only, prefer a proxy in front")
    extra_args: list[ArgWord] = Field(
        default_factory=list, description="further `lmdeploy serve api_server` arguments, appended as given; not a "
                                          "flag a setting owns, nor --api-keys, -h, a short option, a stray value or "
                                          "a prompt-logging --log-level")


class LmdeploySettings(BaseModel):
    """The lmdeploy role's part of the settings model (its keys are prefixed lmdeploy_)."""

    lmdeploy_version: str = Field(
        DEFAULT_VERSION, description="LMDeploy release (roles/lmdeploy/versions.py: a lock per host Python)")
    lmdeploy_python: HostPath = Field(
        "/usr/bin/python3", description="host Python the venv is built on; its version picks the lock file")
    lmdeploy_index_url: str = Field(
        "https://pypi.org/simple", pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="PyPI simple index the venv's wheels come from, or a mirror of it; every wheel's sha256 in the "
                    "lock is still required")
    lmdeploy_instances: dict[InstanceName, LmdeployInstance] = Field(
        default_factory=dict, description="LMDeploy servers by name; the role installs LMDeploy when any is set")


#: What the settings model composes (class Settings(..., SETTINGS)).
SETTINGS = LmdeploySettings
