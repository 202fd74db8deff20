"""tuning: kernel settings (sysctl.d), a swapfile in fstab, the transparent hugepage mode at every boot, and the
service user's open-file limit.

Where the host refuses a live change (a container's read-only /proc/sys or /sys, swapon not permitted), the
persistent configuration is still written, the live step is skipped and the deploy says so and why: it never
claims a value that is not in effect.
"""

from __future__ import annotations

import re
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.facts.server import Sysctl
from pyinfra.operations import files, server, systemd

from roles.facts import HostTraits
from roles.settings import Settings, problem
from roles.tuning.facts import ActiveSwaps, SwapHeaderSize

TEMPLATES = Path(__file__).parent / "templates"
SYSCTL_FILE = "/etc/sysctl.d/60-v100kit.conf"
THP_UNIT = "v100kit-thp.service"

GIB = 1024**3


def skipped(what: str, why: str) -> None:
    """Report a live step that the host does not allow (shown in the deploy output)."""
    logger.warning(f"[{host.name}] tuning: {what} skipped: {why}; the persistent setting is written and takes "
                   f"effect at boot on a host that allows it")


def check(settings: Settings, sysctl: dict, swap_header_size: int | None, exists: bool, avail_bytes: int | None
          ) -> list[str]:
    """Refusals from host facts: every sysctl key must exist on the host (`sysctl`: the Sysctl fact for them); the
    swapfile path must be free or already a swapfile, and fit on its filesystem with 1 GiB to spare."""
    problems = [problem("tuning_sysctl_extra", {k: v}, f"the host's kernel has no {k}", "remove it or fix its name")
                for k, v in settings.tuning_sysctl_extra.items() if k not in sysctl]
    size = int(settings.tuning_swap_size_gib * GIB) // 4096 * 4096
    if exists and swap_header_size is None:
        problems.append(problem("tuning_swap_file", settings.tuning_swap_file, "exists and is not a swapfile",
                                "choose a path that does not exist yet, e.g. /swapfile"))
    elif size and swap_header_size != size and avail_bytes is not None and size + GIB > avail_bytes:
        problems.append(problem("tuning_swap_size_gib", settings.tuning_swap_size_gib,
                                f"only {avail_bytes / GIB:.1f} GiB free where the swapfile goes",
                                "choose a smaller size or another tuning_swap_file"))
    return problems


@operation()
def swapfile(path: str, size_bytes: int, activate: bool):
    """A swapfile of exactly `size_bytes` at `path` (created via a temporary file and rename, so an interrupted
    deploy never leaves a half-written swapfile in place); swapon when `activate`. size_bytes 0 removes it."""
    active = host.get_fact(ActiveSwaps)
    current = host.get_fact(SwapHeaderSize, path=path)
    if size_bytes == 0:
        if path in active:
            yield f"swapoff {path}"
        if current is not None:
            yield f"rm -f {path}"
        return
    if current != size_bytes:
        if path in active:
            yield f"swapoff {path}"
        tmp = f"{path}.v100kit-new"
        yield (f"rm -f {tmp} && ((fallocate -l {size_bytes} {tmp} || dd if=/dev/zero of={tmp} bs=1M "
               f"count={size_bytes // 2**20} status=none) && chmod 600 {tmp} && mkswap {tmp} >/dev/null && "
               f"mv -f {tmp} {path} || {{ rm -f {tmp}; exit 1; }})")
        active = {}
    if activate and path not in active:
        yield f"swapon {path}"


@deploy("Tuning")
def tuning(settings: Settings) -> None:
    traits = host.get_fact(HostTraits)

    files.template(name="kernel settings in sysctl.d", src=str(TEMPLATES / "sysctl.conf.j2"),
                                 dest=SYSCTL_FILE, mode="644", settings=settings)
    wanted = {"vm.swappiness": settings.tuning_swappiness, "vm.nr_hugepages": settings.tuning_nr_hugepages,
              **settings.tuning_sysctl_extra}
    if traits["sysctl_writable"]:
        for key, value in wanted.items():
            server.sysctl(name=f"live {key}", key=key, value=value)
    else:
        live = host.get_fact(Sysctl, keys=list(wanted))
        differ = [f"{k} is {live.get(k)!r}, configured {v!r}" for k, v in wanted.items() if str(live.get(k)) != str(v)]
        if differ:
            skipped("live sysctl (" + "; ".join(differ) + ")", f"/proc/sys is read-only ({traits['virt']})")

    size = int(settings.tuning_swap_size_gib * GIB) // 4096 * 4096
    swap_allowed = traits["virt"] == "none"
    swapfile(name=f"swapfile {settings.tuning_swap_file} of {settings.tuning_swap_size_gib:g} GiB",
             path=settings.tuning_swap_file, size_bytes=size, activate=swap_allowed)
    files.line(name="swapfile in fstab", path="/etc/fstab", line=rf"^{re.escape(settings.tuning_swap_file)}\s",
               replace=f"{settings.tuning_swap_file} none swap sw 0 0", present=size > 0)
    if size and not swap_allowed and settings.tuning_swap_file not in host.get_fact(ActiveSwaps):
        skipped("swapon", f"swapon is not permitted in a container ({traits['virt']})")

    unit = files.template(name="transparent hugepage mode at boot", src=str(TEMPLATES / "v100kit-thp.service.j2"),
                          dest=f"/etc/systemd/system/{THP_UNIT}", mode="644", thp=settings.tuning_thp_mode)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    systemd.service(name="transparent hugepage unit enabled", service=THP_UNIT, enabled=True,
                    running=traits["thp_writable"])
    if traits["thp_writable"]:
        systemd.service(name="apply the new mode now", service=THP_UNIT, restarted=True, _if=unit.did_change)
    if not traits["thp_writable"] and traits["thp_mode"] != settings.tuning_thp_mode:
        skipped(f"live transparent hugepage mode (is {traits['thp_mode']!r}, configured {settings.tuning_thp_mode!r})",
                f"/sys is read-only ({traits['virt']})")

    files.template(name="open-file limit of the service user", src=str(TEMPLATES / "limits.conf.j2"),
                   dest="/etc/security/limits.d/60-v100kit.conf", mode="644",
                   service_user=settings.base_service_user, limit=settings.tuning_nofile_limit)
