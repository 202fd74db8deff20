"""The GPU policy's fact: what each card allows and has now, from one `nvidia-smi -q -d ...` call. The parser is a
plain function tested on the output of real V100 boxes (tests/data/nvidia_smi_v100.txt)."""

from __future__ import annotations

import re

from pyinfra.api import FactBase

from roles.gpu_policy.shapes import GpuCard  # noqa: F401 (the fact's shape, importable without pyinfra)
from roles.smi_q import block_lines, decimal, get, number, tree

#: the nvidia-smi -q sections read (display types of `nvidia-smi -q -d`, present in drivers old and new)
SECTIONS = "POWER,CLOCK,COMPUTE,ECC,SUPPORTED_CLOCKS"


def _supported(lines: list[str]) -> dict[int, list[int]] | None:
    """'Supported Clocks' -> 'Memory : 877 MHz' followed by its 'Graphics : 1380 MHz' lines."""
    out: dict[int, list[int]] = {}
    inside, memory = False, None
    for line in lines:
        text = line.strip()
        if not text:
            continue
        indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
        if text.startswith("Supported Clocks"):
            inside, base = True, indent
            continue
        if not inside:
            continue
        if indent <= base:
            break
        m = re.match(r"^(Memory|Graphics)\s*:\s*(\d+) MHz$", text)
        if m and m.group(1) == "Memory":
            memory = int(m.group(2))
            out.setdefault(memory, [])
        elif m and memory is not None:
            out[memory].append(int(m.group(2)))
    return out or None


def _enabled(value) -> bool | None:
    return {"enabled": True, "disabled": False}.get(str(value).strip().lower())


def cards_from_smi_q(text: str) -> list[GpuCard]:
    """`nvidia-smi -q -d POWER,CLOCK,COMPUTE,ECC,SUPPORTED_CLOCKS` (or the full -q, or outputs of the same GPUs
    concatenated) -> one GpuCard per GPU. Newer drivers print "GPU Power Readings" with "Current Power Limit" where
    older ones print "Power Readings" with "Power Limit": both are read."""
    cards = []
    for index, (bus, lines) in enumerate(block_lines(text)):
        t = tree(lines)
        power = get(t, "GPU Power Readings") or get(t, "Power Readings") or {}
        ecc = get(t, "ECC Mode") or {}
        apps = get(t, "Applications Clocks") or {}
        mode = get(t, "Compute Mode")
        cards.append(GpuCard(
            index=index, bus_id=bus, name=(get(t, "Product Name") or "").strip(),
            power_min_w=decimal(get(power, "Min Power Limit")), power_max_w=decimal(get(power, "Max Power Limit")),
            power_limit_w=decimal(get(power, "Current Power Limit")) or decimal(get(power, "Power Limit")),
            compute_mode=mode.strip().upper() if isinstance(mode, str) and mode.strip() not in ("", "N/A") else None,
            ecc=(_enabled(get(ecc, "Current")), _enabled(get(ecc, "Pending"))),
            app_clocks=(number(get(apps, "Memory")), number(get(apps, "Graphics"))),
            supported=_supported(lines)))
    return cards


class GpuPolicyCards(FactBase[list[GpuCard]]):
    """Each GPU's limits and current policy (cards_from_smi_q), one nvidia-smi call, read-only; [] without
    nvidia-smi, a driver or a GPU."""

    default = list

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"nvidia-smi -q -d {SECTIONS} 2>/dev/null || true"

    def process(self, output: list[str]) -> list[GpuCard]:
        return cards_from_smi_q("\n".join(output))
