"""The shapes of the nvidia_driver role's facts (roles/nvidia_driver/facts.py): plain typed dicts that the decision
modules read, importable without pyinfra."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class GpuProcess(TypedDict):
    """One compute process on a GPU (`nvidia-smi --query-compute-apps`): pid; name as nvidia-smi prints it ('' when
    it may not say: "[Insufficient Permissions]"); used_mib its memory in MiB, None where nvidia-smi prints "[N/A]"
    (Windows WDDM, some containers); unit the systemd service whose cgroup holds the PID (/proc/PID/cgroup,
    'llama-server@chat.service'), '' when none or not readable (a PID of another PID namespace)."""

    pid: int
    name: str
    used_mib: int | None
    unit: str


class GpuInfo(TypedDict):
    """One GPU as nvidia-smi reports it: compute_cap '7.0', memory_mib total VRAM in MiB, driver_version
    '535.261.03'; uuid 'GPU-...'; memory_used_mib and memory_free_mib nvidia-smi's memory.used and memory.free now
    (MiB, None for "[N/A]"; drivers that report memory.reserved leave it out of both, so used + free is what
    processes can have); processes the compute processes on this GPU (joined by uuid)."""

    index: int
    name: str
    compute_cap: str
    memory_mib: int
    persistence_mode: bool
    driver_version: str
    uuid: NotRequired[str]
    memory_used_mib: NotRequired[int | None]
    memory_free_mib: NotRequired[int | None]
    processes: NotRequired[list[GpuProcess]]


class DkmsRow(TypedDict):
    """One line of `dkms status`: kernel is None for a module only added, state e.g. 'installed', 'built'."""

    module: str
    version: str
    kernel: str | None
    state: str


class DriverPackage(TypedDict):
    """One installed driver package: its Debian version, source package and dpkg status abbreviation ('ii')."""

    version: str
    source: str
    status: str


class SecureBootInfo(TypedDict):
    """What SecureBoot reports: `state` 'enabled' | 'disabled' | 'unknown'; `source` what told it ('mokutil',
    'efivar', 'no EFI', ''); `enrolled` DKMS signing certificates that mokutil reports enrolled; `pending` those
    queued for enrollment at the next boot; `keys` the other DKMS signing certificates present."""

    state: str
    source: str
    enrolled: list[str]
    pending: list[str]
    keys: list[str]
