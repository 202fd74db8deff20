"""An owned flag abbreviated in extra_args is refused (first written as a failing bug report).

LMDeploy 0.15.0's `lmdeploy serve api_server` parser is an argparse parser with allow_abbrev left at its default
(lmdeploy/cli/cli.py:18 FlexibleArgumentParser(...), its subparsers made by add_parser inherit it), so a unique
prefix of a long option is that option. Checked against the v0.15.0 source (lmdeploy/cli/cli.py, serve.py, utils.py,
with the modules outside lmdeploy/cli stubbed): after the toolkit's own words
`--backend turbomind --cache-max-entry-count 0.8 --session-len 8192 --server-port 23333 --dtype float16`, the extra
words `--back pytorch --cache-max-entry 0.5 --session 100 --server-p 8081 --dt bfloat16 --max-batch 999` parse to
backend=pytorch, cache_max_entry_count=0.5, session_len=100, server_port=8081, dtype=bfloat16, max_batch_size=999
(extra_args come last, so they win). extra_args_problems applied the prefix rule to --api-keys only, so each of these
overrode the setting the plan, the port check and the TurboMind-only routing were made for.
"""

from __future__ import annotations

import pytest

from roles.lmdeploy.decide import extra_args_problems


@pytest.mark.parametrize("words, setting", [
    (["--server-p", "8000"], "port"),                      # another instance's port: the port-clash check is bypassed
    (["--cache-max-entry", "0.99"], "cache_max_entry_count"),
    (["--session", "100000"], "session_len"),
    (["--max-batch", "999"], "max_batch_size"),
    (["--quant-pol", "8"], "quant_policy"),
])
def test_an_abbreviated_owned_flag_is_refused_naming_its_setting(words, setting):
    problems = extra_args_problems("lmdeploy_instances.a", words)
    assert len(problems) == 1 and "lmdeploy_instances.a.extra_args" in problems[0], problems
    assert f"use the setting {setting}" in problems[0], problems


@pytest.mark.parametrize("words", [["--back", "pytorch"], ["--dt", "bfloat16"], ["--model-form", "awq"]])
def test_an_abbreviated_flag_the_toolkit_fixes_is_refused(words):
    # --back pytorch runs the unplanned PyTorch engine that the architecture check exists to keep out
    problems = extra_args_problems("lmdeploy_instances.a", words)
    assert len(problems) == 1 and "set by the toolkit" in problems[0], problems


def test_an_unknown_or_ambiguous_flag_is_refused_before_the_unit_fails_at_start():
    """argparse exits with "unrecognized arguments" / "ambiguous option" (Python's argparse: a prefix shared by several
    long options is ambiguous): refused in the plan instead, naming the options where it is ambiguous."""
    [unknown] = extra_args_problems("lmdeploy_instances.a", ["--nonexistent-flag"])
    assert "extra_args = '--nonexistent-flag'" in unknown and "has no such option" in unknown
    [ambiguous] = extra_args_problems("lmdeploy_instances.a", ["--se", "x"])
    assert "--server-name, --server-port, --session-len" in ambiguous and "spell the option out" in ambiguous
    assert extra_args_problems("lmdeploy_instances.a", ["--enable-prefix-caching", "--log-level", "INFO",
                                                        "--max-concurrent-req", "64"]) == []


@pytest.mark.parametrize("words", [["--dp", "2"], ["--cp", "2"], ["--ep", "2"], ["--disable-metrics"],
                                   ["--nnodes", "2"], ["--device", "ascend"], ["--disable-m"]])
def test_a_flag_that_changes_what_was_planned_is_refused(words):
    [why] = extra_args_problems("lmdeploy_instances.a", words)
    assert "lmdeploy_instances.a.extra_args" in why and "remove it" in why


def test_the_option_list_is_the_one_the_release_s_own_parser_filled():
    """flags.API_SERVER_OPTIONS against the namespace LMDeploy 0.15.0's wheel parsed (tools/lmdeploy/parse_args.py):
    every destination there is an option here and the other way round (argparse's dest: the option without '--',
    '-' as '_'; --async is stored as async_, --help stores nothing; model_path is the positional argument)."""
    import json
    from pathlib import Path

    from roles.lmdeploy.flags import API_SERVER_OPTIONS

    recorded = json.loads((Path(__file__).resolve().parents[1] / "data/lmdeploy/parsed-0.15.0.json").read_text())
    dests = set(recorded["samples"]["awq"]["parsed"]) - {"command", "model_path"}
    assert {o[2:].replace("-", "_") for o in API_SERVER_OPTIONS} - {"help"} == {d.rstrip("_") for d in dests}
