"""tools/llama_cpp_pin.py and the llama.cpp role against llama.cpp ranges known bad on Volta.

The archives are minimal llama.cpp trees the tests write (the way test_llama_cpp_tree.py builds its small
archives, but from text written here, so they run where no real sdist is): the members roles/llama_cpp/tree.py
needs, and a top-level CMakeLists.txt stating llama.cpp's version as llama.cpp's own does (set(LLAMA_VERSION_MAJOR
0) ...; read in the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp/CMakeLists.txt).

Expected verdicts come from the public record, not from the data under test: PR #28536 broke flash attention on
Volta and #29224 fixed it (ggml-org/llama.cpp#29232, 2026-09-21); v0.4.0 was tagged by 2026-09-05, before #28536
was opened (after #28416 of 2026-09-04), and v0.5.0 on 2026-09-24, after the fix. So a 0.4.1 tree is in the range,
0.3.0 and 0.5.0 trees are not, and a tree from before semantic versioning states no version at all.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

import tools.llama_cpp_pin as pin_tool
from roles.llama_cpp import tree

ROOT = "llama_cpp_python-9.9.9/vendor/llama.cpp"

#: The smallest texts tree.facts() parses: one architecture, a server with a value-style -fa option.
MEMBERS = {
    tree.ARCH_CPP: 'static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {\n'
                   '    { LLM_ARCH_LLAMA, "llama" },\n    { LLM_ARCH_UNKNOWN, "(unknown)" },\n};\n',
    tree.ARG_CPP: ('common_params_context common_params_parser_init(common_params & params, llama_example ex) {\n'
                   '    auto add_opt = [&](common_arg arg) {\n'
                   '        if ((arg.in_example(ex) || arg.in_example(LLAMA_EXAMPLE_COMMON)) && !arg.is_exclude(ex)) {\n'
                   '            ctx_arg.options.push_back(std::move(arg));\n'
                   '        }\n'
                   '    };\n'
                   '    add_opt(common_arg(\n'
                   '        {"-fa", "--flash-attn"}, "[on|off|auto]", "set Flash Attention use",\n'
                   '        [](common_params & params, const std::string & value) { params.flash_attn = value; }\n'
                   '    ));\n'
                   '    return ctx_arg;\n'
                   '}\n'),
    tree.CUDA_CU: "// ggml-cuda.cu\n", tree.COMMON_CUH: "// common.cuh\n", tree.FATTN_CU: "// fattn.cu\n",
    tree.CONTEXT_CPP: "// llama-context.cpp\n", tree.GRAPH_CPP: "// llama-graph.cpp\n",
    tree.CMAKE_GGML: "set(GGML_VERSION_MAJOR 0)\n",
}


def cmake_top(version: tuple[int, int, int] | None) -> str:
    """A top-level CMakeLists.txt as llama.cpp's: the version block of semantic versioning, or (None) the older
    form, which sets only LLAMA_INSTALL_VERSION from the build number (the 0.3.16 sdist's)."""
    if version is None:
        return 'project("llama.cpp" C CXX)\nset(LLAMA_INSTALL_VERSION 0.0.${LLAMA_BUILD_NUMBER})\n'
    major, minor, patch = version
    return ('project("llama.cpp" C CXX)\n\n### llama.cpp version\n'
            f'set(LLAMA_VERSION_MAJOR {major})\nset(LLAMA_VERSION_MINOR {minor})\nset(LLAMA_VERSION_PATCH {patch})\n'
            'set(LLAMA_VERSION_BASE "${LLAMA_VERSION_MAJOR}.${LLAMA_VERSION_MINOR}.${LLAMA_VERSION_PATCH}")\n'
            'option(LLAMA_BUILD_IS_DEV "llama: dev build" ON)\n')


def write_tree(path: Path, version: tuple[int, int, int] | None) -> Path:
    """A .tar.gz holding a minimal llama.cpp tree under ROOT that states `version`."""
    with tarfile.open(path, "w:gz") as out:
        for member, text in {**MEMBERS, tree.CMAKE_TOP: cmake_top(version)}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{ROOT}/{member}")
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def pin_dir(tmp_path, monkeypatch):
    """The tool writes into a temporary PIN_DIR, and PyPI answers with the test archive's sha256."""
    out = tmp_path / "pins"
    monkeypatch.setattr(pin_tool, "PIN_DIR", out)
    monkeypatch.setattr(pin_tool, "pin_file", lambda ref: out / f"{ref}.json")
    return out


def run_tool(archive: Path, monkeypatch) -> int:
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    monkeypatch.setattr(pin_tool, "pypi_sdist", lambda v: (f"https://files.example/{archive.name}", sha, "api"))
    return pin_tool.main(["9.9.9", "--archive", str(archive)])


def test_the_tree_states_its_version_in_its_cmakelists(tmp_path):
    assert tree.read_tree(write_tree(tmp_path / "a.tar.gz", (0, 4, 1)), ROOT).llama_version == (0, 4, 1)
    assert tree.read_tree(write_tree(tmp_path / "b.tar.gz", None), ROOT).llama_version is None


def test_pin_tool_refuses_a_tree_in_the_broken_range(tmp_path, pin_dir, monkeypatch, capsys):
    archive = write_tree(tmp_path / "llama_cpp_python-9.9.9.tar.gz", (0, 4, 1))
    assert run_tool(archive, monkeypatch) == 2
    out = capsys.readouterr().out
    assert "refused" in out and "llama.cpp 0.4.1" in out
    assert "ggml-org/llama.cpp#28536" in out and "ggml-org/llama.cpp#29224" in out  # what broke it, what fixed it
    assert "0.5.0 or later" in out  # what to pick instead
    assert not pin_dir.exists() or not list(pin_dir.iterdir())  # nothing written


def test_pin_tool_refuses_the_whole_line_the_break_landed_in(tmp_path, pin_dir, monkeypatch, capsys):
    """0.4.0: tagged before #28536 was opened, but its line's later commits may hold it (the tree cannot say)."""
    assert run_tool(write_tree(tmp_path / "llama_cpp_python-9.9.9.tar.gz", (0, 4, 0)), monkeypatch) == 2
    assert "llama.cpp 0.4.0" in capsys.readouterr().out


@pytest.mark.parametrize("version", [(0, 5, 0), (0, 3, 0), (0, 6, 0), None])
def test_pin_tool_accepts_a_tree_outside_the_range(version, tmp_path, pin_dir, monkeypatch, capsys):
    archive = write_tree(tmp_path / "llama_cpp_python-9.9.9.tar.gz", version)
    assert run_tool(archive, monkeypatch) == 0
    data = json.loads((pin_dir / "pypi-9.9.9.json").read_text())
    assert data["llama_version"] == (list(version) if version else None)
    assert data["architectures"] == ["llama"] and data["flash_attn_style"] == "value"
    assert "refused" not in capsys.readouterr().out
