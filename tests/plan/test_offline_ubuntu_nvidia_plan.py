"""Plan-level test (facts in, commands out) of offline provisioning for an Ubuntu 22.04 host whose CUDA 12.4 comes
from NVIDIA's repository: a path no lab host takes, and whose servers this machine cannot reach (docs/lab.md). The
settings `v100kit offline fill` writes for the host's repositories must make its deploy fetch exactly the
directory's copies: the files fill stores each URL under (offline_apt.local_path), served by the offline server.
The repository URLs are the ones Ubuntu and NVIDIA publish (Ubuntu's sources.list, NVIDIA's CUDA installation
guide for network repositories), not the toolkit's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.plan.harness import UBUNTU_2204, plan_uploads
from v100kit import offline_apt
from v100kit.offline import served_settings

DATA = {"cuda_source": "nvidia", "cuda_versions": ["12.4"]}
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
UBUNTU = "http://archive.ubuntu.com/ubuntu"
SECURITY = "http://security.ubuntu.com/ubuntu"
REPOS = [(UBUNTU, ("jammy", "jammy-updates"), ("main", "restricted", "universe", "multiverse")),
         (SECURITY, ("jammy-security",), ("main", "restricted", "universe", "multiverse")),
         (NVIDIA, ("/",), ())]
BASE = "http://10.0.0.1:8765"


def served(url: str) -> str:
    """The URL the offline server gives the file that fill stores for `url` (DIR/apt/<host>/<path>)."""
    return f"{BASE}/{offline_apt.local_path(Path('apt'), url).as_posix()}"


#: NVIDIA's own repository, and a user's mirror of it on a port (its copy lies under DIR/apt/mirror.local:8080/)
@pytest.mark.parametrize("root", [NVIDIA.removesuffix("ubuntu2204/x86_64/"), "http://mirror.local:8080/cuda/repos/"])
def test_the_deploy_fetches_nvidias_key_and_repository_from_the_directorys_copies(root):
    nvidia = root + "ubuntu2204/x86_64/"  # the repository the host reads under that root (NVIDIA's layout)
    repos = [*REPOS[:2], (nvidia, ("/",), ())]
    settings = {k: v.replace("{base}", BASE) for k, v in served_settings(repos, root).items()}
    cmds, uploads = plan_uploads(UBUNTU_2204, {**DATA, **settings})
    text = "\n".join(map(str, cmds))
    # the key: where fill put NVIDIA's 3bf863cc.pub, still checked against the pinned fingerprint
    key = re.search(r"curl \S* ?.*?(http://\S+3bf863cc\.pub)", text)
    assert key and key[1] == served(nvidia + "3bf863cc.pub")
    # each repository: apt asks for URI/InRelease (flat) or URI/dists/SUITE/InRelease, which must be the file fill
    # wrote for the original repository
    files = {k: v for k, v in uploads.items() if k.startswith("/etc/apt/sources.list.d/")}
    cuda = files["/etc/apt/sources.list.d/v100kit-cuda.sources"]
    assert re.search(r"^URIs: (\S+)$", cuda, re.M)[1].rstrip("/") + "/InRelease" == served(nvidia + "InRelease")
    assert "cuda-toolkit-12-4=12.4.1-1" in text
    asked = {uri.rstrip("/") + f"/dists/{suite}/InRelease"
             for text_ in files.values() for uri, suites in re.findall(r"^URIs: (\S+)\nSuites: ([^\n]+)$", text_, re.M)
             for suite in suites.split() if suite != "/"}
    assert asked == {served(f"{UBUNTU}/dists/{s}/InRelease") for s in ("jammy", "jammy-updates")} | \
        {served(f"{SECURITY}/dists/jammy-security/InRelease")}
    # and no command or source reaches NVIDIA or Ubuntu itself
    assert not re.search(r"https?://(developer\.download\.nvidia\.com|mirror\.local|[a-z.]*ubuntu\.com)",
                         text + "\n".join(files.values()))
