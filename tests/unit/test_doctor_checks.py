"""Each of the doctor's checks called directly on DoctorFacts (fast: no host). A healthy host gives only ok rows;
each fault turns exactly its own check broken or skipped."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from roles.cuda.versions import Toolkit
from roles.doctor import checks
from roles.doctor.gather import DoctorFacts
from roles.doctor.hardware import gpu_health
from roles.nvidia_driver.decide import BLACKLIST, DriverPlan
from roles.nvidia_driver.versions import DriverPin
from roles.platform import SUPPORTED
from roles.preflight import HostPlan
from roles.settings import load_settings
from tests.unit.test_doctor_hardware import section

PIN = DriverPin("580.95.05", {"cuda-drivers-580": "580.95.05-1", "nvidia-dkms-580": "580.95.05-1"}, "nvidia")
TK = Toolkit("12.4", "nvidia", {"cuda-toolkit-12-4": "12.4.1-1"}, "/usr/local/cuda-12.4/bin/nvcc",
             "/usr/local/cuda-12.4", "g++-11")
class Plan(SimpleNamespace):
    """The parts of a HostPlan the checks read; its engines' plans in `engines` ({role: plan})."""
    engine_plans = HostPlan.engine_plans


PLAN = Plan(settings=load_settings("box", {}), platform=SUPPORTED["ubuntu2404"], driver=DriverPlan(PIN, "linux-headers-generic"), toolkits=[TK],
            engines={"llama_cpp": SimpleNamespace(prefix="/opt/llama.cpp/b1", instances=()),
                     "vllm": SimpleNamespace(venv="/v/0.9")}, ray=None)
PKG = {"version": "580.95.05-1", "source": "nvidia-graphics-drivers-580", "status": "ii"}
K = "6.8.0-45-generic"
HEALTHY = DoctorFacts(
    driver_packages={"cuda-drivers-580": PKG, "nvidia-dkms-580": PKG},
    traits={"virt": "none", "kernel": K, "sysctl_writable": True, "thp_writable": True, "modules_loadable": True,
            "nouveau_loaded": False, "thp_mode": "madvise"},
    loaded_module="580.95.05", loaded_flavour="proprietary",
    secure_boot={"state": "disabled", "source": "mokutil", "enrolled": [], "pending": [], "keys": []},
    source_entries=[], swap={"size": 8 * 1024**3, "fs": "ext2/ext3", "nocow": False, "record": {"/swapfile": "created"}},
    dpkg_audit=[], kernels={K: True},
    dkms=[{"module": "nvidia", "version": "580.95.05", "kernel": K, "state": "installed"}],
    headers_metapackage_installed=True, modprobe_config=["blacklist nouveau"], blacklist_file=True,
    initramfs_lacking=[], holds=["cuda-drivers-580", "nvidia-dkms-580"], pending_upgrades={}, unattended_open=[],
    runfile_markers=[], gpus=[{"index": 0, "name": "Tesla V100", "compute_cap": "7.0", "memory_mib": 16160,
                               "persistence_mode": True, "driver_version": "580.95.05"}],
    persistenced_enabled=True, persistenced_active=True, xids=[], nvcc_releases={"12.4": "12.4"},
    engines={"llama_cpp": {"current": "/opt/llama.cpp/b1", "gpus": True, "servers": {}},
             "vllm": {"current": "/v/0.9", "stamped": True}},
    hardware=gpu_health(section("v100-pcie-32gb-q")))  # a real V100's nvidia-smi -q (tests/data/nvidia_smi_v100.txt)


def rows(**changes) -> dict[str, checks.Row]:
    return {r.check: r for r in checks.diagnose(dataclasses.replace(HEALTHY, **changes), PLAN)}


def test_healthy_host_is_all_ok():
    got = rows()
    assert len(got) == 31 and {r.state for r in got.values()} == {"ok"}, got


OTHER = {"version": "535.274.02-1", "source": "nvidia-graphics-drivers-535", "status": "ii"}


@pytest.mark.parametrize("changes, check, state", [
    ({"driver_packages": {"cuda-drivers-580": PKG}}, "driver packages at the pinned versions", "broken"),
    ({"driver_packages": {**HEALTHY.driver_packages, "libnvidia-compute-535": OTHER}},
     "no other driver branch installed", "broken"),
    ({"driver_packages": {**HEALTHY.driver_packages, "libnvidia-compute-535": OTHER}},
     "one driver version among the packages", "broken"),
    ({"loaded_module": "535.274.02"}, "loaded module matches the userland", "broken"),
    ({"loaded_module": None}, "loaded module matches the userland", "skipped"),
    ({"dpkg_audit": ["half configured: nvidia-dkms-580"]}, "no half-installed packages", "broken"),
    ({"kernels": {K: True, "6.5.0-1-generic": False}}, "headers for every installed kernel", "broken"),
    ({"kernels": {K: True, "6.5.0-1-generic": True}}, "nvidia module built for every installed kernel", "broken"),
    ({"headers_metapackage_installed": False}, "headers metapackage installed", "broken"),
    ({"traits": {**HEALTHY.traits, "nouveau_loaded": True}}, "nouveau not loaded", "broken"),
    ({"blacklist_file": False}, "nouveau blacklisted", "broken"),
    ({"modprobe_config": []}, "nouveau blacklisted", "broken"),
    ({"initramfs_lacking": [K]}, "blacklist inside every initramfs", "broken"),
    ({"holds": ["cuda-drivers-580"]}, "driver packages held", "broken"),
    ({"pending_upgrades": {"nvidia-dkms-580": ("580.95.05-1", "580.105.08-1")}}, "driver packages held", "broken"),
    ({"unattended_open": ["nvidia-dkms-580"]}, "unattended-upgrades cannot touch the driver", "broken"),
    ({"unattended_open": None}, "unattended-upgrades cannot touch the driver", "skipped"),
    ({"runfile_markers": ["/usr/bin/nvidia-uninstall"]}, "no runfile installation mixed with packages", "broken"),
    ({"persistenced_enabled": False}, "nvidia-persistenced enabled", "broken"),
    ({"persistenced_active": False}, "nvidia-persistenced enabled", "broken"),
    ({"gpus": [{**HEALTHY.gpus[0], "persistence_mode": False}]}, "persistence mode on", "broken"),
    ({"gpus": []}, "persistence mode on", "skipped"),
    ({"xids": [{"pci": "0000:3b:00", "xid": 79, "text": "GPU has fallen off the bus."}]},
     "no serious Xid errors this boot", "broken"),
    ({"gpus": []}, "no serious Xid errors this boot", "skipped"),
    ({"gpus": []}, "GPU PCIe link at the card's maximum", "skipped"),
    ({"hardware": []}, "GPU temperature below the slowdown threshold", "skipped"),
    ({"nvcc_releases": {"12.4": None}}, "CUDA 12.4 nvcc", "broken"),
    ({"engines": {**HEALTHY.engines, "llama_cpp": {**HEALTHY.engines["llama_cpp"], "current": "/opt/llama.cpp/b0"}}},
     "llama.cpp build in use", "broken"),
    ({"engines": {**HEALTHY.engines, "vllm": {"current": "/v/0.9", "stamped": False}}}, "vLLM venv in use", "broken"),
    ({"engines": {**HEALTHY.engines, "vllm": {"current": "/v/0.8", "stamped": True}}}, "vLLM venv in use", "broken"),
])
def test_each_fault_turns_its_check(changes, check, state):
    got = rows(**changes)
    assert got[check].state == state, got[check]
    assert got[check].evidence and (state != "broken" or got[check].fix)


def test_gpu_memory_used_outside_v100kit_is_a_row_per_gpu_naming_pids():
    """The V100 of a public report (nvidia-smi: 31589MiB / 32768MiB used, PID 299381 python 31574MiB) with nothing
    of v100kit on it: broken, naming the MiB and the PID; the same memory held by v100kit's own unit: ok."""
    gpu = {**HEALTHY.gpus[0], "memory_mib": 32768, "memory_used_mib": 31589, "memory_free_mib": 1179,
           "processes": [{"pid": 299381, "name": "python", "used_mib": 31574, "unit": ""}]}
    row = rows(gpus=[gpu])["GPU 0 memory used by processes outside v100kit"]
    assert row.state == "broken" and "31589 MiB" in row.evidence and "299381 (python, 31574 MiB)" in row.evidence
    assert "kill 299381" in row.fix and "allow_gpu_in_use" in row.fix
    own = {**gpu, "processes": [{**gpu["processes"][0], "unit": "vllm@chat.service"}]}
    row = rows(gpus=[own])["GPU 0 memory used by processes outside v100kit"]
    assert row.state == "ok" and row.evidence == "15 MiB"  # 31589 - 31574: what no process accounts for
    assert "GPU 0 memory used by processes outside v100kit" not in rows(gpus=[])


def test_xid_that_is_not_serious_passes():
    # Xid 13 (graphics engine exception) is an application fault, not one of the NVIDIA Xid catalog's hardware ones.
    assert rows(xids=[{"pci": "0000:3b:00", "xid": 13, "text": "Graphics Exception"}])[
        "no serious Xid errors this boot"].state == "ok"


def test_no_rows_for_services_not_planned():
    plan = Plan(**{**vars(PLAN), "engines": {}, "toolkits": []})
    names = {r.check for r in checks.diagnose(HEALTHY, plan)}
    assert not {"llama.cpp build in use", "vLLM venv in use", "CUDA 12.4 nvcc"} & names


def test_blacklisted_names_the_file_when_broken():
    assert BLACKLIST in rows(blacklist_file=False)["nouveau blacklisted"].evidence


def test_as_dict():
    assert checks.as_dict([checks.ok("c", "e")]) == [{"check": "c", "state": "ok", "evidence": "e", "fix": ""}]


def test_an_lmdeploy_plan_gets_its_venv_row_through_the_registry():
    """LMDeploy's row comes from its own Engine.doctor (roles/lmdeploy/engine.py), not from the doctor's code."""
    venv = "/opt/lmdeploy/0.15.0-py3.13-0123abcd"
    plan = Plan(**{**vars(PLAN), "engines": {**PLAN.engines, "lmdeploy": SimpleNamespace(venv=venv)}})
    facts = dataclasses.replace(HEALTHY, engines={**HEALTHY.engines, "lmdeploy": {"current": venv, "stamped": True}})
    row = {r.check: r for r in checks.diagnose(facts, plan)}["LMDeploy venv in use"]
    assert row.state == "ok" and venv in row.evidence
    facts = dataclasses.replace(HEALTHY, engines={**HEALTHY.engines, "lmdeploy": {"current": None, "stamped": False}})
    row = {r.check: r for r in checks.diagnose(facts, plan)}["LMDeploy venv in use"]
    assert row.state == "broken" and "not installed and checked" in row.evidence and row.fix == "run deploy.py"
    assert "LMDeploy venv in use" not in {r.check for r in checks.diagnose(HEALTHY, PLAN)}
