"""Checks that need a GPU. They run unchanged on a V100 host and skip, saying why, where no GPU is visible."""

import pytest


@pytest.fixture
def gpu_host(target):
    lspci = target.host.run("lspci -n -d 10de: 2>/dev/null")
    if not lspci.stdout.strip():
        pytest.skip(f"{target.spec.name}: no NVIDIA GPU on the PCI bus (lspci -d 10de:), nothing to load or query")
    return target


def nvidia_gpus_on_bus(host) -> int:
    # class 0300 (VGA) or 0302 (3D controller) functions of vendor 10de
    return sum(1 for line in host.check_output("lspci -n -d 10de:").splitlines() if line.split()[1] in ("0300:", "0302:"))


def query(host, fields: str) -> list[list[str]]:
    out = host.check_output(f"nvidia-smi --query-gpu={fields} --format=csv,noheader,nounits")
    return [[x.strip() for x in line.split(",")] for line in out.splitlines()]


def test_driver_loaded_at_pinned_version(gpu_host):
    assert gpu_host.host.file("/sys/module/nvidia/version").content_string.strip() == gpu_host.driver.pin.version


def test_nvidia_smi_sees_every_gpu(gpu_host):
    assert len(query(gpu_host.host, "index")) == nvidia_gpus_on_bus(gpu_host.host)


def test_compute_capability_is_the_configured_one(gpu_host):
    assert {row[0] for row in query(gpu_host.host, "compute_cap")} == {gpu_host.settings.gpu_compute_capability}


def test_persistence_mode_on(gpu_host):
    assert {row[0] for row in query(gpu_host.host, "persistence_mode")} == {"Enabled"}
