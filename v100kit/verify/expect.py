"""What `v100kit verify` expects of one host, taken from the host's settings through the same preflight that
`deploy.py`, `plan` and `doctor` run (roles/preflight.py), and how testinfra reaches the host. Pure: a HostPlan in,
a Target out; nothing here reads a host."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

from roles.preflight import HostPlan


@dataclass(frozen=True)
class Service:
    """One inference instance: its systemd unit, the port it listens on and the address the check asks."""

    unit: str  # 'llama-server@tiny' or 'vllm@tiny'
    engine: str  # the registered engine's name: 'llama.cpp', 'vllm', 'lmdeploy' (roles/engine_registry.py)
    port: int
    address: str  # where the host itself reaches it: the listen address, loopback for 0.0.0.0
    key_file: str | None  # /etc/<engine>/NAME.key.env when an api_key_file is set, else None
    health_path: str = "/health"  # what the engine answers 200 on once it serves (Engine.health_path)
    needs_gpu: bool = True  # the unit waits for a GPU: its health is asked only where one is (Engine.needs_gpu)


@dataclass(frozen=True)
class Target:
    """One inventory host as the host suite checks it. Every expected value comes from the host's settings (or
    the version map they select), never from the host itself."""

    name: str  # inventory name
    url: str  # testinfra backend URL
    driver_version: str  # the pinned driver (e.g. '550.163.01'), or the one given with --expect-driver-version
    driver_packages: dict[str, str]  # {apt name: exact Debian version} of the pin
    headers_package: str  # the kernel headers metapackage DKMS builds against (e.g. 'linux-headers-amd64')
    driver_from_packages: bool  # False when --expect-driver-version replaced the pin (a driver not from v100kit)
    compute_capability: str  # gpu_compute_capability, e.g. '7.0'
    toolkits: tuple[tuple[str, str], ...]  # (version '12.4', absolute nvcc path) per configured CUDA toolkit
    service_user: str
    service_home: str
    services: tuple[Service, ...] = field(default_factory=tuple)


def _reach(listen: str) -> str:
    return "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen


def services(plan: HostPlan) -> tuple[Service, ...]:
    """The instances the settings configure (llama-server@NAME, vllm@NAME: each registered engine's, in the
    registry's order)."""
    out: list[Service] = []
    for engine, p in plan.engine_plans():
        for i in engine.instances(p):
            out.append(Service(engine.unit_of(i.name), engine.name, i.settings.port, _reach(i.settings.listen),
                               engine.key_file(i.name) if i.api_key else None, engine.health_path,
                               engine.needs_gpu))
    return tuple(out)


def testinfra_url(name: str, data: dict) -> str:
    """testinfra's backend URL for a pyinfra host: local:// for `@local`, else paramiko over the host data's SSH
    settings (ssh_hostname, ssh_port, ssh_user, ssh_key) with sudo where the inventory asks for `_sudo`."""
    if name == "@local" or name.startswith("@local/"):
        return "local://"
    user = data.get("ssh_user")  # None: paramiko's default, the local user (as pyinfra's)
    hostname = data.get("ssh_hostname") or name
    port = data.get("ssh_port") or 22
    query = {}
    if data.get("ssh_key"):
        query["ssh_identity_file"] = str(data["ssh_key"])
    if data.get("_sudo") and user not in (None, "root"):
        query["sudo"] = "true"
    return f"paramiko://{quote(user) + '@' if user else ''}{hostname}:{port}" + (f"?{urlencode(query)}" if query else "")


def target(name: str, data: dict, plan: HostPlan, expect_driver_version: str | None = None) -> Target:
    """The Target of one host from its pyinfra data and its preflight plan. `expect_driver_version`: a machine whose
    driver did not come from v100kit (its packages then are not checked against the pin)."""
    pin = plan.driver.pin
    return Target(
        name=name, url=testinfra_url(name, data),
        driver_version=expect_driver_version or pin.version,
        driver_packages={} if expect_driver_version else dict(pin.packages),
        headers_package=plan.driver.headers_package, driver_from_packages=expect_driver_version is None,
        compute_capability=plan.settings.gpu_compute_capability,
        toolkits=tuple((tk.version, tk.nvcc) for tk in plan.toolkits),
        service_user=plan.settings.base_service_user, service_home=plan.settings.base_service_home,
        services=services(plan))
