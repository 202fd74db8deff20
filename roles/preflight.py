"""Preflight: everything about one host that can be refused is decided here, from settings and read-only facts,
before any operation is added. A refusal raises SettingsError, which stops the deploy on every host."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api.host import Host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import OsRelease

from roles import cuda, nvidia_driver
from roles.cuda.versions import Toolkit
from roles.platform import Platform, platform_from_os_release
from roles.settings import Settings, SettingsError, load_settings


@dataclass(frozen=True)
class HostPlan:
    """The validated settings and the resolved stack of one host."""

    settings: Settings
    platform: Platform
    driver: nvidia_driver.DriverPlan
    toolkits: list[Toolkit]  # default toolkit first


def preflight(host: Host) -> HostPlan:
    """Validate the host's settings and its whole stack. Raises SettingsError listing every problem."""
    settings = load_settings(host.name, host.data.dict())
    platform = platform_from_os_release(host.name, host.get_fact(OsRelease))
    driver, problems = nvidia_driver.plan(settings, platform, host.get_fact(DebPackages))
    toolkits, cuda_problems = cuda.plan(settings, platform, driver.pin if driver else None)
    if problems or cuda_problems or driver is None:
        raise SettingsError(host.name, problems + cuda_problems)
    return HostPlan(settings, platform, driver, toolkits)
