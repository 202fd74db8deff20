"""README promises that no test checked before (docs/promises.md lists every promise with its test): the
`REBOOT REQUIRED` warning, the refusal of an unsupported OS, the unattended-upgrades blacklist as the fake host
would receive it, and the doctor's exit status."""

from __future__ import annotations

import argparse
import logging
import re

import pytest

from roles.doctor.checks import Row
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, UBUNTU_2204, plan_commands, plan_uploads
from v100kit import doctor
from v100kit.hosts import HostFailure

#: a bare-metal box whose nouveau module is loaded (HostTraits, tests/plan/harness.py BARE_METAL's form)
NOUVEAU_LOADED = ["virt=none", "kernel=6.8.0-45-generic", "sysctl_writable=1", "thp_writable=1", "modules_dir=1",
                  "nouveau_loaded=1", "thp_mode=madvise"]


def test_driver_install_over_loaded_nouveau_prints_reboot_required(caplog):
    """README: a deploy that installs the driver where nouveau is loaded prints `REBOOT REQUIRED`; a box with
    nothing loaded gets the module loaded instead and no such warning."""
    caplog.set_level(logging.INFO, logger="pyinfra")
    plan_commands(UBUNTU_2204, responses={"systemd-detect-virt": NOUVEAU_LOADED})
    assert "REBOOT REQUIRED" in caplog.text
    caplog.clear()
    plan_commands(UBUNTU_2204)
    assert caplog.records and "REBOOT REQUIRED" not in caplog.text


@pytest.mark.parametrize("os_release", [
    ['PRETTY_NAME="Ubuntu 20.04.6 LTS"', 'ID=ubuntu', 'VERSION_ID="20.04"'],
    ['PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"', 'ID=debian', 'VERSION_ID="11"'],
    ['PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"', 'ID="rocky"', 'VERSION_ID="9.4"'],
], ids=["ubuntu2004", "debian11", "rocky9"])
def test_unsupported_os_refused_before_any_command(os_release):
    """README: supported are Debian 12, Debian 13, Ubuntu 22.04, Ubuntu 24.04; anything else is refused by the
    preflight, naming the OS, before a single operation."""
    with pytest.raises(SettingsError) as e:
        plan_commands(os_release)
    assert "is not supported" in str(e.value) and os_release[0].split('"')[1] in str(e.value)


def test_unattended_upgrades_blacklist_covers_the_driver_packages():
    """README: the driver is excluded from unattended-upgrades. Its Package-Blacklist entries are regular expressions
    that unattended-upgrades matches against package names (re.match in its is_pkgname_in_blacklist); each binary
    package of Debian 13's nvidia-graphics-drivers 550.163.01 that a compute install pulls in (docs/lab.md
    §Machine) must match one, and an unrelated package none."""
    _, files = plan_uploads(DEBIAN_13, {}, stops_early=True)
    conf = files["/etc/apt/apt.conf.d/51v100kit-unattended-upgrades"]
    body = conf[conf.index("Unattended-Upgrade::Package-Blacklist"):]
    patterns = re.findall(r'^\s*"([^"]+)";', body, re.M)
    assert patterns, conf
    for name in ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-kernel-support"):
        assert any(re.match(p, name) for p in patterns), (name, patterns)
    assert not any(re.match(p, "openssh-server") for p in patterns)


@pytest.mark.parametrize("results, status", [
    ({"a": [Row("x", "ok", "seen")], "b": [Row("y", "skipped", "no GPU visible")]}, 0),
    ({"a": [Row("x", "ok", "seen"), Row("y", "broken", "missing", "run repair.py")]}, 1),
    ({"a": [Row("x", "ok", "seen")], "b": HostFailure("refused", "invalid settings", ("a = 1: no. Fix: 2",))}, 1),
    ({"a": [Row("x", "broken", "missing", "fix")], "b": HostFailure("unreachable", "Could not connect")}, 2),
], ids=["ok-and-skipped", "broken", "refused", "not-diagnosed"])
def test_doctor_exit_status(monkeypatch, capsys, results, status):
    """README: `v100kit doctor` exits 1 when anything is broken (its docstring: 0 all ok or skipped, 1 also for a
    host whose settings are refused, 2 a host that cannot be diagnosed)."""
    monkeypatch.setattr(doctor, "diagnose_all", lambda inventory, limit: results)
    assert doctor.run(argparse.Namespace(inventory="inventory/example.py", limit=None, json=False)) == status
    assert "== a" in capsys.readouterr().out
