"""A host without systemd as PID 1 is refused in the preflight, naming why and the fix, instead of a raw pyinfra
"could not load fact: systemd.SystemdStatus" halfway through the plan (a new user's try found it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roles.facts import HostTraits
from roles.preflight import ROOT, init_problems

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
WHY = ("PID 1 is not systemd (no /run/systemd/system): the services, the swapfile and the boot-time settings are "
       "systemd units")


def test_the_fact_reads_the_sd_booted_test():
    # sd_booted(3): "checks whether the directory /run/systemd/system/ exists"
    assert HostTraits().process(["virt=docker", "systemd=0"])["systemd"] is False
    assert HostTraits().process(["virt=none", "systemd=1"])["systemd"] is True
    assert "test -d /run/systemd/system" in HostTraits().command()


def test_only_a_host_without_systemd_is_refused():
    assert init_problems({"virt": "none", "systemd": True}) == []
    assert init_problems({"virt": "docker", "systemd": False}) == [
        f"host = 'docker without systemd': {WHY}. Fix: deploy to a host booted with systemd (a container needs "
        "systemd as its init)"]


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="this machine runs systemd: nothing to refuse")
def test_this_machine_without_systemd_is_refused_by_a_dry_deploy():
    res = subprocess.run([PYINFRA, "-y", "--dry", "@local", "deploy.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and WHY in out, out[-2000:]
