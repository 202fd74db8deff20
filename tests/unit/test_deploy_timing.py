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


#: lines of a real two-host lab deploy (build/lab-logs/deploy-1.log, colours removed): pyinfra pads the host names
TWO_HOSTS = """--> Beginning operation run...
--> Starting operation: Base | apt sources
    [lab-bookworm] Success
    [lab-trixie]   No changes
--> Starting operation: NVIDIA driver | driver 550.163.01, proprietary module, NVIDIA driver | driver 535.261.03
    [lab-trixie] llama-server@tiny: no GPU answers nvidia-smi, so the check that it serves from the GPU is skipped
    [lab-trixie]   Success
    [lab-bookworm] Success
    [lab-trixie]   Skipped
    [lab-bookworm] Error: executed 1 commands
"""


def test_padded_host_names_and_lines_that_are_not_status_lines():
    from lab.provision import host_operation_seconds

    lines = [(float(t), line) for t, line in enumerate(TWO_HOSTS.splitlines())]
    ops = host_operation_seconds(lines, ["Base | apt sources", "NVIDIA driver | driver", "vLLM | venv"])
    assert ops == {"lab-bookworm": [("Base | apt sources", 2.0), ("NVIDIA driver | driver", 5.0),
                                    ("vLLM | venv", 2.0)],
                   "lab-trixie": [("Base | apt sources", 3.0), ("NVIDIA driver | driver", 3.0), ("vLLM | venv", 2.0)]}
    assert host_operation_seconds(lines[1:], ["x"]) == {}  # the run never began
