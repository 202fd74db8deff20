"""tuning decisions, pure: settings and facts in, refusals and values out. No operations are imported here."""

from __future__ import annotations

from roles.settings import Settings, problem

SYSCTL_FILE = "/etc/sysctl.d/60-v100kit.conf"
THP_UNIT = "v100kit-thp.service"

GIB = 1024**3
#: The swapfiles the role set up, one 'created PATH' or 'adopted PATH' a line: a swapfile is deleted only when the
#: role created it.
SWAP_RECORD = "/var/lib/v100kit/swapfiles"
#: Filesystems (as `stat -f -c %T` names them) that cannot hold an active swapfile: ZFS has no swapfile support
#: (swap goes on a zvol), tmpfs/ramfs live in memory, overlayfs/squashfs/network and FUSE filesystems have no
#: swap_activate (swapon: Invalid argument). btrfs can, with a No_COW file (btrfs(5) SWAPFILE SUPPORT).
NO_SWAPFILE_FS = ("zfs", "tmpfs", "ramfs", "overlayfs", "squashfs", "nfs", "smb2", "cifs", "fuseblk", "fuse",
                  "aufs", "ecryptfs")


def swap_size_bytes(settings: Settings) -> int:
    """The swapfile size in bytes: tuning_swap_size_gib rounded down to whole 4 KiB pages; 0 means no swapfile."""
    return int(settings.tuning_swap_size_gib * GIB) // 4096 * 4096


def wanted_sysctl(settings: Settings) -> dict[str, int | str]:
    """Every kernel setting the role writes: {sysctl key: value}, swappiness and hugepages first."""
    return {"vm.swappiness": settings.tuning_swappiness, "vm.nr_hugepages": settings.tuning_nr_hugepages,
            **settings.tuning_sysctl_extra}


def sysctl_differences(wanted: dict[str, int | str], live: dict) -> list[str]:
    """The wanted settings whose live value (`live`: the Sysctl fact) differs, as 'key is LIVE, configured WANT'."""
    return [f"{k} is {live.get(k)!r}, configured {v!r}" for k, v in wanted.items() if str(live.get(k)) != str(v)]


def check(settings: Settings, sysctl: dict, swap_header_size: int | None, exists: bool, avail_bytes: int | None,
          fs: str = "") -> list[str]:
    """Refusals from host facts, SettingsError lines ([] when none): `sysctl` is the Sysctl fact for the extra keys,
    `swap_header_size` the SwapHeaderSize fact (bytes or None), `exists` whether anything is at the swapfile path,
    `avail_bytes` the FreeBytes fact where the swapfile goes (bytes or None), `fs` the PathFilesystem fact there."""
    taken = swap_path_taken(settings, swap_header_size, exists) or swap_filesystem_refused(settings, fs)
    return (unknown_sysctl_keys(settings, sysctl)
            + (taken or swapfile_does_not_fit(settings, swap_header_size, avail_bytes)))


def swap_filesystem_refused(settings: Settings, fs: str) -> list[str]:
    """A swapfile on a filesystem that cannot hold one (NO_SWAPFILE_FS) is refused before any change."""
    if not swap_size_bytes(settings) or fs not in NO_SWAPFILE_FS:
        return []
    zfs = ("; on ZFS swap goes on a zvol: `zfs create -V 8G -b $(getconf PAGESIZE) -o sync=always "
           "-o primarycache=metadata POOL/swap; mkswap /dev/zvol/POOL/swap`" if fs == "zfs" else "")
    return [problem("tuning_swap_file", settings.tuning_swap_file,
                    f"it is on {fs}, which cannot hold a swapfile (swapon fails with 'Invalid argument')",
                    f"set tuning_swap_file to a path on ext4, xfs or btrfs, or tuning_swap_size_gib: 0{zfs}")]


def parse_swap_record(lines: list[str]) -> dict[str, str]:
    """SWAP_RECORD's lines ('created /swapfile') as {path: 'created' | 'adopted'}; other lines are skipped."""
    record = {}
    for line in lines:
        how, _, path = line.strip().partition(" ")
        if how in ("created", "adopted") and path.startswith("/"):
            record[path] = how
    return record


def retired_swapfiles(record: dict[str, str], current: str, size_bytes: int) -> dict[str, str]:
    """Swapfiles the role set up that the settings no longer want: every recorded path other than `current`, and
    `current` too when size_bytes is 0. {path: 'created' | 'adopted'}; only a created one is deleted."""
    return {p: how for p, how in sorted(record.items()) if p != current or not size_bytes}


def record_command(path: str, how: str | None) -> str:
    """Shell command that sets `path`'s line of SWAP_RECORD to `how` ('created', 'adopted'), or drops it (None)."""
    keep = f"grep -v -x -F -e 'created {path}' -e 'adopted {path}' {SWAP_RECORD} 2>/dev/null"
    add = f"; echo '{how} {path}'" if how else ""
    return (f"mkdir -p {SWAP_RECORD.rsplit('/', 1)[0]} && {{ {keep}{add}; }} > {SWAP_RECORD}.new; "
            f"mv -f {SWAP_RECORD}.new {SWAP_RECORD}")


def unknown_sysctl_keys(settings: Settings, sysctl: dict) -> list[str]:
    """Every key of tuning_sysctl_extra must exist on the host's kernel (present in the Sysctl fact)."""
    return [problem("tuning_sysctl_extra", {k: v}, f"the host's kernel has no {k}", "remove it or fix its name")
            for k, v in settings.tuning_sysctl_extra.items() if k not in sysctl]


def swap_path_taken(settings: Settings, swap_header_size: int | None, exists: bool) -> list[str]:
    """The swapfile path must be free or already a swapfile (never overwrite a user's file)."""
    if exists and swap_header_size is None:
        return [problem("tuning_swap_file", settings.tuning_swap_file, "exists and is not a swapfile",
                        "choose a path that does not exist yet, e.g. /swapfile")]
    return []


def swapfile_does_not_fit(settings: Settings, swap_header_size: int | None, avail_bytes: int | None) -> list[str]:
    """A new or resized swapfile must fit on its filesystem with 1 GiB to spare (unknown free space passes)."""
    size = swap_size_bytes(settings)
    if size and swap_header_size != size and avail_bytes is not None and size + GIB > avail_bytes:
        return [problem("tuning_swap_size_gib", settings.tuning_swap_size_gib,
                        f"only {avail_bytes / GIB:.1f} GiB free where the swapfile goes",
                        "choose a smaller size or another tuning_swap_file")]
    return []
