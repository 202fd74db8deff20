"""The doctor's GPU checks, unchanged, against a fake GPU host answering with recorded outputs: the loaded
module's /proc/driver/nvidia/version, nvidia-smi, and kernel log lines with Xid errors."""

from tests.plan.harness import UBUNTU_2204, doctor_rows
from tests.unit.test_doctor_facts import KERNEL_LOG, PROC_PROPRIETARY

SMI = ["0, Tesla V100-SXM2-16GB, 7.0, 16160, Disabled, 535.261.03",
       "1, Tesla V100-SXM2-16GB, 7.0, 16160, Enabled, 535.261.03"]


def test_doctor_flags_library_mismatch_xid79_and_persistence_off():
    rows = doctor_rows(UBUNTU_2204, responses={
        "cat /proc/driver/nvidia/version": PROC_PROPRIETARY.splitlines(),  # 535 loaded, 580 pinned
        "nvidia-smi --query-gpu": SMI,
        "NVRM: Xid": KERNEL_LOG[1:3],
    })
    assert rows["loaded module matches the userland"].state == "broken"
    assert "Driver/library version mismatch" in rows["loaded module matches the userland"].evidence
    assert rows["no serious Xid errors this boot"].state == "broken" and "79" in rows[
        "no serious Xid errors this boot"].evidence
    assert rows["persistence mode on"].state == "broken" and "[0]" in rows["persistence mode on"].evidence


def test_doctor_skips_gpu_checks_without_gpu_saying_why():
    rows = doctor_rows(UBUNTU_2204)
    for check in ("loaded module matches the userland", "persistence mode on", "no serious Xid errors this boot"):
        assert rows[check].state == "skipped" and rows[check].evidence
