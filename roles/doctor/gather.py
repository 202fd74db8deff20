"""The doctor's fact gathering: every fact the checks need, read from one host into one DoctorFacts (read-only;
nothing on the host changes). The judgement is in checks.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra.api.host import Host
from pyinfra.facts.files import File
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from roles.vllm import decide as vllm
from roles.doctor.facts import (DpkgAudit, KernelXid, ModprobeConfig, NvccRelease, NvidiaProcVersion, PendingUpgrades,
                                RunfileMarkers, UnattendedNotBlocked, XidEvent)
from roles.doctor.hardware import GpuHardware, GpuHealth
from roles.base.facts import AptSourceEntries, SourceEntry
from roles.facts import AptHolds, HostTraits, PackageInstalled, Traits
from roles.nvidia_driver.decide import BLACKLIST
from roles.nvidia_driver.facts import (DkmsRow, DkmsStatus, DriverPackage, DriverPackages, GpuInfo, InitramfsLacking,
                                       InstalledKernels, LoadedModuleFlavour, NvidiaGpus, SecureBoot, SecureBootInfo)
from roles.preflight import HostPlan
from roles.ray.facts import RayAliveNodes
from roles.tuning.facts import NoCow, PathFilesystem, SwapHeaderSize, SwapRecord



@dataclass(frozen=True)
class DoctorFacts:
    """What the doctor saw on one host. Facts that only some hosts need are None where not read."""

    driver_packages: dict[str, DriverPackage]  # DriverPackages
    traits: Traits  # HostTraits
    loaded_module: str | None  # module version from /proc/driver/nvidia/version, None: no module loaded
    loaded_flavour: str | None  # LoadedModuleFlavour: 'open' | 'proprietary', None: no module loaded
    secure_boot: SecureBootInfo  # SecureBoot
    dpkg_audit: list[str]  # `dpkg --audit` lines
    kernels: dict[str, bool]  # InstalledKernels: {kernel version: headers installed}
    dkms: list[DkmsRow]  # DkmsStatus
    headers_metapackage_installed: bool  # the plan's headers metapackage is installed ('ii')
    modprobe_config: list[str]  # nouveau lines of `modprobe --showconfig`
    blacklist_file: bool  # BLACKLIST exists (read only when modprobe_config blacklists nouveau, else False)
    initramfs_lacking: list[str]  # kernels whose initramfs lacks BLACKLIST
    holds: list[str]  # AptHolds
    swap: dict  # {'size': SwapHeaderSize of tuning_swap_file, 'fs': PathFilesystem, 'nocow': NoCow, 'record': SwapRecord}
    source_entries: list[SourceEntry]  # AptSourceEntries
    pending_upgrades: dict[str, tuple[str, str]]  # PendingUpgrades: {name: (installed, candidate)}
    unattended_open: list[str] | None  # driver packages unattended-upgrades may touch; None: it is not installed
    runfile_markers: list[str]  # RunfileMarkers
    gpus: list[GpuInfo]  # NvidiaGpus
    persistenced_enabled: bool | None  # SystemdEnabled of nvidia-persistenced.service
    persistenced_active: bool | None  # SystemdStatus of nvidia-persistenced.service
    xids: list[XidEvent]  # this boot's Xid events (read only when a GPU is visible, else [])
    nvcc_releases: dict[str, str | None]  # {toolkit version: release its nvcc reports, None: missing}
    #: {engine role: what its Engine.evidence read} for each engine planned here (llama.cpp: its current link and,
    #: where a GPU is visible, each llama-server's ServerEvidence; vLLM, LMDeploy: the venv link and stamp)
    engines: dict[str, dict] = field(default_factory=dict)
    #: a Ray cluster's node: whether its unit runs (SystemdStatus) and the alive nodes' addresses the cluster lists
    #: (RayAliveNodes; None: Ray could not be asked); both None without a cluster
    ray_unit_active: bool | None = None
    ray_alive: list[str] | None = None
    #: each GPU's hardware health (GpuHardware: nvidia-smi -q and nvlink -s), read only where a GPU is visible
    hardware: list[GpuHealth] = field(default_factory=list)


def gather(host: Host, plan: HostPlan) -> DoctorFacts:
    """Read every fact the doctor's checks need from `host` for its preflight `plan`. Raises what pyinfra's
    get_fact raises for a host that cannot be read."""
    pkgs = host.get_fact(DriverPackages)
    config = host.get_fact(ModprobeConfig)
    gpus = host.get_fact(NvidiaGpus)
    return DoctorFacts(
        driver_packages=pkgs,
        traits=host.get_fact(HostTraits),
        loaded_module=host.get_fact(NvidiaProcVersion),
        loaded_flavour=host.get_fact(LoadedModuleFlavour),
        secure_boot=host.get_fact(SecureBoot),
        dpkg_audit=host.get_fact(DpkgAudit),
        kernels=host.get_fact(InstalledKernels),
        dkms=host.get_fact(DkmsStatus),
        headers_metapackage_installed=bool(host.get_fact(PackageInstalled, package=plan.driver.headers_package)),
        modprobe_config=config,
        blacklist_file="blacklist nouveau" in config and bool(host.get_fact(File, path=BLACKLIST)),
        initramfs_lacking=host.get_fact(InitramfsLacking, path=BLACKLIST),
        holds=host.get_fact(AptHolds),
        swap=_swap(host, plan.settings.tuning_swap_file),
        source_entries=host.get_fact(AptSourceEntries),
        pending_upgrades=host.get_fact(PendingUpgrades),
        unattended_open=host.get_fact(UnattendedNotBlocked, packages=sorted(pkgs)) if pkgs else [],
        runfile_markers=host.get_fact(RunfileMarkers),
        gpus=gpus,
        persistenced_enabled=host.get_fact(SystemdEnabled).get("nvidia-persistenced.service"),
        persistenced_active=host.get_fact(SystemdStatus).get("nvidia-persistenced.service"),
        xids=host.get_fact(KernelXid) if gpus else [],
        nvcc_releases={tk.version: host.get_fact(NvccRelease, nvcc=tk.nvcc) for tk in plan.toolkits},
        engines={engine.role: engine.evidence(host, p) for engine, p in plan.engine_plans()},
        ray_unit_active=host.get_fact(SystemdStatus).get(f"{plan.ray.unit}.service") if plan.ray else None,
        ray_alive=host.get_fact(RayAliveNodes, python=f"{vllm.CURRENT}/bin/python", gcs_address=plan.ray.gcs_address,
                                user=plan.settings.base_service_user) if plan.ray and plan.ray.head_address else None,
        hardware=host.get_fact(GpuHardware) if gpus else [],
    )


def _swap(host: Host, path: str) -> dict:
    return {"size": host.get_fact(SwapHeaderSize, path=path), "fs": host.get_fact(PathFilesystem, path=path),
            "nocow": host.get_fact(NoCow, path=path), "record": host.get_fact(SwapRecord)}
