"""Doctor fact parsers on recorded outputs of what a container cannot produce (a loaded module, Xid lines)."""

from roles.doctor.facts import PendingUpgrades, module_version_from_proc, xid_events
from roles.nvidia_driver.facts import DkmsStatus

PROC_PROPRIETARY = """NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul  9 21:15:39 UTC 2025
GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)"""
PROC_OPEN = """NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024
GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"""
KERNEL_LOG = [
    "Nov 29 03:12:01 gpu-01 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-5a1c2e0f-8d3b-11ee-b962-0242ac120002",
    "Nov 29 03:12:01 gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.",
    "[ 8811.276543] NVRM: Xid (PCI:0000:86:00): 48, pid=2113, name=python3, An uncorrectable double bit error",
    "Nov 29 03:12:02 gpu-01 kernel: nvidia-nvlink: Unregistered Nvlink Core, major device number 234",
]


def test_module_version_from_proc():
    assert module_version_from_proc(PROC_PROPRIETARY) == "535.261.03"
    assert module_version_from_proc(PROC_OPEN) == "560.35.03"
    assert module_version_from_proc("") is None


def test_xid_events():
    events = xid_events(KERNEL_LOG)
    assert [(e["pci"], e["xid"]) for e in events] == [("0000:3b:00", 79), ("0000:86:00", 48)]
    assert events[0]["text"].endswith("GPU has fallen off the bus.")


def test_pending_upgrades():
    out = ["Inst libnvidia-ml1 [550.163.01-2] (550.163.01-99 fake:local [amd64])",
           "Inst passwd [1:4.17.4-2] (1:4.17.4-2+deb13u1 Debian-Security:13/stable-security [amd64])"]
    assert PendingUpgrades().process(out) == {"libnvidia-ml1": ("550.163.01-2", "550.163.01-99"),
                                              "passwd": ("1:4.17.4-2", "1:4.17.4-2+deb13u1")}


def test_dkms_status_formats():
    rows = DkmsStatus().process([
        "nvidia-current/550.163.01, 6.12.118+deb13-amd64, x86_64: installed",
        "nvidia-current/550.163.01: added",
        "nvidia, 535.104.05, 5.15.0-88-generic, x86_64: installed",  # dkms 2.x
    ])
    assert rows[0] == {"module": "nvidia-current", "version": "550.163.01", "kernel": "6.12.118+deb13-amd64",
                       "state": "installed"}
    assert rows[1]["kernel"] is None and rows[1]["state"] == "added"
    assert rows[2]["module"] == "nvidia" and rows[2]["kernel"] == "5.15.0-88-generic"
