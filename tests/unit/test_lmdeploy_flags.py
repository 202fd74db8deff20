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
