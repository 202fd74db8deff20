"""extra_args of an LMDeploy instance read as LMDeploy 0.15.0's parser reads them: its FlexibleArgumentParser turns
`_` into `-` in a `--` flag's name (lmdeploy/cli/utils.py:829-850 at v0.15.0), and argparse takes a unique prefix
of a long option for it (allow_abbrev, the default: lmdeploy/cli/cli.py:18 sets none). A key there would be in argv,
readable by every local user, and an owned flag would override the setting the memory plan was made for."""

from __future__ import annotations

import pytest

from roles.lmdeploy.decide import extra_args_problems


@pytest.mark.parametrize("words", [["--api_keys", "sk-0123456789"], ["--api-key", "sk-0123456789"],
                                   ["--api-key=sk-0123456789"], ["--api_key", "sk-0123456789"]])
def test_a_key_under_another_spelling_of_api_keys_is_refused(words):
    problems = extra_args_problems("lmdeploy_instances.a", words)
    assert len(problems) == 1 and "lmdeploy_instances.a.extra_args" in problems[0] and "api_key_file" in problems[0]
    assert "sk-0123456789" not in problems[0]  # the refusal shows the flag, never the key


@pytest.mark.parametrize("word, setting", [("--session_len", "session_len"),
                                           ("--cache_max_entry_count=0.5", "cache_max_entry_count"),
                                           ("--server_port", "port")])
def test_an_owned_flag_spelled_with_underscores_is_refused_naming_its_setting(word, setting):
    words = [word] if "=" in word else [word, "1"]  # `--flag=value 1` has a stray word: its own refusal
    problems = extra_args_problems("lmdeploy_instances.a", words)
    assert len(problems) == 1 and f"use the setting {setting}" in problems[0]


def test_other_flags_and_values_pass():
    assert extra_args_problems("lmdeploy_instances.a", ["--enable-prefix-caching", "--log-level", "INFO",
                                                       "--max-prefill-token-num", "4096"]) == []


# --- words argparse reads as values, and flags that stop the instance (LMDeploy 0.15.0's api_server) ---------------

@pytest.mark.parametrize("words, shown", [
    (["-h"], "-h"), (["--help"], "--help"), (["--he"], "--he"),  # a clean exit: Restart=on-failure leaves it down
    (["-tp", "2"], "-tp"),  # api_server has no short option but -h
    (["positional"], "positional"), (["--", "x"], "--"),  # a second positional argument after the model path
    (["--trust-remote-code", "yes"], "yes"),  # a store_true option takes no value
    (["--chat-template", "a", "b"], "b"),  # one value
    (["--ssl"], "--ssl"),  # HTTPS: the deploy's, verify's and the bench's checks speak HTTP
    (["--log-level", "DEBUG"], "--log-level DEBUG"), (["--log-level", "request"], "--log-level request"),
    (["--log_level=NOTSET"], "--log_level=NOTSET"),  # prompts at REQUEST (15), lmdeploy/logger.py
])
def test_a_word_that_would_stop_or_expose_the_instance_is_refused(words, shown):
    problems = extra_args_problems("lmdeploy_instances.a", words)
    assert problems and problems[0].startswith(f"lmdeploy_instances.a.extra_args = {shown!r}"), problems


@pytest.mark.parametrize("words", [
    ["--allow-origins", "https://a.example", "https://b.example", "--enable-prefix-caching"],  # nargs '+'
    ["--rope-scaling-factor", "-1.5"],  # a negative number is a value
    ["--log-level", "INFO"], ["--log-level=ERROR"], ["--max-log-len", "0"],
])
def test_values_where_the_parser_takes_them_pass(words):
    assert extra_args_problems("lmdeploy_instances.a", words) == []


def test_which_options_take_no_value_or_many_is_what_the_releases_own_parser_made():
    """Against the namespace LMDeploy 0.15.0's wheel parsed (tests/data/lmdeploy/parsed-0.15.0.json): a store_true
    option's value is a bool, an nargs '+'/'*' option's default a list or None; the others take one value."""
    import json
    from pathlib import Path

    from roles.lmdeploy.flags import API_SERVER_OPTIONS, MANY_VALUE_OPTIONS, NO_VALUE_OPTIONS

    parsed = json.loads((Path(__file__).parents[1] / "data" / "lmdeploy" / "parsed-0.15.0.json").read_text())
    ns = parsed["samples"]["awq"]["parsed"]
    dest = {o: o[2:].replace("-", "_") + ("_" if o == "--async" else "") for o in API_SERVER_OPTIONS}
    bools = {o for o in API_SERVER_OPTIONS if isinstance(ns.get(dest[o]), bool)}
    lists = {o for o in API_SERVER_OPTIONS if isinstance(ns.get(dest[o]), list)}
    assert bools == NO_VALUE_OPTIONS - {"--help"}
    assert lists <= MANY_VALUE_OPTIONS and not MANY_VALUE_OPTIONS & bools


# --- values argparse requires or checks (LMDeploy 0.15.0: nargs None/'+', choices) ------------------------------------

@pytest.mark.parametrize("words, shown, said", [
    (["--log-level"], "--log-level", "expected one argument"),  # the last word: no value follows
    (["--max-log-len", "--enable-prefix-caching"], "--max-log-len", "expected one argument"),  # an option follows
    (["--allow-origins"], "--allow-origins", "expected at least one argument"),  # nargs '+'
    (["--log-level", "15"], "--log-level 15", "invalid choice"),  # a name of logging's, not the number
    (["--log-level", "info"], "--log-level info", "invalid choice"),  # choices are case-sensitive
    (["--log-level=warning"], "--log-level warning", "invalid choice"),
    (["--async", "2"], "--async 2", "invalid choice"),
    (["--communicator", "mpi"], "--communicator mpi", "invalid choice"),
])
def test_a_missing_or_invalid_value_is_refused_before_the_instance_fails_to_start(words, shown, said):
    problems = extra_args_problems("lmdeploy_instances.a", words)
    assert len(problems) == 1 and problems[0].startswith(f"lmdeploy_instances.a.extra_args = {shown!r}"), problems
    assert said in problems[0]


@pytest.mark.parametrize("words", [["--adapters"], ["--async", "01"], ["--log-level", "WARN"],
                                   ["--log-level", "INFO", "--max-log-len", "-1"], ["--communicator=native"]])
def test_values_the_parser_accepts_pass(words):
    # --adapters is nargs '*' (none is fine); --async is type=int ("01" is 1); -1 is a negative number, a value
    assert extra_args_problems("lmdeploy_instances.a", words) == []


# --- found by trying word lists against LMDeploy 0.15.0's own parser (python3.11 -S, its wheel) ---------------------

@pytest.mark.parametrize("words, shown, said", [
    (["--enable-prefix-caching=true"], "--enable-prefix-caching=true", "ignored explicit argument"),
    (["--eager-mode="], "--eager-mode=", "ignored explicit argument"),
    (["--rope-scaling-factor", "-1e3"], "--rope-scaling-factor", "expected one argument"),  # not -\d+ nor -\d*.\d+
    (["--max-log-len", "-1x"], "--max-log-len", "expected one argument"),
    (["--max-log-len", "x"], "--max-log-len x", "invalid int value"),
    (["--dllm-confidence-threshold", "x"], "--dllm-confidence-threshold x", "invalid float value"),
    (["--max-log-len=1.5"], "--max-log-len 1.5", "invalid int value"),
    (["--hf-overrides.rope_scaling.factor", "2.0"], "--hf-overrides.rope_scaling.factor", "memory plan read"),
    (["--hf-overrides", '{"num_hidden_layers": 2}'], "--hf-overrides", "memory plan read"),
])
def test_what_lmdeploys_parser_refuses_or_the_plan_cannot_hold_is_refused(words, shown, said):
    problems = extra_args_problems("lmdeploy_instances.a", words)  # the first says argparse's own first error
    assert problems and problems[0].startswith(f"lmdeploy_instances.a.extra_args = {shown!r}"), problems
    assert said in problems[0]


@pytest.mark.parametrize("words", [["--chat-template", "-x y"], ["--rope-scaling-factor", "-.5"],
                                   ["--max-log-len", "1_0"], ["--rope-scaling-factor", "1e3"],
                                   ["--chat-template", "-1"]])
def test_words_lmdeploys_parser_takes_as_values_pass(words):
    # argparse: a word with a space is a value, -.5 and -1 are negative numbers; int("1_0") is 10, float("1e3") 1000
    assert extra_args_problems("lmdeploy_instances.a", words) == []
