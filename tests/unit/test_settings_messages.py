"""Each refusal line names the setting by its full dotted key, the value, why, and the fix (issue 14: the mutation
run found that no test read a whole line, so a wrong key, a lost value or the wrong field's help all passed).

Expected lines are written out here: the reason is pydantic's own wording, and the help and default of each key
come from the README's settings table (the user's reference), parsed below, not from the settings model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roles.settings import SettingsError, load_settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def readme_row(key: str) -> tuple[str, str]:
    """(default, meaning) of `key` in the README's settings table (`NAME` stands for an instance name)."""
    m = re.search(rf"^\| `{re.escape(key)}` \| `(.*?)` \| (.*) \|$", README, re.M)
    assert m, f"{key} is in the README's settings table"
    return m.group(1), m.group(2).replace("&#124;", "|")


def refusal(data: dict) -> list[str]:
    with pytest.raises(SettingsError) as e:
        load_settings("box1", data)
    assert "box1" in str(e.value)
    return e.value.problems


def help_fix(key: str, table_key: str) -> str:
    default, meaning = readme_row(table_key)
    return f"Fix: set {key} to a valid value ({meaning}; default {default})"


def test_top_level_wrong_type_names_the_key_value_reason_and_help():
    assert refusal({"tuning_swappiness": "lots"}) == [
        "tuning_swappiness = 'lots': Input should be a valid integer, unable to parse string as an integer. "
        + help_fix("tuning_swappiness", "tuning_swappiness")]


def test_nested_instance_field_names_the_dotted_key_and_the_instance_fields_help():
    assert refusal({"llama_cpp_instances": {"chat": {"model_source": "/m.gguf", "port": "abc"}}}) == [
        "llama_cpp_instances.chat.port = 'abc': Input should be a valid integer, unable to parse string as an "
        "integer. " + help_fix("llama_cpp_instances.chat.port", "llama_cpp_instances.NAME.port")]
    assert refusal({"vllm_instances": {"big": {"model_source": "/m", "gpu_memory_utilization": 2}}}) == [
        "vllm_instances.big.gpu_memory_utilization = 2: Input should be less than or equal to 1. "
        + help_fix("vllm_instances.big.gpu_memory_utilization", "vllm_instances.NAME.gpu_memory_utilization")]


def test_unknown_keys_suggest_the_closest_one_at_their_own_level():
    assert refusal({"llama_cpp_instances": {"chat": {"model_source": "/m.gguf", "prot": 8081}}}) == [
        "llama_cpp_instances.chat.prot = 8081: unknown setting. Fix: did you mean 'port'? Rename it "
        "(settings are listed in README.md)"]
    assert refusal({"tuning_swapiness": 5}) == [
        "tuning_swapiness = 5: unknown setting. Fix: did you mean 'tuning_swappiness'? Rename it "
        "(settings are listed in README.md)"]
    assert refusal({"zzz_nothing_like_it": 1}) == [
        "zzz_nothing_like_it = 1: unknown setting. Fix: remove it (settings are listed in README.md)"]


def test_pyinfra_connection_keys_point_to_pyinfras_names():
    assert refusal({"port": 22}) == ["port = 22: not a toolkit setting. Fix: did you mean pyinfra's 'ssh_port'? "
                                     "Rename it"]
    assert refusal({"sudo": True}) == ["sudo = True: not a toolkit setting. Fix: did you mean pyinfra's '_sudo'? "
                                       "Rename it"]


def test_bad_instance_name_is_named_without_pydantics_key_marker():
    assert refusal({"llama_cpp_instances": {"Chat!": {"model_source": "/m.gguf"}}}) == [
        "llama_cpp_instances.Chat! = 'Chat!': instance names are lower-case letters, digits, '-' and '_' (they "
        "become systemd unit names). Fix: rename the instance, e.g. 'gemma27b'"]


def test_typos_in_pyinfras_own_keys_are_refused_too():
    """ssh_* and _* keys are pyinfra's: the known ones pass (its SSH connector's data, its global arguments), a typo
    is named with the closest one instead of being ignored by both."""
    assert load_settings("box1", {"ssh_user": "admin", "ssh_port": 2222, "_sudo": True, "_sudo_user": "root"})
    assert refusal({"ssh_usr": "admin", "_sudoo": True}) == [
        "_sudoo = True: not a key pyinfra knows either (its SSH connector's data or its global arguments). Fix: did "
        "you mean '_sudo'? Rename it",
        "ssh_usr = 'admin': not a key pyinfra knows either (its SSH connector's data or its global arguments). Fix: "
        "did you mean 'ssh_user'? Rename it"]


def test_a_mirror_without_its_scheme_says_so_instead_of_the_pattern():
    """A URL setting given as a host name (the most common slip with a mirror) is named as not a URL; the regular
    expression it failed is no help to a user."""
    assert refusal({"base_apt_mirror": "mirror.example.org/debian"}) == [
        "base_apt_mirror = 'mirror.example.org/debian': not an http:// or https:// URL (those are the only ones the hosts fetch). "
        + help_fix("base_apt_mirror", "base_apt_mirror")]
    for value in ("ftp://mirror.example.org/models", "HTTP://mirror.example.org/models"):
        assert refusal({"llama_cpp_model_mirror": value})[0].startswith(
            f"llama_cpp_model_mirror = {value!r}: not an http:// or https:// URL")
    assert refusal({"cuda_nvidia_repo_url": "ftp://mirror.example.org/cuda/"})[0].startswith(
        "cuda_nvidia_repo_url = 'ftp://mirror.example.org/cuda/': not an http:// or https:// URL")
    assert refusal({"cuda_nvidia_repo_url": "https://mirror.example.org/cuda"})[0].startswith(
        "cuda_nvidia_repo_url = 'https://mirror.example.org/cuda': the URL must end in '/'. Fix")
    assert refusal({"cuda_nvidia_repo_url": "https://mirror.example.org/cuda?x=1"})[0].startswith(  # a '/' would
        "cuda_nvidia_repo_url = 'https://mirror.example.org/cuda?x=1': String should match pattern")  # not do
