"""roles/llama_cpp/decide.source: which archive is built, from the settings (issue 14: the mutation run found the
overrides and both refusals unchecked). Expected values: the pin data files (files/llama_cpp/<ref>.json: url,
sha256, subdir, -fa style of each pinned sdist) and the settings of each case."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from roles.llama_cpp import tree
from roles.llama_cpp.decide import source
from roles.llama_cpp.versions import DEFAULT_SOURCE, SOURCES, load_pin, pin_file
from roles.settings import load_settings
from tests.unit.test_llama_cpp_volta_ranges import MEMBERS, ROOT, cmake_top

SHA = "ab" * 32


def src_of(**data):
    return source(load_settings("h", data))


def test_a_pinned_ref_is_its_pin_files_archive():
    for ref in SOURCES:
        pin = load_pin(pin_file(ref))
        src, problems = src_of(llama_cpp_ref=ref)
        assert problems == []
        assert (src.ref, src.url, src.sha256, src.subdir, src.flash_attn_style) == (
            pin["ref"], pin["url"], pin["sha256"], pin["subdir"], pin["flash_attn_style"])


def test_a_ref_without_a_pin_or_source_is_refused_naming_the_pins():
    src, problems = src_of(llama_cpp_ref="b9999")
    assert problems == ["llama_cpp_ref = 'b9999': no source for this ref. Fix: set llama_cpp_source (URL or path of "
                        f"the .tar.gz) and llama_cpp_source_sha256, or one of the pinned refs: {', '.join(SOURCES)}"]
    assert src == DEFAULT_SOURCE  # stands in, so the other checks still run


def test_a_source_without_checksum_is_refused():
    src, problems = src_of(llama_cpp_source="https://example.org/llama.cpp.tar.gz")
    assert problems == ["llama_cpp_source = 'https://example.org/llama.cpp.tar.gz': no checksum given. Fix: set "
                        "llama_cpp_source_sha256 to the archive's sha256"]


def test_an_unknown_archive_is_taken_as_given_and_a_path_expanded():
    src, problems = src_of(llama_cpp_ref="mine", llama_cpp_source="~/src/llama.cpp.tar.gz",
                           llama_cpp_source_sha256=SHA, llama_cpp_source_subdir="llama.cpp-b9999",
                           llama_cpp_flash_attn_style="flag")
    assert problems == []
    assert (src.ref, src.url, src.sha256, src.subdir, src.flash_attn_style) == (
        "mine", str(Path("~/src/llama.cpp.tar.gz").expanduser()), SHA, "llama.cpp-b9999", "flag")
    assert (src.architectures, src.fa_form) == (None, None)  # nothing known of an unknown tree


def test_a_pinned_archives_bytes_from_a_mirror_keep_the_pins_facts():
    pin = load_pin(pin_file(DEFAULT_SOURCE.ref))
    url = "https://mirror.example.org/llama_cpp_python.tar.gz"
    src, problems = src_of(llama_cpp_ref="mirrored", llama_cpp_source=url, llama_cpp_source_sha256=pin["sha256"])
    assert problems == []
    assert src == dataclasses.replace(DEFAULT_SOURCE, ref="mirrored", url=url)
    assert src.architectures == frozenset(pin["architectures"]) and src.fa_form == pin["fa_form"]
    # a style setting against the pin's own (read from its common/arg.cpp) is refused; the pin's own is accepted
    other = {"value": "flag", "flag": "value"}[pin["flash_attn_style"]]
    _, problems = src_of(llama_cpp_source=url, llama_cpp_source_sha256=pin["sha256"], llama_cpp_flash_attn_style=other)
    assert problems == [f"llama_cpp_flash_attn_style = '{other}': the pinned tree {pin['ref']} takes "
                        f"{'-fa on|off|auto' if other == 'flag' else 'a bare -fa'} (its common/arg.cpp). Fix: set it "
                        f"to {pin['flash_attn_style']}, or leave it unset"]
    styled, problems = src_of(llama_cpp_source=url, llama_cpp_source_sha256=pin["sha256"],
                              llama_cpp_flash_attn_style=pin["flash_attn_style"])
    assert problems == [] and styled.flash_attn_style == pin["flash_attn_style"] and styled.subdir == pin["subdir"]


def test_a_style_setting_against_a_pinned_ref_is_refused():
    """pypi-0.3.16's llama-server takes a bare -fa (files/llama_cpp/pypi-0.3.16.json, read from its arg.cpp)."""
    assert load_pin(pin_file("pypi-0.3.16"))["flash_attn_style"] == "flag"
    _, problems = src_of(llama_cpp_ref="pypi-0.3.16", llama_cpp_flash_attn_style="value")
    assert problems == ["llama_cpp_flash_attn_style = 'value': the pinned tree pypi-0.3.16 takes a bare -fa (its "
                        "common/arg.cpp). Fix: set it to flag, or leave it unset"]


# -- a control-machine archive's own -fa style ---------------------------------------------------------------------

#: common/arg.cpp's -fa option before about b6327, as llama.cpp wrote it then (a handler without a value: a bare
#: -fa; `-fa on` stops such a llama-server with "error: invalid argument: on"), in place of the value form of
#: test_llama_cpp_volta_ranges.py's minimal arg.cpp
FLAG_FA = MEMBERS[tree.ARG_CPP].replace(
    '        {"-fa", "--flash-attn"}, "[on|off|auto]", "set Flash Attention use",\n'
    '        [](common_params & params, const std::string & value) { params.flash_attn = value; }\n'
    '    ));\n',
    '        {"-fa", "--flash-attn"},\n'
    '        string_format("enable Flash Attention (default: %s)", params.flash_attn ? "enabled" : "disabled"),\n'
    '        [](common_params & params) {\n'
    '            params.flash_attn = true;\n'
    '        }\n'
    '    ).set_env("LLAMA_ARG_FLASH_ATTN"));\n')


def _flag_style_plan(tmp_path, **data):
    """The llama.cpp plan of one tiny model built by an unpinned local archive whose llama-server takes a bare
    -fa (a minimal tree: tests/unit/test_llama_cpp_volta_ranges.py's members, this arg.cpp)."""
    import hashlib
    import io
    import tarfile

    from lab.models import write_llama
    from roles.cuda.versions import Toolkit
    from roles.llama_cpp.decide import plan

    archive = tmp_path / "llama.cpp-b5000.tar.gz"
    with tarfile.open(archive, "w:gz") as out:
        for member, text in {**MEMBERS, tree.ARG_CPP: FLAG_FA, tree.CMAKE_TOP: cmake_top(None)}.items():
            info = tarfile.TarInfo(f"{ROOT}/{member}")
            info.size = len(text.encode())
            out.addfile(info, io.BytesIO(text.encode()))
    gguf = write_llama(tmp_path / "tiny.gguf", n_embd=512, n_head=4, n_head_kv=2)
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    settings = load_settings("h", {
        "llama_cpp_ref": "b5000", "llama_cpp_source": str(archive), "llama_cpp_source_sha256": sha(archive),
        "llama_cpp_instances": {"m": {"model_source": str(gguf), "model_sha256": sha(gguf), "flash_attn": "on"}},
        **data})
    return plan(settings, [Toolkit("12.4", "distro", {}, "/usr/bin/nvcc", None, "g++-13")], [], lambda p: True)


def test_an_unpinned_archives_bare_fa_is_read_from_its_code(tmp_path):
    import shlex

    from roles.llama_cpp.decide import server_args
    p, problems = _flag_style_plan(tmp_path)
    assert problems == [] and p.source.flash_attn_style == "flag"
    args = shlex.split(server_args(p.instances[0], p.source.flash_attn_style))
    fa = args.index("-fa")
    assert fa + 1 == len(args) or args[fa + 1].startswith("-")  # bare: no on|off|auto after it


def test_a_style_setting_against_the_archives_code_is_refused(tmp_path):
    p, problems = _flag_style_plan(tmp_path, llama_cpp_flash_attn_style="value")
    assert p is None
    assert problems == ["llama_cpp_flash_attn_style = 'value': the archive's common/arg.cpp takes a bare -fa. Fix: "
                        "set it to flag, or leave it unset: it is read from the archive"]
