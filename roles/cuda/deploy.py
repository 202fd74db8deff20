"""cuda deploy: NVIDIA's repository (key fingerprint checked) where a toolkit comes from it, the toolkits, and
/usr/local/cuda, PATH and the loader at the default one."""

from __future__ import annotations

import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import Link
from pyinfra.facts.server import Command
from pyinfra.operations import apt, files, server

from roles.base.deploy import update_if_stale
from roles.cuda.decide import nvidia_repo_url
from roles.cuda.versions import NVIDIA_REPO_KEY_FILE, NVIDIA_REPO_KEY_FINGERPRINT, Toolkit
from roles.ops import CURL_RETRY
from roles.platform import Platform
from roles.settings import Settings

TEMPLATES = Path(__file__).parent / "templates"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
RETRY = " ".join(f"{flag} {value}" for flag, value in CURL_RETRY.items())


@operation()
def nvidia_repo_key(url: str):
    """NVIDIA's repository key at KEYRING, accepted only if its fingerprint is the pinned one."""
    have = host.get_fact(Command, command=f"gpg --show-keys --with-colons {KEYRING} 2>/dev/null | "
                                           "awk -F: '$1==\"fpr\"{print $10; exit}'")
    if (have or "").strip() == NVIDIA_REPO_KEY_FINGERPRINT:
        return
    yield (f"set -e; t=$(mktemp); curl -fsSL {RETRY} {shlex.quote(url + NVIDIA_REPO_KEY_FILE)} -o $t; "
           f"f=$(gpg --show-keys --with-colons $t | awk -F: '$1==\"fpr\"{{print $10; exit}}'); "
           f"if [ \"$f\" != {NVIDIA_REPO_KEY_FINGERPRINT} ]; then echo \"NVIDIA repo key fingerprint $f is not the "
           f"pinned {NVIDIA_REPO_KEY_FINGERPRINT}\" >&2; rm -f $t; exit 1; fi; "
           f"gpg --dearmor < $t > {KEYRING}.new; mv -f {KEYRING}.new {KEYRING}; rm -f $t")


@operation()
def default_toolkit(home: str):
    """/usr/local/cuda -> `home` through the `cuda` alternative that NVIDIA's packages register."""
    if (host.get_fact(Link, path="/etc/alternatives/cuda") or {}).get("link_target") != home:
        yield f"update-alternatives --set cuda {home}"


@deploy("CUDA")
def cuda(settings: Settings, platform: Platform, toolkits: list[Toolkit]) -> None:
    """Install `toolkits` (from plan(), default first); where the default has a CUDA_HOME, make it /usr/local/cuda
    for login shells and the loader."""
    if any(t.source == "nvidia" for t in toolkits):
        url = nvidia_repo_url(settings, platform)  # NVIDIA's, or a mirror: the key's fingerprint is checked alike
        nvidia_repo_key(name="NVIDIA repository key (fingerprint checked)", url=url)
        files.template(name="NVIDIA CUDA repository", src=str(TEMPLATES / "cuda.sources.j2"),
                       dest="/etc/apt/sources.list.d/v100kit-cuda.sources", mode="644", url=url, keyring=KEYRING)
        update_if_stale(name="apt-get update if the sources changed")
    for tk in toolkits:
        apt.packages(name=f"CUDA {tk.version} ({tk.source})", no_recommends=True,
                     packages=[f"{n}={v}" for n, v in sorted(tk.packages.items())])
    default = toolkits[0]
    if default.home:
        default_toolkit(name=f"/usr/local/cuda is CUDA {default.version}", home=default.home)
        files.template(name="login shells find nvcc", src=str(TEMPLATES / "cuda-profile.sh.j2"),
                       dest="/etc/profile.d/v100kit-cuda.sh", mode="644", default=default.version)
        ld = files.put(name="the loader finds the CUDA libraries", src=StringIO("/usr/local/cuda/lib64\n"),
                       dest="/etc/ld.so.conf.d/v100kit-cuda.conf", mode="644")
        server.shell(name="ldconfig", commands=["ldconfig"], _if=ld.did_change)
