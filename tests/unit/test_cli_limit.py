"""A --limit host name the inventory lacks is a usage error (exit 2, the name and the inventory's hosts said), not
an empty report: `v100kit doctor INVENTORY --limit typo` must never read as "every host healthy" (exit 0)."""

from __future__ import annotations

import pytest

from v100kit.cli import main


@pytest.mark.parametrize("command", ["plan", "doctor", "bench"])
def test_an_unknown_limit_host_exits_2_naming_it(command, tmp_path, capsys):
    inventory = tmp_path / "inv.py"
    inventory.write_text('boxes = [("gpu-01.example", {}), ("gpu-02.example", {})]\n')
    assert main([command, str(inventory), "--limit", "gpu-03.example"]) == 2
    err = capsys.readouterr().err
    assert "--limit gpu-03.example: no such host" in err and "gpu-01.example, gpu-02.example" in err


@pytest.mark.parametrize("command", ["plan", "doctor", "bench"])
def test_an_inventory_file_that_does_not_exist_exits_2_naming_it(command, tmp_path, capsys, monkeypatch):
    """A wrong path is a usage error too (before: pyinfra's "neither an inventory file" and exit 0, which for the
    doctor read as healthy)."""
    monkeypatch.chdir(tmp_path)
    assert main([command, "inventory/nonexistent.py"]) == 2
    err = capsys.readouterr().err
    assert "inventory inventory/nonexistent.py: no such file" in err and str(tmp_path) in err


def test_a_relative_inventory_path_is_the_callers_not_the_projects(tmp_path, capsys, monkeypatch):
    """`cd elsewhere && v100kit plan inventory/example.py` reads ./inventory/example.py, not the project's own file
    of that name (the commands move to the project root to find group_data/)."""
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory/example.py").write_text('boxes = [("mine-01.example", {})]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "inventory/example.py", "--limit", "gpu-01"]) == 2  # the project's file has gpu-01
    assert "(its hosts: mine-01.example;" in capsys.readouterr().err


def test_limit_takes_group_names_and_globs_as_pyinfras_own_limit_does(tmp_path):
    """pyinfra's --limit is "by name and group name" (pyinfra --help), a glob on host names otherwise: the commands
    select the same hosts, and refuse only what selects none."""
    from v100kit.hosts import UnknownHost, load_inventory

    inventory = tmp_path / "inv.py"
    inventory.write_text('debian12 = [("gpu-01", {}), ("gpu-02", {})]\nubuntu2204 = [("gpu-03", {})]\n')
    names = lambda limit: [h.name for h in load_inventory(str(inventory), limit)[1]]  # noqa: E731
    assert names(None) == ["gpu-01", "gpu-02", "gpu-03"]
    assert names(["ubuntu2204"]) == ["gpu-03"]
    assert names(["gpu-0[12]"]) == ["gpu-01", "gpu-02"]
    assert names(["gpu-03", "debian12"]) == ["gpu-01", "gpu-02", "gpu-03"]
    with pytest.raises(UnknownHost, match=r"--limit debian13: no such host in .*, nor a group \(its hosts: gpu-01, "
                                          r"gpu-02, gpu-03; its groups: debian12, inv, ubuntu2204\)"):
        names(["debian12", "debian13"])


@pytest.mark.parametrize("text, error", [("hosts = [undefined_name]\n", "NameError: name 'undefined_name'"),
                                         ("hosts = [(\n", "SyntaxError")])
def test_an_inventory_that_fails_to_run_is_named_with_its_error(text, error, tmp_path, capsys):
    inventory = tmp_path / "inv.py"
    inventory.write_text(text)
    assert main(["plan", str(inventory)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"v100kit plan: inventory {inventory}: {error}") and err.count("\n") == 1, err
