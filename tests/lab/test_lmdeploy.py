"""lmdeploy role on lab-trixie (Debian 13, Python 3.13; tests/tiers.toml suite lmdeploy): an instance of a small
4-bit AWQ model config deployed; the venv installed exactly from files/lmdeploy/lmdeploy-0.15.0-py3.13.txt (uv's cache
already holds torch 2.10.0 cu128 from vLLM 0.19.1's lock), checked inside the venv; the unit lmdeploy@tiny enabled
and condition-skipped without a GPU; the rendered arguments of /etc/lmdeploy/tiny.env accepted by LMDeploy's own
parser (the host venv's python, as the service user); the API key in a 0600 root file and in no argument; a second
deploy changes nothing; and the lab's own settings again at the end remove the instance.

Needs the engine in the registry and its settings composed into the settings model (roles/lmdeploy is not reached
by deploy.py otherwise)."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import testinfra

from lab.data import api_key_file
from lab.harness import HOSTS
from lab.models import TURBOMIND_CONFIG, write_tiny_hf
from lab.provision import deploy
from roles.lmdeploy.decide import CURRENT, UV
from roles.lmdeploy.versions import DEFAULT_VERSION, LMDEPLOY_RELEASES
from tests.lab.test_deploy import data_args

TRIXIE = next(s for s in HOSTS if s.suite == "trixie")
UNIT = "lmdeploy@tiny"
PY = f"{CURRENT}/bin/python"
PORT = 18093  # beside llama-server@tiny (18082) and the vLLM tests' 18092 on lab-trixie
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}


def lock_pins(text: str) -> dict[str, str]:
    return {m[0].lower().replace("_", "-"): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


@pytest.fixture(scope="module")
def tx(provisioned, tmp_path_factory):
    """lab-trixie deployed with the lab's settings and lmdeploy@tiny (the tiny model's config with TurboMind's head size
    and AWQ's quantization_config: TurboMind is told --model-format awq; nothing loads it without a GPU); the lab's own
    settings again afterwards."""
    model = write_tiny_hf(tmp_path_factory.mktemp("lmdeploy") / "tiny-awq", config={**TURBOMIND_CONFIG, "quantization_config": AWQ})
    inst = {"model_source": str(model), "port": PORT, "session_len": 4096, "api_key_file": str(api_key_file())}
    args = [*data_args({"lmdeploy_instances": {"tiny": inst}}), "--limit", TRIXIE.name]
    host = testinfra.get_host(provisioned.lab.testinfra_url(TRIXIE))
    run = deploy("lmdeploy-trixie", args)
    assert run.rc == 0, run.stderr[-3000:]
    host.deploy_args = args
    yield host
    back = deploy("lmdeploy-trixie-back", ["--limit", TRIXIE.name])
    assert back.rc == 0 and "LMDeploy | lmdeploy@tiny removed" in back.changed_ops.get(TRIXIE.name, []), back.changed_ops
    assert not host.file("/etc/lmdeploy/tiny.env").exists


def test_venv_is_exactly_the_py313_lock_with_sm70_torch(tx):
    release = LMDEPLOY_RELEASES[DEFAULT_VERSION]
    stamp = json.loads(tx.file(f"{CURRENT}/.v100kit-venv.json").content_string)
    assert stamp["lmdeploy"] == DEFAULT_VERSION and stamp["python"] == "3.13"
    probe = ("import json, torch; from importlib.metadata import version; print(json.dumps({'lmdeploy': "
             "version('lmdeploy'), 'torch': torch.__version__, 'arch': torch._C._cuda_getArchFlags().split()}))")
    found = json.loads(tx.check_output(f"{PY} -c \"{probe}\" 2>/dev/null").splitlines()[-1])
    assert found["lmdeploy"] == DEFAULT_VERSION and found["torch"].split("+")[0] == release.torch
    assert "sm_70" in found["arch"], found["arch"]
    assert tx.run(f"{UV} pip check --python {PY}").rc == 0
    assert lock_pins(tx.check_output(f"{UV} pip freeze --python {PY}")) == \
        lock_pins(release.lock_file("3.13").read_text())


#: Runs in the venv as the service user: LMDeploy's own parser, built as its entry point builds it
#: (lmdeploy/cli/entrypoint.py run; tools/lmdeploy/parse_args.py), reads /etc/lmdeploy/tiny.env's LMDEPLOY_ARGS.
PARSE_RENDERED = r"""
import json, shlex
from lmdeploy.cli.cli import CLI
from lmdeploy.cli.serve import SubCliServe
from lmdeploy.cli.lite import SubCliLite
CLI.add_parsers(); SubCliServe.add_parsers(); SubCliLite.add_parsers()
env = dict(l.split('=', 1) for l in open('/etc/lmdeploy/tiny.env').read().splitlines())
ns = vars(CLI.parser.parse_args(shlex.split(env['LMDEPLOY_ARGS'])))
print(json.dumps({k: ns[k] for k in ('backend', 'model_format', 'model_path', 'model_name', 'server_name',
                                     'server_port', 'session_len', 'tp', 'dtype', 'api_keys')}))
"""


def test_rendered_arguments_are_accepted_by_lmdeploys_own_parser(tx):
    tx.run(f"printf %s {shlex.quote(PARSE_RENDERED)} > /tmp/lmdeploy-parse.py && chmod 644 /tmp/lmdeploy-parse.py")
    parsed = tx.run(f"cd /tmp && runuser -u llm -- env HOME=/tmp {PY} /tmp/lmdeploy-parse.py")
    assert parsed.rc == 0, parsed.stderr[-3000:]
    got = json.loads(parsed.stdout.splitlines()[-1])
    assert got == {"backend": "turbomind", "model_format": "awq", "model_path": "/var/lib/llm/models/lmdeploy-tiny",
                   "model_name": "tiny", "server_name": "127.0.0.1", "server_port": PORT, "session_len": 4096,
                   "tp": 1, "dtype": "float16", "api_keys": None}


def test_key_is_a_0600_root_credential_and_in_no_argument(tx):
    key = tx.file("/etc/lmdeploy/tiny.key.env")
    assert key.mode == 0o600 and key.user == "root"
    secret = api_key_file().read_text().strip()
    assert key.content_string.strip() == secret
    env = tx.file("/etc/lmdeploy/tiny.env").content_string
    assert "LMDEPLOY_KEY=api-key\n" in env and "--api-keys" not in env
    assert secret not in tx.check_output(f"systemctl cat {UNIT}; systemctl show {UNIT}; cat /etc/lmdeploy/tiny.env")


def test_unit_is_enabled_and_condition_skipped_without_a_gpu(tx):
    assert tx.run(f"systemd-analyze verify {UNIT}.service").rc == 0
    unit = tx.check_output(f"systemctl cat {UNIT}")
    for line in ("User=llm", "NoNewPrivileges=yes", "ProtectSystem=strict", "Restart=on-failure",
                 "ConditionPathExistsGlob=/proc/driver/nvidia/gpus/*",
                 "LoadCredential=api-key:/etc/lmdeploy/%i.key.env"):
        assert line in unit
    if tx.run("ls /proc/driver/nvidia/gpus/ 2>/dev/null | grep -q .").rc == 0:
        pytest.skip("a GPU is visible here: lmdeploy@tiny must start instead, which this test does not cover")
    tx.run(f"systemctl start {UNIT}")  # as at boot: systemd evaluates the condition and skips
    show = dict(line.split("=", 1) for line in tx.check_output(
        f"systemctl show {UNIT} -p ConditionResult -p ActiveState -p Result -p UnitFileState -p NRestarts").splitlines())
    assert show == {"ConditionResult": "no", "ActiveState": "inactive", "Result": "success",
                    "UnitFileState": "enabled", "NRestarts": "0"}


def test_second_deploy_changes_nothing(tx):
    again = deploy("lmdeploy-trixie-again", tx.deploy_args)
    assert again.rc == 0 and again.changed == {}, again.changed_ops
