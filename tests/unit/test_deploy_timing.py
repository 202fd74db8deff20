"""lab/provision.py's per-host operation times (DeployRun.host_ops), read from a real pyinfra run on this machine
(pyinfra's @local connector: the operations only sleep), with and without --no-wait."""

from __future__ import annotations

import pytest

from lab.provision import deploy

DEPLOY = '''
from pyinfra.api import deploy
from pyinfra.operations import server

@deploy("Slow")
def slow():
    server.shell(name="sleep a while", commands=["sleep 1.5"])
    server.shell(name="quick", commands=["true"])

slow()
server.shell(name="outside any deploy", commands=["sleep 0.5"])
'''


@pytest.mark.parametrize("no_wait", [True, False])
def test_each_operation_gets_its_own_seconds(tmp_path, no_wait):
    (tmp_path / "slow.py").write_text(DEPLOY)
    run = deploy("timing", files=(str(tmp_path / "slow.py"),), inventory="@local", no_wait=no_wait,
                 logs=tmp_path / "logs")
    assert run.rc == 0, run.stderr[-2000:]
    ops = dict(run.host_ops["@local"])
    assert list(ops) == ["Slow | sleep a while", "Slow | quick", "outside any deploy"]
    assert 1.4 <= ops["Slow | sleep a while"] < 5 and ops["Slow | quick"] < 1.4 and 0.4 <= ops["outside any deploy"] < 4
    roles = dict(run.by_role("@local"))
    assert set(roles) == {"Slow", "(no deploy)"} and roles["Slow"] >= 1.4
    assert run.host_slowest("@local", 1)[0][0] == "Slow | sleep a while"
