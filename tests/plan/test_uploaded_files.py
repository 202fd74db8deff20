"""Plan-level tests of what the deploy writes (facts in, files out): the rendered units, the instance's
EnvironmentFile and the driver's apt pin, as the fake host would receive them (tests/plan/harness.py plan_uploads)."""

from __future__ import annotations

import hashlib

import pytest

from lab.data import tiny_hf_model
from lab.models import write_llama
from tests.plan.harness import DEBIAN_13, UBUNTU_2404, plan_uploads


def test_llama_server_unit_and_environment(tmp_path):
    path = write_llama(tmp_path / "h64.gguf", n_embd=256, n_head=4, n_head_kv=2)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    inst = {"model_source": str(path), "model_sha256": sha, "port": 8081, "gpus": [1]}
    _, files = plan_uploads(DEBIAN_13, {"gpu_count": 2, "llama_cpp_ref": "pypi-0.3.16",
                                        "llama_cpp_instances": {"m": inst}},
                            responses={"sha256": [f"{sha}  /var/lib/llm/models/h64.gguf"]}, stops_early=True)
    unit = files["/etc/systemd/system/llama-server@.service"]
    for line in ("User=llm", "NoNewPrivileges=yes", "ProtectSystem=strict", "UMask=0077", "Restart=on-failure",
                 "EnvironmentFile=-/etc/llama-server/%i.key.env"):
        assert line in unit.splitlines(), line
    env = files["/etc/llama-server/m.env"]
    # head size 64 in the 0.3.16 tree: f16 keeps flash attention on the GPU (issue 18's measured table)
    assert "-ctk f16 -ctv f16" in env and " -fa " in env and "CUDA_VISIBLE_DEVICES=1" in env.splitlines()
    # the 0.3.16 tree's own quiet -lv (files/llama_cpp/pypi-0.3.16.json log_verbosity): its library log (the load
    # report, offloaded layers) prints at 0 and its LOG_DBG (every request body) starts at 1; newer trees: 4
    assert env.split("\n", 1)[0].endswith(" -lv 0"), env
    assert "LogsDirectory=llama-server/%i" in unit.splitlines() and "LogsDirectoryMode=0700" in unit.splitlines()


def test_vllm_unit_has_start_limit_and_offline_hub(tmp_path):
    _, files = plan_uploads(UBUNTU_2404, {"vllm_instances": {"t": {"model_source": str(tiny_hf_model(tmp_path))}}},
                            responses={"sys.version_info": ["3.12"]}, stops_early=True)
    unit = files["/etc/systemd/system/vllm@.service"].splitlines()
    for line in ("StartLimitBurst=5", "StartLimitIntervalSec=1800", "ConditionPathExistsGlob=/proc/driver/nvidia/gpus/*",
                 "UMask=0077", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"):
        assert line in unit, line
    assert any(line.startswith("Environment=HF_HUB_OFFLINE=1") for line in unit)
    env = files["/etc/vllm/t.env"]
    assert "--dtype half" in env and "VLLM_USE_V1=0" in env  # Volta: no bf16; 0.8.5.post1 runs the V0 engine


def test_driver_pin_file_pins_the_exact_version():
    _, files = plan_uploads(DEBIAN_13, {}, stops_early=True)
    pins = [v for k, v in files.items() if k.startswith("/etc/apt/preferences.d/")]
    assert pins and any("Pin: version 550.163.01" in p and "Pin-Priority: 1001" in p for p in pins)


@pytest.mark.parametrize("gpus, tensor_parallel_size, visible", [
    ([1], 1, "1"), ([1, 0], 2, "1,0"), (None, 2, None),
], ids=["one", "two-in-order", "unset"])
def test_vllm_gpus_become_cuda_visible_devices_in_the_unit_environment(tmp_path, gpus, tensor_parallel_size, visible):
    """README: `gpus` -> CUDA_VISIBLE_DEVICES. CUDA reads that variable as a comma-separated list of device indices
    whose order is the enumeration order (CUDA C++ Programming Guide, "CUDA Environment Variables"); systemd reads
    the instance's EnvironmentFile as KEY=value lines (systemd.exec(5)). Unset, the instance sees every GPU and the
    variable is not set at all."""
    two = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05",
                                      "1, GPU-00000000-0000-0000-0000-000000000001, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05"],
           "sys.version_info": ["3.12"]}
    inst = {"model_source": str(tiny_hf_model(tmp_path)), "tensor_parallel_size": tensor_parallel_size,
            **({"gpus": gpus} if gpus else {})}
    _, files = plan_uploads(UBUNTU_2404, {"vllm_instances": {"t": inst}}, responses=two)
    assert "EnvironmentFile=/etc/vllm/%i.env" in files["/etc/systemd/system/vllm@.service"].splitlines()
    env = [line for line in files["/etc/vllm/t.env"].splitlines() if line.startswith("CUDA_VISIBLE_DEVICES=")]
    assert env == ([f"CUDA_VISIBLE_DEVICES={visible}"] if visible else []), files["/etc/vllm/t.env"]
