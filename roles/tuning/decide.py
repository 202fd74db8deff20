"""tuning decisions, pure: settings and facts in, refusals and values out. No operations are imported here."""

from __future__ import annotations

from roles.settings import Settings, problem

SYSCTL_FILE = "/etc/sysctl.d/60-v100kit.conf"
THP_UNIT = "v100kit-thp.service"

GIB = 1024**3


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


def check(settings: Settings, sysctl: dict, swap_header_size: int | None, exists: bool, avail_bytes: int | None
          ) -> list[str]:
    """Refusals from host facts, SettingsError lines ([] when none): `sysctl` is the Sysctl fact for the extra keys,
    `swap_header_size` the SwapHeaderSize fact (bytes or None), `exists` whether anything is at the swapfile path,
    `avail_bytes` the FreeBytes fact where the swapfile goes (bytes or None)."""
    taken = swap_path_taken(settings, swap_header_size, exists)
    return (unknown_sysctl_keys(settings, sysctl)
            + (taken or swapfile_does_not_fit(settings, swap_header_size, avail_bytes)))


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
