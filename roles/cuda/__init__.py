"""cuda: one or more CUDA toolkits side by side, from the distribution (Debian's nvidia-cuda-toolkit) or from
NVIDIA's repository (cuda-toolkit-X-Y under /usr/local/cuda-X.Y, /usr/local/cuda at the default one).

`plan()` refuses, before any change, a toolkit that cannot build sm_70 (CUDA 13+) and a toolkit whose minimum
driver is newer than the pinned driver, unless minor-version compatibility is explicitly allowed.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.facts.files import Link
from pyinfra.facts.server import Command
from pyinfra.operations import apt, files, server

from roles.base import update_if_stale
from roles.cuda.versions import (DISTRO_TOOLKITS, NVIDIA_REPO_KEY_FINGERPRINT, NVIDIA_REPO_URL, NVIDIA_REPOS,
                                 NVIDIA_TOOLKITS, Toolkit)
from roles.nvidia_driver.versions import DriverPin
from roles.platform import Platform
from roles.settings import Settings, problem
from roles.volta import CUDA_MIN_DRIVER, CUDA_MINOR_COMPAT_MIN_DRIVER, LAST_CUDA_MAJOR_FOR_SM70, version_tuple

TEMPLATES = Path(__file__).parent / "templates"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"


def source_for(settings: Settings, platform: Platform) -> str:
    """cuda_source, or its per-OS default: distro on Debian, nvidia on Ubuntu."""
    return settings.cuda_source or ("distro" if platform.family == "debian" else "nvidia")


def available(source: str, platform: Platform) -> list[Toolkit]:
    """Toolkits installable on this platform from this source, default first."""
    if source == "distro":
        return [DISTRO_TOOLKITS[platform.id]] if platform.id in DISTRO_TOOLKITS else []
    return [t for (p, _), t in NVIDIA_TOOLKITS.items() if p == platform.id]


def plan(settings: Settings, platform: Platform, driver: DriverPin | None) -> tuple[list[Toolkit], list[str]]:
    """Resolve the toolkits for this host. Returns (toolkits, problems); default toolkit first."""
    source = source_for(settings, platform)
    offer = available(source, platform)
    offered = ", ".join(t.version for t in offer) or "none"
    problems: list[str] = []
    wanted = settings.cuda_versions or [t.version for t in offer[:1]]
    if not wanted:
        problems.append(problem("cuda_source", source, f"no CUDA toolkit for {platform.id} from this source",
                                "set cuda_source to " + ("nvidia" if source == "distro" else "distro")))
    toolkits = []
    for v in wanted:
        major = int(v.split(".")[0])
        if major > LAST_CUDA_MAJOR_FOR_SM70:
            problems.append(problem("cuda_versions", v, f"CUDA {major} cannot compile for sm_70 (CUDA 13.0 removed "
                                    "offline compilation for sm_50..sm_72; CUDA 13.0 release notes)",
                                    f"use a 12.x or 11.x toolkit: {offered} from source {source!r}"))
            continue
        tk = next((t for t in offer if t.version == v), None)
        if tk is None:
            problems.append(problem("cuda_versions", v, f"not available for {platform.id} from source {source!r}",
                                    f"use {offered}, or another cuda_source (roles/cuda/versions.py)"))
            continue
        if driver is not None:
            need = CUDA_MIN_DRIVER[v]
            if version_tuple(driver.version) < version_tuple(need):
                compat = CUDA_MINOR_COMPAT_MIN_DRIVER[major]
                if settings.cuda_allow_minor_version_compat and version_tuple(driver.version) >= version_tuple(compat):
                    logger.warning(f"[{host.name}] cuda: CUDA {v} needs driver >= {need}, pinned {driver.version}: "
                                   f"running through minor-version compatibility (>= {compat}); PTX built for the "
                                   "newer toolkit cannot JIT on this driver")
                else:
                    problems.append(problem(
                        "cuda_versions", v,
                        f"CUDA {v} needs driver >= {need} (CUDA release notes, table 3), the pinned driver is "
                        f"{driver.version}; such a toolkit fails at run time with 'PTX was compiled with an "
                        "unsupported toolchain'",
                        f"pin a driver >= {need} (nvidia_driver_version), choose a toolkit the driver supports, or "
                        f"set cuda_allow_minor_version_compat: true (needs driver >= {compat})"))
                    continue
        toolkits.append(tk)
    default = settings.cuda_default_version or (wanted[0] if wanted else None)
    if default and default not in wanted:
        problems.append(problem("cuda_default_version", default, f"not among cuda_versions {wanted}",
                                "set it to one of cuda_versions"))
    toolkits.sort(key=lambda t: t.version != default)
    return (toolkits if not problems else []), problems


@operation()
def nvidia_repo_key(url: str):
    """NVIDIA's repository key at KEYRING, accepted only if its fingerprint is the pinned one."""
    have = host.get_fact(Command, command=f"gpg --show-keys --with-colons {KEYRING} 2>/dev/null | "
                                           "awk -F: '$1==\"fpr\"{print $10; exit}'")
    if (have or "").strip() == NVIDIA_REPO_KEY_FINGERPRINT:
        return
    yield (f"set -e; t=$(mktemp); curl -fsSL {url}3bf863cc.pub -o $t; "
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
    if any(t.source == "nvidia" for t in toolkits):
        url = NVIDIA_REPO_URL.format(repo=NVIDIA_REPOS[platform.id])
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
