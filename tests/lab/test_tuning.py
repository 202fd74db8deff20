"""tuning role on real lab hosts. Live values are checked where the host allows live changes; a container's
read-only /proc/sys and /sys cannot hold them, and those checks skip saying so."""

import pytest

SYSCTL_FILE = "/etc/sysctl.d/60-v100kit.conf"


def sysctl_file(host) -> dict[str, str]:
    lines = host.file(SYSCTL_FILE).content_string.splitlines()
    return dict((k.strip(), v.strip()) for k, v in (line.split("=", 1) for line in lines
                                                       if "=" in line and not line.startswith("#")))


def test_sysctl_file_holds_the_configured_values(target):
    s = target.settings
    want = {"vm.swappiness": s.tuning_swappiness, "vm.nr_hugepages": s.tuning_nr_hugepages, **s.tuning_sysctl_extra}
    assert sysctl_file(target.host) == {k: str(v) for k, v in want.items()}


def test_sysctl_values_in_effect(target):
    if not target.host.run("test -w /proc/sys/vm/swappiness").succeeded:
        pytest.skip("/proc/sys is read-only on this host (container): live values cannot be set here")
    for key, value in sysctl_file(target.host).items():
        assert target.host.sysctl(key) == int(value)


def test_swapfile_of_configured_size_in_fstab(target):
    s = target.settings
    f = target.host.file(s.tuning_swap_file)
    assert f.is_file and f.mode == 0o600
    assert f.size == int(s.tuning_swap_size_gib * 1024**3) // 4096 * 4096
    assert target.host.run(f"swaplabel {s.tuning_swap_file}").succeeded  # a real swap signature
    fstab = [line.split() for line in target.host.file("/etc/fstab").content_string.splitlines()]
    assert [s.tuning_swap_file, "none", "swap", "sw", "0", "0"] in fstab


def test_swap_active_where_permitted(target):
    if target.host.run("systemd-detect-virt --container").succeeded:
        pytest.skip("swapon is not permitted in a container")
    assert target.settings.tuning_swap_file in target.host.file("/proc/swaps").content_string


def test_thp_mode_applied_at_boot(target):
    unit = target.host.service("v100kit-thp")
    assert unit.is_enabled
    mode = target.settings.tuning_thp_mode
    assert f"echo {mode} >" in target.host.file("/etc/systemd/system/v100kit-thp.service").content_string
    writable = target.host.run("test -w /sys/kernel/mm/transparent_hugepage/enabled").succeeded
    if writable:
        assert f"[{mode}]" in target.host.file("/sys/kernel/mm/transparent_hugepage/enabled").content_string
    else:
        # read-only /sys: the unit ran at this boot's start and was skipped by its condition, not failed
        props = target.host.check_output("systemctl show -p ConditionResult -p Result v100kit-thp")
        assert "ConditionResult=no" in props and "Result=success" in props


def test_open_file_limit_of_service_user(target):
    s = target.settings
    limits = target.host.file("/etc/security/limits.d/60-v100kit.conf").content_string
    assert f"{s.base_service_user} soft nofile {s.tuning_nofile_limit}" in limits
    assert f"{s.base_service_user} hard nofile {s.tuning_nofile_limit}" in limits
    ceiling = int(target.host.check_output("ulimit -Hn"))
    if s.tuning_nofile_limit > ceiling and not target.host.run("capsh --has-p=cap_sys_resource").succeeded:
        pytest.skip(f"this host's hard open-file ceiling is {ceiling} and raising it is not permitted here")
    # pam_limits reads it: a login session of the service user gets the limit
    out = target.host.check_output(f"runuser -l {s.base_service_user} -s /bin/sh -c 'ulimit -Sn; ulimit -Hn'")
    assert out.split() == [str(s.tuning_nofile_limit)] * 2
