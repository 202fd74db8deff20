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
