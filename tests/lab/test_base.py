"""base role on real lab hosts (after deploy, second deploy and reboot). The service user is checked by the host
suite (v100kit/verify/suite), which tests/lab/test_verify.py runs on these hosts."""


def test_apt_sources_have_the_nvidia_components(target):
    sources = target.host.file("/etc/apt/sources.list.d/v100kit-debian.sources")
    assert sources.contains("Components: main contrib non-free non-free-firmware")
    # the image shipped with `main` only: nvidia-smi (non-free) is installable only through our sources
    policy = target.host.run("apt-cache policy nvidia-smi")
    assert "non-free" in policy.stdout
    assert not target.host.file("/etc/apt/sources.list").exists
    assert target.host.file("/etc/apt/sources.list.disabled").exists  # the user's file is kept


def test_apt_waits_for_dpkg_locks(target):
    out = target.host.check_output("apt-config dump DPkg::Lock::Timeout")
    assert f'"{target.settings.base_apt_lock_timeout_s}"' in out

