"""The driver facts as data (roles/nvidia_driver/versions.py) and the pure checks on them: the kernel floor table,
the branchless-metapackage guard, the runfile stand-in package (built with the real dpkg-deb where it exists) and the
installer's version line. Expected values come from the cited public records."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api.util import get_template

from roles.nvidia_driver import decide
from roles.nvidia_driver.facts import runfile_version_from_lines
from roles.nvidia_driver.versions import (DRIVER_PINS, KERNEL_NEWEST_KNOWN, RUNFILE_STANDIN, RUNFILE_STANDIN_SOURCE,
                                          DriverPin, below, kernel_min_driver)
from roles.settings import Settings

TEMPLATES = Path(decide.__file__).parent / "templates"


def test_kernel_floor_is_the_newest_row_at_or_below_the_series():
    # 580.126.18: "Fixed kernel module build issue with Linux kernel v6.19"; 580.159.04: "... v7.1"
    assert kernel_min_driver(580, "6.18") is None
    assert kernel_min_driver(580, "6.19").version == "580.126.18"
    assert kernel_min_driver(580, "7.0").version == "580.142"
    assert kernel_min_driver(580, "7.1").version == "580.159.04"
    assert kernel_min_driver(580, "7.3").version == "580.159.04"
    assert kernel_min_driver(535, "7.1") is None  # no row: KERNEL_NEWEST_KNOWN decides
    assert below("580.142", "580.159.04") and not below("580.173.02", "580.159.04") and below("580.95.05", "580.126.18")


def test_every_branch_of_the_map_has_a_newest_known_kernel():
    assert {p.branch for pins in DRIVER_PINS.values() for p in pins} <= set(KERNEL_NEWEST_KNOWN)


def test_branchless_metapackage_in_a_pin_is_refused():
    # cupy/cupy#10295: NVIDIA's branchless cuda-drivers installs no kernel module
    bad = DriverPin("580.159.04", {"cuda-drivers": "580.159.04-1", "nvidia-kernel-dkms": "580.159.04-1"}, "nvidia")
    problems = decide.branchless_metapackages(bad)
    assert len(problems) == 1 and "cuda-drivers" in problems[0] and "cupy/cupy#10295" in problems[0]
    assert "cuda-drivers-580" in problems[0]  # the fix names the branch's metapackage
    assert decide.branchless_metapackages(DriverPin("580.159.04", {"nvidia-open": "580.159.04-1"}, "nvidia"))
    assert [p for pins in DRIVER_PINS.values() for p in pins if decide.branchless_metapackages(p)] == []


def test_runfile_pins_have_two_agreeing_records_each():
    for pin in DRIVER_PINS[("debian13", "runfile")]:
        assert len(pin.runfile.evidence) == 2 and pin.runfile.url.endswith(f"NVIDIA-Linux-x86_64-{pin.version}.run")
        assert pin.packages == {RUNFILE_STANDIN: pin.version} and pin.dkms_module == "nvidia"


def test_installer_version_line():
    # the first line `nvidia-installer --version` prints
    assert runfile_version_from_lines(["", "nvidia-installer:  version 580.173.02  (buildmeister@builder)  Tue Jul",
                                       "  The NVIDIA Software Installer for Unix/Linux."]) == "580.173.02"
    assert runfile_version_from_lines([]) is None
    assert runfile_version_from_lines(["bash: /usr/bin/nvidia-installer: No such file or directory"]) is None


def test_kernel_problems_check_running_and_installed_kernels_once_each():
    pin = DRIVER_PINS[("ubuntu2404", "nvidia")][0]  # 580.95.05
    problems = decide.kernel_problems(Settings(), pin, ["6.8.0-45-generic", "6.19.0-061900-generic", "",
                                                        "6.19.0-061900-generic"])
    assert len(problems) == 1 and "needs driver 580.126.18 or newer" in problems[0]
    assert decide.kernel_problems(Settings(), pin, ["6.8.0-45-generic", "6.18.9-1-generic"]) == []


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed here")
def test_standin_package_builds_with_dpkg_deb_and_says_what_it_provides(tmp_path):
    pin = DRIVER_PINS[("debian13", "runfile")][0]
    # rendered as files.template renders it on the host (pyinfra's get_template)
    control = get_template(str(TEMPLATES / "runfile-control.j2")).render(
        pin=pin, package=RUNFILE_STANDIN, source=RUNFILE_STANDIN_SOURCE)
    (tmp_path / "pkg" / "DEBIAN").mkdir(parents=True)
    (tmp_path / "pkg" / "DEBIAN" / "control").write_text(control)
    deb = tmp_path / "standin.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(tmp_path / "pkg"), str(deb)], check=True,
                   capture_output=True)

    def field(name: str) -> str:
        return subprocess.run(["dpkg-deb", "-f", str(deb), name], check=True, capture_output=True,
                              text=True).stdout.strip()

    assert field("Package") == RUNFILE_STANDIN and field("Version") == "580.173.02"
    assert field("Source") == RUNFILE_STANDIN_SOURCE
    # Debian trixie's nvidia-cuda-dev: Depends libcuda1 (>= 550) | libcuda.so.1 (>= 550) | libcuda-12.4-1
    assert "libcuda.so.1 (= 580.173.02)" in field("Provides")
    assert {c.strip() for c in field("Conflicts").split(",")} == {"libcuda1", "nvidia-kernel-dkms", "nvidia-driver"}
