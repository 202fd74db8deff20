"""roles/llama_cpp/tree.py on the real llama-cpp-python sdists (skipped where they are not on this machine), and the
pin data files (files/llama_cpp/*.json) checked against what the archives give, so the data cannot drift."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from roles.llama_cpp import attention, tree
from roles.llama_cpp.versions import DEFAULT_SOURCE, SOURCES, pin_file

SHA = {"0.3.16": "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6",  # PyPI, issue 18 / brief
       "0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
PLACES = (Path("/work/llsrc"), Path("/var/cache/v100kit-lab/src"))


def archive(version: str) -> Path:
    for d in PLACES:
        p = d / f"llama_cpp_python-{version}.tar.gz"
        if p.is_file():
            return p
    pytest.skip(f"llama_cpp_python-{version}.tar.gz is in none of {', '.join(map(str, PLACES))}")


def subdir(version: str) -> str:
    return f"llama_cpp_python-{version}/vendor/llama.cpp"


_FILES: dict[str, dict[str, str]] = {}


def files_of(version: str) -> dict[str, str]:
    """The members tree.py reads, read once per session (a read decompresses the whole archive)."""
    if version not in _FILES:
        _FILES[version] = tree.read_files(archive(version), subdir(version))
    return _FILES[version]


@pytest.fixture(scope="module")
def facts() -> dict:
    out = {}
    for v in SHA:
        try:
            out[v] = tree.facts(files_of(v))
        except pytest.skip.Exception:
            pass
    return out


def need(facts: dict, v: str) -> tree.TreeFacts:
    if v not in facts:
        pytest.skip(f"no llama_cpp_python-{v}.tar.gz here")
    return facts[v]


def test_both_trees_load_llama_and_qwen2_and_the_new_one_adds_architectures(facts):
    old, new = need(facts, "0.3.16"), need(facts, "0.3.36")
    for f in (old, new):
        assert {"llama", "qwen2", "gemma3"} <= f.architectures and "(unknown)" not in f.architectures
    assert "clip" not in new.architectures  # "CLIP cannot be used as main model" (src/llama.cpp)
    assert "qwen3next" in new.architectures - old.architectures


def test_the_two_trees_have_different_known_forms_and_fa_styles(facts):
    old, new = need(facts, "0.3.16"), need(facts, "0.3.36")
    assert old.fa_form in attention.RULES and new.fa_form in attention.RULES and old.fa_form != new.fa_form
    # docs/volta.md §5: `-fa on|off|auto` since about b6327, older builds a bare -fa; issue 18: CUDA graphs off
    # below Ampere in the pinned tree, from Volta on in the current one
    assert (old.flash_attn_style, new.flash_attn_style) == ("flag", "value")
    assert (old.cuda_graphs_min_cc, new.cuda_graphs_min_cc) == ((8, 0), (7, 0))


def test_subdir_is_found_by_looking(facts, tmp_path):
    need(facts, "0.3.16")
    small = tmp_path / "small.tar.gz"
    _copy_with("0.3.16", small, subdir("0.3.16"), {})
    assert tree.read_tree(small, None) == facts["0.3.16"]


def _copy_with(version: str, dst: Path, root: str, edits: dict[str, tuple[str, str] | None]) -> None:
    """A small .tar.gz with the members tree.py reads, one text replaced (old, new) or a member left out (None)."""
    files = files_of(version)
    with tarfile.open(dst, "w:gz") as out:
        for member, text in files.items():
            if member in edits and edits[member] is None:
                continue
            if member in edits:
                old, new = edits[member]
                assert old in text
                text = text.replace(old, new, 1)
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{member}")
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


def test_one_changed_line_in_the_fa_rules_makes_the_form_unknown(facts, tmp_path):
    old = need(facts, "0.3.16")
    root = subdir("0.3.16")
    same, changed = tmp_path / "same.tar.gz", tmp_path / "changed.tar.gz"
    _copy_with("0.3.16", same, root, {})
    assert tree.read_tree(same, root) == old  # the real archive read whole gives the same facts as its members
    # ggml-cuda.cu supports_op: head 64 now needs F16 K *and* V
    _copy_with("0.3.16", changed, root, {tree.CUDA_CU: (
        "if (op->src[0]->ne[0] ==  64 && op->src[1]->type == GGML_TYPE_F16) {",
        "if (op->src[0]->ne[0] ==  64 && op->src[1]->type == GGML_TYPE_F16 && op->src[2]->type == GGML_TYPE_F16) {")})
    got = tree.read_tree(changed, root)
    assert got.fa_form is None and got.architectures == old.architectures


def test_a_missing_member_names_the_archive_and_the_member(facts, tmp_path):
    need(facts, "0.3.16")
    root = subdir("0.3.16")
    broken = tmp_path / "broken.tar.gz"
    _copy_with("0.3.16", broken, root, {tree.ARCH_CPP: None})
    with pytest.raises(ValueError, match=rf"broken\.tar\.gz.*missing member {root}/src/llama-arch\.cpp"):
        tree.read_tree(broken, root)


@pytest.mark.parametrize("version", list(SHA))
def test_pin_data_file_agrees_with_its_archive(version, facts):
    f = need(facts, version)
    a = archive(version)
    assert hashlib.sha256(a.read_bytes()).hexdigest() == SHA[version]
    data = json.loads(pin_file(f"pypi-{version}").read_text())
    assert data["sha256"] == SHA[version] and data["subdir"] == subdir(version)
    assert data["url"].startswith("https://files.pythonhosted.org/packages/") and data["url"].endswith(a.name)
    assert set(data["architectures"]) == f.architectures
    assert (data["fa_form"], data["flash_attn_style"]) == (f.fa_form, f.flash_attn_style)
    assert data["matrix"] == attention.matrix(f.fa_form)
    # llama.cpp's own version as its CMakeLists.txt states it: 0.3.16's tree predates semantic versioning (it sets
    # only LLAMA_INSTALL_VERSION 0.0.${LLAMA_BUILD_NUMBER}), 0.3.36's says 0.5.0
    assert data["llama_version"] == {"0.3.16": None, "0.3.36": [0, 5, 0]}[version]
    assert f.llama_version == (tuple(data["llama_version"]) if data["llama_version"] else None)
    src = SOURCES[f"pypi-{version}"]
    assert (src.sha256, src.architectures, src.fa_form) == (SHA[version], f.architectures, f.fa_form)
    assert src.llama_version == f.llama_version
    assert data["log_verbosity"] == f.log_verbosity == src.log_verbosity is not None
    assert data["server_flag_values"] == dict(f.server_flag_values) == dict(src.server_flag_values)
    assert frozenset(data["server_flag_values"]) == f.server_flags == src.server_flags  # the flags are its keys
    assert frozenset(data["server_int_flags"]) == f.server_int_flags == src.server_int_flags


@pytest.mark.parametrize("version", list(SHA))
def test_the_words_each_flag_takes_are_its_handlers_arguments(version, facts):
    """server_flag_values against the handlers' signatures as a grep finds them in common/arg.cpp (not the reader):
    `[](common_params & params)` takes no word, `(common_params & params, int value)` one, a two-string handler
    two (common_params_parse_ex: handler_void, handler_int/handler_string, handler_str_str)."""
    need(facts, version)
    text = files_of(version)[tree.ARG_CPP]
    values = SOURCES[f"pypi-{version}"].server_flag_values
    for names, handler in re.findall(r'add_opt\(common_arg\(\s*\{([^}]*)\},\s*(?:"[^"]*",\s*)*'
                                     r'(?:string_format\([^;]*?\),\s*)?\[\]\((common_params & params[^)]*)\)',
                                     text):
        flags = re.findall(r'"([^"]+)"', names)
        want = handler.count(",")
        if " bool " in handler + " ":
            want = 0
        for flag in flags:
            if flag in values:
                assert values[flag] == want, (flag, handler)
    assert values["-c"] == 1 and values["--jinja"] == 0 and values["--port"] == 1
    assert values["--control-vector-layer-range"] == 2  # START END: the one two-word option of both trees


@pytest.mark.parametrize("version", list(SHA))
def test_the_int_flags_are_those_whose_handler_takes_an_int(version, facts):
    """server_int_flags against a grep of common/arg.cpp (not the reader): an option whose handler is
    `[](common_params & params, int NAME)` is a handler_int (common/arg.h), its word read with std::stoi."""
    need(facts, version)
    text = files_of(version)[tree.ARG_CPP]
    src = SOURCES[f"pypi-{version}"]
    seen = 0
    for names, second in re.findall(r'add_opt\(common_arg\(\s*\{([^}]*)\},\s*(?:\{[^}]*\},\s*)?(?:"[^"]*",\s*)*'
                                    r'(?:string_format\([^;]*?\),\s*)?\[\]\(common_params & params(, [^)]*)?\)',
                                    text):
        for flag in re.findall(r'"([^"]+)"', names):
            if flag in src.server_flag_values:
                seen += 1
                assert (flag in src.server_int_flags) == second.startswith(", int "), (flag, second)
    assert seen > 200 and src.server_int_flags <= frozenset(src.server_flag_values)
    assert {"-c", "-np", "--threads-http"} <= src.server_int_flags and not {"--alias", "--jinja"} & src.server_int_flags


def test_registry_keeps_both_pins_and_the_default():
    assert {"pypi-0.3.16", "pypi-0.3.36"} <= set(SOURCES)
    assert DEFAULT_SOURCE is SOURCES["pypi-0.3.36"] and DEFAULT_SOURCE.sha256 == SHA["0.3.36"]
    assert DEFAULT_SOURCE.flash_attn_style == "value" and SOURCES["pypi-0.3.16"].flash_attn_style == "flag"


def test_relative_pypi_urls_are_made_absolute():
    from tools.llama_cpp_pin import normalise_url  # noqa: PLC0415 (the tool is not a package module)
    rel = "../../packages/packages/ec/e9/e7de2b/llama_cpp_python-0.3.36.tar.gz"
    assert normalise_url(rel) == "https://files.pythonhosted.org/packages/ec/e9/e7de2b/llama_cpp_python-0.3.36.tar.gz"
    absolute = "https://files.pythonhosted.org/packages/e4/b4/x/llama_cpp_python-0.3.16.tar.gz"
    assert normalise_url(absolute) == absolute
