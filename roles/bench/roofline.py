"""The bandwidth roofline of decoding: each decoded token reads every weight on the GPU once plus the KV cache of
the context so far, so one stream cannot decode faster than bandwidth / bytes read per token.

Units: bytes, bytes/s (GB/s = 1e9 bytes/s, TB/s = 1e12, as the datasheets give them), tokens, tokens/s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GB_S = 1e9  # bytes/s in one GB/s (datasheets use decimal units)


@dataclass(frozen=True)
class Bandwidth:
    """Peak memory bandwidth of one GPU model, bytes/s, with where the figure comes from."""

    gpu: str  # the table's name for it
    bytes_per_s: float
    source: str


#: Peak memory bandwidth by the name nvidia-smi reports (--query-gpu=name), first match wins (V100S before V100).
#: Every figure is the vendor's specification (peak), not a measurement; measured read bandwidth is lower (the
#: H200 of issue 15 read 4.2 TB/s of its 4.8).
GPU_BANDWIDTH: tuple[tuple[str, Bandwidth], ...] = (
    (r"V100S", Bandwidth("V100S PCIe 32 GB", 1134 * GB_S,
                         "NVIDIA V100S datasheet (Tesla V100S PCIe 32 GB: 1134 GB/s HBM2)")),
    (r"V100-(SXM2|PCIE)", Bandwidth("V100 SXM2/PCIe", 900 * GB_S,
                                    "NVIDIA Tesla V100 datasheet (SXM2 and PCIe, 16/32 GB: 900 GB/s HBM2); "
                                    "docs/volta.md §6-7")),
    (r"H200", Bandwidth("H200", 4800 * GB_S, "NVIDIA H200 datasheet (H200 SXM and NVL, 141 GB HBM3e: 4.8 TB/s)")),
    (r"H100.*PCIe", Bandwidth("H100 PCIe", 2000 * GB_S, "NVIDIA H100 datasheet (H100 PCIe 80 GB: 2 TB/s)")),
    (r"H100", Bandwidth("H100 SXM", 3350 * GB_S, "NVIDIA H100 datasheet (H100 SXM5 80 GB HBM3: 3.35 TB/s)")),
    (r"A100.*80GB", Bandwidth("A100 80 GB", 1935 * GB_S,
                              "NVIDIA A100 datasheet (A100 80 GB PCIe: 1935 GB/s; SXM: 2039 GB/s, the lower taken)")),
    (r"A100", Bandwidth("A100 40 GB", 1555 * GB_S, "NVIDIA A100 datasheet (A100 40 GB PCIe and SXM: 1555 GB/s)")),
)


def bandwidth(gpu_name: str) -> Bandwidth | None:
    """The table's row for a GPU as nvidia-smi names it ("Tesla V100-SXM2-32GB", "NVIDIA H200"); None when unknown
    (the roofline is then not given, never guessed)."""
    for pattern, bw in GPU_BANDWIDTH:
        if re.search(pattern, gpu_name, re.IGNORECASE):
            return bw
    return None


def bytes_per_token(weight_bytes_on_gpu: int, kv_bytes_per_context_token: int, context_tokens: float) -> float:
    """Bytes one decoded token reads from GPU memory: all weights on the GPU once, plus the KV cache of the
    `context_tokens` before it (kv_bytes_per_context_token: K and V of every layer for one token)."""
    return weight_bytes_on_gpu + kv_bytes_per_context_token * context_tokens


def roofline_tps(bytes_per_decoded_token: float, bandwidth_bytes_s: float) -> float:
    """The decode ceiling of one stream, tokens/s: bandwidth / bytes per token."""
    return bandwidth_bytes_s / bytes_per_decoded_token


def roofline_fraction(decode_tps: float, bytes_per_decoded_token: float, bandwidth_bytes_s: float) -> float:
    """Measured single-stream decode tokens/s over the ceiling: the share of the GPU's bandwidth it uses (0..1;
    above 1 means the byte count is too high, e.g. weights that are not all read per token)."""
    return decode_tps * bytes_per_decoded_token / bandwidth_bytes_s
