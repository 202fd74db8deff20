"""The lab refuses to start hosts the disk cannot hold, before it starts any (lab/harness.py Lab.check_disk):
free space as os.statvfs reports it for the state directory's disk, hosts already created not counted."""

from __future__ import annotations

import os

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


def test_a_host_already_created_needs_no_more_room(tmp_path):
    lab = Lab(tmp_path / "state", tmp_path / "cache")
    for s in HOSTS:
        lab.host_dir(s).mkdir(parents=True)
        (lab.host_dir(s) / "created").touch()
    lab.check_disk(HOSTS, free_gib(tmp_path) * 10)
