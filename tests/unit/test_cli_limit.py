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
    assert "(its hosts: mine-01.example)" in capsys.readouterr().err
