"""vllm role on real lab hosts: the hash-locked venv installed from PyPI on Debian 12 (Python 3.11), checked inside
the venv; the vllm@ unit condition-skipped without a GPU; a tampered lock that changes nothing; and the refusals
(Python 3.13 on Debian 13, AWQ / w4a16 / FP8 weights, bf16, tensor parallel, versions) that change nothing."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import testinfra

from lab.data import VLLM_HOSTS, host_data, vllm_instance
from lab.harness import HOSTS
from lab.models import write_tiny_hf
from v100kit.doctor import diagnose_all as doctor
from roles.planner import read_hf
from roles.vllm.decide import CURRENT, UV, UV_CACHE
from roles.vllm.versions import DEFAULT_VERSION, LOCK_DIR, VLLM_RELEASES
from lab.provision import deploy
from tests.lab.test_deploy import SNAPSHOT, data_args

SPEC = next(s for s in HOSTS if s.name == VLLM_HOSTS[0])
TRIXIE = next(s for s in HOSTS if s.suite == "trixie")
UNIT = "vllm@tiny"
PY = f"{CURRENT}/bin/python"


@pytest.fixture(scope="module")
def bw(provisioned) -> testinfra.host.Host:
    return testinfra.get_host(provisioned.lab.testinfra_url(SPEC))


def lock_pins(text: str) -> dict[str, str]:
    return {m[0].lower().replace("_", "-"): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def test_venv_is_the_locked_release_with_sm70_torch(bw):
    probe = ("import json, torch, vllm; print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__, "
             "'arch': torch._C._cuda_getArchFlags().split()}))")
    found = json.loads(bw.check_output(f"{PY} -c \"{probe}\" 2>/dev/null").splitlines()[-1])
    release = VLLM_RELEASES[DEFAULT_VERSION]
    assert found["vllm"] == DEFAULT_VERSION
    assert found["torch"].split("+")[0] == release.torch
    assert "sm_70" in found["arch"], found["arch"]
    assert bw.run(f"{UV} pip check --python {PY}").rc == 0
    # exactly the lock, nothing more or less
    frozen = bw.check_output(f"{UV} pip freeze --python {PY}")
    assert lock_pins(frozen) == lock_pins(release.lock_file("3.11").read_text())


def test_rendered_arguments_are_accepted_by_the_installed_vllm_and_agree_with_the_planner(bw):
    """vLLM's own CLI parser reads /etc/vllm/tiny.env's arguments, and its ModelConfig reads the deployed model
    as the service user: dtype float16, and the KV shape the planner used."""
    script = (
        "import json, shlex\n"
        "from vllm.config import ParallelConfig\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "from vllm.entrypoints.openai.cli_args import make_arg_parser\n"
        "from vllm.utils import FlexibleArgumentParser\n"
        "env = dict(l.split('=', 1) for l in open('/etc/vllm/tiny.env').read().splitlines())\n"
        "args = make_arg_parser(FlexibleArgumentParser()).parse_args(shlex.split(env['VLLM_ARGS']))\n"
        "m = EngineArgs.from_cli_args(args).create_model_config()\n"
        "p = ParallelConfig()\n"
        "print(json.dumps({'dtype': str(m.dtype), 'max_model_len': m.max_model_len, 'layers': m.get_num_layers(p),"
        " 'kv_heads': m.get_num_kv_heads(p), 'head_size': m.get_head_size()}))\n")
    bw.run(f"printf %s {shlex.quote(script)} > /tmp/vllm-probe.py && chmod 644 /tmp/vllm-probe.py")
    out = bw.check_output(f"cd /tmp && runuser -u llm -- env HF_HUB_OFFLINE=1 HOME=/tmp {PY} /tmp/vllm-probe.py 2>/dev/null")
    got = json.loads(out.splitlines()[-1])
    model = read_hf(vllm_instance()["model_source"])
    assert got == {"dtype": "torch.float16", "max_model_len": vllm_instance()["max_model_len"],
                   "layers": model.n_layers, "kv_heads": model.n_kv_heads, "head_size": model.head_dim}


def test_unit_verifies_runs_unprivileged_and_is_condition_skipped_without_gpu(bw):
    assert bw.run(f"systemd-analyze verify {UNIT}.service").rc == 0
    env = bw.file("/etc/vllm/tiny.env").content_string
    assert "--dtype half" in env and "VLLM_USE_V1=0" in env
    key = bw.file("/etc/vllm/tiny.key.env")
    assert key.mode == 0o600 and key.user == "root" and key.content_string.startswith("VLLM_API_KEY=")
    secret = key.content_string.split("=", 1)[1].strip()
    assert secret not in bw.check_output(f"systemctl cat {UNIT}; systemctl show {UNIT}; cat /etc/vllm/tiny.env")
    unit = bw.check_output(f"systemctl cat {UNIT}")
    for line in ("User=llm", "NoNewPrivileges=yes", "ProtectSystem=strict", "Restart=on-failure",
                 "ConditionPathExistsGlob=/proc/driver/nvidia/gpus/*"):
        assert line in unit
    if bw.run("ls /proc/driver/nvidia/gpus/ 2>/dev/null | grep -q .").rc == 0:
        pytest.skip("a GPU is visible: the service must run instead (test_service_answers_on_a_gpu_host)")
    bw.run(f"systemctl start {UNIT}")  # as at boot: systemd evaluates the condition and skips
    show = dict(line.split("=", 1) for line in bw.check_output(
        f"systemctl show {UNIT} -p ConditionResult -p ActiveState -p Result -p UnitFileState -p NRestarts").splitlines())
    assert show == {"ConditionResult": "no", "ActiveState": "inactive", "Result": "success",
                    "UnitFileState": "enabled", "NRestarts": "0"}


def test_service_answers_on_a_gpu_host(bw):
    if bw.run("ls /proc/driver/nvidia/gpus/ 2>/dev/null | grep -q .").rc != 0:
        pytest.skip("no NVIDIA GPU bound to a loaded driver on this host (/proc/driver/nvidia/gpus is empty)")
    assert bw.service(UNIT).is_running
    port = vllm_instance()["port"]
    assert bw.run(f"curl -sf --retry 60 --retry-all-errors --retry-delay 5 http://127.0.0.1:{port}/health").rc == 0


def test_redeploy_downloads_nothing(provisioned, bw):
    bw.run("touch /run/v100kit-marker")
    run = deploy("vllm-redeploy", ["--limit", SPEC.name])
    assert run.rc == 0 and run.changed == {}, run.changed_ops
    assert bw.check_output(f"find {UV_CACHE} /opt/vllm -newer /run/v100kit-marker | head -5") == ""


def _tampered_lock_dir(tmp_path: Path) -> tuple[Path, str]:
    """A copy of files/vllm whose lock for Python 3.11 has wrong hashes for one small package."""
    lock_dir = tmp_path / "locks"
    shutil.copytree(LOCK_DIR, lock_dir)
    lock = lock_dir / VLLM_RELEASES[DEFAULT_VERSION].lock_file("3.11").name
    text = lock.read_text()
    m = re.search(r"^(idna==\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", text, re.M)
    assert m, "idna is pinned in the lock"
    lock.write_text(text.replace(m.group(2), re.sub(r"[0-9a-f]{64}", "0" * 64, m.group(2))))
    return lock_dir, m.group(1)


def test_trixie_python313_refuses_the_default_release(provisioned):
    """Debian 13's Python 3.13 has no wheels for 0.8.5.post1 (xformers): refused before any change, naming the
    release that installs there (VLLM_RELEASES)."""
    assert "3.13" not in VLLM_RELEASES[DEFAULT_VERSION].pythons
    lab = provisioned.lab
    before = lab.run(TRIXIE, SNAPSHOT)[1]
    run = deploy("vllm-trixie-refused", [*data_args({"vllm_instances": {"tiny": vllm_instance()}}),
                                          "--limit", TRIXIE.name])
    assert run.rc != 0 and run.changed == {}
    assert "vllm_version = '0.8.5.post1'" in run.stderr and "Python 3.13" in run.stderr
    assert "vllm_version: 0.19.1" in run.stderr, run.stderr[-2000:]  # the newest release with a py3.13 lock
    assert lab.run(TRIXIE, SNAPSHOT)[1] == before


def _model(tmp: Path, name: str, **config) -> str:
    return str(write_tiny_hf(tmp / name, config=config))


@pytest.mark.disruptive
@pytest.mark.parametrize("case, expect", [
    ({"config": {"quantization_config": {"quant_method": "awq", "bits": 4}}},
     "Minimum capability: 75. Current capability: 70"),
    ({"config": {"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}}},
     "Minimum capability: 80. Current capability: 70"),
    ({"config": {"quantization_config": {"quant_method": "fp8"}}}, "Minimum capability: 89. Current capability: 70"),
    ({"config": {"attn_logit_softcapping": 50.0}}, "soft-capping"),
    ({"instance": {"dtype": "bfloat16"}}, "vllm_instances.tiny.dtype = 'bfloat16'"),
    ({"instance": {"tensor_parallel_size": 2}}, "vllm_instances.tiny.tensor_parallel_size = 2"),
    ({"instance": {"gpu_memory_utilization": 1.5}}, "vllm_instances.tiny.gpu_memory_utilization = 1.5"),
    # a length beyond what vLLM derives from config.json is a length refusal, never "does not fit" (issue 12)
    ({"instance": {"max_model_len": 1 << 20}}, "greater than the derived max model len 8192"),
    ({"data": {"gpu_memory_mib": 1024}, "instance": {"gpu_memory_utilization": 0.5}}, "does not fit"),
    ({"data": {"vllm_version": "0.11.0"}}, "vllm_version = '0.11.0'"),
    ({"data": {"vllm_version": "0.6.3.post1"}}, "pyairports"),
    ({"instance": {"model_source": None, "model_path": "/var/lib/llm/models/none"}}, "model_path"),
], ids=["awq", "w4a16", "fp8", "softcap", "bf16", "tp2", "util1.5", "too-long", "no-memory", "0.11.0", "0.6.3",
        "no-model"])
def test_bad_vllm_settings_refused_before_any_change(provisioned, tmp_path, request, case, expect):
    lab = provisioned.lab
    inst = dict(host_data(SPEC)["vllm_instances"]["tiny"], **case.get("instance", {}))
    if "config" in case:
        inst["model_source"] = _model(tmp_path, "model", **case["config"])
    before = lab.run(SPEC, SNAPSHOT)[1]
    run = deploy(f"vllm-refused-{request.node.callspec.id}", [*data_args({"vllm_instances": {"tiny": inst}, **case.get("data", {})}),
                                                 "--limit", SPEC.name])
    assert run.rc != 0 and run.changed == {}
    assert expect in run.stderr and "Fix:" in run.stderr, run.stderr[-2000:]
    assert lab.run(SPEC, SNAPSHOT)[1] == before


def test_doctor_sees_the_checked_venv_in_use(provisioned):
    rows = {r.check: r for r in doctor("inventory/lab.py", [SPEC.name])[SPEC.name]}
    assert rows["vLLM venv in use"].state == "ok", rows["vLLM venv in use"]


#: Runs in the venv as the service user: the release's own server parser reads /etc/vllm/tiny.env's VLLM_ARGS (on a
#: host without a GPU, on vLLM's CPU platform, as tools/vllm_flags.py does) and prints what it made of the Volta flags.
PARSE_RENDERED = r"""
import json, shlex
import vllm.platforms as P
try:
    from vllm.utils import FlexibleArgumentParser
except ImportError:  # 0.11+: vllm/utils/argparse_utils.py
    from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.openai.cli_args import make_arg_parser
try:
    parser = make_arg_parser(FlexibleArgumentParser())
except RuntimeError:  # "Failed to infer device type": no GPU here
    from vllm.platforms.cpu import CpuPlatform
    P._current_platform = CpuPlatform()
    parser = make_arg_parser(FlexibleArgumentParser())
env = dict(l.split('=', 1) for l in open('/etc/vllm/tiny.env').read().splitlines())
a = parser.parse_args(shlex.split(env['VLLM_ARGS']))
cc = getattr(a, 'compilation_config', None)
mode = getattr(cc, 'cudagraph_mode', None) if not isinstance(cc, dict) else cc.get('cudagraph_mode')
print(json.dumps({'dtype': a.dtype, 'max_model_len': a.max_model_len,
                  'attention_backend': str(getattr(a, 'attention_backend', None)),
                  'cudagraph_mode': None if mode is None else str(getattr(mode, 'name', mode))}))
"""
