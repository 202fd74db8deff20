"""Facts for the tuning role."""

from __future__ import annotations

from pyinfra.api import FactBase


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
