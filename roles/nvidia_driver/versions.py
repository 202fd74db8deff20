"""The driver version map: per OS and source, the exact driver versions the toolkit installs, with every apt
package of that driver at its exact version (all of them are installed explicitly, held and pinned, so nothing
of the driver can move on its own). The first entry per (platform, source) is the default.

Sources: Debian entries read with `apt-cache policy` / `apt-get install -s` against deb.debian.org on
2026-11-29 (H, re-checked by the lab tests, which install them). Ubuntu and NVIDIA-repository entries cannot be
installed here (no access to those archives): their package names follow the archives' naming (H) and their
exact versions are M; they are covered by plan-level tests only, and `apt-get install` refuses a version the
archive does not have before anything of the driver changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from roles.volta import driver_branch


@dataclass(frozen=True)
class DriverPin:
    """One installable driver: `version` ('535.261.03'), `branch` (535), and `packages` {apt name: exact
    version} to install, hold and pin. `dkms_module` is the DKMS module name that the packages register."""

    version: str
    packages: dict[str, str]
    dkms_module: str
    #: the source package the driver's own packages are built from, where known (H): Debian's
    #: nvidia-graphics-drivers, Ubuntu's nvidia-graphics-drivers-<branch>-server; None for NVIDIA's repository (its
    #: source names are not checked here: the installed pin packages tell, see decide.split_driver_packages)
    source: str | None = None

    @property
    def branch(self) -> int:
        return driver_branch(self.version)

    @property
    def server(self) -> bool:
        """True for Ubuntu's -server flavour (built from nvidia-graphics-drivers-<branch>-server), which conflicts in
        dpkg with the desktop flavour of the same branch and version (Canonical nvidia-graphics-drivers PR 59)."""
        return any(n.endswith("-server") for n in self.packages)


def _debian(version: str, revision: str, extra: dict[str, str]) -> DriverPin:
    # Every binary package of src:nvidia-graphics-drivers that a headless compute install pulls in.
    names = ("nvidia-kernel-dkms", "nvidia-kernel-support", "nvidia-smi", "libcuda1", "libnvidia-ml1",
             "libnvidia-ptxjitcompiler1", "libnvidia-cfg1", "nvidia-alternative", "nvidia-legacy-check",
             "firmware-nvidia-gsp", "libnvidia-pkcs11-openssl3")
    return DriverPin(version, {n: f"{version}-{revision}" for n in names} | extra, "nvidia-current",
                     "nvidia-graphics-drivers")


def _ubuntu_server(version: str, branch: int, revision: str) -> DriverPin:
    names = (f"nvidia-dkms-{branch}-server", f"nvidia-kernel-common-{branch}-server",
             f"nvidia-kernel-source-{branch}-server", f"nvidia-utils-{branch}-server",
             f"nvidia-compute-utils-{branch}-server", f"libnvidia-compute-{branch}-server",
             f"libnvidia-cfg1-{branch}-server")
    return DriverPin(version, {n: f"{version}-{revision}" for n in names}, "nvidia",
                     f"nvidia-graphics-drivers-{branch}-server")


def _nvidia_repo(version: str, family: str) -> DriverPin:
    branch = driver_branch(version)
    # cuda-drivers-<branch> is the proprietary-module metapackage; the DKMS package is named explicitly so
    # that apt can never satisfy it with an -open module (NVIDIA's default from 560 on).
    dkms = "nvidia-kernel-dkms" if family == "debian" else f"nvidia-dkms-{branch}"
    return DriverPin(version, {f"cuda-drivers-{branch}": f"{version}-1", dkms: f"{version}-1"}, "nvidia")


#: (platform id, source) -> installable drivers, default first.
DRIVER_PINS: dict[tuple[str, str], tuple[DriverPin, ...]] = {
    ("debian12", "distro"): (
        _debian("535.261.03", "1", {"nvidia-persistenced": "535.171.04-1~deb12u1",
                                    "nvidia-modprobe": "535.161.07-1~deb12u1"}),),
    ("debian13", "distro"): (
        _debian("550.163.01", "2", {"nvidia-persistenced": "550.163.01-1", "nvidia-modprobe": "570.133.07-1"}),),
    # R580 is the default on Ubuntu: the last branch with Volta, LTSB until 2028-08 (R535 ended 2026-06;
    # docs/volta.md §1).
    ("ubuntu2204", "distro"): (_ubuntu_server("580.95.05", 580, "0ubuntu0.22.04.1"),
                               _ubuntu_server("535.274.02", 535, "0ubuntu0.22.04.1")),
    ("ubuntu2404", "distro"): (_ubuntu_server("580.95.05", 580, "0ubuntu0.24.04.1"),
                               _ubuntu_server("535.274.02", 535, "0ubuntu0.24.04.1")),
    ("debian12", "nvidia"): (_nvidia_repo("550.54.15", "debian"), _nvidia_repo("580.95.05", "debian")),
    ("ubuntu2204", "nvidia"): (_nvidia_repo("550.54.15", "ubuntu"), _nvidia_repo("580.95.05", "ubuntu")),
    ("ubuntu2404", "nvidia"): (_nvidia_repo("580.95.05", "ubuntu"),),
}
