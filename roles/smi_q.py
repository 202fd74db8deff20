"""A reader of `nvidia-smi -q` text (with or without -d sections), pure and free of pyinfra: the doctor's hardware
fact (roles/doctor/hardware.py) and the GPU policy role (roles/gpu_policy) read its GPU blocks. Tested on the
output of real V100 boxes (tests/data/nvidia_smi_v100.txt)."""

from __future__ import annotations

import re

_LINE = re.compile(r"^(\s*)(\S.*?)\s*:\s?(.*?)\s*$")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def tree(lines: list[str]) -> dict:
    """One GPU block of `nvidia-smi -q` as nested dicts by indentation: a line without ' : ' opens a section, a
    'Key : Value' line is a leaf (its value stripped). A leaf with deeper lines under it ("HW Slowdown : Not Active"
    with "HW Thermal Slowdown" below) has them put beside it in its section. Repeated keys keep the first."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for raw in lines:
        line = raw.expandtabs(4).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack[-1][0] >= indent:
            stack.pop()
        node = stack[-1][1]
        m = _LINE.match(line) if " : " in line or line.endswith(" :") else None
        if m:
            node.setdefault(m.group(2).strip(), m.group(3))
        else:
            child = node.setdefault(line.strip(), {})
            if isinstance(child, dict):
                stack.append((indent, child))
    return root


def block_lines(text: str) -> list[tuple[str, list[str]]]:
    """[(bus id, the block's lines)] per 'GPU <bus id>' line in column 0, in order, blocks of the same bus id (two
    outputs concatenated) joined; lines before the first (the log header, an error message) are dropped."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            current = blocks.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return list(blocks.items())


def gpu_blocks(text: str) -> list[tuple[str, dict]]:
    """[(bus id '00000000:18:00.0', tree of its block)] in the order nvidia-smi printed them (index order); []
    when there is none (no GPU, no driver, an error message)."""
    return [(bus, tree(lines)) for bus, lines in block_lines(text)]


def number(value) -> int | None:
    """'16x' -> 16, '40 C' -> 40, '0' -> 0; None for N/A, a section or anything without a leading number."""
    if not isinstance(value, str):
        return None
    m = re.match(r"^(\d+)", value.strip())
    return int(m.group(1)) if m else None


def decimal(value) -> float | None:
    """'250.00 W' -> 250.0; None for N/A and the like."""
    if not isinstance(value, str):
        return None
    m = re.match(r"^(\d+(?:\.\d+)?)", value.strip())
    return float(m.group(1)) if m else None


def get(node, *path: str):
    """The value at `path` in a tree, keys compared without case (nvidia-smi changed capitalisation between drivers:
    "Ecc Mode"/"ECC Mode", "Replays since reset"/"Replays Since Reset"); None where absent."""
    for key in path:
        if not isinstance(node, dict):
            return None
        node = next((v for k, v in node.items() if k.lower() == key.lower()), None)
    return node
