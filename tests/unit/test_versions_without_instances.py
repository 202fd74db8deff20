"""An unknown vLLM release or llama.cpp ref is refused even where no instance is configured yet (a new user's try: it
passed silently until the first instance was added)."""

from __future__ import annotations

from roles.cuda.versions import DISTRO_TOOLKITS
from roles.llama_cpp import decide as llama_cpp
from roles.llama_cpp.versions import SOURCES
from roles.settings import load_settings
from roles.vllm import decide as vllm
from roles.vllm.versions import VLLM_RELEASES


def test_an_unknown_vllm_release_is_refused_without_instances():
    plan, problems = vllm.plan(load_settings("h", {"vllm_version": "0.9.9"}), "3.11", [], None, lambda p: None, {})
    assert plan is None and len(problems) == 1 and problems[0].startswith("vllm_version = '0.9.9'")
    for version, rel in VLLM_RELEASES.items():  # every release of the table passes, installable or not
        if rel.refused is None:
            assert vllm.plan(load_settings("h", {"vllm_version": version}), "3.11", [], None, lambda p: None, {}) \
                == (None, [])


def test_an_unknown_llama_cpp_ref_is_refused_without_instances():
    toolkits = list(DISTRO_TOOLKITS.values())
    plan, problems = llama_cpp.plan(load_settings("h", {"llama_cpp_ref": "pypi-9.9.9"}), toolkits, [], lambda p: True)
    assert plan is None and len(problems) == 1 and problems[0].startswith("llama_cpp_ref = 'pypi-9.9.9'")
    for ref in SOURCES:
        assert llama_cpp.plan(load_settings("h", {"llama_cpp_ref": ref}), toolkits, [], lambda p: True) == (None, [])
