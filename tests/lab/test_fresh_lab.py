"""A new user's first run: the lab started with empty state and cache directories (temporary paths, nothing
from an earlier run), one host built from nothing, an SSH login, and a pyinfra deploy over that login."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from lab.harness import LAB_DATA, HostSpec, Lab
from lab.provision import PYINFRA, ROOT

#: Its own name and sshd port, so that it runs beside the bundled hosts without touching them.
FRESH = HostSpec("lab-fresh", "bookworm", 2209, "debian12", dict(LAB_DATA))

INVENTORY = """
from pathlib import Path
from lab.harness import HostSpec, Lab
lab = Lab(Path({state!r}), Path({cache!r}), hosts=(HostSpec({name!r}, {suite!r}, {port!r}, {group!r}, {data!r}),))
debian12 = lab.pyinfra_hosts()["debian12"]
"""


def test_lab_from_empty_state_and_cache_logs_in_and_deploys():
    top = Path(tempfile.mkdtemp(prefix="v100kit-fresh-", dir="/var/tmp"))  # rootfs and image: not on a tmpfs
    state, cache = top / "state", top / "cache"  # neither exists yet
    lab = Lab(state, cache, hosts=(FRESH,))
    try:
        lab.up(FRESH)
        assert lab.run(FRESH, "id -un")[1].strip() == "root"  # key login, host key checked strictly
        assert list((cache / "images").glob("bookworm-*.tar")), "the image was built into the empty cache"
        inventory = top / "inventory.py"
        inventory.write_text(INVENTORY.format(state=str(state), cache=str(cache), name=FRESH.name, suite=FRESH.suite,
                                              port=FRESH.ssh_port, group=FRESH.group, data=FRESH.data))
        res = subprocess.run([PYINFRA, "-y", str(inventory), "tests/lab/fresh_deploy.py"], cwd=ROOT,
                             capture_output=True, text=True, timeout=1800)
        assert res.returncode == 0, res.stderr[-4000:]
        assert lab.run(FRESH, "id -un llm")[0] == 0  # the base role's service user exists on the host
    finally:
        lab.destroy(FRESH)
        shutil.rmtree(top, ignore_errors=True)
