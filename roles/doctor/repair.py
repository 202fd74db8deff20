"""Repair steps that run before the normal roles (repair.py, then deploy.py): they remove what the roles cannot
converge on their own. Each step looks at the host when it runs and does nothing on a healthy host."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy, operation

from roles.doctor.facts import RUNFILE_UNINSTALLER, DpkgAudit, RunfileMarkers
from roles.facts import AptHolds
from roles.nvidia_driver.decide import split_driver_packages
from roles.nvidia_driver.facts import DriverPackages
from roles.nvidia_driver.versions import DriverPin

APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"


@operation()
def finish_half_installed():
    """dpkg --configure -a when dpkg --audit reports unfinished packages."""
    if host.get_fact(DpkgAudit):
        yield "dpkg --configure -a"


@operation()
def remove_runfile_driver(pin: DriverPin):
    """Run the .run driver's own uninstaller: a runfile install under packages breaks both. Not for a runfile pin
    (nvidia_driver_source: runfile), whose driver the .run installer is."""
    if pin.runfile is None and host.get_fact(RunfileMarkers):
        yield f"{RUNFILE_UNINSTALLER} --silent"


@operation()
def purge_other_branches(pin: DriverPin):
    """Purge installed driver packages that are not the pin's (another branch or version, the other -server/desktop
    flavour, the open kernel module's packages), releasing their holds first: installing an exact pin over them otherwise ends in "held broken packages". Pinned packages at another
    version are released so that the role can reinstall them at the pin."""
    pkgs = host.get_fact(DriverPackages)
    held = set(host.get_fact(AptHolds))
    others = sorted(split_driver_packages(pkgs, pin)[1])
    off_pin = sorted(n for n, p in pkgs.items() if n in pin.packages and p["version"] != pin.packages[n])
    release = sorted((set(others) | set(off_pin)) & held)
    if release:
        yield "apt-mark unhold " + " ".join(release)
    if others:
        yield f"{APT} purge " + " ".join(others)


@deploy("Repair")
def repair(pin: DriverPin) -> None:
    finish_half_installed(name="finish half-installed packages")
    remove_runfile_driver(name="remove a runfile driver", pin=pin)
    purge_other_branches(name="purge other driver branches", pin=pin)
