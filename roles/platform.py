"""The operating systems the toolkit supports, identified from /etc/os-release."""

from __future__ import annotations

from dataclasses import dataclass

from roles.settings import SettingsError


@dataclass(frozen=True)
class Platform:
    """A supported OS release: id ('debian12'), family ('debian' | 'ubuntu'), codename ('bookworm')."""

    id: str
    family: str
    codename: str
    python: str  # the distribution's python3 (major.minor), for the vLLM role


SUPPORTED: dict[str, Platform] = {
    p.id: p for p in (
        Platform("debian12", "debian", "bookworm", "3.11"),
        Platform("debian13", "debian", "trixie", "3.13"),
        Platform("ubuntu2204", "ubuntu", "jammy", "3.10"),
        Platform("ubuntu2404", "ubuntu", "noble", "3.12"),
    )
}


def platform_from_os_release(host_name: str, os_release: dict | None) -> Platform:
    """Map the OsRelease fact ({'id': 'debian', 'version_id': '12', ...}) to a Platform.

    Raises SettingsError (before any change) for an OS the toolkit has no version map for.
    """
    os_release = os_release or {}  # no /etc/os-release at all
    key = f"{os_release.get('id', '?')}{os_release.get('version_id', '?').replace('.', '')}"
    if key not in SUPPORTED:
        raise SettingsError(host_name, [
            f"operating system {os_release.get('pretty_name', key)!r} is not supported: the driver and CUDA "
            f"version maps cover {', '.join(SUPPORTED)}. Fix: install one of those releases"])
    return SUPPORTED[key]
