"""vLLM releases moved on a real lab host (the full tier, suite vllm-releases in tests/tiers.toml): the release the
Python 3.13 refusal names installed on Debian 13 from its lock, a release change and its rollback on Debian 12, and a
tampered lock that changes nothing. They left CI's tier for its cold budget (docs/testing.md); every assertion is as
it was in tests/lab/test_vllm.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import testinfra

from lab.data import vllm_instance
from lab.provision import deploy
from roles.vllm.decide import CURRENT, UV, UV_CACHE
from roles.vllm.versions import DEFAULT_VERSION, VLLM_RELEASES
from tests.lab.test_deploy import data_args
from tests.lab.test_vllm import PARSE_RENDERED, PY, SPEC, TRIXIE, UNIT, _tampered_lock_dir, lock_pins


@pytest.fixture(scope="module")
def bw(provisioned) -> testinfra.host.Host:
    return testinfra.get_host(provisioned.lab.testinfra_url(SPEC))


@pytest.mark.disruptive
def test_tampered_lock_fails_and_leaves_venv_and_service_untouched(provisioned, bw, tmp_path):
    lock_dir, pin = _tampered_lock_dir(tmp_path)
    state = f"readlink {CURRENT}; ls /opt/vllm; sha256sum /etc/vllm/* /etc/systemd/system/vllm@.service; " \
            f"systemctl show {UNIT} -p InvocationID -p ActiveState -p UnitFileState -p NRestarts"
    before = bw.check_output(state)
    run = deploy("vllm-tampered-lock", [*data_args({"vllm_lock_dir": str(lock_dir)}), "--limit", SPEC.name])
    assert run.rc != 0
    assert "hash" in run.stderr.lower() and pin.split("==")[0] in run.stderr, run.stderr[-3000:]
    assert bw.check_output(state) == before, "the venv, the link, the configuration and the unit are as they were"
    assert bw.run(f"{PY} -c 'import vllm' 2>/dev/null").rc == 0
    run = deploy("vllm-after-tampered-lock", ["--limit", SPEC.name])
    assert run.rc == 0 and run.changed == {}, run.changed_ops


@pytest.mark.disruptive
def test_trixie_installs_the_release_the_refusal_names_then_removes_the_instance(provisioned):
    """The fix the Python 3.13 refusal names works: the newest release with a py3.13 lock (0.19.1, V1 engine) installs
    from its lock on Debian 13 and passes the venv checks (torch's own arch list has sm_70), and its own argument
    parser accepts the rendered Volta flags (--dtype half, TRITON_ATTN, CUDA graphs FULL_DECODE_ONLY); deploying the
    lab's own settings again (no vLLM instance) stops and unconfigures it."""
    release = VLLM_RELEASES[max((r for r in VLLM_RELEASES.values() if "3.13" in r.pythons and not r.refused),
                                key=lambda r: tuple(int(x) for x in r.version.split(".")[:3])).version]
    assert release.version == "0.19.1"  # what the refusal names (test_trixie_python313_refuses_the_default_release)
    tx = testinfra.get_host(provisioned.lab.testinfra_url(TRIXIE))
    args = [*data_args({"vllm_version": release.version, "vllm_instances": {"tiny": {**vllm_instance(), "port": 18092}}}),
            "--limit", TRIXIE.name]
    venvs_before = set(tx.check_output(f"ls -A {Path(CURRENT).parent} 2>/dev/null || true").split())
    try:
        run = deploy(f"vllm-trixie-{release.version}", args)
        assert run.rc == 0, run.stderr[-3000:]
        stamp = json.loads(tx.file(f"{CURRENT}/.v100kit-venv.json").content_string)
        assert stamp["vllm"] == release.version and stamp["python"] == "3.13"
        probe = "import torch, vllm; print(vllm.__version__, torch.__version__, torch._C._cuda_getArchFlags())"
        out = tx.check_output(f"{PY} -c \"{probe}\" 2>/dev/null").splitlines()[-1].split(" ", 2)
        assert out[0] == release.version and out[1].startswith(release.torch) and "sm_70" in out[2].split()
        assert lock_pins(tx.check_output(f"{UV} pip freeze --python {PY}")) == \
            lock_pins(release.lock_file("3.13").read_text())
        env = tx.file("/etc/vllm/tiny.env").content_string
        assert "VLLM_USE_V1" not in env
        tx.run(f"printf %s {shlex.quote(PARSE_RENDERED)} > /tmp/vllm-parse.py && chmod 644 /tmp/vllm-parse.py")
        parsed = tx.run(f"cd /tmp && runuser -u llm -- env HF_HUB_OFFLINE=1 HOME=/tmp {PY} /tmp/vllm-parse.py")
        assert parsed.rc == 0, parsed.stderr[-3000:]
        got = json.loads(parsed.stdout.splitlines()[-1])
        assert got["dtype"] == "half" and got["max_model_len"] == vllm_instance()["max_model_len"], got
        assert "TRITON_ATTN" in got["attention_backend"] and got["cudagraph_mode"] == "FULL_DECODE_ONLY", got
        again = deploy(f"vllm-trixie-{release.version}-again", args)
        assert again.rc == 0 and again.changed == {}, again.changed_ops
    finally:
        back = deploy("vllm-trixie-back", ["--limit", TRIXIE.name])
        # the test's own venv goes once it is checked (the deploy keeps venvs: nothing the user built is deleted):
        # its 7 GB of copied wheels left the next test's 0.10.2 venv without room on this machine's disk (ENOSPC in
        # two make test-all runs). Only what the test added, and only after the deploy that removed the instance.
        added = set(tx.check_output(f"ls -A {Path(CURRENT).parent} 2>/dev/null || true").split()) - venvs_before
        if Path(CURRENT).name not in added:  # a link that was there keeps its target
            added.discard(Path(tx.run(f"readlink {CURRENT}").stdout.strip()).name)
        if back.rc == 0 and added:
            tx.run(f"cd {Path(CURRENT).parent} && rm -rf -- {' '.join(shlex.quote(a) for a in sorted(added))}")
    assert back.rc == 0 and "vLLM | vllm@tiny removed" in back.changed_ops.get(TRIXIE.name, []), back.changed_ops
    assert tx.service(UNIT).is_enabled is False and not tx.file("/etc/vllm/tiny.env").exists


@pytest.mark.disruptive
def test_setting_the_version_back_rolls_back_to_the_old_venv_without_installing(provisioned, bw):
    """README: "Set `vllm_version` back to roll back: the old venv is still there." Debian 12 moves to 0.10.2 (a venv
    of its own from the py3.11 lock, V1 engine) and back: the link returns to the old venv, which nothing touched,
    nothing is downloaded or installed, the instance's engine environment is the old release's again, and the
    0.10.2 venv stays on the host (nothing the user built is deleted)."""
    other = VLLM_RELEASES["0.10.2"]
    assert "3.11" in other.pythons and other.version != DEFAULT_VERSION
    old = bw.check_output(f"readlink {CURRENT}")
    old_stamp = f"{old}/.v100kit-venv.json"
    assert json.loads(bw.file(old_stamp).content_string)["vllm"] == DEFAULT_VERSION
    untouched = f"stat -c '%n %i %Y' {old} {old}/bin/python {old_stamp}; sha256sum {old_stamp}"
    before = bw.check_output(untouched)
    args = [*data_args({"vllm_version": other.version}), "--limit", SPEC.name]
    try:
        run = deploy("vllm-to-0.10.2", args)
        assert run.rc == 0, run.stderr[-3000:]
        new = bw.check_output(f"readlink {CURRENT}")
        assert new != old and json.loads(bw.file(f"{new}/.v100kit-venv.json").content_string)["vllm"] == other.version
        assert "VLLM_USE_V1" not in bw.file("/etc/vllm/tiny.env").content_string  # V1: nothing to set on Volta
        assert bw.check_output(untouched) == before, "installing another release left the old venv as it was"
    finally:
        bw.run("touch /run/v100kit-rollback-marker")
        back = deploy("vllm-rollback", ["--limit", SPEC.name])
    assert back.rc == 0, back.stderr[-3000:]
    assert bw.check_output(f"readlink {CURRENT}") == old
    assert f"vLLM venv | {CURRENT} -> {Path(old).name}" in back.changed_ops.get(SPEC.name, []), back.changed_ops
    assert not any(op.startswith("vLLM venv | venv ") for op in back.changed_ops.get(SPEC.name, [])), back.changed_ops
    assert bw.check_output(untouched) == before
    assert bw.check_output(f"find {UV_CACHE} {old} -newer /run/v100kit-rollback-marker | head -5") == ""
    assert "VLLM_USE_V1=0" in bw.file("/etc/vllm/tiny.env").content_string
    assert bw.file(f"{new}/.v100kit-venv.json").exists, "the 0.10.2 venv stays for the next roll forward"
    assert bw.run(f"{PY} -c 'import vllm' 2>/dev/null").rc == 0
    again = deploy("vllm-after-rollback", ["--limit", SPEC.name])
    assert again.rc == 0 and again.changed == {}, again.changed_ops
