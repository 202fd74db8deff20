"""The GPU exporter (roles/monitoring/gpu_exporter.py, a standalone stdlib script) on recorded nvidia-smi output
(the H200 and RTX 2080 SUPER captures of tests/data/nvidia_smi_captures.txt, whole: every column nvidia-smi
printed, read by the exporter from its header) and recorded kernel logs with Xid lines (tests/data/kernel_log_xid.txt).
Its output is checked with a strict parser written from the exposition format's specification
(https://prometheus.io/docs/instrumenting/exposition_formats/, "Text-based format"): prometheus_client is not in
the venv."""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "monitoring" / "gpu_exporter.py"
DATA = ROOT / "tests" / "data"

spec = importlib.util.spec_from_file_location("gpu_exporter", SCRIPT)
gx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gx)


# -- a strict reader of the text exposition format ------------------------------------------------------------------
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)"
SAMPLE = re.compile(rf"^({NAME})(\{{(?:{LABEL}={LABEL_VALUE}(?:,{LABEL}={LABEL_VALUE})*,?)?\}})? ({VALUE})( -?\d+)?$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_exposition(text: str) -> dict[str, dict]:
    """{family: {'help', 'type', 'samples': {frozenset(labels.items()): value}}}; raises AssertionError on anything
    the specification does not allow: a line not ending in a line feed, a malformed HELP/TYPE/sample line, an unknown
    type, a second HELP or TYPE for a name, a TYPE after the family's first sample, a family's samples not in one
    group, a label value with an escape other than \\\\, \\" and \\n, the same label set twice."""
    assert text.endswith("\n"), "the last line must end with a line feed"
    families: dict[str, dict] = {}
    closed: set[str] = set()
    current = None
    for line in text[:-1].split("\n"):
        if not line.strip():
            continue
        if line.startswith("#"):
            m = re.match(rf"^# (HELP|TYPE) ({NAME}) (.*)$", line)
            if not m:
                assert re.match(r"^#( |$)", line), line  # any other comment
                continue
            kind, name, rest = m.groups()
            fam = families.setdefault(name, {"help": None, "type": None, "samples": {}})
            assert name not in closed, f"{name}: its lines must form one group"
            if kind == "HELP":
                assert fam["help"] is None, f"second HELP for {name}"
                assert not re.search(r"\\[^\\n]", rest), f"bad escape in HELP of {name}"
                fam["help"] = rest
            else:
                assert fam["type"] is None, f"second TYPE for {name}"
                assert not fam["samples"], f"TYPE after samples for {name}"
                assert rest in TYPES, rest
                fam["type"] = rest
            if current not in (None, name):
                closed.add(current)
            current = name
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "{}", m.group(3)
        if current not in (None, name):
            closed.add(current)
        assert name not in closed, f"{name}: its samples must form one group"
        current = name
        pairs = re.findall(rf"({LABEL})=({LABEL_VALUE})", labels)
        assert len({k for k, _ in pairs}) == len(pairs), f"a label twice: {line}"
        key = frozenset((k, ast.literal_eval(v)) for k, v in pairs)
        fam = families.setdefault(name, {"help": None, "type": None, "samples": {}})
        assert key not in fam["samples"], f"the same series twice: {line}"
        fam["samples"][key] = float(value.replace("Inf", "inf"))
    return families


def value(families: dict, metric: str, /, **labels) -> float:
    """The one sample of `metric` whose labels include `labels`."""
    hits = [v for k, v in families[metric]["samples"].items() if set(labels.items()) <= dict(k).items()]
    assert len(hits) == 1, (metric, labels, families[metric]["samples"])
    return hits[0]


def test_the_strict_reader_refuses_what_the_format_forbids():
    good = "# HELP a x\n# TYPE a gauge\na{b=\"c\"} 1\n"
    assert parse_exposition(good)["a"]["samples"] == {frozenset({("b", "c")}): 1.0}
    for bad in ("a 1", "a{b=c} 1\n", "a{b=\"c\\t\"} 1\n", "# TYPE a gauge\n# TYPE a gauge\na 1\n",
                "a 1\nb 1\na 2\n", "a{b=\"c\"} 1\na{b=\"c\"} 2\n", "a one\n", "# TYPE a gaug\na 1\n",
                "a 1\n# TYPE a gauge\n"):
        with pytest.raises(AssertionError):
            parse_exposition(bad)


# -- recorded inputs ------------------------------------------------------------------------------------------------
def capture(name: str) -> str:
    """The header and rows of a query-gpu capture (its '# $ nvidia-smi ...' line dropped)."""
    text = (DATA / "nvidia_smi_captures.txt").read_text()
    m = re.search(rf"^== {re.escape(name)} :: load :: query-gpu\n# \$ [^\n]*\n(.*?)(?=^== |\Z)", text, re.S | re.M)
    return m.group(1).strip() + "\n"


H200 = capture("linux-x86_64__nvidia-h200__590.48.01")
RTX = capture("windows-x86_64__nvidia-geforce-rtx-2080-super__591.86")
KERNEL_LOG = [line for line in (DATA / "kernel_log_xid.txt").read_text().splitlines()
              if line and not line.startswith(("#", "=="))]


def smi(csv_text: str, refuse_event_names: bool = False):
    """A runner answering nvidia-smi --query-gpu with `csv_text` (an older driver refuses the new field name with
    the message nvidia-smi prints for an unknown field: huggingface/candle issue 733, '"compute_cap" is not a valid
    field to query'), and journalctl -k with KERNEL_LOG."""
    calls = []

    def runner(cmd):
        calls.append(cmd)
        if cmd[0] == "nvidia-smi":
            if refuse_event_names and "clocks_event_reasons.active" in cmd[1]:
                return 2, 'Field "clocks_event_reasons.active" is not a valid field to query.\n\n', ""
            return 0, csv_text, ""
        if cmd[0] == "journalctl":
            return 0, "\n".join(KERNEL_LOG) + "\n", ""
        return 127, "", f"{cmd[0]}: not found"
    runner.calls = calls
    return runner


def export(runner, tmp_path, *extra) -> dict:
    out = tmp_path / "v100kit_gpu.prom"
    assert gx.main([str(out), *extra], runner=runner) == 0
    return parse_exposition(out.read_text())


def test_h200_capture_values_as_nvidia_smi_printed_them(tmp_path):
    f = export(smi(H200), tmp_path)
    ids = {"index": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "NVIDIA H200"}
    assert value(f, "v100kit_gpu_exporter_up") == 1 and value(f, "v100kit_gpu_count") == 1
    # the capture's own numbers: 100 %, 7 %, 32362 MiB of 143771 MiB, 52 C, 627.40 W of 700.00 W, 1980/3201 MHz,
    # gen 5 of 5, x16 of x16, no ECC errors, reasons 0x0000000000000000
    assert value(f, "v100kit_gpu_utilization_percent", **ids) == 100
    assert value(f, "v100kit_gpu_memory_utilization_percent", **ids) == 7
    assert value(f, "v100kit_gpu_memory_used_bytes", **ids) == 32362 * 2**20
    assert value(f, "v100kit_gpu_memory_total_bytes", **ids) == 143771 * 2**20
    assert value(f, "v100kit_gpu_temperature_celsius", **ids) == 52
    assert value(f, "v100kit_gpu_power_draw_watts", **ids) == 627.40
    assert value(f, "v100kit_gpu_power_limit_watts", **ids) == 700
    assert value(f, "v100kit_gpu_sm_clock_hertz", **ids) == 1980e6
    assert value(f, "v100kit_gpu_memory_clock_hertz", **ids) == 3201e6
    assert value(f, "v100kit_gpu_pcie_link_gen_current", **ids) == 5 == value(f, "v100kit_gpu_pcie_link_gen_max")
    assert value(f, "v100kit_gpu_pcie_link_width_current", **ids) == 16 == value(f, "v100kit_gpu_pcie_link_width_max")
    assert value(f, "v100kit_gpu_ecc_uncorrected_volatile_errors", **ids) == 0
    assert value(f, "v100kit_gpu_clock_event_reasons", **ids) == 0
    assert value(f, "v100kit_gpu_clock_event_reason_active", reason="hw_slowdown") == 0
    # ecc.mode.current "Enabled"; retired_pages.pending "[N/A]" (Hopper remaps rows instead): no series
    assert value(f, "v100kit_gpu_ecc_mode_enabled", **ids) == 1
    assert "v100kit_gpu_retired_pages_pending" not in f
    assert all(fam["type"] == "gauge" and fam["help"] for fam in f.values())


def test_rtx_capture_idle_reason_and_absent_ecc(tmp_path):
    f = export(smi(RTX), tmp_path)
    # reasons 0x0000000000000001 = GPU idle (nvml.h); ECC [N/A] on a GeForce: no series rather than a made-up 0
    assert value(f, "v100kit_gpu_clock_event_reason_active", reason="gpu_idle") == 1
    assert value(f, "v100kit_gpu_clock_event_reason_active", reason="sw_power_cap") == 0
    assert "v100kit_gpu_ecc_uncorrected_volatile_errors" not in f and "v100kit_gpu_ecc_mode_enabled" not in f
    assert value(f, "v100kit_gpu_power_draw_watts", name="NVIDIA GeForce RTX 2080 SUPER") == 97.43


def _v100_q_as_query(edit=lambda page: page):
    """The Tesla V100-PCIE-32GB `nvidia-smi -q` page (tests/data/nvidia_smi_v100.txt, driver 410.48) as the
    --query-gpu CSV of the same readings (tests/unit/test_metric_names.py q_to_query_csv); `edit` changes the page
    first."""
    from tests.unit.test_metric_names import q_to_query_csv, v100_page
    return q_to_query_csv(edit(v100_page("v100-pcie-32gb-q")))


def test_v100_ecc_mode_and_retired_pages_pending(tmp_path):
    # the page: "Ecc Mode / Current : Enabled", "Retired Pages / Pending : No"
    f = export(smi(_v100_q_as_query()), tmp_path)
    gpu = {"name": "Tesla V100-PCIE-32GB"}
    assert value(f, "v100kit_gpu_ecc_mode_enabled", **gpu) == 1
    assert value(f, "v100kit_gpu_retired_pages_pending", **gpu) == 0
    assert value(f, "v100kit_gpu_ecc_uncorrected_volatile_errors", **gpu) == 0
    assert value(f, "v100kit_gpu_memory_used_bytes", **gpu) == 31194 * 2**20
    # edited copies, one field each: ECC turned off; a page retirement waiting for the reboot
    off = export(smi(_v100_q_as_query(lambda p: p.replace(
        "Ecc Mode\n        Current                     : Enabled",
        "Ecc Mode\n        Current                     : Disabled", 1))), tmp_path)
    assert value(off, "v100kit_gpu_ecc_mode_enabled", **gpu) == 0
    pending = export(smi(_v100_q_as_query(lambda p: p.replace(
        "        Pending                     : No", "        Pending                     : Yes", 1))), tmp_path)
    assert value(pending, "v100kit_gpu_retired_pages_pending", **gpu) == 1


def test_output_as_the_systemd_unit_passes_it(tmp_path):
    """v100kit-gpu-exporter.service runs `gpu_exporter.py --output PATH`; the positional form (tools/gpu/monitoring/
    go.sh) still works; both at once, or neither, is a usage error (exit 2)."""
    out = tmp_path / "unit.prom"
    assert gx.main(["--output", str(out)], runner=smi(H200)) == 0
    assert value(parse_exposition(out.read_text()), "v100kit_gpu_exporter_up") == 1
    for argv in ([], [str(out), "--output", str(out)]):
        with pytest.raises(SystemExit) as e:
            gx.main(argv, runner=smi(H200))
        assert e.value.code == 2


def test_older_driver_throttle_field_name(tmp_path):
    # an older driver: the new name refused, the old one answered under its own header
    old = H200.replace("clocks_event_reasons.active", "clocks_throttle_reasons.active")
    runner = smi(old, refuse_event_names=True)
    f = export(runner, tmp_path)
    assert [c[1].split(",")[-1] for c in runner.calls if c[0] == "nvidia-smi"] == [
        "clocks_event_reasons.active", "clocks_throttle_reasons.active"]
    assert value(f, "v100kit_gpu_clock_event_reasons") == 0 and value(f, "v100kit_gpu_exporter_up") == 1


def test_xid_events_counted_per_gpu_and_code(tmp_path):
    # the real lines; one of the Xid 48 lines edited onto the H200's PCI address (0000:83:00) so that it joins a GPU
    log = [line.replace("PCI:0000:8a:00): 48", "PCI:0000:83:00): 48") for line in KERNEL_LOG]
    logfile = tmp_path / "kern.log"
    logfile.write_text("\n".join(log) + "\n")
    f = export(smi(H200), tmp_path, "--kernel-log", str(logfile))
    assert value(f, "v100kit_gpu_xid_log_readable") == 1
    assert value(f, "v100kit_gpu_xid_errors", xid="48", index="0", name="NVIDIA H200", pci="0000:83:00") == 1
    assert value(f, "v100kit_gpu_xid_errors", xid="13", pci="0000:cb:00", index="") == 3
    assert value(f, "v100kit_gpu_xid_errors", xid="109") == 1 and value(f, "v100kit_gpu_xid_errors", xid="63") == 1
    # Xid 79: the GPU fell off the bus and nvidia-smi no longer lists it: kept, without index
    assert value(f, "v100kit_gpu_xid_errors", xid="79", pci="0000:44:00", uuid="") == 1
    assert len(f["v100kit_gpu_xid_errors"]["samples"]) == 5  # the multi-line message without an Xid is not one


def test_kernel_log_unreadable_says_why(tmp_path):
    def runner(cmd):
        if cmd[0] == "nvidia-smi":
            return 0, H200, ""
        if cmd[0] == "journalctl":  # what journalctl prints to a user outside systemd-journal/adm
            return 0, "", "No journal files were opened due to insufficient permissions.\n"
        return 1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"
    f = export(runner, tmp_path)
    (labels,) = f["v100kit_gpu_xid_log_readable"]["samples"]
    assert f["v100kit_gpu_xid_log_readable"]["samples"][labels] == 0
    assert "insufficient permissions" in dict(labels)["reason"] and "Operation not permitted" in dict(labels)["reason"]
    assert "v100kit_gpu_xid_errors" not in f and value(f, "v100kit_gpu_exporter_up") == 1


@pytest.mark.parametrize("answer, reason", [
    ((127, "", "nvidia-smi: not found"), "nvidia-smi: not found"),
    # nvidia-smi on a host whose driver sees no GPU prints this and exits 6
    ((6, "No devices were found\n", ""), "No devices were found"),
    ((9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
         "NVIDIA driver is installed and running.\n\n", ""), "couldn't communicate with the NVIDIA driver"),
    ((0, "index, uuid, name\n", ""), "no GPU: nvidia-smi listed none"),
])
def test_no_gpu_writes_up_0_with_the_reason(tmp_path, answer, reason):
    def runner(cmd):
        return answer if cmd[0] == "nvidia-smi" else (0, "", "")
    f = export(runner, tmp_path)
    (labels,) = f["v100kit_gpu_exporter_up"]["samples"]
    assert f["v100kit_gpu_exporter_up"]["samples"][labels] == 0 and reason in dict(labels)["reason"]
    assert value(f, "v100kit_gpu_count") == 0 and "v100kit_gpu_temperature_celsius" not in f


def test_label_values_are_escaped(tmp_path):
    odd = H200.replace("NVIDIA H200", 'NVIDIA "H200" \\ test')
    f = export(smi(odd), tmp_path)
    assert value(f, "v100kit_gpu_temperature_celsius", name='NVIDIA "H200" \\ test') == 52


def test_written_atomically_beside_the_target(tmp_path, monkeypatch):
    out = tmp_path / "v100kit_gpu.prom"
    out.write_text("old\n")
    renames = []
    real = os.replace
    monkeypatch.setattr(gx.os, "replace", lambda a, b: (renames.append((a, b)), real(a, b)))
    assert gx.main([str(out)], runner=smi(H200)) == 0
    (src, dest), = renames
    assert Path(src).parent == tmp_path and not src.endswith(".prom") and dest == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v100kit_gpu.prom"]  # no temporary file left
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 and "v100kit_gpu_exporter_up" in out.read_text()


def test_unwritable_target_exits_1(tmp_path):
    assert gx.main([str(tmp_path / "missing-dir" / "x.prom")], runner=smi(H200)) == 1


def test_runs_as_a_script_with_python_39_syntax(tmp_path):
    """Standalone: parses as Python 3.9 and imports only the standard library; the command line writes the file
    (here nvidia-smi is absent, so up is 0 and says why)."""
    tree = ast.parse(SCRIPT.read_text(), feature_version=(3, 9))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    out = tmp_path / "gpu.prom"
    p = subprocess.run([sys.executable, str(SCRIPT), str(out), "--nvidia-smi", str(tmp_path / "no-nvidia-smi"),
                        "--kernel-log", str(DATA / "kernel_log_xid.txt")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    f = parse_exposition(out.read_text())
    assert value(f, "v100kit_gpu_exporter_up") == 0 and not math.isnan(
        value(f, "v100kit_gpu_exporter_last_run_timestamp_seconds"))


def test_the_exporter_run_on_the_lent_h200_agrees_with_its_nvidia_smi_q():
    """The exporter's file as it wrote it on the lent NVIDIA H200 (tools/gpu/monitoring/go.sh, 2026-12-02:
    tests/data/gpu_exporter_h200.prom) read by the strict exposition-format reader, against the same machine's
    `nvidia-smi -q` taken minutes apart (tests/data/nvidia_smi_h200_q.txt): "FB Memory Usage Total : 143771 MiB",
    "Current Power Limit : 700.00 W", PCIe "Max : 5 / 16x", ECC 0 uncorrectable, "Idle" the active reason."""
    fam = parse_exposition((DATA / "gpu_exporter_h200.prom").read_text())
    gpu = {"index": "0", "uuid": "GPU-e6b30009-2aaa-de67-9c14-5fd1de954843", "name": "NVIDIA H200"}
    assert value(fam, "v100kit_gpu_exporter_up", reason="") == 1
    assert value(fam, "v100kit_gpu_memory_total_bytes", **gpu) == 143771 * 2**20
    assert value(fam, "v100kit_gpu_power_limit_watts", **gpu) == 700
    assert value(fam, "v100kit_gpu_pcie_link_gen_max", **gpu) == 5
    assert value(fam, "v100kit_gpu_pcie_link_width_max", **gpu) == 16
    assert value(fam, "v100kit_gpu_ecc_uncorrected_volatile_errors", **gpu) == 0
    assert value(fam, "v100kit_gpu_clock_event_reason_active", **gpu, reason="gpu_idle") == 1
    assert value(fam, "v100kit_gpu_clock_event_reason_active", **gpu, reason="hw_slowdown") == 0
