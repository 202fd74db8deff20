"""Plan-level (facts in, commands and uploads out): extra_args and the typed flag settings reach the instance's
EnvironmentFile, and an owned or unknown flag stops the plan before any command. Expected flags read by hand in the
pinned 0.3.36 tree's common/arg.cpp (`{"--no-warmup"}` and `{"-cb", "--cont-batching"}` are server options) and in
vLLM 0.8.5.post1's --help (`--disable-log-stats`; `--disable-log-requests` is the toolkit's own there, from
vllm_log_requests)."""

from __future__ import annotations

import shlex

import pytest

from lab.data import tiny_hf_model
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, UBUNTU_2404, plan_uploads

MODEL = {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64, "port": 8081}


def llama_args(instance: dict) -> list[str]:
    _, uploads = plan_uploads(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**MODEL, **instance}}})
    env = uploads["/etc/llama-server/tiny.env"]
    line = next(x for x in env.splitlines() if x.startswith("LLAMA_SERVER_ARGS="))
    return shlex.split(line.split("=", 1)[1])


def test_llama_extra_args_and_typed_settings_reach_the_environment_file():
    args = llama_args({"extra_args": ["--no-warmup", "-cb"], "jinja": True, "batch_size": 1024, "ubatch_size": 256,
                       "mlock": True})
    # appended last, after the toolkit's -lv 4: a flag missing its value cannot take the toolkit's own
    assert args[-4:] == ["-lv", "4", "--no-warmup", "-cb"]
    for i, want in ((args.index("--jinja"), ["--jinja"]), (args.index("-b"), ["-b", "1024"]),
                    (args.index("-ub"), ["-ub", "256"]), (args.index("--load-mode"), ["--load-mode", "mmap+mlock"])):
        assert args[i:i + len(want)] == want
    assert "--no-warmup" not in llama_args({})


@pytest.mark.parametrize("instance, needle", [
    ({"extra_args": ["--port", "9000"]}, "extra_args = '--port': set by the toolkit. Fix: use the setting port"),
    ({"extra_args": ["--no-such-flag"]}, "extra_args = '--no-such-flag': not a flag of this llama.cpp"),
    ({"batch_size": 128, "ubatch_size": 512}, "tiny.batch_size = 128: below ubatch_size 512"),
    # common/arg.cpp: -h, --help, --usage print the usage and exit 0, which Restart=on-failure does not restart
    ({"extra_args": ["-h"]}, "extra_args = '-h': the server prints its help and exits 0"),
    ({"extra_args": ["--usage"]}, "extra_args = '--usage': the server prints its help and exits 0"),
])
def test_llama_refusals_stop_the_plan(instance, needle):
    with pytest.raises(SettingsError) as e:
        llama_args(instance)
    assert needle in str(e.value)


def vllm_args(tmp_path_factory, instance: dict) -> list[str]:
    model = tiny_hf_model(tmp_path_factory.getbasetemp() / "cache")
    data = {"vllm_instances": {"tiny": {"model_source": str(model), **instance}}}
    _, uploads = plan_uploads(UBUNTU_2404, data, responses={"sys.version_info": ["3.12"]})
    env = uploads["/etc/vllm/tiny.env"]
    return shlex.split(next(x for x in env.splitlines() if x.startswith("VLLM_ARGS=")).split("=", 1)[1])


def test_vllm_extra_args_and_typed_settings_reach_the_environment_file(tmp_path_factory):
    args = vllm_args(tmp_path_factory, {"extra_args": ["--disable-log-stats"], "enable_prefix_caching": True,
                                        "max_num_batched_tokens": 8192})
    assert args[-1] == "--disable-log-stats" and "--enable-prefix-caching" in args
    assert "--disable-log-requests" in args  # vllm_log_requests' default: prompts stay out of the journal
    with pytest.raises(SettingsError, match=r"extra_args = '--disable-log-requests': set by the toolkit. Fix: use "
                                            r"the setting vllm_log_requests"):
        vllm_args(tmp_path_factory, {"extra_args": ["--disable-log-requests"]})
    assert args[args.index("--max-num-batched-tokens") + 1] == "8192"
    with pytest.raises(SettingsError, match=r"extra_args = '-tp': set by the toolkit. Fix: use the setting "
                                            r"tensor_parallel_size"):
        vllm_args(tmp_path_factory, {"extra_args": ["-tp", "2"]})


@pytest.mark.parametrize("word", ["-h", "--help"])
def test_vllm_help_in_extra_args_is_refused(tmp_path_factory, word):
    """vllm serve's argparse -h/--help prints the help and exits 0: the unit would stay down (Restart=on-failure)."""
    with pytest.raises(SettingsError, match=rf"extra_args = '{word}': the server prints its help and exits 0"):
        vllm_args(tmp_path_factory, {"extra_args": [word]})


@pytest.mark.parametrize("word", ["--ssl-key-file", "--ssl-cert-file"])
def test_llama_server_tls_flags_are_refused(word):
    # llama-server serves HTTPS with them (files/llama_cpp/<ref>.json server_flags lists both): the health checks
    # speak HTTP and the deploy would fail after changing the host
    with pytest.raises(SettingsError) as e:
        plan_uploads(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**MODEL, "extra_args": [word, "/etc/ssl/x.pem"]}}})
    assert f"llama_cpp_instances.tiny.extra_args = {word!r}" in str(e.value) and "HTTPS" in str(e.value)


def test_a_flag_without_its_value_is_refused_before_any_change():
    # the default pin's arities (files/llama_cpp/<ref>.json server_flag_values, read from common/arg.cpp):
    # `--alias` last on the command line stops llama-server at start ("expected value for argument")
    with pytest.raises(SettingsError) as e:
        plan_uploads(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**MODEL, "extra_args": ["--alias"]}}})
    assert "llama_cpp_instances.tiny.extra_args = '--alias'" in str(e.value) and "expected value" in str(e.value)


def test_an_int_flag_with_a_word_it_cannot_read_is_refused_before_any_change():
    # files/llama_cpp/<ref>.json server_int_flags: `--threads-http` has an `int value` handler (common/arg.cpp), read
    # with std::stoi, which throws on "four": llama-server stops at start ("error while handling argument")
    with pytest.raises(SettingsError) as e:
        plan_uploads(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**MODEL, "extra_args": ["--threads-http", "four"]}}})
    assert "llama_cpp_instances.tiny.extra_args = 'four'" in str(e.value) and "std::stoi" in str(e.value)
