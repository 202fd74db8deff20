"""Host facts shared by several roles: what kind of machine this is and what it lets a deploy change live."""

from __future__ import annotations

from typing import TypedDict

from pyinfra.api import FactBase


class Traits(TypedDict):
    """What HostTraits reports: see its docstring for each key."""

    virt: str
    kernel: str
    sysctl_writable: bool
    thp_writable: bool
    modules_loadable: bool
    nouveau_loaded: bool
    thp_mode: str
    systemd: bool


class HostTraits(FactBase[Traits]):
    """What the host allows, read without changing anything.

    Returns a Traits dict:
        virt: container type from `systemd-detect-virt --container` ('none' on bare metal or a VM),
        kernel: `uname -r`,
        sysctl_writable: /proc/sys accepts writes (False in containers: read-only /proc/sys),
        thp_writable: /sys/kernel/mm/transparent_hugepage/enabled accepts writes,
        modules_loadable: not a container and /lib/modules/<running kernel> exists,
        nouveau_loaded: the nouveau module is loaded (it then owns the GPU until a reboot),
        thp_mode: the transparent hugepage mode in effect ('always' | 'madvise' | 'never' | ''),
        systemd: the host was booted with systemd as PID 1 (/run/systemd/system exists, sd_booted(3)); True when
            the output does not say (an older recording).
    """

    def command(self) -> str:
        return (
            "echo virt=$(systemd-detect-virt --container 2>/dev/null || echo none); "
            "echo kernel=$(uname -r); "
            "test -w /proc/sys/vm/swappiness && echo sysctl_writable=1 || echo sysctl_writable=0; "
            "test -w /sys/kernel/mm/transparent_hugepage/enabled && echo thp_writable=1 || echo thp_writable=0; "
            "test -d /lib/modules/$(uname -r) && echo modules_dir=1 || echo modules_dir=0; "
            "test -d /sys/module/nouveau && echo nouveau_loaded=1 || echo nouveau_loaded=0; "
            "echo thp_mode=$(sed 's/.*\\[\\(.*\\)\\].*/\\1/' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null); "
            "test -d /run/systemd/system && echo systemd=1 || echo systemd=0"
        )

    def process(self, output: list[str]) -> Traits:
        raw = dict(line.split("=", 1) for line in output if "=" in line)
        virt = raw.get("virt", "none") or "none"
        return Traits(
            virt=virt,
            kernel=raw.get("kernel", ""),
            sysctl_writable=raw.get("sysctl_writable") == "1",
            thp_writable=raw.get("thp_writable") == "1",
            modules_loadable=virt == "none" and raw.get("modules_dir") == "1",
            nouveau_loaded=raw.get("nouveau_loaded") == "1",
            thp_mode=raw.get("thp_mode", ""),
            systemd=raw.get("systemd") != "0",
        )


SOURCES_GLOB = "/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources"
SOURCES_STAMP = "/var/lib/apt/lists/v100kit-sources.sha256"


class AptSourcesChanged(FactBase[bool]):
    """True when the apt sources differ from those of the last `apt-get update` run by this toolkit.

    Compares a sha256 of every sources file with the stamp written after that update, so it is True after a source
    or component was added and stays True until an update succeeds (also after an interrupted deploy). apt's own
    index files cannot tell: empty indexes are not stored and their mtimes come from the mirror.
    """

    def command(self) -> str:
        return (f"a=$(cat {SOURCES_GLOB} 2>/dev/null | sha256sum | cut -d' ' -f1); "
                f"b=$(cat {SOURCES_STAMP} 2>/dev/null); [ \"$a\" = \"$b\" ] && echo same || echo changed")

    def process(self, output: list[str]) -> bool:
        return output[-1].strip() != "same"


class AptHolds(FactBase[list[str]]):
    """Packages marked hold (`apt-mark showhold`), as a sorted list of names."""

    default = list

    def command(self) -> str:
        return "apt-mark showhold"

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.split(":")[0].strip() for line in output if line.strip())


class PackageInstalled(FactBase[bool]):
    """True when `package` is installed and configured (dpkg status 'ii'; a removed package whose configuration
    files remain, 'rc', is not)."""

    def command(self, package: str) -> str:
        return f"dpkg-query -W -f '${{db:Status-Abbrev}}' {package} 2>/dev/null || true"

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[0].strip() == "ii"
