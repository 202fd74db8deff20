"""Facts for the nvidia_driver role. Each works on a host without a GPU (then it reports nothing loaded)."""

from __future__ import annotations

import re
from typing import TypedDict

from pyinfra.api import FactBase

#: Source packages of NVIDIA driver userland and kernel modules, on Debian, Ubuntu and NVIDIA's repository.
DRIVER_SOURCE_RE = re.compile(r"^(nvidia-graphics-drivers.*|nvidia-persistenced|nvidia-modprobe|nvidia-settings)$")


class GpuInfo(TypedDict):
    """One GPU as nvidia-smi reports it: compute_cap '7.0', memory_mib total VRAM in MiB, driver_version
    '535.261.03'."""

    index: int
    name: str
    compute_cap: str
    memory_mib: int
    persistence_mode: bool
    driver_version: str


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


class NvidiaGpus(FactBase[list[GpuInfo]]):
    """GPUs as the loaded driver sees them (`nvidia-smi --query-gpu`); [] without a driver, a GPU or nvidia-smi.

    Each entry: a GpuInfo {'index': int, 'name': str, 'compute_cap': str ('7.0'), 'memory_mib': int,
    'persistence_mode': bool, 'driver_version': str}.
    """

    default = list

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return ("nvidia-smi --query-gpu=index,name,compute_cap,memory.total,persistence_mode,driver_version "
                "--format=csv,noheader,nounits 2>/dev/null || true")

    def process(self, output: list[str]) -> list[GpuInfo]:
        gpus: list[GpuInfo] = []
        for line in output:
            f = [x.strip() for x in line.split(",")]
            if len(f) == 6 and f[0].isdigit():
                gpus.append(GpuInfo(index=int(f[0]), name=f[1], compute_cap=f[2], memory_mib=int(float(f[3])),
                                    persistence_mode=f[4] == "Enabled", driver_version=f[5]))
        return gpus


class LoadedNvidiaModule(FactBase[str | None]):
    """Version of the loaded nvidia kernel module (/sys/module/nvidia/version), or None when not loaded."""

    def command(self) -> str:
        return "cat /sys/module/nvidia/version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output and output[0].strip() else None


class InstalledKernels(FactBase[dict[str, bool]]):
    """Kernels installed on the host: {version: headers installed (bool)}, from /boot/vmlinuz-* and
    /usr/src/linux-headers-<version> (or /lib/modules/<version>/build)."""

    default = dict

    def command(self) -> str:
        return ("for k in /boot/vmlinuz-*; do [ -e \"$k\" ] || continue; v=${k#/boot/vmlinuz-}; "
                "if [ -e /lib/modules/$v/build/Makefile ] || [ -d /usr/src/linux-headers-$v ]; "
                "then echo \"$v 1\"; else echo \"$v 0\"; fi; done")

    def process(self, output: list[str]) -> dict[str, bool]:
        return {line.split()[0]: line.split()[1] == "1" for line in output if len(line.split()) == 2}


class DkmsStatus(FactBase[list[DkmsRow]]):
    """`dkms status` as a list of DkmsRow {'module', 'version', 'kernel' (None if only added), 'state'}; [] without
    dkms."""

    default = list

    def requires_command(self) -> str:
        return "dkms"

    def command(self) -> str:
        return "dkms status 2>/dev/null || true"

    def process(self, output: list[str]) -> list[DkmsRow]:
        rows: list[DkmsRow] = []
        for line in output:
            if ":" not in line:
                continue
            head, state = line.rsplit(":", 1)
            parts = [p.strip() for p in head.split(",")]
            module, _, version = parts[0].partition("/")
            if not version and len(parts) > 1:  # old format: "module, version, kernel, arch"
                version = parts.pop(1)
            rows.append(DkmsRow(module=module, version=version, kernel=parts[1] if len(parts) > 1 else None,
                                state=state.strip().split()[0]))
        return rows


class InitramfsLacking(FactBase[list[str]]):
    """Installed kernels (/boot/vmlinuz-<version>) whose initramfs (/boot/initrd.img-<version>) does not contain
    `path`: a list of kernel versions. Backups such as initrd.img-*.dpkg-bak are not looked at."""

    default = list

    def command(self, path: str) -> str:
        rel = path.lstrip("/")
        return ("for k in /boot/vmlinuz-*; do [ -e \"$k\" ] || continue; v=${k#/boot/vmlinuz-}; "
                f"lsinitramfs /boot/initrd.img-$v 2>/dev/null | grep -qx '{rel}' || echo \"$v\"; done")

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


class DriverPackages(FactBase[dict[str, DriverPackage]]):
    """Installed packages built from NVIDIA driver sources: {name: DriverPackage {'version', 'source', 'status'}}."""

    default = dict

    def command(self) -> str:
        return "dpkg-query -W -f '${Package}\\t${Version}\\t${source:Package}\\t${db:Status-Abbrev}\\n'"

    def process(self, output: list[str]) -> dict[str, DriverPackage]:
        pkgs: dict[str, DriverPackage] = {}
        for line in output:
            parts = line.split("\t")
            if len(parts) == 4 and DRIVER_SOURCE_RE.match(parts[2]) and parts[3].strip() not in ("un", "rc"):
                pkgs[parts[0]] = DriverPackage(version=parts[1], source=parts[2], status=parts[3].strip())
        return pkgs


class BootId(FactBase[str]):
    """This boot's id (/proc/sys/kernel/random/boot_id): it changes at every boot."""

    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""
