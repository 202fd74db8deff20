"""roles/llama_cpp/decide.source: which archive is built, from the settings (issue 14: the mutation run found the
overrides and both refusals unchecked). Expected values: the pin data files (files/llama_cpp/<ref>.json: url,
sha256, subdir, -fa style of each pinned sdist) and the settings of each case."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from roles.llama_cpp.decide import source
from roles.llama_cpp.versions import DEFAULT_SOURCE, SOURCES, load_pin, pin_file
from roles.settings import load_settings

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
    # a style override still applies to it
    styled, _ = src_of(llama_cpp_source=url, llama_cpp_source_sha256=pin["sha256"], llama_cpp_flash_attn_style="flag")
    assert styled.flash_attn_style == "flag" and styled.subdir == pin["subdir"]
