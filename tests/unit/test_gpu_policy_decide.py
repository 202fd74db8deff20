"""The GPU policy's decisions (roles/gpu_policy/decide.py) against cards read from real V100 nvidia-smi output
(tests/data/nvidia_smi_v100.txt): Microway's Tesla V100-PCIE-32GB (100..250 W, supported clocks memory 877 MHz with
graphics 135..1380 MHz; the page omits 159 of the 167 graphics clocks, so only the listed ones count here) and
Princeton's Tesla V100-SXM2-32GB (150..300 W; its log has no SUPPORTED_CLOCKS section)."""

from __future__ import annotations

import pytest

from roles.gpu_policy import decide
from roles.gpu_policy.facts import GpuPolicyCards, cards_from_smi_q
from roles.settings import load_settings
from tests.unit.test_doctor_hardware import PCIE_Q, SXM2_Q, section

PCIE = cards_from_smi_q(PCIE_Q + section("v100-pcie-supported-clocks"))
SXM2 = cards_from_smi_q(SXM2_Q)


def settings(**kw):
    return load_settings("box", kw)


def test_cards_as_the_real_logs_print_them():
    (c,) = PCIE
    assert (c["name"], c["bus_id"], c["power_min_w"], c["power_max_w"], c["power_limit_w"]) == (
        "Tesla V100-PCIE-32GB", "00000000:18:00.0", 100.0, 250.0, 250.0)
    assert c["compute_mode"] == "DEFAULT" and c["ecc"] == (True, True) and c["app_clocks"] == (877, 1230)
    assert c["supported"] == {877: [1380, 1372, 1365, 1357, 157, 150, 142, 135]}
    (s,) = SXM2
    assert (s["power_min_w"], s["power_max_w"], s["power_limit_w"]) == (150.0, 300.0, 300.0)
    assert s["supported"] is None and s["app_clocks"] == (877, 1290)


def test_fact_reads_one_nvidia_smi_call():
    assert GpuPolicyCards().command() == "nvidia-smi -q -d POWER,CLOCK,COMPUTE,ECC,SUPPORTED_CLOCKS 2>/dev/null || true"
    assert GpuPolicyCards().process((PCIE_Q).splitlines())[0]["power_max_w"] == 250.0
    assert GpuPolicyCards().process(["No devices were found"]) == []


def test_nothing_set_means_no_plan_and_no_refusal():
    assert decide.plan(settings(), PCIE) == (None, [])
    assert not decide.wanted(settings(gpu_policy_reboot=True))


def test_no_gpu_visible_is_not_refused_and_applies_nothing():
    assert decide.plan(settings(gpu_policy_power_limit_w=200), []) == (None, [])


def test_power_limit_within_each_cards_range():
    p, problems = decide.plan(settings(gpu_policy_power_limit_w=200), PCIE)
    assert not problems and p.exec_lines == ["/usr/bin/nvidia-smi -pl 200"]
    assert p.differs == ["GPU 0 (Tesla V100-PCIE-32GB) power limit 250 W -> 200 W"]
    # the SXM2's 300 W is above the PCIe card's 250 W maximum: refused naming setting, value, range and fix
    _, problems = decide.plan(settings(gpu_policy_power_limit_w=300), PCIE)
    (line,) = problems
    assert line.startswith("gpu_policy_power_limit_w = 300.0: GPU 0 (Tesla V100-PCIE-32GB) allows 100..250 W")
    assert "Fix: set it within 100..250 W, or None to keep the card's 250 W" in line
    assert decide.plan(settings(gpu_policy_power_limit_w=300), SXM2)[1] == []
    assert "allows 150..300 W" in decide.plan(settings(gpu_policy_power_limit_w=100), SXM2)[1][0]


def test_application_clocks_among_the_supported_pairs():
    p, problems = decide.plan(settings(gpu_policy_application_clocks="877,1380"), PCIE)
    assert not problems and p.exec_lines == ["/usr/bin/nvidia-smi -ac 877,1380"]
    assert p.differs == ["GPU 0 (Tesla V100-PCIE-32GB) application clocks 877,1230 -> 877,1380"]
    # 1530 MHz is the SXM2's maximum, not the PCIe card's
    (line,) = decide.plan(settings(gpu_policy_application_clocks="877,1530"), PCIE)[1]
    assert "supports graphics clocks 135..1380 MHz with memory 877 MHz" in line and "'877,1380' (the nearest)" in line
    (line,) = decide.plan(settings(gpu_policy_application_clocks="850,1380"), PCIE)[1]
    assert "supports memory clocks [877] MHz only" in line and "'877,1380'" in line
    # the SXM2 log lists no supported clocks: refused rather than guessed
    (line,) = decide.plan(settings(gpu_policy_application_clocks="877,1380"), SXM2)[1]
    assert "lists no supported clocks" in line and line.startswith("gpu_policy_application_clocks = '877,1380'")


def test_compute_mode_and_ecc():
    p, _ = decide.plan(settings(gpu_policy_compute_mode="EXCLUSIVE_PROCESS", gpu_policy_ecc=True), PCIE)
    assert p.exec_lines == ["/usr/bin/nvidia-smi -c EXCLUSIVE_PROCESS", "/usr/bin/nvidia-smi -e 1"]
    assert p.ecc_reboot == [] and p.differs == ["GPU 0 (Tesla V100-PCIE-32GB) compute mode DEFAULT -> EXCLUSIVE_PROCESS"]
    p, _ = decide.plan(settings(gpu_policy_ecc=False, gpu_policy_reboot=True), PCIE)
    assert p.exec_lines == ["/usr/bin/nvidia-smi -e 0"] and p.ecc_reboot == [0] and p.reboot
    assert p.summary == "ECC off"


def test_ecc_on_a_card_without_ecc_is_refused():
    # the PCIe log edited: Ecc Mode Current/Pending Enabled -> N/A (what a card without ECC prints)
    text = PCIE_Q.replace("    Ecc Mode\n        Current                     : Enabled\n        Pending"
                          "                     : Enabled", "    Ecc Mode\n        Current                     : N/A\n"
                          "        Pending                     : N/A")
    (line,) = decide.plan(settings(gpu_policy_ecc=True), cards_from_smi_q(text))[1]
    assert "has no ECC mode" in line


def test_every_card_is_checked():
    both = PCIE + [{**SXM2[0], "index": 1}]
    _, problems = decide.plan(settings(gpu_policy_power_limit_w=280), both)
    assert len(problems) == 1 and "GPU 0 (Tesla V100-PCIE-32GB) allows 100..250 W" in problems[0]


@pytest.mark.parametrize("value", ["877-1380", "877,", "fast"])
def test_application_clocks_format_is_refused_by_the_settings(value):
    with pytest.raises(Exception, match="gpu_policy_application_clocks"):
        settings(gpu_policy_application_clocks=value)
