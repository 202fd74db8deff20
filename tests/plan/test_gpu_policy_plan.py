"""Plan-level tests of the GPU policy (pyinfra's facts in, commands and uploads out; nothing runs on a GPU): a fake
Debian 13 box with one Tesla V100-PCIE-32GB answers nvidia-smi -q as Microway's real one printed it (100..250 W,
supported clocks 877 MHz with 135..1380 MHz: tests/data/nvidia_smi_v100.txt). Settings out of the card's range are
refused before any command; within it, the oneshot unit applies them at boot and now; a second run on the host the
first left (harness.converged, the card now at the policy) changes nothing."""

from __future__ import annotations

import json
import re

import pytest

from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, converged, plan_uploads_raw
from tests.unit.test_doctor_hardware import PCIE_Q, edited, section

UNIT = "v100kit-gpu-policy.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
SMI_Q = (PCIE_Q + section("v100-pcie-supported-clocks")).splitlines()
#: the NvidiaGpus fact's answer for the same card (its --query-gpu row: index, uuid, name, compute_cap, memory
#: total/used/free MiB, persistence mode, driver)
GPU = {"nvidia-smi --query-gpu": ["0, GPU-4965xxxx-79e3-7941-12cb-1dfe9c53xxxx, Tesla V100-PCIE-32GB, 7.0, 32480, "
                                  "0, 32480, Enabled, 550.163.01", "#apps", "#units"]}
RUNNING = {f"--property SubState {UNIT}": [f"Id={UNIT}", "SubState=exited"],
           f"--property UnitFileState {UNIT}": [f"Id={UNIT}", "UnitFileState=enabled"]}


def plan(data: dict, smi_q: list[str] = SMI_Q, more: dict | None = None, stops_early: bool = False):
    return plan_uploads_raw(DEBIAN_13, data, {**GPU, "nvidia-smi -q -d POWER": smi_q, **(more or {})},
                            stops_early=stops_early)


def ours(cmds: list[str]) -> list[str]:
    """The commands that change something about the policy: its unit's systemctl calls and removal, nvidia-smi
    setting a card, a reboot (the facts' read-only commands left out)."""
    return [str(c) for c in map(str, cmds) if (c.startswith(("systemctl", "rm -f")) and UNIT in c)
            or re.search(r"nvidia-smi -(pl|ac|c|e) ", c) or re.match(r"^(reboot|shutdown -r)", c)]


def test_default_settings_leave_the_cards_alone():
    cmds, uploads = plan({})
    assert UNIT_PATH not in uploads and ours(cmds) == []


def test_out_of_range_is_refused_before_any_command():
    with pytest.raises(SettingsError) as e:
        plan({"gpu_policy_power_limit_w": 300, "gpu_policy_application_clocks": "877,1530"})
    text = str(e.value)
    assert "gpu_policy_power_limit_w = 300.0: GPU 0 (Tesla V100-PCIE-32GB) allows 100..250 W" in text
    assert "gpu_policy_application_clocks = '877,1530'" in text and "135..1380 MHz" in text


def test_policy_unit_applies_at_boot_and_now():
    cmds, uploads = plan({"gpu_policy_power_limit_w": 200, "gpu_policy_application_clocks": "877,1380",
                          "gpu_policy_compute_mode": "EXCLUSIVE_PROCESS"})
    unit = uploads[UNIT_PATH].decode()
    assert ("ExecStart=/usr/bin/nvidia-smi -pl 200\nExecStart=/usr/bin/nvidia-smi -ac 877,1380\n"
            "ExecStart=/usr/bin/nvidia-smi -c EXCLUSIVE_PROCESS\n") in unit
    assert "Type=oneshot" in unit and "After=nvidia-persistenced.service" in unit and "WantedBy=multi-user.target" in unit
    assert any(c.startswith(f"systemctl start {UNIT}") or c == f"systemctl restart {UNIT}" for c in ours(cmds))
    assert any("systemctl enable" in c and UNIT in c for c in ours(cmds))
    assert not any(c.startswith("reboot") for c in ours(cmds))


def test_second_run_changes_nothing():
    data = {"gpu_policy_power_limit_w": 200, "gpu_policy_application_clocks": "877,1380"}
    cmds, uploads = plan(data)
    # the card as the unit left it: power limit 200 W, application clocks 877,1380 (the real log, those two edited)
    now = edited("\n".join(SMI_Q), "        Power Limit                 : 250.00 W",
                 "        Power Limit                 : 200.00 W")
    now = edited(now, "    Applications Clocks\n        Graphics                    : 1230 MHz",
                 "    Applications Clocks\n        Graphics                    : 1380 MHz")
    again, uploads2 = plan(data, now.splitlines(), {**converged(cmds, uploads), **RUNNING})
    assert ours(again) == [], ours(again)


def test_a_card_changed_by_hand_is_set_again():
    data = {"gpu_policy_power_limit_w": 200}
    cmds, uploads = plan(data)
    # the unit in place, but the card back at 250 W (someone ran nvidia-smi -pl 250): the real, unedited log
    again, _ = plan(data, SMI_Q, {**converged(cmds, uploads), **RUNNING})
    assert ours(again) == [f"systemctl restart {UNIT}"]


def test_ecc_change_says_reboot_unless_allowed():
    cmds, uploads = plan({"gpu_policy_ecc": False})
    assert b"ExecStart=/usr/bin/nvidia-smi -e 0" in uploads[UNIT_PATH]
    assert not any(c.startswith("reboot") or "shutdown -r" in c for c in map(str, cmds))
    cmds, _ = plan({"gpu_policy_ecc": False, "gpu_policy_reboot": True}, stops_early=True)
    assert any("reboot" in str(c) for c in cmds)


def test_no_gpu_visible_installs_nothing():
    cmds, uploads = plan_uploads_raw(DEBIAN_13, {"gpu_policy_power_limit_w": 200})
    assert UNIT_PATH not in uploads and ours(cmds) == []


def test_unsetting_removes_an_earlier_unit():
    cmds, uploads = plan({"gpu_policy_power_limit_w": 200})
    again, _ = plan({}, SMI_Q, {**converged(cmds, uploads), **RUNNING})
    assert f"rm -f {UNIT_PATH}" in again and any("systemctl stop" in c and UNIT in c for c in ours(again))


TINY = {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64}


def test_exclusive_process_with_two_instances_on_one_gpu_is_refused_before_any_command():
    # one process's context per GPU (the CUDA driver API's CUcomputemode): the second llama-server on GPU 0 would
    # fail at its CUDA initialisation, after the deploy had changed the host
    two = {"llama_cpp_instances": {"a": {**TINY, "port": 8081}, "b": {**TINY, "port": 8082}}}
    with pytest.raises(SettingsError) as e:
        plan({"gpu_policy_compute_mode": "EXCLUSIVE_PROCESS", **two})
    text = str(e.value)
    assert "gpu_policy_compute_mode = 'EXCLUSIVE_PROCESS'" in text and "llama-server@a and llama-server@b" in text
    assert "GPU 0" in text
    cmds, _ = plan({"gpu_policy_compute_mode": "DEFAULT", **two}, stops_early=True)
    assert any("llama-server@b" in c for c in cmds)  # under DEFAULT the same instances pass preflight and deploy


def test_prohibited_with_an_instance_on_the_gpu_is_refused():
    with pytest.raises(SettingsError) as e:
        plan({"gpu_policy_compute_mode": "PROHIBITED", "llama_cpp_instances": {"a": {**TINY, "port": 8081}}})
    assert "gpu_policy_compute_mode = 'PROHIBITED'" in str(e.value) and "llama-server@a" in str(e.value)


@pytest.mark.parametrize("gpu", [True, False])
def test_the_plan_shows_the_policy_and_says_when_it_is_not_applied(gpu):
    """`v100kit plan` (read-only preflight of a fake host) shows the policy, the change on the card (its nvidia-smi
    -q says 250 W), or without a visible GPU that it is neither checked against a card nor applied (before, plan
    said nothing of the policy either way)."""
    from tests.plan.harness import preflight_cluster
    from v100kit.plan import summarize, table

    responses = {**GPU, "nvidia-smi -q -d POWER": SMI_Q} if gpu else {}
    node, plan_ = preflight_cluster({"box": (DEBIAN_13, {"gpu_policy_power_limit_w": 200}, responses)}, {}, "box")
    out = summarize(node, plan_)
    line = next(x for x in table({"box": out}).splitlines() if x.startswith("   GPU policy:"))
    assert line.startswith("   GPU policy: power limit 200 W, "), line
    if gpu:
        assert out["gpu_policy"]["applied"] and "GPU 0 (Tesla V100-PCIE-32GB) power limit 250 W -> 200 W" in line
    else:
        assert not out["gpu_policy"]["applied"] and "NOT APPLIED: no GPU visible" in line
    assert json.loads(json.dumps(out))["gpu_policy"] == out["gpu_policy"]  # --json carries it as it is


def test_exclusive_process_beside_a_process_outside_v100kit_is_refused_even_with_allow_gpu_in_use():
    # allow_gpu_in_use leaves the outside process's memory out of the plan; its CUDA context still takes the one an
    # EXCLUSIVE_PROCESS GPU allows (nvidia-smi lists PID 4242 on GPU 0 here)
    busy = {"nvidia-smi --query-gpu": [GPU["nvidia-smi --query-gpu"][0].replace(", 0, 32480, Enabled",
                                                                              ", 900, 31580, Enabled"),
                                       "#apps", "GPU-4965xxxx-79e3-7941-12cb-1dfe9c53xxxx, 4242, 890, python3",
                                       "#units"]}
    data = {"gpu_policy_compute_mode": "EXCLUSIVE_PROCESS",
            "llama_cpp_instances": {"a": {**TINY, "port": 8081, "allow_gpu_in_use": True}}}
    with pytest.raises(SettingsError) as e:
        plan_uploads_raw(DEBIAN_13, data, {**busy, "nvidia-smi -q -d POWER": SMI_Q})
    assert "llama-server@a beside a process outside v100kit use GPU 0" in str(e.value), str(e.value)
    assert "stop the process outside v100kit" in str(e.value)
