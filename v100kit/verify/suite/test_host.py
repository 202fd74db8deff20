"""The host suite: what a host provisioned by v100kit must show, checked read-only (v100kit/verify/readonly.py)
against the values its settings give (v100kit/verify/expect.py). One check per test, run once per inventory host.

Checks that need a GPU run wherever one is visible (an NVIDIA display or 3D controller on the PCI bus, or a GPU
listed by nvidia-smi) and skip, saying so, elsewhere. Checks that need systemd (sd_booted(3): /run/systemd/system
exists) or dpkg/apt skip with that reason on a host without them: none passes without having looked.
"""

from __future__ import annotations

import re

import pytest

from roles.engine_registry import ENGINES

#: PCI class codes of a GPU function (PCI Code and ID Assignment Specification, base class 03h): 0300 VGA-compatible
#: controller, 0302 3D controller (data-centre GPUs such as the V100 and H200 show as 0302). NVIDIA's vendor ID: 10de.
GPU_CLASSES = ("0x0300", "0x0302")
NVIDIA_VENDOR = "0x10de"


# -- what the host has ----------------------------------------------------------------------------------------

def need_systemd(host, what: str) -> None:
    if not host.run("test -d /run/systemd/system").succeeded:
        pytest.skip(f"systemd is not running on this host (/run/systemd/system is absent): {what} cannot be checked")


def need_program(host, program: str, what: str) -> None:
    if not host.run(f"command -v {program}").succeeded:
        pytest.skip(f"{program} is not on this host: {what} cannot be checked")


def pci_gpus(host) -> int:
    """NVIDIA GPU functions on the PCI bus, from sysfs (vendor and class files of /sys/bus/pci/devices/*)."""
    out = host.run("grep -H . /sys/bus/pci/devices/*/vendor /sys/bus/pci/devices/*/class 2>/dev/null").stdout
    attrs: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        path, _, value = line.partition(":")
        dev, _, attr = path.rpartition("/")
        attrs.setdefault(dev, {})[attr] = value.strip()
    return sum(1 for a in attrs.values()
               if a.get("vendor") == NVIDIA_VENDOR and a.get("class", "")[:6] in GPU_CLASSES)


def smi(host, fields: str) -> list[list[str]] | None:
    """nvidia-smi --query-gpu rows, or None when nvidia-smi is missing or fails."""
    res = host.run(f"nvidia-smi --query-gpu={fields} --format=csv,noheader,nounits")
    if not res.succeeded:
        return None
    return [[x.strip() for x in line.split(",")] for line in res.stdout.splitlines() if line.strip()]


@pytest.fixture
def gpu(host, target):
    """Skip unless a GPU is visible: an NVIDIA GPU function on the PCI bus, or a GPU nvidia-smi lists."""
    on_bus, listed = pci_gpus(host), smi(host, "index")
    if not on_bus and not listed:
        pytest.skip(f"no GPU visible on {target.name}: no NVIDIA display/3D function on the PCI bus "
                    f"(/sys/bus/pci/devices) and nvidia-smi lists none "
                    f"({'missing or failing' if listed is None else 'empty list'})")
    return on_bus, listed or []


# -- driver, from its packages ------------------------------------------------------------------------------------

def test_driver_packages_at_the_pinned_versions(host, target):
    if not target.driver_from_packages:
        pytest.skip(f"--expect-driver-version {target.driver_version}: this driver did not come from v100kit's packages")
    need_program(host, "dpkg-query", "the driver packages' versions")
    wrong = {}
    for name, version in target.driver_packages.items():
        pkg = host.package(name)  # testinfra: installed counts "install" and "hold" (the deploy holds them)
        got = pkg.version if pkg.is_installed else "not installed"
        if got != version:
            wrong[name] = f"{got}, pinned {version}"
    assert not wrong, wrong


def test_driver_packages_held_and_pinned_for_apt(host, target):
    """Field case: apt or unattended-upgrades upgrading libnvidia-* under a loaded module ("Failed to initialize
    NVML: Driver/library version mismatch"). Held (apt-mark) and pinned (an apt preferences Pin at priority 1001)."""
    if not target.driver_from_packages:
        pytest.skip(f"--expect-driver-version {target.driver_version}: this driver did not come from v100kit's packages")
    need_program(host, "apt-mark", "the driver packages' holds")
    held = set(host.check_output("apt-mark showhold").split())
    assert set(target.driver_packages) <= held, f"not held: {sorted(set(target.driver_packages) - held)}"
    for name, version in target.driver_packages.items():
        policy = host.check_output(f"apt-cache policy {name}")
        assert f"Package pin: {version}" in policy or f"*** {version} 1001" in policy, policy


def test_headers_metapackage_installed(host, target):
    """DKMS builds the module for a new kernel only where that kernel's headers come with it (the metapackage)."""
    if not target.driver_from_packages:
        pytest.skip(f"--expect-driver-version {target.driver_version}: this driver did not come from v100kit's packages")
    need_program(host, "dpkg-query", "the headers metapackage")
    assert host.package(target.headers_package).is_installed, f"{target.headers_package} is not installed"


def test_nvidia_persistenced_enabled(host, target):
    need_systemd(host, "nvidia-persistenced.service")
    # systemctl(1): is-enabled exits 0 for enabled, enabled-runtime, static, alias, indirect, generated, transient
    res = host.run("systemctl is-enabled nvidia-persistenced.service")
    assert res.rc == 0, f"nvidia-persistenced.service: {res.stdout.strip() or res.stderr.strip()}"


# -- driver and GPUs, live ---------------------------------------------------------------------------------------

def loaded_module(host) -> str | None:
    """The loaded nvidia module's version: /sys/module/nvidia/version, else the NVRM line of
    /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ...")."""
    res = host.run("cat /sys/module/nvidia/version")
    if res.succeeded and res.stdout.strip():
        return res.stdout.strip()
    m = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", host.run("cat /proc/driver/nvidia/version").stdout)
    return m.group(1) if m else None


def test_driver_module_loaded_at_the_pinned_version(host, target, gpu):
    module = loaded_module(host)
    assert module is not None, "a GPU is visible but no nvidia kernel module is loaded"
    assert module == target.driver_version, f"loaded {module}, expected {target.driver_version}"
    userland = {row[0] for row in smi(host, "driver_version") or []}
    assert userland == {target.driver_version}, f"nvidia-smi reports {userland or 'nothing'}"


def test_nvidia_smi_sees_every_gpu_on_the_bus(host, target, gpu):
    on_bus, listed = gpu
    if not on_bus:
        pytest.skip(f"nvidia-smi lists {len(listed)} GPU(s) but this host shows no PCI bus (/sys/bus/pci/devices has "
                    "no NVIDIA function): nothing to count them against")
    assert len(listed) == on_bus, f"nvidia-smi lists {len(listed)}, the PCI bus has {on_bus} NVIDIA GPU functions"


def test_compute_capability_is_the_configured_one(host, target, gpu):
    caps = smi(host, "index,name,compute_cap")
    assert caps, "nvidia-smi answers nothing"
    assert {row[2] for row in caps} == {target.compute_capability}, caps


def test_persistence_mode_on(host, target, gpu):
    modes = smi(host, "index,persistence_mode")
    assert modes, "nvidia-smi answers nothing"
    assert {row[1] for row in modes} == {"Enabled"}, modes


# -- CUDA toolkits and the service user ------------------------------------------------------------------------

def test_each_toolkit_nvcc_reports_its_version(host, target):
    assert target.toolkits, "the settings configure no CUDA toolkit"
    for version, nvcc in target.toolkits:
        res = host.run(f"{nvcc} --version")
        assert res.succeeded and f"release {version}," in res.stdout, f"{nvcc}: {res.stdout or res.stderr}"


def test_service_user_is_an_unprivileged_system_user(host, target):
    passwd = host.run(f"getent passwd {target.service_user}")
    assert passwd.succeeded, f"no user {target.service_user}"
    _, _, uid, _, _, home, shell = passwd.stdout.strip().split(":")
    assert 0 < int(uid) < 1000, f"uid {uid}: not a system user (Debian Policy 9.2.2: 100-999)"
    assert shell in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false"), shell
    assert home == target.service_home


# -- inference instances ---------------------------------------------------------------------------------------

def need_services(target, engine: str | None = None):
    found = [s for s in target.services if engine is None or s.engine == engine]
    if not found:
        pytest.skip(f"the settings configure no {engine or 'inference'} instance on {target.name}")
    return found


def test_instance_units_enabled(host, target):
    services = need_services(target)
    need_systemd(host, ", ".join(s.unit for s in services))
    states = {s.unit: host.run(f"systemctl is-enabled {s.unit}.service") for s in services}
    assert all(r.rc == 0 for r in states.values()), {u: r.stdout.strip() or r.stderr.strip() for u, r in states.items()}


def test_instance_api_keys_root_only(host, target):
    """The API key is in a 0600 root file (LLAMA_API_KEY / VLLM_API_KEY), never in the unit or the arguments."""
    with_keys = [s for s in need_services(target) if s.key_file]
    if not with_keys:
        pytest.skip("no instance has an api_key_file")
    for s in with_keys:
        stat = host.run(f"stat -c '%U %a' {s.key_file}")
        assert stat.stdout.split() == ["root", "600"], f"{s.key_file}: {stat.stdout or stat.stderr}"


def health(host, service) -> str:
    # an IPv6 literal goes in brackets in a URL (RFC 3986 3.2.2): curl refuses http://::1:PORT/ as malformed
    address = f"[{service.address}]" if ":" in service.address else service.address
    url = f"http://{address}:{service.port}{service.health_path}"
    return host.run(f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 {url}").stdout.strip()


def _health_check(engine):
    """The check that every `engine` instance (roles/engines.py Engine) answers its health path with 200; on a host
    without a GPU it skips for an engine whose unit waits for one (Engine.needs_gpu)."""
    def check(host, target, request):
        if engine.needs_gpu:  # first, as a fixture would: without a GPU it skips for that reason on every host
            request.getfixturevalue("gpu")
        services = need_services(target, engine.name)
        need_program(host, "curl", "the instances' health")
        codes = {s.unit: health(host, s) for s in services}
        assert set(codes.values()) == {"200"}, codes
    check.__name__ = f"test_{engine.role}_instances_answer_health"
    check.__doc__ = (f"{engine.name} answers GET {engine.health_path} with 200 once its model is loaded"
                     + (" (its unit waits for a GPU, so this needs one)." if engine.needs_gpu
                        else ", also on the CPU: this runs with or without a GPU."))
    return check


# one health check per registered engine: test_llama_cpp_instances_answer_health, test_vllm_..., test_lmdeploy_...
for _engine in ENGINES:
    globals()[f"test_{_engine.role}_instances_answer_health"] = _health_check(_engine)
