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
