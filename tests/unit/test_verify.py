"""`v100kit verify` (v100kit/verify): the read-only guard, how a pyinfra host becomes a testinfra URL, and the suite
run against this machine through pyinfra's @local, where no GPU and (on the development machine) no systemd is:
those checks must skip with their reason, never pass."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import testinfra

from v100kit.verify import expect
from v100kit.verify.readonly import NotReadOnly, check, guard

ROOT = Path(__file__).resolve().parents[2]

#: commands the suite and testinfra's modules send (testinfra/modules/file.py, package.py, service.py)
READS = [
    "test -d /run/systemd/system", "command -v dpkg-query", "dpkg-query -W -f '${Status} ${Version}' nvidia-smi",
    "apt-mark showhold", "apt-cache policy libcuda1", "systemctl is-enabled nvidia-persistenced.service",
    "cat /sys/module/nvidia/version", "nvidia-smi --query-gpu=index,compute_cap --format=csv,noheader,nounits",
    "grep -H . /sys/bus/pci/devices/*/vendor /sys/bus/pci/devices/*/class 2>/dev/null",
    "/usr/local/cuda-12.4/bin/nvcc --version", "getent passwd llm", "stat -c '%U %a' /etc/vllm/t.key.env",
    "curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://127.0.0.1:8080/health", "stat -Lc %a /x",
    "systemctl list-unit-files | grep -q \"^nvidia\"",
]
#: commands that change a host (each must be refused before it is sent)
WRITES = [
    "rm -f /etc/vllm/t.env", "systemctl restart vllm@t", "systemctl start llama-server@t", "apt-get install -y x",
    "apt-mark unhold libcuda1", "dkms remove nvidia/550", "nvidia-smi -pm 1", "cat /etc/passwd > /tmp/x",
    "echo x >> /etc/fstab", "cat /x | tee /y", "curl -X POST http://127.0.0.1:8080/slots",
    "curl -o /tmp/f http://x/", "sudo modprobe nvidia", "test -d / && reboot",
]


@pytest.mark.parametrize("command", READS)
def test_guard_lets_reads_through(command):
    check(command)


@pytest.mark.parametrize("command", WRITES)
def test_guard_refuses_writes(command):
    with pytest.raises(NotReadOnly):
        check(command)


def test_guard_sits_under_testinfra_modules(tmp_path):
    """testinfra's modules and host.run both reach the guard: a write is refused before it runs."""
    host = guard(testinfra.get_host("local://"))
    marker = tmp_path / "made"
    with pytest.raises(NotReadOnly):
        host.run(f"touch {marker}")
    assert not marker.exists()
    assert host.file(str(tmp_path)).is_directory  # a module's read (test -d) goes through


def test_testinfra_url_from_pyinfra_host_data():
    assert expect.testinfra_url("@local", {}) == "local://"
    assert expect.testinfra_url("lab-trixie", {"ssh_hostname": "127.0.0.1", "ssh_port": 2202, "ssh_user": "root",
                                        "ssh_key": "/var/lib/v100kit-lab/id_ed25519"}) == \
        "paramiko://root@127.0.0.1:2202?ssh_identity_file=%2Fvar%2Flib%2Fv100kit-lab%2Fid_ed25519"
    # the README's inventory: an admin user with passwordless sudo
    assert expect.testinfra_url("gpu-01.lab.example", {"ssh_user": "admin", "_sudo": True}) == \
        "paramiko://admin@gpu-01.lab.example:22?sudo=true"


GPU_CHECKS = {"test_driver_module_loaded_at_the_pinned_version", "test_nvidia_smi_sees_every_gpu_on_the_bus",
              "test_compute_capability_is_the_configured_one", "test_persistence_mode_on",
              "test_vllm_instances_answer_health", "test_lmdeploy_instances_answer_health"}


def test_suite_against_this_machine_skips_what_it_cannot_see_and_says_why(tmp_path):
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0:
        pytest.skip("a GPU answers nvidia-smi here: the GPU checks run instead of skipping")
    inventory = tmp_path / "inventory.py"
    inventory.write_text('debian12 = [("@local", {})]\n')
    xml = tmp_path / "verify.xml"
    res = subprocess.run([sys.executable, "-m", "v100kit.cli", "verify", str(inventory), "--junitxml", str(xml)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert xml.exists(), res.stdout[-3000:] + res.stderr[-2000:]
    cases = {c.get("name").split("[")[0]: c for c in ET.parse(xml).getroot().iter("testcase")}
    if "this host cannot be checked" in res.stdout:
        pytest.skip(f"the preflight refuses this machine: {res.stdout[-500:]}")
    assert GPU_CHECKS | {"test_nvidia_persistenced_enabled", "test_each_toolkit_nvcc_reports_its_version"} <= set(cases)
    for name in GPU_CHECKS:
        skip = cases[name].find("skipped")
        assert skip is not None and "no GPU visible" in skip.get("message"), name
    systemd = Path("/run/systemd/system").is_dir()
    skip = cases["test_nvidia_persistenced_enabled"].find("skipped")
    assert (skip is None) == systemd  # run where systemd is, skipped with the reason where it is not
    if not systemd:
        assert "systemd is not running" in skip.get("message")
    # this machine was never provisioned: the checks that can look must fail, not pass
    assert cases["test_each_toolkit_nvcc_reports_its_version"].find("failure") is not None or \
        Path("/usr/bin/nvcc").exists()
    assert res.returncode == (1 if any(c.find("failure") is not None for c in cases.values()) else 0)
