"""The driver version map: per OS and source, the exact driver versions the toolkit installs, with every apt
package of that driver at its exact version (all of them are installed explicitly, held and pinned, so nothing
of the driver can move on its own). The first entry per (platform, source) is the default.

Sources: Debian entries read with `apt-cache policy` / `apt-get install -s` against deb.debian.org on
2026-11-29 (H, re-checked by the lab tests, which install them; trixie re-read with `apt-cache madison` on
2026-12: nvidia-driver 550.163.01-2 is the newest, beside nvidia-tesla-535 535.274.02-1~deb13u1: Debian carries
no 580 package in any release). Ubuntu and NVIDIA-repository entries cannot be installed here (no access to those
archives): each 580 entry names the public record that shows the exact package version in the archive (M: one
or two secondary sources each); they are covered by plan-level tests only, and `apt-get install` refuses a
version the archive does not have before anything of the driver changes. Runfile entries carry the sha256 that
two independent public records agree on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roles.volta import driver_branch, version_tuple


@dataclass(frozen=True)
class Runfile:
    """NVIDIA's .run installer of one driver version: `url` on NVIDIA's download server, `sha256` (hex) and `size`
    (bytes) of the file, `evidence`: the public records the checksum comes from (NVIDIA publishes none for .run
    drivers, so two independent ones that agree are required)."""

    url: str
    sha256: str
    size: int
    evidence: tuple[str, ...] = field(default_factory=tuple)

    @property
    def file_name(self) -> str:
        """'NVIDIA-Linux-x86_64-580.173.02.run'"""
        return self.url.rsplit("/", 1)[-1]


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
    #: where the driver comes from: 'distro' (the distribution's archive), 'nvidia' (NVIDIA's CUDA repository),
    #: 'runfile' (NVIDIA's .run installer; `packages` is then the stand-in package that records it for dpkg)
    origin: str = "distro"
    #: the .run installer of a 'runfile' pin, None otherwise
    runfile: Runfile | None = None
    #: the public record that shows this exact version exists where `origin` says (why it is in the map)
    evidence: str = ""

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


def _ubuntu_server(version: str, branch: int, revision: str, evidence: str = "") -> DriverPin:
    names = (f"nvidia-dkms-{branch}-server", f"nvidia-kernel-common-{branch}-server",
             f"nvidia-kernel-source-{branch}-server", f"nvidia-utils-{branch}-server",
             f"nvidia-compute-utils-{branch}-server", f"libnvidia-compute-{branch}-server",
             f"libnvidia-cfg1-{branch}-server")
    return DriverPin(version, {n: f"{version}-{revision}" for n in names}, "nvidia",
                     f"nvidia-graphics-drivers-{branch}-server", evidence=evidence)


def _nvidia_repo(version: str, family: str, revision: str = "1", evidence: str = "") -> DriverPin:
    branch = driver_branch(version)
    # cuda-drivers-<branch> is the proprietary-module metapackage of one branch; the branchless cuda-drivers and
    # nvidia-open are never named (BRANCHLESS_METAPACKAGES). The DKMS package is named explicitly so that apt can
    # never satisfy it with an -open module (NVIDIA's default from 560 on).
    dkms = "nvidia-kernel-dkms" if family == "debian" else f"nvidia-dkms-{branch}"
    return DriverPin(version, {f"cuda-drivers-{branch}": f"{version}-{revision}", dkms: f"{version}-{revision}"},
                     "nvidia", origin="nvidia", evidence=evidence)


#: The stand-in package that records a runfile driver for dpkg (roles/nvidia_driver/templates/runfile-control.j2):
#: its version is the driver's, it is held like any driver package, it Provides libcuda.so.1 at that version so that
#: Debian's nvidia-cuda-toolkit (nvidia-cuda-dev Depends: libcuda1 (>= 550) | libcuda.so.1 (>= 550) |
#: libcuda-12.4-1) installs without Debian's 550 libcuda1 beside the runfile's libraries (apt-get install -s
#: against trixie with the stand-in in dpkg's status: no libcuda1, nvidia-alternative or nvidia-kernel-* is pulled
#: in; checked 2026-12), and it Conflicts with Debian's driver packages so that apt can never mix them in.
RUNFILE_STANDIN = "v100kit-nvidia-runfile"
#: its Source field: DriverPackages (facts.py) reads packages of nvidia-graphics-drivers* sources, so the doctor
#: and the holds see the stand-in like the packages of a packaged driver
RUNFILE_STANDIN_SOURCE = "nvidia-graphics-drivers-runfile"
#: Where the .run file is kept on the host (a re-deploy finds it there and downloads nothing).
RUNFILE_DIR = "/var/cache/v100kit/nvidia-runfile"


def _runfile(version: str, url: str, sha256: str, size: int, evidence: tuple[str, ...]) -> DriverPin:
    return DriverPin(version, {RUNFILE_STANDIN: version}, "nvidia", RUNFILE_STANDIN_SOURCE, origin="runfile",
                     runfile=Runfile(url, sha256, size, evidence), evidence="; ".join(evidence))


#: CUDA 13.0 Update 2's bundled driver, by NVIDIA's own installer name
_CUDA_13_0_2_DRIVER = ("developer.download.nvidia.com/compute/cuda/13.0.2/local_installers/cuda_13.0.2_580.95.05_linux.run "
                       "(installed by that name in pytorch .ci/docker/common/install_cuda.sh)")

#: (platform id, source) -> installable drivers, default first.
DRIVER_PINS: dict[tuple[str, str], tuple[DriverPin, ...]] = {
    ("debian12", "distro"): (
        _debian("535.261.03", "1", {"nvidia-persistenced": "535.171.04-1~deb12u1",
                                    "nvidia-modprobe": "535.161.07-1~deb12u1"}),),
    # Debian carries only the 550 branch, whose support ended in 2025 (docs/volta.md §1); for R580 on Debian 13 see
    # the runfile source below
    ("debian13", "distro"): (
        _debian("550.163.01", "2", {"nvidia-persistenced": "550.163.01-1", "nvidia-modprobe": "570.133.07-1"}),),
    # R580 is the default on Ubuntu: the last branch with Volta, LTSB until 2028-08 (R535 ended 2026-06;
    # docs/volta.md §1). Each 580 entry is the newest -server point release a public record shows in that release's
    # -updates (an older one leaves the archive's pool when it is superseded).
    ("ubuntu2204", "distro"): (
        _ubuntu_server("580.178.04", 580, "0ubuntu0.22.04.1",
                       "libnvidia-gl-580-server=580.178.04-0ubuntu0.22.04.1 installed from the archive on a GCP "
                       "Ubuntu 22.04 CUDA image (public benchmark README, 2026-09); the desktop flavour "
                       "580.173.02-0ubuntu0.22.04.1 is in snapshot.ubuntu.com jammy of 2026-09-01"),
        _ubuntu_server("535.274.02", 535, "0ubuntu0.22.04.1")),
    ("ubuntu2404", "distro"): (
        # 580.178.04 is shown for noble only in the desktop flavour (nvidia-driver-580 and nvidia-kernel-source-580-open
        # 580.178.04-0ubuntu0.24.04.1), not yet in -server: the pin stays at the newest -server release shown
        _ubuntu_server("580.173.02", 580, "0ubuntu0.24.04.1",
                       "nvidia-driver-580-server=580.173.02-0ubuntu0.24.04.1: packages.ubuntu.com/noble, retrieved "
                       "2026-09-07, and apt installs of it in two public provisioning scripts"),
        _ubuntu_server("535.274.02", 535, "0ubuntu0.24.04.1")),
    # NVIDIA's repositories default to their newest R580 shown: R580 is the last branch with Volta and 550 has ended
    # (issue 28; NVIDIA's own ansible role moved its default to 580: NVIDIA/ansible-role-nvidia-driver#89). 550.54.15
    # (CUDA 12.4 Update 1's driver) stays pinnable where the repository carries it, below KERNEL_MIN_DRIVER's 550 rows.
    # NVIDIA's debian12 repository: nvidia-kernel-dkms=580.159.04-1 and 580.126.20-1 are installed from it in public
    # provisioning notes (2026-05); cuda-drivers-580 follows NVIDIA's -1 revision there (M)
    ("debian12", "nvidia"): (_nvidia_repo("580.159.04", "debian", evidence="nvidia-kernel-dkms=580.159.04-1 from "
                                          "developer.download.nvidia.com/compute/cuda/repos/debian12 (public notes, "
                                          "2026-05)"),
                             _nvidia_repo("550.54.15", "debian")),
    # NVIDIA's ubuntu repositories: no public record of a newer x86_64 cuda-drivers-580 revision was found (the sbsa
    # repository shows cuda-drivers-580=580.159.04-1ubuntu1, another revision scheme than the -1 used here), so these
    # stay at 580.95.05, the driver of CUDA 13.0 Update 2, which NVIDIA's repositories carry with each CUDA release (M)
    ("ubuntu2204", "nvidia"): (_nvidia_repo("580.95.05", "ubuntu", evidence=_CUDA_13_0_2_DRIVER),
                               _nvidia_repo("550.54.15", "ubuntu")),
    ("ubuntu2404", "nvidia"): (_nvidia_repo("580.95.05", "ubuntu", evidence=_CUDA_13_0_2_DRIVER),),
    # NVIDIA's .run installer: the only R580 for Debian 13 (Debian has none, NVIDIA's debian13 repository carries
    # 590+ only). sha256 from flathub/org.freedesktop.Platform.GL.nvidia data/nvidia-<version>-x86_64.data
    # (sha256sum of the downloaded file, with its size) and from nixpkgs pkgs/os-specific/linux/nvidia-x11/default.nix
    # (SRI base64 converted to hex); both agree for each entry.
    ("debian13", "runfile"): (
        _runfile("580.173.02",
                 "https://us.download.nvidia.com/XFree86/Linux-x86_64/580.173.02/NVIDIA-Linux-x86_64-580.173.02.run",
                 "8d8eb9001e05a9a8a663d3d5d304feb64ef2844ee185ccdfd952786820f46e1b", 398312209,
                 ("flathub/org.freedesktop.Platform.GL.nvidia data/nvidia-580.173.02-x86_64.data",
                  "nixpkgs legacy_580 sha256_64bit sha256-jY65AB4FqaimY9PV0wT+tk7yhE7hhczf2VJ4aCD0bhs= "
                  "(NixOS/nixpkgs#538659)")),
        # the data-center (tesla) build, the first with Linux 7.1 support (KERNEL_MIN_DRIVER)
        _runfile("580.159.04",
                 "https://us.download.nvidia.com/tesla/580.159.04/NVIDIA-Linux-x86_64-580.159.04.run",
                 "c1e66761b088d17b3adf6cb6979de9af38be2684d102b001a176dcfafabdca1e", 397162548,
                 ("flathub/org.freedesktop.Platform.GL.nvidia data/nvidia-580.159.04-x86_64.data",
                  "nixpkgs dc_580 sha256_64bit sha256-weZnYbCI0Xs632y2l53przi+JoTRArABoXbc+vq9yh4= "
                  "(NixOS/nixpkgs#520219)"))),
}

#: Branchless metapackages of NVIDIA's newer repositories: they follow the newest branch (590+, which ignores a
#: V100), and the branchless cuda-drivers installs no kernel module (cupy/cupy#10295). Never installed: a pin names
#: cuda-drivers-<branch> and the module package (decide.branchless_metapackages refuses any pin that names one).
BRANCHLESS_METAPACKAGES = ("cuda-drivers", "nvidia-open")

#: NVIDIA CUDA repositories that carry only branches after R580 (no driver for compute capability below 7.5):
#: platform id -> the public record. (NVIDIA/cuda-repo-management#38, #40: the debian13 repository has 590+ only)
NVIDIA_REPO_WITHOUT_VOLTA: dict[str, str] = {
    "debian13": "NVIDIA's debian13 CUDA repository carries driver branches 590 and newer only "
                "(NVIDIA/cuda-repo-management#38, #40)",
}


@dataclass(frozen=True)
class KernelFloor:
    """The oldest point release of a driver branch that builds its kernel module on a kernel series: `series`
    ('7.1'), `version` ('580.159.04'), `evidence` (the public reports)."""

    series: str
    version: str
    evidence: str


#: driver branch -> the kernel series that needed a newer point release of it, oldest first. A kernel of series S
#: needs at least the version of the newest row whose series is <= S (a release that builds on 7.1 builds on 7.0).
KERNEL_MIN_DRIVER: dict[int, tuple[KernelFloor, ...]] = {
    580: (
        KernelFloor("6.19", "580.126.18", "NVIDIA 580.126.18 release notes 'Fixed kernel module build issue with Linux "
                    "kernel v6.19' (NixOS/nixpkgs#491462, glfs-book/glfs#376)"),
        KernelFloor("7.0", "580.142", "580.119.02 fails on 7.0.9 (Frogging-Family/nvidia-all#379), 580.126.18 on "
                    "7.0.1 without a distribution patch (void-linux/void-packages#60171); 580.142 runs on 7.0.12 "
                    "(void-linux/void-packages#61087) (M)"),
        KernelFloor("7.1", "580.159.04", "580.142 fails on 7.1; 580.159.04 'Fixed kernel module build issue with "
                    "Linux kernel v7.1' (void-linux/void-packages#61087; NixOS/nixpkgs#538659)"),
    ),
    570: (
        KernelFloor("6.15", "570.169", "570.153 fails on 6.15, 570.169 builds (damentz/liquorix-package#198)"),
        KernelFloor("6.17", "570.195.03", "570.183 fails on 6.17.1, 570.195.03 builds (Frogging-Family/nvidia-all#310)"),
    ),
    550: (
        # no public record found of the first 550 release that builds on 6.10: the floor is the oldest 550 shown to
        # build on 6.10 or newer, Debian 13's 550.163.01 for its 6.12 kernel (conservative)
        KernelFloor("6.10", "550.163.01", "550.78 fails to build on 6.10.5 (NixOS/nixpkgs#332350); Debian 13 ships "
                    "550.163.01 for its 6.12 kernel (apt-cache madison, trixie) (M: the oldest 550 that builds on 6.10 "
                    "is not known)"),
    ),
}

#: driver branch -> (the newest kernel series it is known to build on, the evidence). A kernel of a newer series is
#: refused unless nvidia_driver_allow_untested_kernel is set: out-of-tree modules that predate a kernel series are
#: not expected to build on it (void-linux/void-packages#61087, #55536: the maintainers' guidance).
KERNEL_NEWEST_KNOWN: dict[int, tuple[str, str]] = {
    580: ("7.1", "580.159.04 and newer build on 7.1 (void-linux/void-packages#61087; NixOS/nixpkgs#538659)"),
    570: ("6.17", "570.195.03 builds on 6.17 (Frogging-Family/nvidia-all#310)"),
    550: ("6.12", "Debian 13 ships 550.163.01 for its 6.12 kernel (apt-cache madison, trixie)"),
    # Debian's bookworm-backports carries nvidia-kernel-dkms 535.216.03-2~bpo12+1 beside linux-image-amd64
    # 6.12.95-1~bpo12+1 (apt-cache madison, 2026-12-02): the 535 branch is packaged for 6.12 kernels (M: the archive
    # shows the pair, not a build log).
    535: ("6.12", "Debian's bookworm-backports ships 535.216.03 for its 6.12 kernel (apt-cache madison, "
                  "bookworm-backports, 2026-12-02)"),
}


def kernel_series_tuple(series: str) -> tuple[int, int]:
    """'6.19' -> (6, 19); raises ValueError for anything else."""
    major, minor = series.split(".")
    return int(major), int(minor)


def kernel_min_driver(branch: int, series: str) -> KernelFloor | None:
    """The floor a kernel of `series` ('7.0') sets for driver `branch`: the newest KERNEL_MIN_DRIVER row of that
    branch whose series is <= `series`; None where no row applies."""
    rows = [r for r in KERNEL_MIN_DRIVER.get(branch, ())
            if kernel_series_tuple(r.series) <= kernel_series_tuple(series)]
    return max(rows, key=lambda r: kernel_series_tuple(r.series), default=None)


def below(version: str, floor: str) -> bool:
    """True when driver `version` is older than `floor` ('580.142' < '580.159.04')."""
    return version_tuple(version) < version_tuple(floor)
