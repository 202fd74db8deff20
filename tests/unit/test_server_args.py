"""llama-server's command line (roles/llama_cpp/decide.server_args) against the flags llama.cpp declares in its own
argument table, common/arg.cpp (`common_arg({"-np", "--parallel"}, ...)`), read from the pinned sdists where this
machine has them (issue 14: the mutation run found misspelt or upper-cased flags, and the bare-`-fa` builds'
choice of flash attention, unchecked; and an instance without a KV choice, a model not readable before the
deploy, raised UnboundLocalError: fixed). Values: what the settings say, and llama.cpp's `-fa on|off|auto`."""

from __future__ import annotations

import re
import shlex

import pytest

from roles.llama_cpp import tree
from roles.llama_cpp.choices import KvChoice
from roles.llama_cpp.decide import Instance, server_args
from roles.llama_cpp.settings import LlamaCppInstance
from tests.unit.test_llama_cpp_tree import archive


def declared_flags(version: str) -> set[str]:
    text = tree.read_files(archive(version))[tree.ARG_CPP]  # the toolkit's own reader of the sdist's members
    return {f for group in re.findall(r"common_arg\(\s*\{([^}]*)\}", text) for f in re.findall(r'"(-[^"]+)"', group)}


def inst(kv: KvChoice | None = None, **settings) -> Instance:
    s = LlamaCppInstance(model_source="/models/m.gguf", **settings)
    return Instance("chat", s, "/home/llm/models/chat/m.gguf", s.model_source, None, kv=kv)


def parsed(cmd: str) -> dict[str, str | None]:
    """{flag: its value, or None for a bare flag}: a token starting with '-' is a flag, the next one its value
    unless it is a flag too."""
    tokens, out = shlex.split(cmd), {}
    for i, t in enumerate(tokens):
        if t.startswith("-"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            out[t] = None if nxt is None or nxt.startswith("-") else nxt
    return out


CASES = [
    dict(),
    dict(listen="::1", port=8181, context=16384, parallel=4, n_gpu_layers=20, metrics=True,
         cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on", rope_scaling="yarn", rope_scale=4.0,
         yarn_orig_ctx=32768),
]


@pytest.mark.parametrize("version, style", [("0.3.16", "flag"), ("0.3.36", "value")])
@pytest.mark.parametrize("settings", CASES)
def test_every_flag_is_one_llama_server_declares_with_the_settings_value(version, style, settings):
    flags = declared_flags(version)
    try:
        i = inst(**settings)
    except Exception as e:  # a setting this model does not have: the test's own mistake
        pytest.fail(f"settings {settings}: {e}")
    args = parsed(server_args(i, style))
    assert set(args) <= flags, f"not llama-server {version} flags: {set(args) - flags}"
    s = i.settings
    assert args["-m"] == i.model_path and args["--host"] == s.listen and args["--port"] == str(s.port)
    # without a serving choice (the model not read before the deploy): the settings as given, else llama-server's
    # own automatic 4 slots, 8192 tokens each; -c is the pool of all slots together
    slots, per_request = (s.parallel or 4, s.context or 8192)
    assert args["-ngl"] == str(s.n_gpu_layers) and args["-c"] == str(slots * per_request)
    assert args["-np"] == str(slots)
    assert (args["-ctk"], args["-ctv"]) == (s.cache_type_k or "f16", s.cache_type_v or "f16")  # llama.cpp's default
    assert args["-lv"] == "4"
    assert ("--metrics" in args) == s.metrics
    if s.rope_scaling:
        assert (args["--rope-scaling"], args["--rope-scale"], args["--yarn-orig-ctx"]) == ("yarn", "4", "32768")
    else:
        assert not {"--rope-scaling", "--rope-scale", "--yarn-orig-ctx"} & set(args)
    if style == "value":
        assert args["-fa"] == s.flash_attn


@pytest.mark.parametrize("setting, v_type, bare_fa", [
    ("on", "f16", True), ("off", "q8_0", False), ("auto", "q8_0", True), ("auto", "f16", False),
    ("auto", "q4_0", True), ("off", "f16", False)])
def test_a_bare_fa_build_has_no_auto_so_auto_means_on_for_a_quantized_v_cache(setting, v_type, bare_fa):
    args = parsed(server_args(inst(flash_attn=setting, cache_type_k="f16", cache_type_v=v_type), "flag"))
    assert ("-fa" in args) == bare_fa
    assert args.get("-fa", None) is None  # bare: no value follows


@pytest.mark.parametrize("fa, style, expect", [(True, "value", "on"), (False, "value", "off"), (True, "flag", None),
                                               (False, "flag", "absent")])
def test_the_models_kv_choice_wins_over_the_settings(fa, style, expect):
    kv = KvChoice("q8_0", "q4_0", fa, "chosen for the model")
    args = parsed(server_args(inst(kv=kv, flash_attn="auto", cache_type_k="f16", cache_type_v="f16"), style))
    assert (args["-ctk"], args["-ctv"]) == ("q8_0", "q4_0")
    if expect == "absent":
        assert "-fa" not in args
    else:
        assert "-fa" in args and args["-fa"] == expect
