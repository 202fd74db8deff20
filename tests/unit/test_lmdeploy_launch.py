"""The API-key launcher (roles/lmdeploy/launch.py): keys from a file appended inside the process, never in argv."""

from __future__ import annotations

import pytest

from roles.lmdeploy.launch import keyed_argv


def test_keys_from_the_file_are_appended_as_lmdeploys_api_keys(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-one\n\nsk-two\n")
    argv = ["launch.py", str(key), "serve", "api_server", "/m", "--backend", "turbomind"]
    assert keyed_argv(argv, str(key)) == ["launch.py", "serve", "api_server", "/m", "--backend", "turbomind",
                                          "--api-keys", "sk-one", "sk-two"]


@pytest.mark.parametrize("content", [None, "", "\n  \n"])
def test_a_missing_or_empty_key_file_stops_the_start(tmp_path, content):
    key = tmp_path / "key"
    if content is not None:
        key.write_text(content)
    with pytest.raises(SystemExit, match=str(key)):
        keyed_argv(["launch.py", str(key), "serve"], str(key))


def test_a_credential_name_is_read_under_systemds_credentials_directory(tmp_path, monkeypatch):
    from roles.lmdeploy.launch import launch_argv
    (tmp_path / "api-key").write_text("sk-cred-0123456789\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert launch_argv(["launch.py", "api-key", "serve", "api_server", "/m"]) == [
        "launch.py", "serve", "api_server", "/m", "--api-keys", "sk-cred-0123456789"]


def test_dash_starts_without_a_key_and_a_named_credential_without_systemds_directory_stops(monkeypatch):
    from roles.lmdeploy.launch import launch_argv
    assert launch_argv(["launch.py", "-", "serve", "api_server", "/m"]) == ["launch.py", "serve", "api_server", "/m"]
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(SystemExit, match="CREDENTIALS_DIRECTORY"):
        launch_argv(["launch.py", "api-key", "serve"])


def _lmdeploys_api_keys(words: list) -> list:
    """What LMDeploy 0.15.0's parser reads as its keys: `--api-keys` is declared `type=str, nargs='*'`
    (lmdeploy/cli/utils.py:368-375 at v0.15.0), parsed by Python's argparse."""
    import argparse
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("model_path")
    parser.add_argument("--api-keys", type=str, nargs="*", default=None)
    return parser.parse_args(words).api_keys


@pytest.mark.parametrize("key", ["-Ab3_xY9kQ2", "--Zq8-w7e6r5t"])
def test_a_key_that_starts_with_a_dash_reaches_lmdeploy_as_the_key(tmp_path, key):
    """secrets.token_urlsafe() starts a key with '-' one time in 64 (API_KEY_RE allows it); argparse reads a word
    after `--api-keys` that starts with '-' as another option and stops LMDeploy at start."""
    path = tmp_path / "key"
    path.write_text(key + "\n")
    argv = keyed_argv(["launch.py", str(path), "/m"], str(path))
    assert _lmdeploys_api_keys(argv[1:]) == [key]


def test_several_keys_one_of_them_dash_led_stop_the_start_naming_the_file(tmp_path):
    path = tmp_path / "key"
    path.write_text("sk-one-0123\n-dash-0123\n")
    with pytest.raises(SystemExit, match=str(path)):
        keyed_argv(["launch.py", str(path), "/m"], str(path))
