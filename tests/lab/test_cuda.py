"""cuda role on real lab hosts: each configured toolkit's own nvcc reports the configured version."""


def test_each_toolkit_nvcc_reports_its_version(target):
    assert target.toolkits
    for tk in target.toolkits:
        out = target.host.check_output(f"{tk.nvcc} --version")
        assert f"release {tk.version}," in out, out
        for name, version in tk.packages.items():
            assert target.host.package(name).version == version
