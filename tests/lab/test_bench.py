"""`v100kit bench` against the provisioned lab: the lab serves its tiny model from the CPU (no GPU there), so every
llama-server@tiny is reported as not on the GPU and the command exits 1, but the timing figures are still measured.
The vLLM instance is enabled but not started without a GPU: reported as not running. Plain bench restarts nothing."""

from __future__ import annotations

import json
import subprocess

import pytest

from lab.data import LLAMA_HOSTS, VLLM_HOSTS, llama_hosts
from lab.harness import HOSTS
from lab.provision import ROOT
from tests.lab.test_plan import V100KIT

pytestmark = pytest.mark.lab

UNIT = "llama-server@tiny"
#: the service's identity: a restart by the bench would change the InvocationID
INVOCATION = f"systemctl show -p InvocationID -p MainPID --value {UNIT}"


def test_bench_flags_cpu_served_instances_with_exit_1_and_still_times_them(provisioned, tmp_path):
    lab = provisioned.lab
    benched = [s for s in HOSTS if s.name in llama_hosts()]  # the full tier adds lab-bookworm (lab/data.py)
    before = {s.name: lab.run(s, INVOCATION)[1] for s in benched}
    res = subprocess.run([V100KIT, "bench", "inventory/lab.py", "--json", "--report", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 1, f"rc {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    doc = json.loads(res.stdout)
    assert doc["load"]["concurrency"] == [1, 4, 8]
    for s in benched:
        rows = doc["hosts"][s.name]
        assert isinstance(rows, list), rows  # benched, not {"error": "unreachable"|"refused"|"failed", "cause": ...}
        inst = next(i for i in rows if i["unit"] == UNIT)
        assert inst["running"] and inst["on_gpu"] is False, inst["residency"]
        assert any(f.startswith("not on the GPU") for f in inst["flags"]), inst["flags"]
        levels = {lv["concurrency"]: lv for lv in inst["levels"]}
        assert set(levels) == {1, 4, 8}
        for lv in levels.values():
            assert lv["failed"] == 0, lv["errors"]
            assert lv["ttft_p50_ms"] > 0 and lv["ttft_p95_ms"] >= lv["ttft_p50_ms"]
            assert lv["itl_p50_ms"] > 0 and lv["aggregate_e2e_tps"] > 0 and lv["aggregate_decode_tps"] > 0
            assert lv["ttft_p99_ms"] >= lv["ttft_p95_ms"]
            assert lv["peak_vram_mib"] is None and "nvidia-smi" in lv["peak_vram_note"]  # no GPU to sample
        assert inst["decode_tps"] > 0
        assert inst["roofline"] is None  # no GPU: no bandwidth to compare with
        assert inst["planned_vram_mib"] > 0 and inst["vram_mib"] is None  # planned, but no nvidia-smi to measure
        md = (tmp_path / f"{s.name}.md").read_text()
        assert f"| {UNIT} | NOT ON GPU |" in md
        assert (tmp_path / f"{s.name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in VLLM_HOSTS:
        vllm = next(i for i in doc["hosts"][name] if i["unit"] == "vllm@tiny")
        assert not vllm["running"] and vllm["flags"]
    assert {s.name: lab.run(s, INVOCATION)[1] for s in benched} == before  # no service was restarted


def test_bench_table_shows_the_flag(provisioned):
    res = subprocess.run([V100KIT, "bench", "inventory/lab.py", "--limit", LLAMA_HOSTS[0]], cwd=ROOT,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 1, res.stderr[-3000:]
    assert f"{UNIT}: FLAG not on the GPU" in res.stdout and "NOT ON GPU" in res.stdout
