"""The CUDA toolkit version map: per OS and source, the toolkits the toolkit installs, with exact package
versions and the nvcc each one provides.

Debian's nvidia-cuda-toolkit entries were read with `apt-cache policy` against deb.debian.org on 2026-11-29 (H,
installed by the lab tests). NVIDIA-repository entries follow NVIDIA's package naming (`cuda-toolkit-X-Y`,
installed under /usr/local/cuda-X.Y side by side) (H); their exact versions and which OS repository carries
which toolkit are M (NVIDIA's debian12 repository starts at CUDA 12.3; CUDA 12.4 predates Ubuntu 24.04 support),
covered by plan-level tests only.
"""

from __future__ import annotations

from dataclasses import dataclass

from roles.volta import version_tuple

#: Fingerprint of NVIDIA's CUDA repository signing key (3bf863cc.pub, in use since the 2022 key rotation;
#: NVIDIA "CUDA Linux repository key rotation" notice; M). The key is verified against it before apt trusts it.
NVIDIA_REPO_KEY_FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"
#: its file name in each OS directory of the repository (and of a mirror, or an offline directory)
NVIDIA_REPO_KEY_FILE = "3bf863cc.pub"
#: NVIDIA's repository directory per platform id.
NVIDIA_REPOS = {"debian12": "debian12", "ubuntu2204": "ubuntu2204", "ubuntu2404": "ubuntu2404"}


@dataclass(frozen=True)
class Toolkit:
    """One installable CUDA toolkit: `version` ('12.4'), `source`, `packages` {apt name: exact version},
    `nvcc` (absolute path of its compiler), `home` (CUDA_HOME, None for Debian's split layout) and
    `host_compiler`, the g++ package nvcc accepts on that OS (nvcc refuses newer host compilers: CUDA 11.7/11.8
    need gcc <= 11, CUDA 12.4 gcc <= 13; CUDA install guides, H; docs/volta.md §2)."""

    version: str
    source: str
    packages: dict[str, str]
    nvcc: str
    home: str | None
    host_compiler: str

    @property
    def major(self) -> int:
        return version_tuple(self.version)[0]


def _nvidia(version: str, package_version: str, host_compiler: str) -> Toolkit:
    home = f"/usr/local/cuda-{version}"
    return Toolkit(version, "nvidia", {f"cuda-toolkit-{version.replace('.', '-')}": package_version},
                   f"{home}/bin/nvcc", home, host_compiler)


#: platform id -> the distribution's own toolkit (one per release).
DISTRO_TOOLKITS: dict[str, Toolkit] = {
    "debian12": Toolkit("11.8", "distro", {"nvidia-cuda-toolkit": "11.8.89~11.8.0-5~deb12u1"}, "/usr/bin/nvcc", None,
                        "g++-11"),
    "debian13": Toolkit("12.4", "distro", {"nvidia-cuda-toolkit": "12.4.131~12.4.1-2"}, "/usr/bin/nvcc", None,
                        "g++-13"),
}

#: (platform id, version) -> toolkit from NVIDIA's repository. The first per platform is that source's default.
NVIDIA_TOOLKITS: dict[tuple[str, str], Toolkit] = {
    ("debian12", "12.4"): _nvidia("12.4", "12.4.1-1", "g++-12"),
    ("ubuntu2204", "12.4"): _nvidia("12.4", "12.4.1-1", "g++-11"),
    ("ubuntu2204", "11.7"): _nvidia("11.7", "11.7.1-1", "g++-11"),
    ("ubuntu2404", "12.6"): _nvidia("12.6", "12.6.3-1", "g++-13"),
    # CUDA 12.8 and 12.9: NVIDIA's debian12, ubuntu2204 and ubuntu2404 repositories carry cuda-toolkit-12-8 and
    # cuda-toolkit-12-9 (NVIDIA's own install lines name them per OS, e.g. cuda-repo-debian12-12-8-local_12.8.1 in
    # finnwilliamsml/searchless-chess-container scripts/05_build_stockfish.sh, cuda-repo-ubuntu2204-12-8-local_12.8.1
    # in xuanzhaopeng/curriculum0 scripts/cuda-install.sh, cuda-repo-ubuntu2204-12-9-local_12.9.1 in
    # kutlay/getting-started-with-cuopt 0-install-environment.sh; M). Both accept gcc up to 14 (CUDA 12.8/12.9
    # installation guides), so each OS keeps its own g++. Not defaults: llama.cpp built with 12.9 fails to
    # allocate its weights on a V100 (ggml-org/llama.cpp#28416), and the llama.cpp role prefers 12.8 (decide.py).
    ("debian12", "12.8"): _nvidia("12.8", "12.8.1-1", "g++-12"),
    ("debian12", "12.9"): _nvidia("12.9", "12.9.1-1", "g++-12"),
    ("ubuntu2204", "12.8"): _nvidia("12.8", "12.8.1-1", "g++-11"),
    ("ubuntu2204", "12.9"): _nvidia("12.9", "12.9.1-1", "g++-11"),
    ("ubuntu2404", "12.8"): _nvidia("12.8", "12.8.1-1", "g++-13"),
    ("ubuntu2404", "12.9"): _nvidia("12.9", "12.9.1-1", "g++-13"),
}
