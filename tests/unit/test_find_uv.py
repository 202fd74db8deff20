"""tools/lock_vllm.py find_uv: the lock tools use the uv tools/setup.sh chose (PATH's where it is UV_VERSION, else
.tools/bin/uv), not a bare `uv` that was missing on a machine where setup.sh had installed its own."""

from __future__ import annotations

import pytest

import tools.lock_vllm as tool


def _uv(directory, version: str):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "uv"
    path.write_text(f"#!/bin/sh\necho 'uv {version} (fake)'\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("on_path, in_tools, chosen", [
    (tool.UV_VERSION, "0.9.0", "path"), ("0.9.0", tool.UV_VERSION, "tools"), (None, tool.UV_VERSION, "tools")])
def test_the_uv_of_the_locks_version_is_chosen(tmp_path, monkeypatch, on_path, in_tools, chosen):
    path_dir = tmp_path / "bin"
    path_dir.mkdir()
    found = {"path": _uv(path_dir, on_path) if on_path else None, "tools": _uv(tmp_path / ".tools" / "bin", in_tools)}
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    assert tool.find_uv() == str(found[chosen])


def test_no_uv_of_the_locks_version_names_what_was_found_and_setup(tmp_path, monkeypatch):
    path_dir = tmp_path / "bin"
    _uv(path_dir, "0.9.0")
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.setattr(tool, "ROOT", tmp_path)  # no .tools/bin/uv
    with pytest.raises(SystemExit) as e:
        tool.find_uv()
    assert f"no uv {tool.UV_VERSION}" in str(e.value) and "uv 0.9.0 at" in str(e.value)
    assert "tools/setup.sh" in str(e.value)
