"""The pieces every settings module shares: the settings error and its problem lines, the value types (HostPath,
ArgWord, Sha256, ...), and the base of every engine's instance model.

The core model (roles/settings.py Settings) and each engine's own settings (roles/NAME/settings.py, composed into
Settings through roles/engine_packages.py) import this module; it imports no role, so none of them loops back.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from roles.hub_source import is_hub_source, source_problem

CudaVersion = Annotated[str, Field(pattern=r"^\d{2}\.\d$", description="major.minor, e.g. '12.4'")]
Sha256 = Annotated[str, BeforeValidator(lambda v: v.strip().lower() if isinstance(v, str) else v),
                   Field(pattern=r"^[0-9a-f]{64}$")]
#: Absolute paths of characters that need no quoting anywhere: systemd splits $VAR arguments on whitespace and
#: its EnvironmentFile parser strips quotes and backslashes, so a path must pass through both unchanged.
HostPath = Annotated[str, Field(pattern=r"^/[A-Za-z0-9._+@:,=/-]*$")]
#: Where the toolkit must never put the service home or the swapfile.
SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev", "/run", "/var/lib/dpkg",
               "/var/lib/apt")
#: One command-line word of extra_args: only characters that shlex.quote leaves bare and that pass systemd's
#: EnvironmentFile parser and its whitespace split of $VAR unchanged (no spaces, quotes, backslashes, $ or braces).
ArgWord = Annotated[str, Field(pattern=r"^[A-Za-z0-9_@%+=:,./-]+$")]
#: The name of an engine's instance (a key of its `*_instances` setting): it becomes a systemd unit name.
InstanceName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")]


def once_each(values: list | None, what: str) -> list | None:
    """Validator body: `values` unchanged, or ValueError when an entry repeats."""
    if values and len(set(values)) != len(values):
        raise ValueError(f"{values} lists a {what} twice")
    return values


def listen_address(cls, v: str) -> str:
    """Validator body of an instance's `listen`: `v` unchanged; pydantic's ValueError names the value where it is no
    IP address (no port, no host name)."""
    ipaddress.ip_address(v)
    return v


def hub_source_check(value: str | None, needs_file: bool) -> str | None:
    """Validator body: `value` unchanged, or ValueError for an hf:// source in the wrong form (roles/hub.py)."""
    if is_hub_source(value) and (why := source_problem(value, needs_file)):
        raise ValueError(why)
    return value


class InstanceOnGpus(BaseModel):
    """The settings every engine's instances share, declared once (the base of roles/NAME/settings.py's
    instance model): no unknown key, frozen, allow_gpu_in_use, and the checks of the `listen` and `gpus` every
    instance model declares (each with its own description, in its own place of the README table)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # YAML .nan/.inf are floats

    allow_gpu_in_use: bool = Field(
        False, description="plan on the GPUs' whole memory although processes outside v100kit use some of it now "
                           "(they must have stopped before the instance starts); refused otherwise where the "
                           "instance does not fit beside them")

    _listen_address = field_validator("listen", check_fields=False)(listen_address)
    _unique_gpus = field_validator("gpus", check_fields=False)(lambda v: once_each(v, "GPU"))


class HfModelInstance(InstanceOnGpus):
    """The base of an instance whose model is a Hugging Face directory (vLLM's, LMDeploy's): `model_path` on the
    host, or `model_source` on the control machine (or an hf:// repository snapshot), copied to the service home."""

    model_path: HostPath | None = Field(None, description="model directory already on the host")
    model_source: str | None = Field(
        None, pattern=r"^\S+$", description="model directory on the control machine, or a Hugging Face repository at "
                                           "a commit: hf://ORG/REPO@COMMIT (its safetensors snapshot, fetched on "
                                           "the control machine, HF_ENDPOINT for a mirror)")

    _hub_source = field_validator("model_source")(lambda v: hub_source_check(v, needs_file=False))


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
