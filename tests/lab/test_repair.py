"""Doctor and repair on a real lab host broken on purpose in every way a container allows. What a container
cannot reproduce (a loaded module's version, Xid lines) is covered by tests/plan/test_doctor_gpu_host.py."""

from __future__ import annotations

import hashlib
import subprocess
import textwrap
from pathlib import Path

import pytest

from lab.harness import spec
from v100kit.doctor import diagnose_all as doctor
from roles.llama_cpp.versions import DEFAULT_SOURCE
from roles.nvidia_driver.decide import BLACKLIST, PREFERENCES
from lab.provision import FRESH_ONLY, REUSED, DeployRun, deploy

pytestmark = pytest.mark.disruptive

HOST = "lab-trixie"
OLD_KERNEL = "linux-image-6.12.107+deb13-amd64"  # installed alone: a kernel without headers
OTHER_BRANCH = "nvidia-tesla-535-smi libnvidia-tesla-535-ml1"  # a second driver version's userland
FAKE_REPO = "/var/local/v100kit-fake-repo"
FAKE_SOURCES = "/etc/apt/sources.list.d/v100kit-test-fake.list"

EXPECTED = {
    "no other driver branch installed", "one driver version among the packages",      # second branch userland
    "driver packages held",                                                            # holds released + pending
    "nouveau blacklisted", "blacklist inside every initramfs",                         # blacklist removed
    "headers metapackage installed",                                                   # metapackage removed
    "headers for every installed kernel", "nvidia module built for every installed kernel",  # kernel w/o headers
    "no runfile installation mixed with packages",                                     # runfile marker
    "nvidia-persistenced enabled",                                                     # daemon stopped
}


def fake_newer_deb(tmp: Path, name: str, version: str) -> tuple[Path, str]:
    """A newer-looking empty package and its Packages stanza: an upgrade apt would take if nothing held it."""
    root = tmp / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(textwrap.dedent(f"""\
        Package: {name}
        Version: {version}
        Architecture: amd64
        Maintainer: v100kit tests <tests@v100kit.invalid>
        Description: stand-in for an upstream driver upgrade
        """))
    deb = tmp / f"{name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True,
                   capture_output=True)
    data = deb.read_bytes()
    stanza = (root / "DEBIAN/control").read_text() + (
        f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    return deb, stanza


def repair_run(label: str) -> DeployRun:
    """pyinfra repair.py deploy.py on the host (repair first, then the normal convergence)."""
    return deploy(label, ["--limit", HOST], files=("repair.py", "deploy.py"))


def broken_checks(limit: str = HOST) -> set[str]:
    rows = doctor("inventory/lab.py", [limit])[limit]
    assert isinstance(rows, list), rows  # diagnosed, not a HostFailure (unreachable, refused)
    return {r.check for r in rows if r.state == "broken"}


@pytest.fixture(scope="module")
def broken_host(provisioned, tmp_path_factory):
    if REUSED:  # an earlier run's repair left the old kernel installed with headers and module: nothing to break
        pytest.skip(FRESH_ONLY)
    lab, s = provisioned.lab, spec(HOST)
    pin_packages = " ".join(sorted(provisioned_pin(s)))
    deb, stanza = fake_newer_deb(tmp_path_factory.mktemp("fake"), "nvidia-smi", "550.163.01-99")

    def sh(cmd: str) -> str:
        rc, out = lab.run(s, cmd)
        assert rc == 0, f"{cmd}: {out[-2000:]}"
        return out

    before = broken_checks()
    # a runfile install's uninstaller (this stand-in removes itself when run, as the real one removes the driver)
    sh("printf '#!/bin/sh\\n[ \"$1\" = --silent ] && rm -f /usr/bin/nvidia-uninstall\\n' > /usr/bin/nvidia-uninstall"
       " && chmod 755 /usr/bin/nvidia-uninstall")
    sh("systemctl disable --now nvidia-persistenced")
    sh("DEBIAN_FRONTEND=noninteractive apt-get remove -y linux-headers-amd64")
    sh(f"rm -f {BLACKLIST} && update-initramfs -u -k all")
    sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {OLD_KERNEL}")
    sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {OTHER_BRANCH}")
    # holds released, the pin gone, and a newer driver package offered: apt would upgrade under a loaded module
    sh(f"apt-mark unhold {pin_packages} && rm -f {PREFERENCES}")
    sh(f"mkdir -p {FAKE_REPO}")
    with lab.client(s) as c, c.open_sftp() as sftp:
        sftp.put(str(deb), f"{FAKE_REPO}/{deb.name}")
        with sftp.open(f"{FAKE_REPO}/Packages", "w") as f:
            f.write(stanza)
    sh(f"echo 'deb [trusted=yes] file:{FAKE_REPO} ./' > {FAKE_SOURCES} && apt-get update -qq")
    yield before
    sh(f"rm -rf {FAKE_REPO} {FAKE_SOURCES}")
    deploy("repair-cleanup", ["--limit", HOST])


def provisioned_pin(s) -> dict:
    from lab.data import host_data
    from roles.nvidia_driver import decide as nvidia_driver
    from roles.platform import SUPPORTED
    from roles.settings import load_settings
    plan, _ = nvidia_driver.plan(load_settings(s.name, host_data(s)), SUPPORTED["debian13"], {"linux-image-amd64": []})
    return plan.pin.packages


def test_doctor_reports_exactly_the_faults_then_repair_fixes_them(broken_host):
    assert broken_host == set(), f"the provisioned host was not healthy before the breakage: {broken_host}"
    assert broken_checks() == EXPECTED
    first = repair_run("repair-1")
    assert first.rc == 0, first.stderr[-3000:]
    assert broken_checks() == set()
    second = repair_run("repair-2")
    assert second.rc == 0 and second.changed == {}, second.changed_ops


def test_repair_keeps_user_builds(provisioned, broken_host):
    lab, s = provisioned.lab, spec(HOST)
    rc, out = lab.run(s, "ls -d /opt/llama.cpp/*/ /var/lib/llm/models/*")
    assert rc == 0 and f"/opt/llama.cpp/{DEFAULT_SOURCE.ref}-sm70-" in out and "/var/lib/llm/models/tiny-llama" in out, \
        out
