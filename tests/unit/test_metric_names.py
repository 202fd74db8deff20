"""One list of metric names: roles/monitoring/decide.py METRICS against what the GPU exporter
(roles/monitoring/gpu_exporter.py) really writes, both ways.

Inputs, all recorded from real machines (none made up for this test):
- the file the exporter wrote on the lent NVIDIA H200 (tests/data/gpu_exporter_h200.prom, tools/gpu/monitoring/go.sh);
- the exporter run on the real `nvidia-smi --query-gpu` output of an H200 and a GeForce RTX 2080 SUPER
  (tests/data/nvidia_smi_captures.txt), with the public kernel log's Xid lines (tests/data/kernel_log_xid.txt);
- the exporter run on two Tesla V100s' `nvidia-smi -q` pages (tests/data/nvidia_smi_v100.txt), each value handed to
  it under the `--query-gpu` field name that prints the same NVML reading (Q_FIELDS below; the field names as
  `nvidia-smi --help-query-gpu` lists them and the 590.48.01 capture's header prints them);
- the exporter on a host without a GPU: nvidia-smi absent, and nvidia-smi's "No devices were found" (exit 6).
Checked: (a) every family written for any of them is in METRICS with exactly METRICS' labels and type; (b) every
v100kit_gpu_* name of METRICS is written for at least one of them."""

from __future__ import annotations

import re

import pytest

from roles.monitoring.decide import METRICS
from tests.unit.test_gpu_exporter import DATA, H200, KERNEL_LOG, RTX, gx, parse_exposition

#: `nvidia-smi -q` (section path) -> the `--query-gpu` field that reads the same value (nvidia-smi --help-query-gpu:
#: "pci.bus_id", "utilization.gpu", "memory.used", "temperature.gpu", "power.draw", "clocks.current.sm",
#: "ecc.mode.current", "ecc.errors.corrected.volatile.total" (single-bit), "ecc.errors.uncorrected.volatile.total"
#: (double-bit), "retired_pages.pending", "pcie.link.gen.current", "pcie.link.width.max", ...). The -q pages print
#: no throttle bitmask (only a row per reason), so that column is left out, as a driver without it would.
Q_FIELDS = {
    ("Product Name",): "name",
    ("GPU UUID",): "uuid",
    ("PCI", "Bus Id"): "pci.bus_id",
    ("PCI", "GPU Link Info", "PCIe Generation", "Current"): "pcie.link.gen.current",
    ("PCI", "GPU Link Info", "PCIe Generation", "Max"): "pcie.link.gen.max",
    ("PCI", "GPU Link Info", "Link Width", "Current"): "pcie.link.width.current",
    ("PCI", "GPU Link Info", "Link Width", "Max"): "pcie.link.width.max",
    ("FB Memory Usage", "Total"): "memory.total",
    ("FB Memory Usage", "Used"): "memory.used",
    ("Utilization", "Gpu"): "utilization.gpu",
    ("Utilization", "Memory"): "utilization.memory",
    ("Ecc Mode", "Current"): "ecc.mode.current",
    ("ECC Errors", "Volatile", "Single Bit", "Total"): "ecc.errors.corrected.volatile.total",
    ("ECC Errors", "Volatile", "Double Bit", "Total"): "ecc.errors.uncorrected.volatile.total",
    ("Retired Pages", "Pending"): "retired_pages.pending",
    ("Temperature", "GPU Current Temp"): "temperature.gpu",
    ("Power Readings", "Power Draw"): "power.draw",
    ("Power Readings", "Power Limit"): "power.limit",
    ("Clocks", "SM"): "clocks.current.sm",
    ("Clocks", "Memory"): "clocks.current.memory",
}


def v100_page(name: str) -> str:
    """One '== name :: ...' section of tests/data/nvidia_smi_v100.txt."""
    text = (DATA / "nvidia_smi_v100.txt").read_text()
    m = re.search(rf"^== {re.escape(name)} :: [^\n]*\n(.*?)(?=^== |\Z)", text, re.S | re.M)
    return m.group(1)


def q_to_query_csv(page: str) -> str:
    """The GPUs of an `nvidia-smi -q` page as `--query-gpu=index,<Q_FIELDS>` CSV (header, one row per GPU, index in
    the page's order, as nvidia-smi numbers them): only the values the page prints, as it prints them."""
    gpus: list[dict[str, str]] = []
    path: list[tuple[int, str]] = []
    for line in page.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f]{8}:", line):
            gpus.append({"index": str(len(gpus))})
            path = []
            continue
        if not gpus or not line.strip() or not line.startswith("    "):
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key, sep, value = line.strip().partition(":")
        path = [p for p in path if p[0] < depth]
        if not sep:
            path.append((depth, key.strip()))
            continue
        field = Q_FIELDS.get(tuple(p for _, p in path) + (key.strip(),))
        if field:
            gpus[-1][field] = value.strip()
    header = ["index", *Q_FIELDS.values()]
    rows = [", ".join(header)] + [", ".join(g.get(f, "[N/A]") for f in header) for g in gpus]
    return "\n".join(rows) + "\n"


V100_PCIE = q_to_query_csv(v100_page("v100-pcie-32gb-q"))
V100_SXM2 = q_to_query_csv(v100_page("v100-sxm2-32gb-q"))


def answering(query_csv: str | None, smi_answer=None):
    """A runner: nvidia-smi answers `query_csv` (or `smi_answer`, an (rc, out, err)), journalctl the Xid lines."""
    def runner(cmd):
        if cmd[0] == "nvidia-smi":
            return smi_answer if smi_answer else (0, query_csv, "")
        if cmd[0] == "journalctl":
            return 0, "\n".join(KERNEL_LOG) + "\n", ""
        return 127, "", f"{cmd[0]}: not found"
    return runner


def run_exporter(runner, tmp_path) -> dict:
    out = tmp_path / "v100kit_gpu.prom"
    assert gx.main(["--output", str(out)], runner=runner) == 0
    return parse_exposition(out.read_text())


INPUTS = {
    "h200-capture": lambda: answering(H200),
    "rtx-2080-super-capture": lambda: answering(RTX),
    "v100-pcie-32gb-q": lambda: answering(V100_PCIE),
    "v100-sxm2-32gb-q": lambda: answering(V100_SXM2),
    "no-gpu-no-nvidia-smi": lambda: answering(None, (127, "", "nvidia-smi: not found")),
    "no-gpu-no-devices": lambda: answering(None, (6, "No devices were found\n", "")),
}


def written(tmp_path) -> dict[str, dict]:
    """{input: families} for the real H200 file and every INPUTS run."""
    out = {"h200-real-file": parse_exposition((DATA / "gpu_exporter_h200.prom").read_text())}
    for name, make in INPUTS.items():
        d = tmp_path / name
        d.mkdir()
        out[name] = run_exporter(make(), d)
    return out


def test_the_v100_pages_reach_the_exporter_as_nvidia_smi_printed_them():
    """The conversion keeps the page's own values: 44 % busy, 31194 of 32480 MiB, 40 C, 58.81 W of 250.00 W, SM
    1380 MHz, ECC on, no page pending, gen 3 x16 (the PCIe card); the SXM2 card at x2 of x16 under 418.67."""
    assert V100_PCIE.splitlines()[1].split(", ")[:3] == ["0", "Tesla V100-PCIE-32GB", "GPU-4965xxxx-79e3-7941-12cb-1dfe9c53xxxx"]
    (pcie,) = gx.parse_query_csv(V100_PCIE)
    assert (pcie["utilization.gpu"], pcie["memory.used"], pcie["memory.total"], pcie["temperature.gpu"],
            pcie["power.draw"], pcie["power.limit"], pcie["clocks.current.sm"], pcie["ecc.mode.current"],
            pcie["retired_pages.pending"], pcie["pcie.link.width.max"]) == (
        "44 %", "31194 MiB", "32480 MiB", "40 C", "58.81 W", "250.00 W", "1380 MHz", "Enabled", "No", "16x")
    (sxm2,) = gx.parse_query_csv(V100_SXM2)
    assert (sxm2["name"], sxm2["pcie.link.width.current"], sxm2["pcie.link.width.max"]) == (
        "Tesla V100-SXM2-32GB", "2x", "16x")


def test_every_metric_written_is_listed_with_its_labels_and_type(tmp_path):
    """(a) For every input, every family the exporter writes is in METRICS, with METRICS' type, and every one of
    its samples carries exactly METRICS' labels."""
    wrong = []
    for source, families in written(tmp_path).items():
        for name, fam in families.items():
            if name not in METRICS:
                wrong.append(f"{source}: {name} is not in METRICS")
                continue
            kind, labels, _ = METRICS[name]
            if fam["type"] != kind:
                wrong.append(f"{source}: {name} is a {fam['type']}, METRICS says {kind}")
            for key in fam["samples"]:
                if {k for k, _ in key} != set(labels):
                    wrong.append(f"{source}: {name} labels {sorted(k for k, _ in key)}, METRICS says {sorted(labels)}")
    assert wrong == []


def test_every_listed_gpu_metric_is_written_for_some_real_input(tmp_path):
    """(b) No name in METRICS that the exporter never writes: each v100kit_gpu_* is written for one of the inputs
    (with the kernel log's Xid lines for v100kit_gpu_xid_errors)."""
    seen = {name for families in written(tmp_path).values() for name in families}
    assert sorted(n for n in METRICS if n.startswith("v100kit_gpu_") and n not in seen) == []


@pytest.mark.parametrize("source", ["no-gpu-no-nvidia-smi", "no-gpu-no-devices"])
def test_a_gpu_less_hosts_file_is_valid_and_says_why(tmp_path, source):
    f = run_exporter(INPUTS[source](), tmp_path)
    assert set(f) == {"v100kit_gpu_exporter_up", "v100kit_gpu_count", "v100kit_gpu_xid_log_readable",
                      "v100kit_gpu_xid_errors", "v100kit_gpu_exporter_last_run_timestamp_seconds"}
    ((labels, up),) = f["v100kit_gpu_exporter_up"]["samples"].items()
    assert up == 0 and dict(labels)["reason"] in ("nvidia-smi: not found", "No devices were found")
