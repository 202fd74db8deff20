"""Host states the field leaves behind (issue 13), made on a Debian 12 lab host of its own and fixed by one deploy of
tests/lab/fresh_deploy.py (preflight, base, tuning), after which a second deploy changes nothing:

- Secure Boot, shown with a stand-in `mokutil` on PATH: refused before any change, naming the fixes;
- an old entry for NVIDIA's repository beside the toolkit's own: disabled, kept as *.disabled;
- a copy-on-write swapfile on a btrfs filesystem (a loop image mounted in the host): made again NOCOW;
- changed swap paths: the old swapfile leaves fstab and the record; deleted only when the toolkit created it;
- a swapfile path on tmpfs (ZFS stands in: no ZFS in the lab): refused before any change;
- another flavour of the pinned driver at the pinned version (a package of src:nvidia-graphics-drivers-tesla-535 at
  535.261.03, built here: Debian has no -server flavour, its tesla flavour is the same kind of conflict), held:
  released and purged by repair.py (the driver itself is not installed: its DKMS build is the bundled lab's work).

Its own host name, sshd port (2211) and temporary state directory; only the warm image and apt caches are shared
with the bundled lab (/var/cache/v100kit-lab). The host and its loop device are removed at the end. Run as root.
What a container cannot show: swapon and swapoff (not permitted in a container; the deploy says it skips them), so
the kernel's "swapfile must not be copy-on-write" is not reproduced here, only the file's attribute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from lab.harness import LAB_CACHE, LAB_DATA, HostSpec, Lab
from lab.provision import PYINFRA, ROOT
from v100kit.doctor import diagnose_all

# disruptive: each test breaks its host on purpose (make test-all runs them, tests/tiers.toml suite field-states; make
# lab, which provisions and verifies the bundled hosts, does not: about 190 s of its own host's deploys)
pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="boots a systemd-nspawn host: needs root"),
              pytest.mark.disruptive]

BTRFS = "/srv/btrfs"
#: Settings of the host: NVIDIA's repository in use (so its entries are the toolkit's to manage), a small swapfile.
DATA = {**LAB_DATA, "cuda_source": "nvidia", "cuda_versions": ["12.4"], "cuda_allow_minor_version_compat": True,
        "tuning_swap_size_gib": 0.25, "tuning_swap_file": f"{BTRFS}/swapfile"}
FIELD = HostSpec("lab-field", "bookworm", 2211, "debian12", DATA)
OLD_LIST = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
OLD_ENTRY = ("deb [signed-by=/usr/share/keyrings/cuda-archive-keyring-old.gpg] "
             "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /")
#: mokutil(1)'s own wording for --sb-state and --test-key.
MOKUTIL = """#!/bin/sh
case "$1" in
  --sb-state) echo "SecureBoot enabled" ;;
  --test-key) if [ -e /root/mok-enrolled ]; then echo "$2 is already enrolled"; else echo "$2 is not enrolled"; fi ;;
esac
"""
SIZE = int(0.25 * 1024**3)

INVENTORY = """
from lab.harness import HostSpec, Lab
from pathlib import Path
lab = Lab(Path({state!r}), Path({cache!r}), hosts=(HostSpec({name!r}, {suite!r}, {port!r}, {group!r}, {data!r}),))
{group} = lab.pyinfra_hosts()[{group!r}]
"""


class Field:
    """The lab-field host: commands on it, deploys with settings of the moment."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.lab = Lab(top / "state", LAB_CACHE, hosts=(FIELD,))
        self.loop = ""
        self.inventories = 0

    def sh(self, cmd: str) -> str:
        rc, out = self.lab.run(FIELD, cmd)
        assert rc == 0, f"{cmd}: {out[-2000:]}"
        return out

    def inventory(self, **changes) -> Path:
        """The inventory of the host with DATA updated by `changes` (a new file each time: an inventory file already
        loaded in this process is not read again)."""
        self.inventories += 1
        inv = self.top / f"inventory{self.inventories}.py"
        inv.write_text(INVENTORY.format(state=str(self.lab.state), cache=str(LAB_CACHE), name=FIELD.name,
                                        suite=FIELD.suite, port=FIELD.ssh_port, group=FIELD.group,
                                        data={**DATA, **changes}))
        return inv

    def doctor(self, **changes) -> dict:
        """The doctor's rows for the host: {check: (state, evidence)}."""
        rows = diagnose_all(str(self.inventory(**changes)), [FIELD.name])[FIELD.name]
        assert isinstance(rows, list), rows  # diagnosed, not a HostFailure (unreachable, refused)
        return {r.check: (r.state, r.evidence) for r in rows}

    def deploy(self, deploy_file: str = "tests/lab/fresh_deploy.py", **changes) -> tuple[int, list[str], str]:
        """`deploy_file` with DATA updated by `changes`: (exit status, names of the operations that changed,
        stderr)."""
        inv = self.inventory(**changes)
        res = subprocess.run([PYINFRA, "-y", "--json", str(inv), deploy_file], cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
        try:
            ops = json.loads(res.stdout)["results"]["operations"]
        except (ValueError, KeyError, TypeError):
            ops = []
        return res.returncode, [op["name"] for op in ops if op.get("success")], res.stderr

    def converge(self, deploy_file: str = "tests/lab/fresh_deploy.py", **changes) -> str:
        """One deploy that must succeed, then a second that must change nothing; returns the first's stderr."""
        rc, _, err = self.deploy(deploy_file, **changes)
        assert rc == 0, err[-4000:]
        rc, changed, err2 = self.deploy(deploy_file, **changes)
        assert rc == 0 and changed == [], (changed, err2[-3000:])
        return err

    def mount_btrfs(self) -> None:
        """A 2 GiB sparse btrfs image in the host, attached to a loop device from outside (the container has no
        /dev/loop-control) and mounted at BTRFS inside."""
        self.sh("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends btrfs-progs e2fsprogs "
                ">/dev/null && truncate -s 2G /var/tmp/field-btrfs.img && mkfs.btrfs -q -f /var/tmp/field-btrfs.img")
        image = self.lab.rootfs(FIELD) / "var/tmp/field-btrfs.img"
        self.loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True,
                                   text=True).stdout.strip()
        minor = int(self.loop.removeprefix("/dev/loop"))
        self.sh(f"[ -e {self.loop} ] || mknod {self.loop} b 7 {minor}; mkdir -p {BTRFS} && mount {self.loop} {BTRFS}")

    def cleanup(self) -> None:
        try:
            self.lab.run(FIELD, f"umount {BTRFS} /srv/tmpfs", timeout=30)
        except Exception:  # noqa: BLE001 - the host may not be up; the loop device is detached below either way
            pass
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
        self.lab.destroy(FIELD)


@pytest.fixture(scope="module")
def field():
    top = Path(tempfile.mkdtemp(prefix="v100kit-field-", dir="/var/tmp"))
    f = Field(top)
    t0 = time.monotonic()
    try:
        f.lab.up(FIELD)
        yield f
    finally:
        f.cleanup()
        shutil.rmtree(top, ignore_errors=True)
        print(f"\nlab-field: {time.monotonic() - t0:.0f} s from boot to destroyed")


def test_secure_boot_with_a_stand_in_mokutil_is_refused_before_any_change(field):
    field.sh(f"cat > /usr/local/bin/mokutil <<'EOF'\n{MOKUTIL}EOF\nchmod 755 /usr/local/bin/mokutil; "
             "mkdir -p /var/lib/dkms && echo stand-in > /var/lib/dkms/mok.pub")
    rc, changed, err = field.deploy()
    assert rc != 0 and changed == []
    assert "nvidia_driver_secure_boot = 'refuse': Secure Boot is enabled (mokutil)" in err
    assert "mokutil --import /var/lib/dkms/mok.pub" in err and "turn Secure Boot off" in err
    assert field.sh("ls /etc/apt/sources.list.d/ /etc/apt/sources.list").split().count("/etc/apt/sources.list") == 1
    state, evidence = field.doctor()["Secure Boot lets the module load"]
    assert state == "broken" and "Secure Boot enabled (mokutil)" in evidence
    # the key enrolled: the same host deploys (the next test's deploy)
    field.sh("touch /root/mok-enrolled")
    state, evidence = field.doctor()["Secure Boot lets the module load"]
    assert state == "ok" and "/var/lib/dkms/mok.pub, enrolled" in evidence


def test_old_repository_entry_and_cow_swapfile_on_btrfs_fixed_by_one_deploy(field):
    field.mount_btrfs()
    assert field.sh(f"stat -f -c %T {BTRFS}").strip() == "btrfs"
    # a swapfile made the copy-on-write way, as a hand setup (or the toolkit before this fix) left it
    field.sh(f"fallocate -l {SIZE} {BTRFS}/swapfile && chmod 600 {BTRFS}/swapfile && mkswap {BTRFS}/swapfile "
             f">/dev/null && echo '{BTRFS}/swapfile none swap sw 0 0' >> /etc/fstab")
    assert "C" not in field.sh(f"lsattr {BTRFS}/swapfile").split()[0]
    field.sh(f"echo '{OLD_ENTRY}' > {OLD_LIST}")
    rows = field.doctor()
    assert rows["no other source entry for a repository v100kit manages"][0] == "broken"
    assert rows["swapfile as configured"] == ("broken", f"{BTRFS}/swapfile is copy-on-write on btrfs: swapon fails "
                                                        "('swapfile must not be copy-on-write')")
    err = field.converge()
    assert f"{OLD_LIST} is another entry for https://developer.download.nvidia.com" in err
    listed = field.sh("ls /etc/apt/sources.list.d/").split()
    assert "cuda-debian12-x86_64.list.disabled" in listed and "cuda-debian12-x86_64.list" not in listed
    assert "C" in field.sh(f"lsattr {BTRFS}/swapfile").split()[0]
    assert field.sh(f"stat -c %s {BTRFS}/swapfile").strip() == str(SIZE)
    assert field.sh("cat /var/lib/v100kit/swapfiles").split("\n")[0] == f"adopted {BTRFS}/swapfile"
    assert "swapon skipped" in err  # a container may not swapon: said, not claimed
    rows = field.doctor()
    assert rows["no other source entry for a repository v100kit manages"][0] == "ok"
    assert rows["swapfile as configured"] == ("ok", f"{BTRFS}/swapfile: {SIZE} bytes on btrfs")


def test_changed_swap_paths_retire_the_old_swapfile(field):
    new = f"{BTRFS}/swap-new"
    field.converge(tuning_swap_file=new)
    assert field.sh(f"test -e {BTRFS}/swapfile && echo kept").strip() == "kept"  # not created by the toolkit
    fstab = field.sh("cat /etc/fstab")
    assert f"{BTRFS}/swapfile " not in fstab and f"{new} none swap sw 0 0" in fstab
    assert "C" in field.sh(f"lsattr {new}").split()[0]
    assert field.sh("cat /var/lib/v100kit/swapfiles").split("\n")[0] == f"created {new}"
    assert field.doctor(tuning_swap_file=new)["swapfile as configured"] == ("ok", f"{new}: {SIZE} bytes on btrfs")
    state, evidence = field.doctor(tuning_swap_file="/var/swapfile-field")["swapfile as configured"]
    assert state == "broken" and new in evidence  # before the deploy that moves it
    field.converge(tuning_swap_file="/var/swapfile-field")  # on the host's root filesystem, not btrfs
    assert field.sh(f"test -e {new} || echo gone").strip() == "gone"  # the toolkit created it: deleted
    fstab = field.sh("cat /etc/fstab")
    assert new not in fstab and "/var/swapfile-field none swap sw 0 0" in fstab
    assert field.sh("cat /var/lib/v100kit/swapfiles").strip() == "created /var/swapfile-field"


def test_swapfile_on_a_filesystem_that_cannot_swap_is_refused_before_any_change(field):
    field.sh("mkdir -p /srv/tmpfs && mount -t tmpfs -o size=4G tmpfs /srv/tmpfs")
    before = field.sh("cat /etc/fstab /var/lib/v100kit/swapfiles")
    rc, changed, err = field.deploy(tuning_swap_file="/srv/tmpfs/swapfile")
    assert rc != 0 and changed == []
    assert "tuning_swap_file = '/srv/tmpfs/swapfile': it is on tmpfs, which cannot hold a swapfile" in err
    assert field.sh("cat /etc/fstab /var/lib/v100kit/swapfiles") == before


CONTROL = """Package: {name}
Source: nvidia-graphics-drivers-tesla-535
Version: {version}
Architecture: amd64
Maintainer: v100kit tests <tests@v100kit.invalid>
Description: stand-in for the tesla flavour of the pinned driver
"""


def test_another_flavour_at_the_pinned_version_is_released_and_purged_by_repair(field):
    name, version = "libnvidia-tesla-535-ml1", "535.261.03-1"  # the debian12 pin's upstream version
    control = CONTROL.format(name=name, version=version)
    field.sh(f"set -e; d=$(mktemp -d); mkdir $d/DEBIAN; printf '%s' '{control}' > $d/DEBIAN/control; "
             f"dpkg-deb --build --root-owner-group $d /var/tmp/{name}.deb >/dev/null; "
             f"dpkg -i /var/tmp/{name}.deb >/dev/null; apt-mark hold {name} >/dev/null")
    state, evidence = field.doctor()["no other driver branch installed"]
    assert state == "broken" and name in evidence
    err = field.converge("repair.py")
    assert field.sh(f"dpkg-query -W -f '${{db:Status-Abbrev}}' {name} 2>/dev/null || true").strip() in ("", "un")
    assert field.doctor()["no other driver branch installed"][0] == "ok", err[-2000:]
