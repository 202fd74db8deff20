"""The `lmdeploy serve api_server` words (roles/lmdeploy/flags.py) against what LMDeploy 0.15.0's own parser made
of them: tests/data/lmdeploy/parsed-0.15.0.json, recorded by tools/lmdeploy/parse_args.py, which ran LMDeploy's
entry-point parser from the release's wheels (lmdeploy-0.15.0-py3.11.txt). Its parser exits on any word it does
not know, so a recorded sample is an accepted command line; the test keeps the rendering equal to it and checks
that each setting arrived in the field TurboMind reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.lmdeploy.flags import serve_argv
from tools.lmdeploy.parse_args import SAMPLES

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "lmdeploy" / "parsed-0.15.0.json").read_text())


def test_the_record_is_lmdeploy_0_15_0s_and_has_every_sample():
    assert RECORDED["lmdeploy"] == "0.15.0"
    assert set(RECORDED["samples"]) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_rendered_words_are_the_ones_lmdeploys_parser_accepted(name):
    assert serve_argv(SAMPLES[name]) == RECORDED["samples"][name]["argv"]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_setting_reaches_lmdeploys_field(name):
    s, parsed = SAMPLES[name], RECORDED["samples"][name]["parsed"]
    assert parsed["model_path"] == s.model and parsed["model_name"] == s.served_name
    assert parsed["backend"] == "turbomind" and parsed["model_format"] == s.fmt.model_format
    assert (parsed["server_name"], parsed["server_port"]) == (s.host, s.port)
    assert (parsed["tp"], parsed["session_len"], parsed["max_batch_size"]) == (s.tp, s.session_len, s.max_batch_size)
    assert parsed["cache_max_entry_count"] == s.cache_max_entry_count
    assert (parsed["cache_block_seq_len"], parsed["quant_policy"]) == (s.cache_block_seq_len, s.quant_policy)
    assert parsed["dtype"] == "float16"
    assert parsed["api_keys"] is None  # keys never in argv: roles/lmdeploy/launch.py adds them in-process


def test_the_option_tables_are_what_lmdeploys_own_parser_defines():
    """API_SERVER_OPTIONS, the arity tables and CHOICES that extra_args are read with, against the actions of the
    release's own `serve api_server` parser (recorded by tools/lmdeploy/parse_args.py from the wheel)."""
    from roles.lmdeploy import flags
    from roles.lmdeploy.decide import OWNED_FLAGS, PLAN_CHANGING_FLAGS

    options = RECORDED["api_server_options"]
    assert set(flags.API_SERVER_OPTIONS) == set(options)
    assert flags.NO_VALUE_OPTIONS == {o for o, a in options.items() if a["nargs"] == 0}
    assert flags.MANY_VALUE_OPTIONS == {o for o, a in options.items() if a["nargs"] in ("*", "+")}
    assert flags.AT_LEAST_ONE_VALUE_OPTIONS == {o for o, a in options.items() if a["nargs"] == "+"}
    assert not [o for o, a in options.items() if a["nargs"] not in (None, 0, "*", "+")]  # no '?' or N to read
    # every option checked against its choices, but those refused whatever their value; a word is never None
    checked = {o: tuple(c for c in a["choices"] if c != "None") for o, a in options.items()
               if a["choices"] is not None and o not in OWNED_FLAGS and o not in PLAN_CHANGING_FLAGS}
    assert {o: tuple(sorted(c)) for o, c in flags.CHOICES.items()} == {o: tuple(sorted(c)) for o, c in checked.items()}
    assert set(flags.CHOICES) & flags.INT_OPTIONS == {o for o in checked if options[o]["type"] == "int"}
    assert flags.INT_OPTIONS == {o for o, a in options.items() if a["type"] == "int"}
    assert flags.FLOAT_OPTIONS == {o for o, a in options.items() if a["type"] == "float"}
