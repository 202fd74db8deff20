"""The doctor's hardware rows (roles/doctor/hardware.py parses, health.py judges) on nvidia-smi output as real V100
boxes printed it (tests/data/nvidia_smi_v100.txt: Microway's V100-PCIE-32GB under load, Princeton's idle
V100-SXM2-32GB, a DGX-1's and an Azure VM's `nvidia-smi nvlink -s`). Each row healthy and broken; a broken case
that no public log shows is the real log edited in the one field named in the test."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from roles.doctor import health
from roles.doctor.hardware import GpuHardware, gpu_health, parse_nvlink, parse_smi_q

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi_v100.txt"


def section(name: str) -> str:
    """The output of one '== name :: source' section of the data file."""
    text = DATA.read_text()
    m = re.search(rf"^== {re.escape(name)} :: .*?\n(.*?)(?=^== |\Z)", text, re.S | re.M)
    assert m, name
    return m.group(1)


PCIE_Q = section("v100-pcie-32gb-q")
SXM2_Q = section("v100-sxm2-32gb-q")
NVLINK_UP = section("v100-sxm2-nvlink-up")
NVLINK_DOWN = section("v100-sxm2-nvlink-inactive")


def edited(text: str, old: str, new: str) -> str:
    """`text` with one real line changed (exactly one occurrence, so that the edit is the one the test names)."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def rows(smi: str, nvlink: str = "") -> dict[str, object]:
    return {r.check: r for r in health.hardware_rows(gpu_health(smi, nvlink))}


def test_parses_the_v100_pcie_log_as_printed():
    (g,) = parse_smi_q(PCIE_Q)
    assert g["name"] == "Tesla V100-PCIE-32GB" and g["bus_id"] == "00000000:18:00.0" and g["index"] == 0
    assert g["pcie_gen"] == (3, 3) and g["pcie_width"] == (16, 16)
    assert g["ecc_mode"] == ("Enabled", "Enabled")
    assert g["ecc_uncorrected"] == {"volatile": 0, "aggregate": 0} and g["ecc_corrected"] == {"volatile": 0,
                                                                                                "aggregate": 0}
    assert g["retired"] == {"single_bit": 0, "double_bit": 0, "pending": False} and g["remapped"] is None
    assert g["temp"] == {"current": 40, "slowdown": 87, "shutdown": 90, "max_operating": 83, "tlimit": None,
                         "slowdown_tlimit": None, "shutdown_tlimit": None}
    assert g["pstate"] == "P0"
    assert g["throttle"]["Idle"] is False and g["throttle"]["HW Thermal Slowdown"] is False  # nested under HW Slowdown
    assert len(g["throttle"]) == 9


def test_parses_the_idle_sxm2_log():
    (g,) = parse_smi_q(SXM2_Q)
    assert g["name"] == "Tesla V100-SXM2-32GB" and g["bus_id"] == "00000004:04:00.0"
    assert g["pcie_width"] == (2, 16) and g["throttle"]["Idle"] is True


def test_parses_nvlink_status_both_layouts():
    # the DGX-1 page uses tabs, the Azure issue spaces; the UUID suffix is optional
    assert parse_nvlink(NVLINK_UP) == {0: [(i, "up") for i in range(6)], 7: [(i, "up") for i in range(6)]}
    assert parse_nvlink(NVLINK_DOWN) == {3: [(0, "up"), (1, "up"), (2, "up"), (3, "inactive"), (4, "up"),
                                             (5, "inactive")]}


def test_fact_splits_its_two_outputs():
    out = (PCIE_Q + "\n#nvlink\n" + "GPU 0: Tesla V100-SXM2-32GB\n\t Link 0: <inactive>\n").splitlines()
    (g,) = GpuHardware().process(out)
    assert g["nvlink"] == [(0, "inactive")] and g["pcie_gen"] == (3, 3)
    assert GpuHardware().process(["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                                  "#nvlink"]) == []


def test_healthy_v100_under_load_is_all_ok():
    got = rows(PCIE_Q)
    assert [r.state for r in got.values()] == ["ok"] * 6, got
    assert "gen 3 of 3, x16 of x16" in got[health.PCIE].evidence
    assert "40 C (slowdown 87 C, shutdown 90 C)" in got[health.TEMPERATURE].evidence
    assert got[health.NVLINK].evidence == "no NVLink links listed (PCIe cards)"


def test_pcie_width_below_max_is_broken_on_the_real_sxm2_log():
    """The Princeton POWER9 node's V100 really shows 'Link Width Max 16x, Current 2x'."""
    row = rows(SXM2_Q)[health.PCIE]
    assert row.state == "broken" and "x2 of x16" in row.evidence and "reseat" in row.fix


def test_pcie_generation_is_judged_only_under_load():
    # real log of an idle RTX 3090 (nvidia-docker issue 1616: gen 1 of 4 at x16), with the 'GPU <bus>' line the
    # excerpt lacks and its idle throttle reason (edited in: the excerpt shows only the PCI section)
    idle = ("GPU 00000000:61:00.0\n" + section("rtx3090-pcie-idle-gen1")
            + "    Clocks Throttle Reasons\n        Idle                        : Active\n")
    row = rows(idle)[health.PCIE]
    assert row.state == "ok" and "idle at gen 1" in row.evidence
    # the V100 under load, edited: PCIe generation current 3 -> 1 while busy (Idle: Not Active)
    loaded = edited(PCIE_Q, "                Current             : 3\n", "                Current             : 1\n")
    row = rows(loaded)[health.PCIE]
    assert row.state == "broken" and "gen 1 of 3 while not idle" in row.evidence


def test_ecc_off_is_broken():
    # edited: ECC Mode Current Enabled -> Disabled (Pending left Enabled: a change waiting for its reboot)
    smi = edited(PCIE_Q, "    Ecc Mode\n        Current                     : Enabled",
                 "    Ecc Mode\n        Current                     : Disabled")
    row = rows(smi)[health.ECC]
    assert row.state == "broken" and "ECC Disabled (pending Enabled)" in row.evidence and "reboot" in row.fix


def test_uncorrected_ecc_errors_are_broken():
    # edited: the volatile Double Bit Device Memory and Total 0 -> 2 (the first Double Bit block is the volatile one)
    smi = PCIE_Q.replace("            Double Bit            \n                Device Memory       : 0",
                         "            Double Bit            \n                Device Memory       : 2", 1)
    smi = smi.replace("                CBU                 : 0\n                Total               : 0",
                      "                CBU                 : 0\n                Total               : 2", 1)
    (g,) = parse_smi_q(smi)
    assert g["ecc_uncorrected"] == {"volatile": 2, "aggregate": 0}
    row = rows(smi)[health.ECC]
    assert row.state == "broken" and "2 since the driver loaded" in row.evidence and "nvidia-smi -r" in row.fix


def test_newer_driver_ecc_counters_are_summed():
    # the layout of newer drivers (SRAM/DRAM counters), as the H200 in tests/data/nvidia_smi_captures.txt reports
    # them by field (ecc.errors.uncorrected.volatile.dram, .sram): written here in -q form, one counter set to 1
    smi = ("GPU 00000000:83:00.0\n    Product Name : NVIDIA H200\n    ECC Mode\n        Current : Enabled\n"
           "        Pending : Enabled\n    ECC Errors\n        Volatile\n            SRAM Correctable : 0\n"
           "            SRAM Uncorrectable Parity : 0\n            SRAM Uncorrectable SEC-DED : 0\n"
           "            DRAM Correctable : 3\n            DRAM Uncorrectable : 1\n        Aggregate\n"
           "            SRAM Correctable : 0\n            DRAM Uncorrectable : 0\n")
    (g,) = parse_smi_q(smi)
    assert g["ecc_uncorrected"] == {"volatile": 1, "aggregate": 0} and g["ecc_corrected"]["volatile"] == 3


def test_retired_pages_pending_or_at_the_limit_are_broken():
    # edited: Retired Pages Pending No -> Yes
    smi = edited(PCIE_Q, "        Pending                     : No", "        Pending                     : Yes")
    row = rows(smi)[health.RETIRED]
    assert row.state == "broken" and "pending retirement" in row.evidence and "reboot" in row.fix
    # edited: Double Bit ECC 0 -> 64 retired pages (the guide's limit)
    smi = edited(PCIE_Q, "        Double Bit ECC              : 0", "        Double Bit ECC              : 64")
    row = rows(smi)[health.RETIRED]
    assert row.state == "broken" and "64 retired pages" in row.evidence
    # a few retired pages without a pending one are reported, not failed
    smi = edited(PCIE_Q, "        Single Bit ECC              : 0", "        Single Bit ECC              : 2")
    row = rows(smi)[health.RETIRED]
    assert row.state == "ok" and "retired 2 single-bit" in row.evidence


def test_newer_driver_retirement_field_name():
    # drivers after 418 print "Pending Page Blacklist" for "Pending": edited in, set to Yes
    smi = edited(PCIE_Q, "        Pending                     : No", "        Pending Page Blacklist      : Yes")
    assert rows(smi)[health.RETIRED].state == "broken"


def test_nvlink_inactive_links_are_broken():
    smi = PCIE_Q.replace("Tesla V100-PCIE-32GB", "Tesla V100-SXM2-32GB")
    up = "GPU 0: Tesla V100-SXM2-32GB\n" + NVLINK_UP.split("GPU 7")[0].split("\n", 1)[1]
    assert rows(smi, up)[health.NVLINK].state == "ok" and "6 of 6 links up" in rows(smi, up)[health.NVLINK].evidence
    # the Azure report's GPU 3, renumbered to GPU 0 (the only GPU of this log)
    down = NVLINK_DOWN.replace("GPU 3:", "GPU 0:")
    row = rows(smi, down)[health.NVLINK]
    assert row.state == "broken" and "links 3, 5 inactive" in row.evidence and row.fix


@pytest.mark.parametrize("reason", ["HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown",
                                    "SW Thermal Slowdown"])
def test_fault_throttle_reasons_are_broken(reason):
    # edited: that one reason Not Active -> Active
    m = re.search(rf"^( +{reason} +: )Not Active$", PCIE_Q, re.M)
    smi = PCIE_Q[:m.start()] + m.group(1) + "Active" + PCIE_Q[m.end():]
    row = rows(smi)[health.THROTTLE]
    assert row.state == "broken" and f"{reason}" in row.evidence and "cooling" in row.fix


def test_power_cap_and_idle_are_reported_not_failed():
    smi = edited(PCIE_Q, "        SW Power Cap                : Not Active", "        SW Power Cap                : Active")
    row = rows(smi)[health.THROTTLE]
    assert row.state == "ok" and "SW Power Cap" in row.evidence
    assert rows(SXM2_Q)[health.THROTTLE].state == "ok"  # real: Idle active


def test_newer_driver_event_reasons_heading():
    # drivers from R535 print "Clocks Event Reasons" (clocks_event_reasons.* in the 590 capture): heading edited
    smi = edited(PCIE_Q, "    Clocks Throttle Reasons\n", "    Clocks Event Reasons\n")
    smi = edited(smi, "            HW Thermal Slowdown     : Not Active", "            HW Thermal Slowdown     : Active")
    row = rows(smi)[health.THROTTLE]
    assert row.state == "broken" and "HW Thermal Slowdown" in row.evidence


def test_temperature_at_the_slowdown_threshold_is_broken():
    # edited: GPU Current Temp 40 C -> 88 C (the card's slowdown is 87 C, shutdown 90 C)
    smi = edited(PCIE_Q, "GPU Current Temp            : 40 C", "GPU Current Temp            : 88 C")
    row = rows(smi)[health.TEMPERATURE]
    assert row.state == "broken" and "88 C (slowdown 87 C, shutdown 90 C)" in row.evidence and "airflow" in row.fix


def test_two_gpus_one_row_each_check_naming_the_bad_one():
    two = PCIE_Q + edited(SXM2_Q.split("Attached GPUs                       : 4\n")[1],
                          "GPU Current Temp            : 38 C", "GPU Current Temp            : 90 C")
    got = rows(two)
    row = got[health.TEMPERATURE]
    assert row.state == "broken" and row.evidence == "GPU 1: 90 C (slowdown 87 C, shutdown 90 C)"
    assert "GPU 1 (00000004:04:00.0) runs x2 of x16" in got[health.PCIE].evidence
    assert "GPU 0" not in got[health.PCIE].evidence.split(";")[0]


def test_no_gpu_skips_every_row_saying_why():
    got = health.hardware_rows([], gpus_visible=False)
    assert [r.state for r in got] == ["skipped"] * 6 and all("no GPU" in r.evidence for r in got)
    got = health.hardware_rows([], gpus_visible=True)
    assert all(r.state == "skipped" and "no GPU block" in r.evidence for r in got)


def test_a_missing_section_is_reported_not_guessed():
    (g,) = parse_smi_q("GPU 00000000:18:00.0\n    Product Name : Tesla V100-PCIE-32GB\n")
    r = {x.check: x for x in health.hardware_rows([g])}
    assert "link not reported" in r[health.PCIE].evidence and "thresholds not reported" in r[health.TEMPERATURE].evidence
    assert copy.deepcopy(g)["retired"] is None


def test_newer_drivers_temperature_margins():
    """Hopper's nvidia-smi prints margins ("GPU T.Limit Temp") where the V100's prints thresholds. The layout is
    written here in -q form from two public readings: the H200 capture's temperature.gpu 52 with
    temperature.gpu.tlimit 35 (tests/data/nvidia_smi_captures.txt) and the H100's slowdown margin of -2 C
    (NVIDIA/NVSentinel pull request 1371); the shutdown margin -5 C is not from a log, and only shown."""
    block = ("GPU 00000000:83:00.0\n    Product Name : NVIDIA H200\n    Temperature\n"
             "        GPU Current Temp : 52 C\n        GPU T.Limit Temp : {t} C\n"
             "        GPU Shutdown T.Limit Temp : -5 C\n        GPU Slowdown T.Limit Temp : -2 C\n")
    row = rows(block.format(t=35))[health.TEMPERATURE]
    assert row.state == "ok" and "52 C, 35 C below its limit (T.Limit; slows down at -2 C" in row.evidence
    assert rows(block.format(t=-2))[health.TEMPERATURE].state == "broken"


def test_the_real_h200_reads_healthy_on_every_row():
    """The lent NVIDIA H200 itself (tools/gpu/monitoring/go.sh, 2026-12-02, driver 580.159.04): the GpuHardware
    fact's own command output, stored whole in tests/data/nvidia_smi_h200_q.txt (its serial number left out). The
    expected values are read off that text: PCIe "Max : 5 / Current : 5", "16x / 16x", ECC Enabled with 0
    uncorrectable, Remapped Rows 0, no NVLink listed (a PCIe card), Idle the only clock event reason, and Hopper's
    margins instead of thresholds ("GPU T.Limit Temp : 51 C", slowdown at -2 C, shutdown at -8 C)."""
    text = (DATA.parent / "nvidia_smi_h200_q.txt").read_text()
    [g] = GpuHardware().process(text.splitlines())
    assert (g["name"], g["pcie_gen"], g["pcie_width"]) == ("NVIDIA H200", (5, 5), (16, 16))
    assert g["ecc_mode"] == ("Enabled", "Enabled") and g["ecc_uncorrected"] == {"volatile": 0, "aggregate": 0}
    assert g["retired"] is None and g["remapped"]["uncorrectable"] == 0 and g["nvlink"] == []
    assert [r for r, on in g["throttle"].items() if on] == ["Idle"]
    assert (g["temp"]["tlimit"], g["temp"]["slowdown_tlimit"], g["temp"]["shutdown_tlimit"]) == (51, -2, -8)
    got = {r.check: r for r in health.hardware_rows([g])}
    assert len(got) == 6 and {r.state for r in got.values()} == {"ok"}, got
    assert "51 C below its limit" in got["GPU temperature below the slowdown threshold"].evidence
