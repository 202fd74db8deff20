"""The shape of the GPU policy's fact (roles/gpu_policy/facts.py), importable without pyinfra."""

from __future__ import annotations

from typing import TypedDict


class GpuCard(TypedDict):
    """One card: index (order of nvidia-smi -q), bus_id, name; power_min_w / power_max_w / power_limit_w the range
    `nvidia-smi -pl` accepts and the limit now (W; None: not reported, "Power Management: N/A"); compute_mode
    'DEFAULT' | 'EXCLUSIVE_PROCESS' | 'PROHIBITED' (upper case, as `nvidia-smi -c` takes it); ecc (current, pending)
    True/False (None: the card has no ECC); app_clocks (memory, graphics) MHz now; supported {memory MHz: [graphics
    MHz, ...]} from "Supported Clocks" (None: not reported)."""

    index: int
    bus_id: str
    name: str
    power_min_w: float | None
    power_max_w: float | None
    power_limit_w: float | None
    compute_mode: str | None
    ecc: tuple[bool | None, bool | None]
    app_clocks: tuple[int | None, int | None]
    supported: dict[int, list[int]] | None
