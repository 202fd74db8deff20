"""`v100kit plan` against the provisioned lab: every instance planned from its own model file, and
nothing on the hosts changed by asking."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab.data import VLLM_HOSTS, llama_hosts
from lab.harness import HOSTS
from lab.provision import ROOT
from tests.lab.test_deploy import SNAPSHOT

#: the console script installed into the same environment as this Python
V100KIT = str(Path(sys.executable).with_name("v100kit"))


def test_plan_command_reports_every_instance_and_changes_nothing(provisioned):
    lab = provisioned.lab
    before = {s.name: lab.run(s, SNAPSHOT)[1] for s in HOSTS}
    res = subprocess.run([V100KIT, "plan", "inventory/lab.py", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    plans = json.loads(res.stdout)
    for name in llama_hosts():  # the full tier adds lab-bookworm (lab/data.py)
        p = plans[name]["instances"]["llama-server@tiny"]["plan"]
        assert p["outcome"] == "fits" and p["layers_offloaded"] == 0 and p["max_context_tokens"] >= 8192
    for name in VLLM_HOSTS:
        inst = plans[name]["instances"]["vllm@tiny"]
        assert inst["dtype"] == "half" and inst["plan"]["outcome"] == "fits"
        assert plans[name]["vllm"]["venv"].startswith("/opt/vllm/0.8.5.post1-py3.11-")
    assert {s.name: lab.run(s, SNAPSHOT)[1] for s in HOSTS} == before
    table = subprocess.run([V100KIT, "plan", "inventory/lab.py"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300).stdout
    assert "vllm@tiny: FITS" in table and "llama-server@tiny: FITS" in table
