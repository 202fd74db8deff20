"""Facts for the nvidia_driver role. Each works on a host without a GPU (then it reports nothing loaded)."""

from __future__ import annotations

import csv
import re

from pyinfra.api import FactBase

# the facts' shapes, importable without pyinfra (the decision modules read them)
from roles.nvidia_driver.shapes import DkmsRow, DriverPackage, GpuInfo, GpuProcess, SecureBootInfo  # noqa: F401

#: Source packages of NVIDIA driver userland and kernel modules, on Debian, Ubuntu and NVIDIA's repository.
#: Debian's open module (`nvidia-open-kernel-dkms`) comes from nvidia-open-gpu-kernel-modules.
DRIVER_SOURCE_RE = re.compile(r"^(nvidia-graphics-drivers.*|nvidia-open.*|nvidia-persistenced|nvidia-modprobe|"
                              r"nvidia-settings)$")
#: The EFI variable that holds the Secure Boot state: 4 attribute bytes, then 1 (on) or 0 (off) (UEFI spec §3.3,
#: EFI_GLOBAL_VARIABLE GUID).
EFI_SECURE_BOOT = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
#: Certificates DKMS signs modules with: Debian's dkms >= 3.0 (`mok_certificate` in /etc/dkms/framework.conf) and
#: Ubuntu's shim-signed (update-secureboot-policy).
DKMS_SIGNING_CERTS = ("/var/lib/dkms/mok.pub", "/var/lib/shim-signed/mok/MOK.der")


#: What nvidia-smi prints in a CSV field it cannot fill: not supported, not permitted, or not available (the
#: captures of utkuozdemir/nvidia_gpu_exporter internal/captures/*.txt and internal/nvidiasmi/computeapps_test.go).
SMI_ABSENT = ("[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]", "")

#: The --query-gpu fields NvidiaGpus reads, in order, and the --query-compute-apps fields. The process name comes
#: last: it is the one field a workload chooses, so a name with a comma (older drivers print it as is; newer ones
#: put "?" in its place) only lengthens the row's tail.
GPU_FIELDS = ("index", "uuid", "name", "compute_cap", "memory.total", "memory.used", "memory.free",
              "persistence_mode", "driver_version")
APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")


def _mib(field: str) -> int | None:
    """A MiB field of `--format=csv,nounits` as int; None for what nvidia-smi prints when it cannot tell."""
    field = field.strip().removesuffix(" MiB")
    return None if field in SMI_ABSENT or not re.fullmatch(r"\d+(\.\d+)?", field) else int(float(field))


def gpus_from_smi(gpu_rows: list[str], app_rows: list[str], units: dict[int, str] | None = None) -> list[GpuInfo]:
    """GpuInfo per GPU from nvidia-smi's CSV (`--format=csv,noheader,nounits`, read with the csv module): `gpu_rows`
    of GPU_FIELDS, `app_rows` of APP_FIELDS, joined by uuid; `units` {pid: systemd unit}. A GPU row whose index is
    not a number is skipped (an error line); an app row whose pid is not a number ("[Insufficient Permissions]" in a
    container that cannot see the process) is skipped too: the memory it holds still counts in the GPU's
    memory.used. Never raises."""
    units = units or {}
    apps: dict[str, list[GpuProcess]] = {}
    for row in csv.reader(app_rows, skipinitialspace=True):
        if len(row) < 3 or not row[1].strip().isdigit():
            continue
        name = ", ".join(row[3:]).strip()
        pid = int(row[1])
        apps.setdefault(row[0].strip(), []).append(GpuProcess(
            pid=pid, name="" if name in SMI_ABSENT else name, used_mib=_mib(row[2]), unit=units.get(pid, "")))
    gpus: list[GpuInfo] = []
    for row in csv.reader(gpu_rows, skipinitialspace=True):
        f = [x.strip() for x in row]
        # a row without a compute capability ("[N/A]": an old driver, a GPU fallen off the bus) is left out: every
        # decision needs it; without any row the settings' gpu_compute_capability stands in (roles/engines.py)
        if len(f) != len(GPU_FIELDS) or not f[0].isdigit() or _mib(f[4]) is None or not re.fullmatch(r"\d+\.\d+", f[3]):
            continue
        gpus.append(GpuInfo(index=int(f[0]), uuid=f[1], name=f[2], compute_cap=f[3], memory_mib=_mib(f[4]) or 0,
                            memory_used_mib=_mib(f[5]), memory_free_mib=_mib(f[6]),
                            persistence_mode=f[7] == "Enabled", driver_version=f[8],
                            processes=apps.get(f[1], [])))
    return gpus


class NvidiaGpus(FactBase[list[GpuInfo]]):
    """GPUs as the loaded driver sees them (`nvidia-smi --query-gpu`), each with its compute processes
    (`--query-compute-apps`, joined by GPU uuid) and the systemd unit of each process (its cgroup); [] without a
    driver, a GPU or nvidia-smi. Each entry: a GpuInfo (gpus_from_smi)."""

    default = list

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        # the unit from the process's cgroup: cgroup v2's "0::/system.slice/.../llama-server@chat.service", or v1's
        # name=systemd hierarchy; the last *.service component (a service's own sub-cgroups come below it)
        return (f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits 2>/dev/null || true; "
                f"echo '#apps'; apps=$(nvidia-smi --query-compute-apps={','.join(APP_FIELDS)} "
                "--format=csv,noheader,nounits 2>/dev/null); [ -n \"$apps\" ] && echo \"$apps\"; echo '#units'; "
                "for p in $(echo \"$apps\" | cut -d, -f2 | tr -d ' '); do case $p in *[!0-9]*|'') continue;; esac; "
                "u=$(grep -E '^(0::|[0-9]+:name=systemd:)' /proc/$p/cgroup 2>/dev/null | head -n1 | "
                "grep -o '[^/]*\\.service' | tail -n1); echo \"$p $u\"; done; true")

    def process(self, output: list[str]) -> list[GpuInfo]:
        sections: dict[str, list[str]] = {"gpus": [], "#apps": [], "#units": []}
        section = "gpus"
        for line in output:
            if line.strip() in ("#apps", "#units"):
                section = line.strip()
            else:
                sections[section].append(line)
        units = {int(w[0]): w[1] for w in (line.split() for line in sections["#units"])
                 if len(w) == 2 and w[0].isdigit()}
        return gpus_from_smi(sections["gpus"], sections["#apps"], units)


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


def secure_boot_from_lines(lines: list[str]) -> SecureBootInfo:
    """Parse SecureBoot's output. `mokutil --sb-state` wins ('SecureBoot enabled' / 'SecureBoot disabled'; 'SecureBoot
    validation is disabled in shim' means unsigned modules load, so: disabled; 'EFI variables are not supported' means
    a BIOS boot: disabled); else the EFI variable's last byte (1 on, 0 off); else no /sys/firmware/efi: disabled."""
    raw = [line.strip() for line in lines if line.strip()]
    mok = [line.removeprefix("mokutil=") for line in raw if line.startswith("mokutil=")]
    state, source = "unknown", ""
    if any("validation is disabled" in m for m in mok):
        state, source = "disabled", "mokutil (shim validation off)"
    elif any(m.startswith("SecureBoot enabled") for m in mok):
        state, source = "enabled", "mokutil"
    elif any(m.startswith("SecureBoot disabled") or "not supported" in m or "doesn't support" in m for m in mok):
        state, source = "disabled", "mokutil"
    elif "efivar=1" in raw or "efivar=0" in raw:
        state, source = ("enabled" if "efivar=1" in raw else "disabled"), "efivar"
    elif "efi=0" in raw:
        state, source = "disabled", "no EFI"

    def certs(prefix: str) -> list[str]:
        return [line.removeprefix(prefix) for line in raw if line.startswith(prefix)]
    return SecureBootInfo(state=state, source=source, enrolled=certs("enrolled="), pending=certs("pending="),
                          keys=certs("key="))


class SecureBoot(FactBase[SecureBootInfo]):
    """Secure Boot's state and the DKMS signing keys' enrollment (secure_boot_from_lines): from `mokutil --sb-state`
    where mokutil is installed, else the EFI variable EFI_SECURE_BOOT; `mokutil --test-key` per certificate of
    DKMS_SIGNING_CERTS present ('is already enrolled', 'is already in the enrollment request')."""

    def command(self) -> str:
        certs = " ".join(DKMS_SIGNING_CERTS)
        return ("if command -v mokutil >/dev/null 2>&1; then mokutil --sb-state 2>&1 | sed 's/^/mokutil=/'; fi; "
                f"if [ -r {EFI_SECURE_BOOT} ]; then echo efivar=$(od -An -t u1 -j4 -N1 {EFI_SECURE_BOOT} | tr -d ' '); "
                "fi; if [ -d /sys/firmware/efi ]; then echo efi=1; else echo efi=0; fi; "
                f"for c in {certs}; do [ -f $c ] || continue; t=$(mokutil --test-key $c 2>&1 || true); "
                "case $t in *'already enrolled'*) echo enrolled=$c;; *'enrollment request'*) echo pending=$c;; "
                "*) echo key=$c;; esac; done")

    def process(self, output: list[str]) -> SecureBootInfo:
        return secure_boot_from_lines(output)


def module_flavour_from_proc(text: str) -> str | None:
    """The loaded module's flavour from /proc/driver/nvidia/version: 'open' for 'NVIDIA UNIX Open Kernel Module for
    x86_64', 'proprietary' for 'NVIDIA UNIX x86_64 Kernel Module', None when no module is loaded."""
    if "Open Kernel Module" in text:
        return "open"
    return "proprietary" if re.search(r"NVIDIA UNIX \S+ Kernel Module", text) else None


class LoadedModuleFlavour(FactBase[str | None]):
    """The loaded nvidia module's flavour, 'open' or 'proprietary' (module_flavour_from_proc), None when not loaded."""

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return module_flavour_from_proc("\n".join(output))


class KernelMetapackages(FactBase[dict[str, str]]):
    """Installed kernel image metapackages and the kernel image package each depends on: {'linux-image-generic-hwe-22.04':
    'linux-image-6.8.0-45-generic'} ('' when it names none). Versioned images (linux-image-6.1.0-26-amd64) and
    linux-image-unsigned-* are not metapackages."""

    default = dict

    def command(self) -> str:
        return "dpkg-query --show --showformat='${db:Status-Abbrev}|${Package}|${Depends}\\n' 'linux-image-*' 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str]:
        metas = {}
        for line in output:
            parts = line.split("|")
            if len(parts) != 3 or parts[0].strip() != "ii":
                continue
            name = parts[1].strip()
            if not re.fullmatch(r"linux-image-(?!\d)(?!unsigned)[a-z0-9.+-]+", name):
                continue
            deps = [d.strip().split()[0] for d in parts[2].split(",") if d.strip()]
            metas[name] = next((d for d in deps if re.match(r"linux-image-(unsigned-)?\d", d)), "")
        return metas


def runfile_version_from_lines(lines: list[str]) -> str | None:
    """The driver version of an installed .run driver from `nvidia-installer --version`, whose first line reads
    'nvidia-installer:  version 580.173.02  (buildmeister@...)  ...'; None when nothing is installed."""
    for line in lines:
        m = re.search(r"nvidia-installer:\s+version\s+(\d+\.\d+(?:\.\d+)?)", line)
        if m:
            return m.group(1)
    return None


class RunfileDriver(FactBase[str | None]):
    """The driver version NVIDIA's .run installer installed on the host (it installs itself as
    /usr/bin/nvidia-installer beside /usr/bin/nvidia-uninstall), None where no .run driver is installed."""

    def command(self) -> str:
        return "[ -x /usr/bin/nvidia-installer ] && /usr/bin/nvidia-installer --version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return runfile_version_from_lines(output)
