"""Parsers of the field-state facts (issue 13) on recorded outputs: mokutil, /proc/driver/nvidia/version, apt source
files, dpkg's kernel metapackages, lsattr."""

from __future__ import annotations

from roles.base.facts import SourceEntry, source_entries
from roles.nvidia_driver.decide import kernel_flavour, kernel_series
from roles.nvidia_driver.facts import KernelMetapackages, module_flavour_from_proc, secure_boot_from_lines
from roles.tuning.decide import parse_swap_record, retired_swapfiles
from roles.tuning.facts import NoCow


def test_secure_boot_from_mokutil_and_the_efi_variable():
    # mokutil(1) --sb-state wording; shim's "validation is disabled" lets unsigned modules load
    assert secure_boot_from_lines(["mokutil=SecureBoot enabled", "efi=1"])["state"] == "enabled"
    assert secure_boot_from_lines(["mokutil=SecureBoot disabled", "efivar=1", "efi=1"])["state"] == "disabled"
    assert secure_boot_from_lines(["mokutil=SecureBoot enabled", "mokutil=SecureBoot validation is disabled in shim",
                                   "efi=1"])["state"] == "disabled"
    assert secure_boot_from_lines(["mokutil=EFI variables are not supported on this system", "efi=0"])["state"] == \
        "disabled"
    assert secure_boot_from_lines(["efivar=1", "efi=1"])["source"] == "efivar"
    assert secure_boot_from_lines(["efi=1"])["state"] == "unknown"
    sb = secure_boot_from_lines(["mokutil=SecureBoot enabled", "enrolled=/var/lib/shim-signed/mok/MOK.der",
                                 "key=/var/lib/dkms/mok.pub"])
    assert sb["enrolled"] == ["/var/lib/shim-signed/mok/MOK.der"] and sb["keys"] == ["/var/lib/dkms/mok.pub"]


def test_module_flavour_from_proc():
    # the open module's line from issue 13 (a real host), the proprietary one's from a Debian 12 host
    assert module_flavour_from_proc("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release "
                                    "Build  (builder@host)") == "open"
    assert module_flavour_from_proc("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul  9 "
                                    "21:15:39 UTC 2025") == "proprietary"
    assert module_flavour_from_proc("") is None


def test_source_entries_one_line_and_deb822():
    lines = ["/etc/apt/sources.list\t# deb http://old/ x main", "/etc/apt/sources.list\tdeb-src http://s/ x main",
             "/etc/apt/sources.list.d/c.list\tdeb [arch=amd64 signed-by=/k.gpg] https://r/x/ / # note",
             "/etc/apt/sources.list.d/d.sources\tTypes: deb deb-src", "/etc/apt/sources.list.d/d.sources\tURIs: http://a/",
             "/etc/apt/sources.list.d/d.sources\tSuites: s s-updates", "/etc/apt/sources.list.d/d.sources\t",
             "/etc/apt/sources.list.d/d.sources\tTypes: deb", "/etc/apt/sources.list.d/d.sources\tEnabled: no",
             "/etc/apt/sources.list.d/d.sources\tURIs: http://off/", "/etc/apt/sources.list.d/d.sources\tSuites: s"]
    assert source_entries(lines) == [
        SourceEntry("/etc/apt/sources.list.d/c.list", "https://r/x/", "/"),
        SourceEntry("/etc/apt/sources.list.d/d.sources", "http://a/", "s"),
        SourceEntry("/etc/apt/sources.list.d/d.sources", "http://a/", "s-updates")]


def test_kernel_metapackages_and_flavours():
    out = ["ii |linux-image-amd64|linux-image-6.1.0-50-amd64 (= 6.1.176-1)",
           "ii |linux-image-6.1.0-50-amd64|kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2)",
           "rc |linux-image-cloud-amd64|linux-image-6.1.0-40-cloud-amd64", "ii |linux-image-unsigned-6.8.0-45-generic|",
           "ii |linux-image-generic-hwe-22.04|linux-image-6.8.0-49-generic, linux-firmware, intel-microcode"]
    assert KernelMetapackages().process(out) == {"linux-image-amd64": "linux-image-6.1.0-50-amd64",
                                                  "linux-image-generic-hwe-22.04": "linux-image-6.8.0-49-generic"}
    assert [kernel_flavour(r) for r in ("6.8.0-49-generic", "6.1.0-50-cloud-amd64", "6.12.57+deb13-amd64",
                                         "5.15.0-1050-aws", "linux-image-6.8.0-49-lowlatency")] == \
        ["generic", "cloud-amd64", "amd64", "aws", "lowlatency"]
    assert kernel_series("6.8.0-49-generic") == "6.8" and kernel_series("5.15.0-126-generic") == "5.15"


def test_swap_record_and_nocow():
    record = parse_swap_record(["created /swapfile", "adopted /srv/b/swap", "junk", "created relative"])
    assert record == {"/swapfile": "created", "/srv/b/swap": "adopted"}
    assert retired_swapfiles(record, "/swapfile", 1 << 30) == {"/srv/b/swap": "adopted"}
    assert retired_swapfiles(record, "/swapfile", 0) == record
    assert NoCow().process(["---------------C------ /srv/b/swap"]) and not NoCow().process(["-------------- /x"])
