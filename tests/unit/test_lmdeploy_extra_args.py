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
    problems = extra_args_problems("lmdeploy_instances.a", [word, "1"])
    assert len(problems) == 1 and f"use the setting {setting}" in problems[0]


def test_other_flags_and_values_pass():
    assert extra_args_problems("lmdeploy_instances.a", ["--enable-prefix-caching", "--log-level", "INFO",
                                                       "--max-prefill-token-num", "4096"]) == []
