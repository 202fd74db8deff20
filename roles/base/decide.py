"""base decisions, pure: settings and facts in, refusals out. No operations are imported here."""

from __future__ import annotations

from pathlib import Path

from roles.settings import Settings, problem

MIRRORS = {
    "debian": ("http://deb.debian.org/debian", "http://security.debian.org/debian-security"),
    "ubuntu": ("http://archive.ubuntu.com/ubuntu", "http://security.ubuntu.com/ubuntu"),
}

#: Packages every later role relies on (download with checksums, PCI listing, module tools).
BASE_PACKAGES = ["ca-certificates", "curl", "gnupg", "pciutils", "kmod", "procps", "lsb-release"]

#: The distribution's own source files, replaced by ours. Renamed with `.disabled`, which apt ignores silently
#: (Dir::Ignore-Files-Silently), so the user's original content stays on the host.
DISTRO_SOURCE_FILES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources",
                       "/etc/apt/sources.list.d/ubuntu.sources")


def check(settings: Settings, users: dict) -> list[str]:
    """Refusals from host facts: `users` is pyinfra's Users fact ({name: {'uid', 'home', ...}}). Returns
    SettingsError lines, [] when none: see ca_files_not_pem and service_user_taken."""
    return ca_files_not_pem(settings) + service_user_taken(settings, users)


def ca_files_not_pem(settings: Settings) -> list[str]:
    """base_ca_certificates must be PEM certificate files on the control machine (read here, not on the host)."""
    return [problem("base_ca_certificates", path, "not a PEM certificate file on the control machine",
                    "give the path of the proxy's CA certificate (PEM)")
            for path in settings.base_ca_certificates if not _is_pem_file(Path(path).expanduser())]


def _is_pem_file(p: Path) -> bool:
    return p.is_file() and "-----BEGIN CERTIFICATE-----" in p.read_text(errors="replace")


def service_user_taken(settings: Settings, users: dict) -> list[str]:
    """The service user must be a system account of its own (1 <= uid < 1000, home = base_service_home), never
    root or a login user: the role sets its shell to nologin and its home. An absent account is fine."""
    u = users.get(settings.base_service_user)
    if u is None:
        return []
    uid = int(u.get("uid") or 0)
    if uid == 0 or uid >= 1000 or (u.get("home") or "").rstrip("/") != settings.base_service_home.rstrip("/"):
        return [problem("base_service_user", settings.base_service_user,
                        f"an existing account (uid {uid}, home {u.get('home')}) would get nologin and a "
                        "new home", "choose a name no account has yet, e.g. 'llm' (the default)")]
    return []
