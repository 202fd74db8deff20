"""The refusals of the base, tuning, nvidia_driver and cuda decide modules, each called directly (fast: no host).
Expected values come from the rules' sources (docs/volta.md §1, §2), not from the version maps."""

from __future__ import annotations

from roles.base import decide as base
from roles.cuda import decide as cuda
from roles.nvidia_driver import decide as nvidia_driver
from roles.nvidia_driver.versions import DriverPin
from roles.platform import SUPPORTED
from roles.settings import Settings
from roles.tuning import decide as tuning

GIB = 1 << 30
UBUNTU, DEBIAN = SUPPORTED["ubuntu2204"], SUPPORTED["debian12"]


def pin(version: str, packages: dict[str, str] | None = None) -> DriverPin:
    return DriverPin(version, packages or {}, "nvidia")


# -- base ----------------------------------------------------------------------------------------------------------

def test_ca_files_must_be_pem_on_the_control_machine(tmp_path):
    pem = tmp_path / "proxy.crt"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert base.ca_files_not_pem(Settings(base_ca_certificates=[str(pem)])) == []
    problems = base.ca_files_not_pem(Settings(base_ca_certificates=[str(text), str(tmp_path / "missing.crt")]))
    assert len(problems) == 2 and all(p.startswith("base_ca_certificates = ") for p in problems)


def test_service_user_must_be_its_own_system_account():
    s = Settings()  # llm, home /var/lib/llm
    assert base.service_user_taken(s, {}) == []
    assert base.service_user_taken(s, {"llm": {"uid": 998, "home": "/var/lib/llm/"}}) == []
    for account in ({"uid": 0, "home": "/var/lib/llm"}, {"uid": 1000, "home": "/var/lib/llm"},
                    {"uid": 998, "home": "/home/llm"}):
        assert base.service_user_taken(s, {"llm": account})[0].startswith("base_service_user = 'llm'")


# -- tuning --------------------------------------------------------------------------------------------------------

def test_swap_size_is_whole_pages():
    assert tuning.swap_size_bytes(Settings(tuning_swap_size_gib=8)) == 8 * GIB
    assert tuning.swap_size_bytes(Settings(tuning_swap_size_gib=0)) == 0
    assert tuning.swap_size_bytes(Settings(tuning_swap_size_gib=0.001)) % 4096 == 0


def test_unknown_sysctl_keys():
    s = Settings(tuning_sysctl_extra={"vm.max_map_count": 1048576, "vm.nope": 1})
    problems = tuning.unknown_sysctl_keys(s, {"vm.max_map_count": 65530})
    assert len(problems) == 1 and "vm.nope" in problems[0]


def test_swap_path_taken_only_by_a_file_that_is_not_a_swapfile():
    s = Settings()
    assert tuning.swap_path_taken(s, None, exists=False) == []
    assert tuning.swap_path_taken(s, 8 * GIB, exists=True) == []
    assert tuning.swap_path_taken(s, None, exists=True)[0].startswith("tuning_swap_file = '/swapfile'")


def test_swapfile_must_fit_with_one_gib_to_spare():
    s = Settings(tuning_swap_size_gib=8)
    assert tuning.swapfile_does_not_fit(s, None, 9 * GIB) == []
    assert tuning.swapfile_does_not_fit(s, None, 9 * GIB - 1)[0].startswith("tuning_swap_size_gib = 8")
    assert tuning.swapfile_does_not_fit(s, 8 * GIB, 0) == []  # already there at that size
    assert tuning.swapfile_does_not_fit(s, None, None) == []  # free space unknown


def test_sysctl_differences_compare_as_text():
    assert tuning.sysctl_differences({"vm.swappiness": 10}, {"vm.swappiness": "10"}) == []
    assert tuning.sysctl_differences({"vm.swappiness": 10}, {"vm.swappiness": 60}) == [
        "vm.swappiness is 60, configured 10"]


# -- nvidia_driver -------------------------------------------------------------------------------------------------

def test_open_module_needs_turing():
    assert nvidia_driver.open_module_refused(Settings(nvidia_driver_kernel_module="open"))
    assert nvidia_driver.open_module_refused(Settings(nvidia_driver_kernel_module="open",
                                                      gpu_compute_capability="7.5")) == []
    assert nvidia_driver.open_module_refused(Settings()) == []


def test_branches_after_r580_drop_volta():
    assert "driver branch 590" in nvidia_driver.branch_drops_volta(Settings(nvidia_driver_version="590.44.01"), ())[0]
    assert nvidia_driver.branch_drops_volta(Settings(nvidia_driver_version="580.95.05"), ()) == []
    assert nvidia_driver.branch_drops_volta(Settings(nvidia_driver_version="590.44.01",
                                                     gpu_compute_capability="8.0"), ()) == []


def test_version_must_be_in_the_map_unless_refused_for_its_branch():
    pins = (pin("580.95.05"),)
    assert nvidia_driver.version_not_in_map(Settings(nvidia_driver_version="580.95.05"), UBUNTU, pins) == []
    assert "not in the version map" in nvidia_driver.version_not_in_map(
        Settings(nvidia_driver_version="535.999.01"), UBUNTU, pins)[0]
    assert nvidia_driver.version_not_in_map(Settings(nvidia_driver_version="590.44.01"), UBUNTU, pins) == []


def test_source_without_default_driver():
    assert nvidia_driver.source_has_no_driver(Settings(), UBUNTU, (pin("580.95.05"),)) == []
    assert nvidia_driver.source_has_no_driver(Settings(), UBUNTU, ())[0].startswith("nvidia_driver_source = ")
    assert nvidia_driver.source_has_no_driver(Settings(nvidia_driver_version="580.95.05"), UBUNTU, ()) == []


def test_unheld_includes_the_pins_own_dependencies():
    p = pin("580.95.05", {"cuda-drivers-580": "580.95.05-1"})
    pkgs = {"cuda-drivers-580": {"version": "580.95.05-1", "source": "nvidia-graphics-drivers-580", "status": "ii"},
            "libnvidia-compute-580": {"version": "580.95.05-1", "source": "nvidia-graphics-drivers-580",
                                      "status": "ii"},
            "libnvidia-compute-535": {"version": "535.274.02-1", "source": "nvidia-graphics-drivers-535",
                                      "status": "ii"}}
    assert nvidia_driver.unheld(p, pkgs, ["cuda-drivers-580"]) == ["libnvidia-compute-580"]


def test_built_kernels():
    rows = [{"module": "nvidia", "version": "580.95.05", "kernel": "6.8.0-45-generic", "state": "installed"},
            {"module": "nvidia", "version": "580.95.05", "kernel": "6.5.0-1-generic", "state": "built"},
            {"module": "zfs", "version": "2.2", "kernel": "6.5.0-2-generic", "state": "installed"}]
    assert nvidia_driver.built_kernels(rows, "nvidia") == {"6.8.0-45-generic"}


# -- cuda ----------------------------------------------------------------------------------------------------------

def test_nothing_offered():
    assert cuda.nothing_offered(UBUNTU, "distro", [])[0].startswith("cuda_source = 'distro'")
    assert cuda.nothing_offered(UBUNTU, "nvidia", ["12.4"]) == []


def test_cuda_13_cannot_build_sm70():
    assert "CUDA 13 cannot compile for sm_70" in cuda.too_new_for_sm70("13.0", "nvidia", [])[0]
    assert cuda.too_new_for_sm70("12.8", "nvidia", []) == []


def test_toolkit_must_be_offered():
    assert cuda.not_available("12.4", DEBIAN, "distro", [])[0].startswith("cuda_versions = '12.4'")
    assert cuda.not_available("11.8", DEBIAN, "distro", cuda.available("distro", DEBIAN)) == []


def test_driver_too_old_for_the_toolkit():
    # CUDA 12.4 needs >= 550.54.14 (release notes table 3); 12.x minor-version compatibility from 525.60.13 (table 2)
    assert cuda.driver_too_old(Settings(), "12.4", pin("550.54.15")) == []
    assert "needs driver >= 550.54.14" in cuda.driver_too_old(Settings(), "12.4", pin("535.274.02"))[0]
    allow = Settings(cuda_allow_minor_version_compat=True)
    assert cuda.driver_too_old(allow, "12.4", pin("535.274.02")) == []
    assert cuda.driver_too_old(allow, "12.4", pin("520.61.05"))
    assert cuda.driver_too_old(Settings(), "12.4", None) == []


def test_minor_compat_warnings_only_for_accepted_toolkits():
    s = Settings(cuda_versions=["12.4"], cuda_allow_minor_version_compat=True)
    warnings = cuda.minor_compat_warnings(s, UBUNTU, pin("535.274.02"))
    assert len(warnings) == 1 and "minor-version compatibility (>= 525.60.13)" in warnings[0]
    assert cuda.minor_compat_warnings(s, UBUNTU, pin("580.95.05")) == []
    assert cuda.minor_compat_warnings(Settings(cuda_versions=["12.4"]), UBUNTU, pin("535.274.02")) == []


def test_default_toolkit_must_be_installed():
    assert cuda.default_not_wanted("11.7", ["12.4"])[0].startswith("cuda_default_version = '11.7'")
    assert cuda.default_not_wanted("12.4", ["12.4"]) == [] and cuda.default_not_wanted(None, []) == []
