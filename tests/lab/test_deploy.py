"""The deploy as a whole on real lab hosts: idempotency, reboots, and refusals that change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.data import host_data
from lab.harness import HOSTS
from lab.provision import FRESH_ONLY, REUSED, deploy


def test_first_deploy_changed_every_host(provisioned):
    if REUSED:
        pytest.skip(FRESH_ONLY)
    assert provisioned.first.rc == 0
    assert set(provisioned.first.changed) == {s.name for s in HOSTS}
    assert not provisioned.first.errors


def test_second_deploy_changes_nothing(provisioned):
    second = provisioned.second
    assert second.rc == 0, second.stderr[-2000:]
    assert second.changed == {}, f"operations that changed on the second run: {second.changed}"
    assert set(second.unchanged) == {s.name for s in HOSTS}


def test_every_host_was_rebooted(provisioned):
    """All checks in this suite run after this reboot: what they see survived it."""
    for s in HOSTS:
        old, new = provisioned.reboots[s.name]
        assert old != new


def test_deploy_after_reboot_changes_nothing(provisioned):
    run = deploy("deploy-after-reboot")
    assert run.rc == 0 and run.changed == {}, run.changed


SNAPSHOT = ("(dpkg-query -W -f '${Package} ${Version} ${Status}\\n'; apt-mark showhold; "
            "find /etc /opt /usr/local /var/lib/llm -xdev \\( -type f -o -type l \\) -printf '%p %s %T@\\n' "
            "2>/dev/null; systemctl list-unit-files --no-legend) | sort | sha256sum")


def data_args(data: dict) -> list[str]:
    """pyinfra --data overrides (JSON values; they take precedence over inventory and group data)."""
    return [a for k, v in data.items() for a in ("--data", f"{k}={json.dumps(v)}")]


TINY = "llama_cpp_instances"


def tiny(provisioned_spec_data: dict, **changes) -> dict:
    inst = dict(provisioned_spec_data[TINY]["tiny"], **changes)
    return {TINY: {"tiny": inst}}


@pytest.mark.disruptive
@pytest.mark.parametrize("data, key", [
    ({"cuda_verions": ["12.4"]}, "cuda_verions"),                          # a typo
    ({"tuning_swappiness": "lots"}, "tuning_swappiness"),                  # wrong type
    ({"tuning_thp_mode": "sometimes"}, "tuning_thp_mode"),                 # not an allowed value
    ({"nvidia_driver_version": "590.44.01"}, "nvidia_driver_version"),     # branch without Volta
    ({"nvidia_driver_kernel_module": "open"}, "nvidia_driver_kernel_module"),  # open module below cc 7.5
    ({"cuda_versions": ["13.0"]}, "cuda_versions"),                        # CUDA 13 cannot build sm_70
    # field case: a toolkit newer than the driver ("PTX was compiled with an unsupported toolchain")
    ({"cuda_source": "nvidia", "cuda_versions": ["12.4"]}, "cuda_versions"),
    # llama.cpp: an unknown KV cache type, an architecture CUDA 11.8 cannot build, a missing model file, a model
    # checksum mismatch, two instances on one port
    (lambda d: tiny(d, cache_type_k="q9_9"), "cache_type_k"),
    ({"llama_cpp_cuda_architectures": ["30"]}, "llama_cpp_cuda_architectures"),
    (lambda d: tiny(d, model_source="/nonexistent/model.gguf"), "model_source"),
    (lambda d: tiny(d, model_sha256="0" * 64), "model_sha256"),
    (lambda d: {TINY: {"tiny": d[TINY]["tiny"], "twin": d[TINY]["tiny"]}}, "port"),
    # host-dependent refusals: an existing login account, a system file as swapfile, a kernel without that
    # sysctl, a mirror without scheme, an unauthenticated public listener, a privileged port, a model that does
    # not fit the VRAM (the planner reads the GGUF header)
    ({"base_service_user": "root"}, "base_service_user"),
    ({"tuning_swap_file": "/etc/passwd"}, "tuning_swap_file"),
    ({"tuning_sysctl_extra": {"vm.max_map_cont": 1}}, "tuning_sysctl_extra"),
    ({"base_apt_mirror": "deb.debian.org/debian"}, "base_apt_mirror"),
    (lambda d: tiny(d, listen="0.0.0.0", api_key_file=None), "listen"),
    (lambda d: tiny(d, port=80), "port"),
    (lambda d: {"gpu_memory_mib": 1024, **tiny(d, context=2_000_000)}, "does not fit"),
    ({"gpu_usable_fraction": 1.5}, "gpu_usable_fraction"),
    # download sources (#17): mirrors without a scheme or of the wrong shape, a hub model at a branch
    ({"base_apt_security_mirror": "security.debian.org/debian-security"}, "base_apt_security_mirror"),
    ({"cuda_nvidia_repo_url": "https://mirror.example/cuda/repos"}, "cuda_nvidia_repo_url"),
    ({"vllm_index_url": "pypi.org/simple"}, "vllm_index_url"),
    ({"vllm_uv_wheel_url": "https://mirror.example/uv-0.13.8.tar.gz"}, "vllm_uv_wheel_url"),
    ({"llama_cpp_model_mirror": "/srv/models"}, "llama_cpp_model_mirror"),
    (lambda d: tiny(d, model_source="hf://org/repo@main/model-Q4_K_M.gguf", model_sha256=None), "model_source"),
])
def test_bad_settings_refused_before_any_change(provisioned, data, key):
    # llama.cpp cases on trixie (the host with a llama-server instance), the rest on bookworm (driver 535)
    spec = HOSTS[1] if callable(data) or any(k.startswith("llama_cpp") for k in data) else HOSTS[0]
    lab = provisioned.lab
    before = lab.run(spec, SNAPSHOT)[1]
    if callable(data):
        data = data(host_data(spec))
    run = deploy(f"refused-{key}", [*data_args(data), "--limit", spec.name])
    assert run.rc != 0
    assert key in run.stderr and "Fix:" in run.stderr, run.stderr[-2000:]
    assert run.changed == {}
    assert lab.run(spec, SNAPSHOT)[1] == before


def test_dry_run_of_a_pending_change_changes_nothing(provisioned, tmp_path):
    # README: `pyinfra INVENTORY deploy.py --dry` runs the preflight and the plan and changes nothing, also when a
    # change is pending: here a model the host does not have yet (a copy of the tiny model under another name)
    spec = HOSTS[1]
    lab = provisioned.lab
    model = tmp_path / "tiny-dry.gguf"
    model.write_bytes(Path(host_data(spec)[TINY]["tiny"]["model_source"]).read_bytes())
    before = lab.run(spec, SNAPSHOT)[1]
    run = deploy("dry-pending-model", [*data_args(tiny(host_data(spec), model_source=str(model))),
                                       "--limit", spec.name, "--dry"])
    assert run.rc == 0, run.stderr[-2000:]
    assert lab.run(spec, SNAPSHOT)[1] == before
