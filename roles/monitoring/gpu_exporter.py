#!/usr/bin/env python3
"""v100kit's GPU exporter for node_exporter's textfile collector: one run writes one .prom file, then exits.

    gpu_exporter.py --output /var/lib/prometheus/node-exporter/v100kit_gpu.prom [--nvidia-smi nvidia-smi]
                    [--kernel-log FILE]
    (the output may also be given as the one positional argument)

Standalone on purpose: Python 3.9+ and its standard library only, because it runs on the box as the service user from
a systemd timer, outside the toolkit's venvs.

What it reads:
- `nvidia-smi --query-gpu=FIELDS --format=csv`, read by the header it prints (so the units in the header, "[MiB]",
  "[W]", "[MHz]", say how to read each column, and a column this driver lacks is simply absent). The throttle bitmask
  field was renamed `clocks_throttle_reasons.active` -> `clocks_event_reasons.active` in newer drivers (the 590
  capture in tests/data/nvidia_smi_captures.txt has only the new name): the new name is asked first and, when
  nvidia-smi refuses it ('is not a valid field to query'), the old one. `ecc.mode.current` ("Enabled"/"Disabled")
  and `retired_pages.pending` ("Yes"/"No": nvmlDeviceGetRetiredPagesPendingStatus; "[N/A]" where the GPU retires no
  pages, e.g. the H200, which remaps rows instead) are `nvidia-smi --help-query-gpu` fields, both in the real
  590.48.01 query of tests/data/nvidia_smi_captures.txt; `nvidia-smi -q` prints the same values as "Ecc Mode /
  Current" and "Retired Pages / Pending" (the V100 pages of tests/data/nvidia_smi_v100.txt).
- Xid events since boot from the kernel log, `journalctl -k -b` (else `dmesg`): lines
  'NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.' (NVIDIA's Xid catalog,
  https://docs.nvidia.com/deploy/xid-errors/; the line format as public reports paste it:
  tests/data/kernel_log_xid.txt), counted per GPU (by PCI address) and Xid code. The service user needs to read the
  kernel log (group systemd-journal or adm); if it cannot, v100kit_gpu_xid_log_readable is 0 and says why.

What it writes (Prometheus text exposition format 0.0.4,
https://prometheus.io/docs/instrumenting/exposition_formats/), every per-GPU series labelled index, uuid, name:
  v100kit_gpu_exporter_up{reason} 1 | 0 (0: no nvidia-smi, no GPU, nvidia-smi failed: the reason says which; the
  file is still written, so that the scrape shows it), and per GPU the gauges of METRICS, the throttle bitmask
  decoded per reason (REASON_BITS), and v100kit_gpu_xid_errors{pci,xid} (with index/uuid/name empty where the PCI
  address is no GPU nvidia-smi lists: a GPU that fell off the bus is not listed any more).
  The one list of these names, with their labels, is roles/monitoring/decide.py METRICS (roles/monitoring/METRICS.md);
  tests/unit/test_metric_names.py keeps this script and that list equal.
The file is written atomically: a temporary file in the same directory (not ending in .prom, which the collector
reads), then rename(2).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

#: nvidia-smi --query-gpu fields, canonical names (nvidia-smi --help-query-gpu); the throttle field is added per
#: driver (THROTTLE_FIELDS).
FIELDS = ("index", "uuid", "name", "pci.bus_id", "utilization.gpu", "utilization.memory", "memory.used",
          "memory.total", "temperature.gpu", "power.draw", "power.limit", "clocks.current.sm",
          "clocks.current.memory", "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
          "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
          "ecc.mode.current", "retired_pages.pending")
THROTTLE_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
#: header names nvidia-smi prints for aliases of the fields above
ALIASES = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
           "clocks.memory": "clocks.current.memory", "gpu_uuid": "uuid", "gpu_name": "name",
           "gpu_bus_id": "pci.bus_id", "clocks_throttle_reasons.active": "clocks_event_reasons.active"}

#: field -> (metric name, help, factor applied to the value as nvidia-smi prints it)
METRICS = {
    "utilization.gpu": ("v100kit_gpu_utilization_percent", "GPU utilization over the last sample period (%).", 1),
    "utilization.memory": ("v100kit_gpu_memory_utilization_percent",
                           "Share of the last sample period the memory was read or written (%).", 1),
    "memory.used": ("v100kit_gpu_memory_used_bytes", "GPU memory in use (bytes).", 1 << 20),
    "memory.total": ("v100kit_gpu_memory_total_bytes", "GPU memory in total (bytes).", 1 << 20),
    "temperature.gpu": ("v100kit_gpu_temperature_celsius", "GPU core temperature (degrees C).", 1),
    "power.draw": ("v100kit_gpu_power_draw_watts", "Power drawn by the board (W).", 1),
    "power.limit": ("v100kit_gpu_power_limit_watts", "Power limit in effect (W).", 1),
    "clocks.current.sm": ("v100kit_gpu_sm_clock_hertz", "SM clock (Hz).", 1_000_000),
    "clocks.current.memory": ("v100kit_gpu_memory_clock_hertz", "Memory clock (Hz).", 1_000_000),
    "clocks_event_reasons.active": ("v100kit_gpu_clock_event_reasons",
                                    "Bitmask of the active clock event (throttle) reasons, as NVML reports it.", 1),
    "ecc.errors.corrected.volatile.total": ("v100kit_gpu_ecc_corrected_volatile_errors",
                                            "Corrected (single-bit) ECC errors since the driver loaded.", 1),
    "ecc.errors.uncorrected.volatile.total": ("v100kit_gpu_ecc_uncorrected_volatile_errors",
                                              "Uncorrected (double-bit) ECC errors since the driver loaded.", 1),
    "pcie.link.gen.current": ("v100kit_gpu_pcie_link_gen_current",
                              "PCIe link generation now (an idle GPU may lower it to save power).", 1),
    "pcie.link.gen.max": ("v100kit_gpu_pcie_link_gen_max", "Highest PCIe generation of the GPU and its slot.", 1),
    "pcie.link.width.current": ("v100kit_gpu_pcie_link_width_current", "PCIe lanes in use now.", 1),
    "pcie.link.width.max": ("v100kit_gpu_pcie_link_width_max", "Most PCIe lanes of the GPU and its slot.", 1),
    "ecc.mode.current": ("v100kit_gpu_ecc_mode_enabled", "1: ECC is on now; 0: off (absent where the GPU has none).",
                         1),
    "retired_pages.pending": ("v100kit_gpu_retired_pages_pending",
                              "1: pages retired for ECC errors wait for a reboot (or driver reload) to take effect.",
                              1),
}

#: NVML's clock event (throttle) reason bits (nvml.h nvmlClocksThrottleReason* / nvmlClocksEventReason*, the same
#: values in nvidia-ml-py's pynvml.py): bit -> reason label
REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
               0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
               0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}

#: the words nvidia-smi prints for a state (ecc.mode.current, retired_pages.pending), as numbers
STATES = {"Enabled": 1.0, "Disabled": 0.0, "Yes": 1.0, "No": 0.0}

#: what nvidia-smi prints in a field it cannot fill
ABSENT = {"[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]",
          "[Requested functionality has been deprecated]", ""}

XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\): (\d+)")

Runner = Callable[[List[str]], Tuple[int, str, str]]


def run(cmd: List[str], timeout: float = 30) -> Tuple[int, str, str]:
    """(exit status, stdout, stderr) of `cmd`; 127 when it is not found, 124 when it ran past `timeout` seconds."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, "", f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{cmd[0]} did not answer within {timeout:g} s"
    return p.returncode, p.stdout, p.stderr


def _field(header: str) -> str:
    """'memory.used [MiB]' -> 'memory.used'; aliases to their canonical name."""
    name = re.sub(r"\s*\[[^\]]*\]$", "", header.strip())
    return ALIASES.get(name, name)


def _number(value: str) -> Optional[float]:
    """'71.24 W' -> 71.24, '0 %' -> 0.0, '0x0000000000000001' -> 1.0, 'Enabled'/'Yes' -> 1.0,
    'Disabled'/'No' -> 0.0; None for N/A and the like."""
    value = value.strip()
    if value in ABSENT:
        return None
    if value in STATES:
        return STATES[value]
    if re.fullmatch(r"0x[0-9a-fA-F]+", value):
        return float(int(value, 16))
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)(?:\s*(?:%|MiB|W|MHz|C|x))?", value)
    return float(m.group(1)) if m else None


def parse_query_csv(text: str) -> List[Dict[str, str]]:
    """`nvidia-smi --query-gpu=... --format=csv` (with its header line) -> one {canonical field: raw value} per GPU.
    Lines that do not have the header's number of columns (an error message) are skipped."""
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    if not rows:
        return []
    header = [_field(h) for h in rows[0]]
    return [dict(zip(header, (v.strip() for v in r))) for r in rows[1:] if len(r) == len(header)]


def query_gpus(smi: str, runner: Runner = run) -> Tuple[Optional[List[Dict[str, str]]], str]:
    """The GPUs as nvidia-smi reports them, and '' ; or (None, why) when nvidia-smi cannot be asked."""
    why = ""
    for throttle in THROTTLE_FIELDS:
        rc, out, err = runner([smi, f"--query-gpu={','.join(FIELDS + (throttle,))}", "--format=csv"])
        if rc == 0:
            return parse_query_csv(out), ""
        why = (out.strip() or err.strip() or f"exit status {rc}").splitlines()[0]
        if rc in (124, 127) or "is not a valid field" not in why:
            break
    return None, why


def _bus(domain: str, bus: str, device: str) -> Tuple[int, int, int]:
    return int(domain, 16), int(bus, 16), int(device, 16)


def bus_key(bus_id: str) -> Optional[Tuple[int, int, int]]:
    """nvidia-smi's '00000000:3B:00.0' -> (0, 0x3b, 0); None when it is not a PCI address."""
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", bus_id.strip())
    return _bus(*m.groups()) if m else None


def xid_counts(lines: List[str]) -> Dict[Tuple[Tuple[int, int, int], str, int], int]:
    """{((domain, bus, device), 'dddd:bb:dd' as logged, xid): events} from kernel log lines (XID_RE)."""
    counts: Dict[Tuple[Tuple[int, int, int], str, int], int] = {}
    for line in lines:
        m = XID_RE.search(line)
        if m:
            key = (_bus(*m.groups()[:3]), ":".join(m.groups()[:3]).lower(), int(m.group(4)))
            counts[key] = counts.get(key, 0) + 1
    return counts


def kernel_log(runner: Runner = run, path: Optional[str] = None) -> Tuple[Optional[List[str]], str]:
    """This boot's kernel log lines and '', or (None, why) when it cannot be read. `path`: read that file instead
    (a recorded log)."""
    if path:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read().splitlines(), ""
        except OSError as e:
            return None, f"{path}: {e.strerror}"
    rc, out, err = runner(["journalctl", "-k", "-b", "--no-pager", "-o", "short"])
    if rc == 0 and "insufficient permissions" not in err and "No journal files" not in err:
        return out.splitlines(), ""
    why = (err.strip() or f"journalctl exit status {rc}").splitlines()[0]
    rc, out, err = runner(["dmesg"])
    if rc == 0:
        return out.splitlines(), ""
    return None, f"{why}; dmesg: {(err.strip() or f'exit status {rc}').splitlines()[0]}"


def _escape(value: str) -> str:
    """A label value escaped as the exposition format requires: backslash, double quote and line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}" if labels else ""


def _value(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


class Exposition:
    """Metric families in the text format: each family's HELP and TYPE once, its samples together."""

    def __init__(self) -> None:
        self.families: Dict[str, Tuple[str, List[str]]] = {}

    def add(self, name: str, help_: str, labels: Dict[str, str], value: float) -> None:
        self.families.setdefault(name, (help_, []))[1].append(f"{name}{_labels(labels)} {_value(value)}")

    def text(self) -> str:
        out = []
        for name, (help_, samples) in self.families.items():
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", *samples]
        return "\n".join(out) + "\n"


def exposition(gpus: Optional[List[Dict[str, str]]], why: str, log: Optional[List[str]], log_why: str,
               now: float) -> str:
    """The .prom text for what was read: `gpus` from parse_query_csv (None: nvidia-smi could not be asked, `why`
    says why), `log` the kernel log lines (None: unreadable, `log_why`)."""
    e = Exposition()
    up_help = "1: nvidia-smi listed the GPUs; 0: it could not (the reason label says why)."
    if gpus is None or not gpus:
        e.add("v100kit_gpu_exporter_up", up_help, {"reason": why or "no GPU: nvidia-smi listed none"}, 0)
    else:
        e.add("v100kit_gpu_exporter_up", up_help, {"reason": ""}, 1)
    e.add("v100kit_gpu_count", "GPUs nvidia-smi lists.", {}, len(gpus or []))
    by_bus = {}
    for g in gpus or []:
        ids = {"index": g.get("index", ""), "uuid": g.get("uuid", ""), "name": g.get("name", "")}
        key = bus_key(g.get("pci.bus_id", ""))
        if key:
            by_bus[key] = ids
        for field, (metric, help_, factor) in METRICS.items():
            v = _number(g.get(field, ""))
            if v is not None:
                e.add(metric, help_, ids, v * factor)
        mask = _number(g.get("clocks_event_reasons.active", ""))
        if mask is not None:
            for bit, reason in REASON_BITS.items():
                e.add("v100kit_gpu_clock_event_reason_active", "1 where this clock event (throttle) reason is "
                      "active (hw_*, sw_thermal_slowdown: a power or cooling fault).", {**ids, "reason": reason},
                      1 if int(mask) & bit else 0)
    e.add("v100kit_gpu_xid_log_readable", "1: this boot's kernel log was read for Xid events; 0: it was not (the "
          "reason label says why).", {"reason": log_why if log is None else ""}, 0 if log is None else 1)
    for (key, pci, xid), n in sorted(xid_counts(log or []).items()):
        ids = by_bus.get(key, {"index": "", "uuid": "", "name": ""})
        e.add("v100kit_gpu_xid_errors", "Xid events in this boot's kernel log, per GPU (PCI address) and Xid code "
              "(79: fallen off the bus; 48: double-bit ECC error).", {**ids, "pci": pci, "xid": str(xid)}, n)
    e.add("v100kit_gpu_exporter_last_run_timestamp_seconds", "When this file was written (Unix time).", {}, now)
    return e.text()


def write_atomically(path: str, text: str) -> None:
    """`text` into `path` through a temporary file in the same directory and rename(2), mode 0644."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: Optional[List[str]] = None, runner: Runner = run) -> int:
    """Read, write the file, exit 0; 1 when the file cannot be written; 2 on a usage error."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("output", nargs="?", help="the .prom file to write (in node_exporter's textfile directory)")
    ap.add_argument("--output", dest="output_opt", metavar="OUTPUT",
                    help="the same, as the systemd unit passes it (v100kit-gpu-exporter.service)")
    ap.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to run (default: from PATH)")
    ap.add_argument("--kernel-log", help="read Xid lines from this file instead of journalctl -k -b / dmesg")
    args = ap.parse_args(argv)
    if (args.output is None) == (args.output_opt is None):
        ap.error("give the .prom file to write once: as OUTPUT or as --output OUTPUT")
    output = args.output or args.output_opt
    gpus, why = query_gpus(args.nvidia_smi, runner)
    log, log_why = kernel_log(runner, args.kernel_log)
    try:
        write_atomically(output, exposition(gpus, why, log, log_why, time.time()))
    except OSError as e:
        print(f"gpu_exporter: cannot write {output}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
