"""Facts for the tuning role."""

from __future__ import annotations

from pyinfra.api import FactBase

from roles.tuning.decide import SWAP_RECORD, parse_swap_record


class ActiveSwaps(FactBase[dict[str, int]]):
    """Active swap areas from /proc/swaps: {path: size in bytes}."""

    default = dict

    def command(self) -> str:
        return "cat /proc/swaps"

    def process(self, output: list[str]) -> dict[str, int]:
        swaps = {}
        for line in output[1:]:
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():
                swaps[parts[0]] = int(parts[2]) * 1024  # /proc/swaps sizes are KiB
        return swaps


class SwapHeaderSize(FactBase[int | None]):
    """Usable size in bytes recorded in a swapfile's header (`swaplabel` cannot tell it, so read the file
    size and check the SWAPSPACE2 signature); None when the path is not a swapfile."""

    def command(self, path: str) -> str:
        return (f"test -f {path} && tail -c +4087 {path} 2>/dev/null | head -c 10 | grep -q SWAPSPACE2 "
                f"&& stat -c %s {path} || true")

    def process(self, output: list[str]) -> int | None:
        return int(output[0]) if output and output[0].strip().isdigit() else None


class FreeBytes(FactBase[int | None]):
    """Bytes available to root on the filesystem that holds `path` (or its parent directory)."""

    def command(self, path: str) -> str:
        return f"df -B1 --output=avail \"$(dirname {path})\" 2>/dev/null | tail -n 1"

    def process(self, output: list[str]) -> int | None:
        return int(output[-1]) if output and output[-1].strip().isdigit() else None


class PathFilesystem(FactBase[str]):
    """The filesystem type of the directory that holds `path`, as `stat -f -c %T` names it ('ext2/ext3' for ext4
    too, 'xfs', 'btrfs', 'zfs', 'tmpfs', 'overlayfs', ...); '' when the directory does not exist."""

    def command(self, path: str) -> str:
        return f"stat -f -c %T \"$(dirname {path})\" 2>/dev/null || true"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""


class NoCow(FactBase[bool]):
    """True when the file at `path` has the No_COW attribute ('C' in `lsattr`), which a swapfile on btrfs needs."""

    def command(self, path: str) -> str:
        return f"lsattr {path} 2>/dev/null | cut -d' ' -f1 || true"

    def process(self, output: list[str]) -> bool:
        return bool(output) and "C" in output[0]


class SwapRecord(FactBase[dict[str, str]]):
    """The swapfiles this toolkit set up (tuning decide.SWAP_RECORD): {path: 'created' (it made the file) or
    'adopted' (it found a swapfile there and wrote its fstab line)}."""

    default = dict

    def command(self) -> str:
        return f"cat {SWAP_RECORD} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_swap_record(output)
