"""tuning deploy: sysctl.d and live values, the swapfile, the THP unit and the open-file limit."""

from __future__ import annotations

import re
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.facts.server import Sysctl
from pyinfra.operations import files, server, systemd

from roles.facts import HostTraits
from roles.settings import Settings
from roles.tuning.decide import (SYSCTL_FILE, THP_UNIT, record_command, retired_swapfiles, swap_size_bytes,
                                 sysctl_differences, wanted_sysctl)
from roles.tuning.facts import ActiveSwaps, NoCow, PathFilesystem, SwapHeaderSize, SwapRecord

TEMPLATES = Path(__file__).parent / "templates"


def skipped(what: str, why: str) -> None:
    """Report a live step that the host does not allow (shown in the deploy output)."""
    logger.warning(f"[{host.name}] tuning: {what} skipped: {why}; the persistent setting is written and takes "
                   f"effect at boot on a host that allows it")


@operation()
def swapfile(path: str, size_bytes: int, activate: bool):
    """A swapfile of exactly `size_bytes` at `path` (created via a temporary file and rename, so an interrupted
    deploy never leaves a half-written swapfile in place); swapon when `activate`. On btrfs the file is made No_COW
    while still empty (`chattr +C`: btrfs(5) SWAPFILE SUPPORT; the kernel refuses a copy-on-write swapfile), and a
    swapfile there without the attribute is made again. The file is recorded in SWAP_RECORD as created (or adopted,
    where a swapfile was there already), so that a later change of path deletes only what the role made.
    size_bytes 0: nothing here (retired by swapfile_retired)."""
    if size_bytes == 0:
        return
    active = host.get_fact(ActiveSwaps)
    current = host.get_fact(SwapHeaderSize, path=path)
    btrfs = host.get_fact(PathFilesystem, path=path) == "btrfs"
    cow = btrfs and current is not None and not host.get_fact(NoCow, path=path)
    record = host.get_fact(SwapRecord)
    if current != size_bytes or cow:
        if path in active and activate:
            yield f"swapoff {path}"
        if record.get(path) != "created":
            yield record_command(path, "adopted" if current is not None else "created")
        tmp = f"{path}.v100kit-new"
        nocow = f" && chattr +C {tmp}" if btrfs else ""
        yield (f"rm -f {tmp} && touch {tmp}{nocow} && ((fallocate -l {size_bytes} {tmp} || dd if=/dev/zero of={tmp} "
               f"bs=1M count={size_bytes // 2**20} status=none) && chmod 600 {tmp} && mkswap {tmp} >/dev/null && "
               f"mv -f {tmp} {path} || {{ rm -f {tmp}; exit 1; }})")
        active = {}
    elif path not in record:
        yield record_command(path, "adopted")  # set up before the record existed: never deleted by the role
    if activate and path not in active:
        yield f"swapon {path}"


@operation()
def swapfile_retired(path: str, how: str, live: bool, recorded: bool = True):
    """A swapfile the settings no longer want (another tuning_swap_file, or size 0): swapoff (where `live`), delete
    it only when the role created it (`how` 'created', and it is still a swapfile), drop it from SWAP_RECORD where
    `recorded`. Its fstab line is removed by the deploy."""
    if live and path in host.get_fact(ActiveSwaps):
        yield f"swapoff {path}"
    if not recorded:
        return
    if how == "created" and host.get_fact(SwapHeaderSize, path=path) is not None:
        yield f"rm -f {path}"
    elif host.get_fact(SwapHeaderSize, path=path) is not None:
        logger.warning(f"[{host.name}] tuning: {path} is no longer the swapfile; kept, v100kit did not create it")
    yield record_command(path, None)


@deploy("Tuning")
def tuning(settings: Settings) -> None:
    """Kernel settings (live where /proc/sys allows), the swapfile and its fstab line, the THP mode at boot, the
    service user's open-file limit. Live steps a container refuses are skipped with a warning."""
    traits = host.get_fact(HostTraits)

    files.template(name="kernel settings in sysctl.d", src=str(TEMPLATES / "sysctl.conf.j2"),
                   dest=SYSCTL_FILE, mode="644", settings=settings)
    wanted = wanted_sysctl(settings)
    if traits["sysctl_writable"]:
        for key, value in wanted.items():
            server.sysctl(name=f"live {key}", key=key, value=value)
    else:
        differ = sysctl_differences(wanted, host.get_fact(Sysctl, keys=list(wanted)))
        if differ:
            skipped("live sysctl (" + "; ".join(differ) + ")", f"/proc/sys is read-only ({traits['virt']})")

    size = swap_size_bytes(settings)
    swap_allowed = traits["virt"] == "none"
    swapfile(name=f"swapfile {settings.tuning_swap_file} of {settings.tuning_swap_size_gib:g} GiB",
             path=settings.tuning_swap_file, size_bytes=size, activate=swap_allowed)
    files.line(name="swapfile in fstab", path="/etc/fstab", line=rf"^{re.escape(settings.tuning_swap_file)}\s",
               replace=f"{settings.tuning_swap_file} none swap sw 0 0", present=size > 0)
    record = host.get_fact(SwapRecord)
    retired = retired_swapfiles(record, settings.tuning_swap_file, size)
    if not size and host.get_fact(SwapHeaderSize, path=settings.tuning_swap_file) is not None:
        retired.setdefault(settings.tuning_swap_file, "adopted")  # set up before the record: swapped off, kept
    for old, how in retired.items():
        swapfile_retired(name=f"old swapfile {old} retired", path=old, how=how, live=swap_allowed,
                         recorded=old in record)
        if old != settings.tuning_swap_file:
            files.line(name=f"old swapfile {old} out of fstab", path="/etc/fstab", line=rf"^{re.escape(old)}\s",
                       present=False)
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
