"""The lab refuses to start hosts the disk cannot hold, before it starts any (lab/harness.py Lab.check_disk):
free space as os.statvfs reports it for the state directory's disk, less what each host's directory already holds
(as `du` measures it: a host created but never deployed still needs almost all)."""

from __future__ import annotations

import os
import shutil

import pytest

from lab.harness import HOSTS, Lab, LabError


def free_gib(path) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / 2**30


def test_hosts_the_disk_cannot_hold_are_refused_naming_them_and_the_fix(tmp_path):
    lab = Lab(tmp_path / "state", tmp_path / "cache")  # neither exists yet: the disk of their parent counts
    too_much = free_gib(tmp_path) / len(HOSTS) + 1
    with pytest.raises(LabError, match=rf"GiB free on the disk of {tmp_path}; starting {HOSTS[0].name}, "
                                       rf"{HOSTS[1].name} needs about .*Fix: `v100kit lab destroy`"):
        lab.check_disk(HOSTS, too_much)
    lab.check_disk(HOSTS, free_gib(tmp_path) / len(HOSTS) * 0.5)  # room for both: no error (half: a lab
    # run may be writing to this disk meanwhile)


def test_a_host_created_but_never_deployed_still_needs_room(tmp_path):
    lab = Lab(tmp_path / "state", tmp_path / "cache")
    for s in HOSTS:
        lab.host_dir(s).mkdir(parents=True)
        (lab.host_dir(s) / "created").touch()
    with pytest.raises(LabError, match=rf"starting {HOSTS[0].name}, {HOSTS[1].name} needs about"):
        lab.check_disk(HOSTS, free_gib(tmp_path) / len(HOSTS) + 1)


def test_what_a_host_holds_already_is_not_needed_again(tmp_path, monkeypatch):
    """The free space is fixed at 20 MiB here (a lab run elsewhere on this disk would move the real figure by
    more than the megabytes this test writes); what each host holds is measured for real by du."""
    mib = 1 / 1024
    lab = Lab(tmp_path / "state", tmp_path / "cache")
    held, empty = HOSTS[0], HOSTS[1]
    lab.host_dir(held).mkdir(parents=True)
    (lab.host_dir(held) / "rootfs.img").write_bytes(os.urandom(14 << 20))  # 14 MiB of blocks
    lab.host_dir(empty).mkdir(parents=True)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1 << 40, 0, 20 << 20))
    lab.check_disk((held, empty), 16 * mib)  # needs 2 + 16 MiB of the 20
    with pytest.raises(LabError, match=rf"starting {empty.name} needs about"):
        lab.check_disk((empty,), 21 * mib)
    with pytest.raises(LabError, match=rf"starting {held.name}, {empty.name} needs about"):
        lab.check_disk((held, empty), 18 * mib)  # 4 + 18 MiB
