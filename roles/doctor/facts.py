"""Read-only facts the doctor diagnoses from. Parsers are plain functions so that what a container cannot produce
(a loaded module's /proc/driver/nvidia/version, Xid lines) is tested on recorded file contents."""

from __future__ import annotations

import re
from typing import TypedDict

from pyinfra.api import FactBase


class XidEvent(TypedDict):
    """One Xid line of the kernel log: the GPU's PCI address, the Xid code and the rest of the message."""

    pci: str
    xid: int
    text: str


def module_version_from_proc(text: str) -> str | None:
    """The kernel module version from /proc/driver/nvidia/version, e.g.
    'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed ...' -> '535.261.03'."""
    m = re.search(r"Kernel Module(?: for [\w-]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def xid_events(lines: list[str]) -> list[XidEvent]:
    """Xid events from kernel log lines: 'NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.'
    -> [{'pci': '0000:3b:00', 'xid': 79, 'text': '...'}]."""
    events: list[XidEvent] = []
    for line in lines:
        m = re.search(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),?\s*(.*)", line)
        if m:
            events.append(XidEvent(pci=m.group(1), xid=int(m.group(2)), text=m.group(3).strip()))
    return events


class DpkgAudit(FactBase[list[str]]):
    """`dpkg --audit`: lines describing half-installed or half-configured packages ([] when clean)."""

    default = list

    def command(self) -> str:
        return "dpkg --audit 2>&1 || true"

    def process(self, output: list[str]) -> list[str]:
        return [line for line in output if line.strip()]


class NvidiaProcVersion(FactBase[str | None]):
    """The loaded module's version from /proc/driver/nvidia/version, None when no module is loaded."""

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return module_version_from_proc("\n".join(output))


class KernelXid(FactBase[list[XidEvent]]):
    """Xid events in this boot's kernel log (journalctl -k, else dmesg): see xid_events."""

    default = list

    def command(self) -> str:
        return "(journalctl -k -b --no-pager 2>/dev/null || dmesg 2>/dev/null) | grep 'NVRM: Xid' || true"

    def process(self, output: list[str]) -> list[XidEvent]:
        return xid_events(output)


class PendingUpgrades(FactBase[dict[str, tuple[str, str]]]):
    """Packages `apt-get upgrade` would change now (simulated, no lock): {name: (installed, candidate)}."""

    default = dict

    def command(self) -> str:
        return "apt-get -s -o Debug::NoLocking=1 upgrade 2>/dev/null | grep '^Inst ' || true"

    def process(self, output: list[str]) -> dict[str, tuple[str, str]]:
        pending: dict[str, tuple[str, str]] = {}
        for line in output:
            m = re.match(r"Inst (\S+) \[([^\]]+)\] \((\S+)", line)
            if m:
                pending[m.group(1)] = (m.group(2), m.group(3))
        return pending


class UnattendedNotBlocked(FactBase[list[str] | None]):
    """Of `packages`, those unattended-upgrades would still touch, asked with its own matcher and apt's merged
    configuration; None when unattended-upgrades is not installed."""

    def command(self, packages: list[str]) -> str:
        script = ("import sys, apt_pkg, importlib.machinery, importlib.util; "
                  "l = importlib.machinery.SourceFileLoader('uu', '/usr/bin/unattended-upgrade'); "
                  "s = importlib.util.spec_from_loader('uu', l); uu = importlib.util.module_from_spec(s); "
                  "l.exec_module(uu); apt_pkg.init_config(); "
                  "bl = apt_pkg.config.value_list('Unattended-Upgrade::Package-Blacklist'); "
                  "print('open:' + ' '.join(n for n in sys.argv[1:] if not uu.is_pkgname_in_blacklist(n, bl)))")
        return (f"if [ -x /usr/bin/unattended-upgrade ]; then python3 -c \"{script}\" {' '.join(packages)}; "
                "else echo absent; fi")

    def process(self, output: list[str]) -> list[str] | None:
        for line in output:
            if line.startswith("open:"):
                return line[5:].split()
        return None


RUNFILE_UNINSTALLER = "/usr/bin/nvidia-uninstall"


class RunfileMarkers(FactBase[list[str]]):
    """Traces of an installed NVIDIA .run driver (its uninstaller stays until it is run), which must not mix
    with packages: a list of the paths found."""

    default = list

    def command(self) -> str:
        return f"ls -d {RUNFILE_UNINSTALLER} 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


class ModprobeConfig(FactBase[list[str]]):
    """`modprobe --showconfig` lines about nouveau (blacklist and options) in effect."""

    default = list

    def command(self) -> str:
        return "modprobe --showconfig 2>/dev/null | grep -E '^(blacklist|options) nouveau' || true"

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


class NvccRelease(FactBase[str | None]):
    """The 'release X.Y' that an nvcc binary reports, None when it is missing."""

    def command(self, nvcc: str) -> str:
        return f"{nvcc} --version 2>/dev/null | grep -o 'release [0-9.]*' || true"

    def process(self, output: list[str]) -> str | None:
        return output[0].split()[1] if output and output[0].strip() else None
