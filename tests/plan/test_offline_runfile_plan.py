"""Plan-level test (facts in, commands out) of `v100kit offline fill` for a Debian 13 host with
`nvidia_driver_source: runfile`: fill downloads the pinned NVIDIA .run installer into the directory, checked against
the pinned sha256, and the deploy from the directory fetches the directory's copy, never NVIDIA's server. The real
file is ~400 MB: the pin's URL is pointed at a local server holding a small stand-in with its own sha256 for the fill
part; the deploy part plans the real pin with the served URL fill records. The apt steps are no-ops here (they are
tested against Debian's real archive in tests/unit/test_offline_apt.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import re

import pytest
from pyinfra.context import ctx_host
from pyinfra_cli.util import load_deploy_file

from roles.nvidia_driver.versions import DRIVER_PINS
from roles.preflight import preflight
from tests.plan.harness import DEBIAN_13, ROOT, _connected_in_repo, _fake_state, plan_commands
from v100kit import offline, offline_apt, offline_pypi
from v100kit.offline import serve

#: a bare-metal Debian 13 box booted into trixie's own kernel (`uname -r`), as tests/plan/test_driver_facts_plan.py
TRIXIE_KERNEL = "6.12.57+deb13-amd64"
TRIXIE = {"systemd-detect-virt": ["virt=none", f"kernel={TRIXIE_KERNEL}", "sysctl_writable=1", "thp_writable=1",
                                  "modules_dir=1", "nouveau_loaded=0", "thp_mode=always"],
          "--showformat='${db:Status-Abbrev}|": [f"ii |linux-image-amd64|linux-image-{TRIXIE_KERNEL}"],
          "build/Makefile": [f"{TRIXIE_KERNEL} 1"]}
RUNFILE = {"nvidia_driver_source": "runfile"}
#: NVIDIA's file name of the default R580 installer (us.download.nvidia.com/XFree86/Linux-x86_64/580.173.02/)
RUN_NAME = "NVIDIA-Linux-x86_64-580.173.02.run"
#: its sha256 as flathub/org.freedesktop.Platform.GL.nvidia data/nvidia-580.173.02-x86_64.data records it
FLATHUB_580_173_02 = "8d8eb9001e05a9a8a663d3d5d304feb64ef2844ee185ccdfd952786820f46e1b"
BASE = "http://10.0.0.1:8765"


@pytest.fixture
def no_apt(monkeypatch):
    """The apt steps of the fill as no-ops (not the subject here)."""
    for name in ("fill_repository", "fill_debs", "resolve"):
        monkeypatch.setattr(offline_apt, name, lambda *a, **k: [])
    monkeypatch.setattr(offline_apt, "_fetch", lambda *a, **k: None)
    monkeypatch.setattr(offline_pypi, "RETRY_DELAY_S", 0)


def host_plan(data: dict):
    state, host = _fake_state(DEBIAN_13, data, TRIXIE)
    with _connected_in_repo(state):
        load_deploy_file(state, str(ROOT / "deploy.py"))
        with ctx_host.use(host):
            return preflight(host), offline.host_commands(state, host)


def stand_in_pin(monkeypatch, url: str, body: bytes):
    """Point the default runfile pin of Debian 13 at `url`, with the sha256 and size of `body`."""
    key = ("debian13", "runfile")
    pin = DRIVER_PINS[key][0]
    fake = dataclasses.replace(pin, runfile=dataclasses.replace(
        pin.runfile, url=url, sha256=hashlib.sha256(body).hexdigest(), size=len(body)))
    monkeypatch.setitem(DRIVER_PINS, key, (fake, *DRIVER_PINS[key][1:]))
    return fake


def test_plan_level_offline_fill_stores_the_pinned_runfile_and_points_the_deploy_at_it(tmp_path, no_apt, monkeypatch):
    origin = tmp_path / "origin"
    (origin / "XFree86").mkdir(parents=True)
    body = b"#!/bin/sh\n# a stand-in for NVIDIA's 400 MB installer\n"
    (origin / "XFree86" / RUN_NAME).write_bytes(body)
    with serve(origin, "127.0.0.1") as there:
        stand_in_pin(monkeypatch, f"{there}/XFree86/{RUN_NAME}", body)
        plan, commands = host_plan(RUNFILE)
        data: dict = {}
        report = offline.fill_host(tmp_path / "dir", "box", plan, commands, "", data)
    assert (tmp_path / "dir" / "files" / RUN_NAME).read_bytes() == body
    assert data["nvidia_driver_runfile_url"] == f"{{base}}/files/{RUN_NAME}"
    assert any(RUN_NAME in line for line in report)


def test_plan_level_offline_fill_refuses_a_runfile_that_does_not_match_its_pin(tmp_path, no_apt, monkeypatch):
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / RUN_NAME).write_bytes(b"other bytes")
    with serve(origin, "127.0.0.1") as there:
        stand_in_pin(monkeypatch, f"{there}/{RUN_NAME}", b"the pinned bytes")
        plan, commands = host_plan(RUNFILE)
        with pytest.raises(offline_pypi.HashMismatch):
            offline.fill_host(tmp_path / "dir", "box", plan, commands, "", {})
    assert not (tmp_path / "dir" / "files" / RUN_NAME).exists()


def test_plan_level_offline_deploy_fetches_the_directorys_runfile_not_nvidias(tmp_path, no_apt):
    # the real pin: what fill records for it, as the deploy from the directory receives it
    plan, _ = host_plan(RUNFILE)
    settings = {k: v.replace("{base}", BASE) for k, v in offline.host_settings(plan).items() if v is not None}
    assert settings["nvidia_driver_runfile_url"] == f"{BASE}/files/{RUN_NAME}"
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {**RUNFILE, **settings}, TRIXIE)]
    text = "\n".join(cmds)
    assert f"{BASE}/files/{RUN_NAME}" in text
    assert f"echo '{FLATHUB_580_173_02}  /var/cache/v100kit/nvidia-runfile/{RUN_NAME}' | sha256sum --check" in text
    assert not re.search(r"https?://[a-z.]*nvidia\.com", text)
