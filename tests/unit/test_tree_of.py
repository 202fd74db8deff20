"""roles/llama_cpp/decide.tree_of: what the role knows of the tree it builds, for each kind of source (issue 14's
mutation run found every field of its result unchecked). Expected facts come from the pin data files (written by
tools/llama_cpp_pin.py from the archives, and checked against them in test_llama_cpp_tree.py) and from the real
sdist where this machine has it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from roles.llama_cpp.decide import Tree, tree_of
from roles.llama_cpp.versions import SOURCES, load_pin, pin_file
from roles.settings import load_settings
from tests.unit.test_llama_cpp_tree import archive

PIN = "pypi-0.3.36"


def settings(all_quants: bool):
    return load_settings("h", {"llama_cpp_fa_all_quants": all_quants})


def pin_facts(ref: str) -> tuple[frozenset[str], str, frozenset[str]]:
    """architectures, flash-attention form and llama-server flags, as the pin's data file has them."""
    data = load_pin(pin_file(ref))
    return frozenset(data["architectures"]), data["fa_form"], frozenset(data["server_flag_values"])


#: llama.cpp's version as the pin's tree states it (its CMakeLists.txt; read in the 0.3.36 sdist: 0.5.0)
VERSION = (0, 5, 0)
#: the pin's quiet -lv as its data file has it (its common/log.h LOG_DBG 5, library INFO 4: 4)
QUIET = load_pin(pin_file(PIN))["log_verbosity"]
#: the words each of its server's flags takes, as its data file has them
VALUES = load_pin(pin_file(PIN))["server_flag_values"]
#: its server's flags whose value is read with std::stoi, as its data file has them
INTS = frozenset(load_pin(pin_file(PIN))["server_int_flags"])


@pytest.mark.parametrize("all_quants", [True, False])
def test_a_pinned_source_gives_its_pin_files_facts_without_reading_anything(all_quants):
    src = dataclasses.replace(SOURCES[PIN], url="/nonexistent/archive.tar.gz")  # not read: the pin data is enough
    archs, form, flags = pin_facts(PIN)
    assert tree_of(src, settings(all_quants)) == Tree(PIN, archs, form, all_quants, server_flags=flags,
                                                      llama_version=VERSION, log_verbosity=QUIET, server_flag_values=VALUES, server_int_flags=INTS)


def test_a_pinned_source_with_only_its_architectures_known_still_uses_them():
    src = dataclasses.replace(SOURCES[PIN], fa_form=None)
    assert tree_of(src, settings(False)) == Tree(PIN, pin_facts(PIN)[0], None, False, server_flags=pin_facts(PIN)[2],
                                                 llama_version=VERSION, log_verbosity=QUIET, server_flag_values=VALUES, server_int_flags=INTS)


@pytest.mark.parametrize("all_quants", [True, False])
def test_an_archive_on_the_control_machine_is_read_for_its_facts(all_quants):
    path = archive("0.3.36")
    src = dataclasses.replace(SOURCES[PIN], ref="mine", url=str(path), architectures=None, fa_form=None,
                              llama_version=None, log_verbosity=None)
    archs, form, flags = pin_facts(PIN)  # the same archive the pin was made from
    assert tree_of(src, settings(all_quants)) == Tree("mine", archs, form, all_quants, server_flags=flags,
                                                      llama_version=VERSION, log_verbosity=QUIET,
                                                      server_flag_values=VALUES, server_int_flags=INTS, flash_attn_style=load_pin(pin_file(PIN))["flash_attn_style"])
    # after its checksum failed the archive is not read: unknown, said so where it matters
    assert tree_of(src, settings(all_quants), read_archive=False) == Tree("mine", None, None, all_quants)


@pytest.mark.parametrize("url", ["https://example.org/llama.cpp-b9999.tar.gz", "/nonexistent/llama.cpp.tar.gz"])
def test_a_url_or_a_missing_file_is_unknown(url):
    src = dataclasses.replace(SOURCES[PIN], ref="other", url=url, architectures=None, fa_form=None)
    assert tree_of(src, settings(True)) == Tree("other", None, None, True)


def test_an_unreadable_archive_is_unknown_not_an_error(tmp_path: Path):
    bad = tmp_path / "llama.cpp.tar.gz"
    bad.write_bytes(b"not a tar archive at all")
    src = dataclasses.replace(SOURCES[PIN], ref="broken", url=str(bad), architectures=None, fa_form=None)
    assert tree_of(src, settings(False)) == Tree("broken", None, None, False)
