"""The GPUs' hardware health as `nvidia-smi -q` and `nvidia-smi nvlink -s` print it: one fact (GpuHardware, two
nvidia-smi calls) and its parsers, plain functions tested on the output of real V100 boxes
(tests/data/nvidia_smi_v100.txt). The rows that judge it are in health.py.

`nvidia-smi -q` is read rather than `--query-gpu` because it is what public reports paste (so the parser is tested
on real V100 output), because the temperature thresholds (slowdown, shutdown) are only there, and because an unknown
section or field is simply absent instead of failing the whole query the way an unknown `--query-gpu` field does
(the throttle fields were renamed: `clocks_throttle_reasons.*` became `clocks_event_reasons.*` and "Clocks Throttle
Reasons" became "Clocks Event Reasons" in newer drivers; the 590 capture in tests/data/nvidia_smi_captures.txt has
only the new names).
"""

from __future__ import annotations

import re
from typing import TypedDict

from pyinfra.api import FactBase

from roles.smi_q import get as _get, gpu_blocks, number as _num


class GpuHealth(TypedDict):
    """One GPU's health readings (None: nvidia-smi printed N/A, or the section is absent for this card/driver).

    index: position in `nvidia-smi -q` (its GPUs come in index order); bus_id '00000000:18:00.0'; name;
    pcie_gen / pcie_width: (current, max) PCIe link generation and width in lanes ("16x" -> 16);
    ecc_mode: (current, pending) 'Enabled' | 'Disabled'; ecc_uncorrected / ecc_corrected: {'volatile': n,
    'aggregate': n} totals (old drivers: Double Bit / Single Bit Total; new ones: the sums of the *Uncorrectable /
    *Correctable counters); retired: {'single_bit': n, 'double_bit': n, 'pending': bool} (Retired Pages, the page
    retirement of Volta and older; https://docs.nvidia.com/deploy/dynamic-page-retirement/); remapped:
    {'correctable': n, 'uncorrectable': n, 'pending': bool, 'failure': bool} (Remapped Rows, Ampere and newer);
    throttle: {reason as printed: active} of "Clocks Throttle Reasons" or "Clocks Event Reasons"; temp: {'current',
    'slowdown', 'shutdown', 'max_operating'} in degrees C, and where newer drivers print margins instead ("GPU T.Limit
    Temp": degrees below the card's limit) {'tlimit', 'slowdown_tlimit', 'shutdown_tlimit'} (the margins at which it
    slows down and shuts off: -2 C and -5 C on an H100, NVIDIA/NVSentinel pull request 1371); pstate 'P0'; nvlink: [(link number, 'up' | 'inactive')]
    from `nvidia-smi nvlink -s` ([]: no NVLink listed for this GPU)."""

    index: int
    bus_id: str
    name: str
    pcie_gen: tuple[int | None, int | None]
    pcie_width: tuple[int | None, int | None]
    ecc_mode: tuple[str | None, str | None]
    ecc_uncorrected: dict[str, int | None]
    ecc_corrected: dict[str, int | None]
    retired: dict | None
    remapped: dict | None
    throttle: dict[str, bool]
    temp: dict[str, int | None]
    pstate: str | None
    nvlink: list[tuple[int, str]]


def _ecc_totals(errors: dict | None, which: str) -> dict[str, int | None]:
    """{'volatile', 'aggregate'} totals of `which` ('uncorrected' | 'corrected') from the "ECC Errors" section:
    old drivers (the V100 logs) "Double Bit"/"Single Bit" -> "Total"; newer ones flat counters such as "DRAM
    Uncorrectable", "SRAM Uncorrectable Parity", "SRAM Correctable" (summed)."""
    old, word = ("Double Bit", "uncorrectable") if which == "uncorrected" else ("Single Bit", "correctable")
    out: dict[str, int | None] = {}
    for scope in ("Volatile", "Aggregate"):
        node = _get(errors or {}, scope)
        total = _num(_get(node, old, "Total")) if isinstance(_get(node, old), dict) else None
        if total is None and isinstance(node, dict):
            values = [_num(v) for k, v in node.items()
                      if isinstance(v, str) and re.search(rf"\b{word}\b", k.lower())
                      and not k.lower().startswith("sram threshold")]
            total = sum(v for v in values if v is not None) if any(v is not None for v in values) else None
        out[scope.lower()] = total
    return out


def _signed(value) -> int | None:
    """'-5 C' -> -5, '35 C' -> 35; None for N/A."""
    m = re.match(r"^(-?\d+)", value.strip()) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


def _yes(value) -> bool | None:
    if not isinstance(value, str) or value.strip() in ("N/A", ""):
        return None
    return value.strip().lower() in ("yes", "true", "active")


def parse_smi_q(text: str) -> list[dict]:
    """`nvidia-smi -q` (any driver, with or without -d sections) -> one dict per GPU block (see GpuHealth; nvlink
    empty). GPU blocks start at a line 'GPU <bus id>' in column 0; lines before the first (the log header) are
    ignored; [] when there is none (no GPU, no driver, an error message)."""
    gpus = []
    for index, (bus_id, t) in enumerate(gpu_blocks(text)):
        link = _get(t, "PCI", "GPU Link Info") or {}
        gen, width = _get(link, "PCIe Generation") or {}, _get(link, "Link Width") or {}
        # newer drivers print "Device Max"/"Host Max"/"Device Current" beside or instead of "Max"/"Current"
        gen_max = _num(_get(gen, "Max")) or _num(_get(gen, "Device Max"))
        gen_cur = _num(_get(gen, "Current")) or _num(_get(gen, "Device Current"))
        ecc = _get(t, "ECC Mode") or {}
        retired = _get(t, "Retired Pages")
        remapped = _get(t, "Remapped Rows")
        throttle = _get(t, "Clocks Event Reasons") or _get(t, "Clocks Throttle Reasons") or {}
        temp = _get(t, "Temperature") or {}
        gpus.append({
            "index": index, "bus_id": bus_id, "name": (_get(t, "Product Name") or "").strip(),
            "pcie_gen": (gen_cur, gen_max), "pcie_width": (_num(_get(width, "Current")), _num(_get(width, "Max"))),
            "ecc_mode": tuple(v if v not in (None, "N/A") else None
                              for v in (_get(ecc, "Current"), _get(ecc, "Pending"))),
            "ecc_uncorrected": _ecc_totals(_get(t, "ECC Errors"), "uncorrected"),
            "ecc_corrected": _ecc_totals(_get(t, "ECC Errors"), "corrected"),
            "retired": None if not isinstance(retired, dict) or _num(_get(retired, "Double Bit ECC")) is None and
            _num(_get(retired, "Single Bit ECC")) is None else {
                "single_bit": _num(_get(retired, "Single Bit ECC")), "double_bit": _num(_get(retired, "Double Bit ECC")),
                # "Pending" (drivers up to 418) became "Pending Page Blacklist" and then "Pending Page Retirement"
                "pending": bool(_yes(_get(retired, "Pending")) or _yes(_get(retired, "Pending Page Blacklist"))
                                or _yes(_get(retired, "Pending Page Retirement")))},
            "remapped": None if not isinstance(remapped, dict) or _get(remapped, "Pending") in (None, "N/A") else {
                "correctable": _num(_get(remapped, "Correctable Error")),
                "uncorrectable": _num(_get(remapped, "Uncorrectable Error")),
                "pending": bool(_yes(_get(remapped, "Pending"))),
                "failure": bool(_yes(_get(remapped, "Remapping Failure Occurred")))},
            "throttle": {k: v.strip() == "Active" for k, v in throttle.items() if isinstance(v, str)
                         and v.strip() in ("Active", "Not Active")},
            "temp": {"current": _num(_get(temp, "GPU Current Temp")), "slowdown": _num(_get(temp, "GPU Slowdown Temp")),
                     "shutdown": _num(_get(temp, "GPU Shutdown Temp")),
                     "max_operating": _num(_get(temp, "GPU Max Operating Temp")),
                     # newer drivers on Hopper print margins instead ("T.Limit"): degrees below the limit, and the
                     # margins at which the card slows down and shuts off (H100: -2 C and -5 C)
                     "tlimit": _signed(_get(temp, "GPU T.Limit Temp")),
                     "slowdown_tlimit": _signed(_get(temp, "GPU Slowdown T.Limit Temp")),
                     "shutdown_tlimit": _signed(_get(temp, "GPU Shutdown T.Limit Temp"))},
            "pstate": (_get(t, "Performance State") or None),
            "nvlink": [],
        })
    return gpus


def parse_nvlink(text: str) -> dict[int, list[tuple[int, str]]]:
    """`nvidia-smi nvlink -s` (or --status) -> {GPU index: [(link, 'up' | 'inactive')]}: a link with a speed
    ('Link 0: 25.781 GB/s') is up, '<inactive>' is down. A GPU without NVLink lists no links (or is absent)."""
    links: dict[int, list[tuple[int, str]]] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+):", line)
        if m:
            gpu = int(m.group(1))
            links.setdefault(gpu, [])
            continue
        m = re.match(r"^\s+Link (\d+):\s*(.*)$", line)
        if m and gpu is not None:
            state = "inactive" if "inactive" in m.group(2).lower() else "up" if re.search(r"\d", m.group(2)) else \
                m.group(2).strip() or "unknown"
            links[gpu].append((int(m.group(1)), state))
    return links


def gpu_health(smi_q: str, nvlink: str = "") -> list[GpuHealth]:
    """The GpuHealth of each GPU from the two outputs (parse_smi_q joined with parse_nvlink by index)."""
    gpus = parse_smi_q(smi_q)
    links = parse_nvlink(nvlink)
    for g in gpus:
        g["nvlink"] = links.get(g["index"], [])
    return gpus  # type: ignore[return-value]


SMI_Q = "nvidia-smi -q"
NVLINK = "nvidia-smi nvlink -s"


class GpuHardware(FactBase[list[GpuHealth]]):
    """Each GPU's hardware health (gpu_health): `nvidia-smi -q` and `nvidia-smi nvlink -s`, two calls, read-only;
    [] without nvidia-smi, a driver or a GPU."""

    default = list

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"{SMI_Q} 2>/dev/null; echo '#nvlink'; {NVLINK} 2>/dev/null; true"

    def process(self, output: list[str]) -> list[GpuHealth]:
        text = "\n".join(output)
        smi, _, nvlink = text.partition("#nvlink")
        return gpu_health(smi, nvlink)
