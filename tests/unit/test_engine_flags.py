"""extra_args and the typed flag settings of both engines (roles/llama_cpp/flags.py, roles/vllm/flags.py), and the
derived flag lists (files/llama_cpp/<ref>.json server_flags from common/arg.cpp; files/vllm/<version>.flags.json
from vLLM's own parser).

Independent expectations, read in the pinned trees' common/arg.cpp by hand: `{"-cb", "--cont-batching"}` and
`{"--no-warmup"}` are added for LLAMA_EXAMPLE_SERVER (0.3.36 lines 2569 and 1968); `{"-p", "--prompt"}` has
`.set_excludes({LLAMA_EXAMPLE_SERVER})` (1770) and `{"-ns", "--sequences"}` `.set_examples({LLAMA_EXAMPLE_PARALLEL})`
(2563); `{"--draft", "--draft-n", "--draft-max"}` only calls arg_removed (4387); `--load-mode` replaces --mlock and
--no-mmap there (2691), while 0.3.16 has `{"--mlock"}`, `{"--no-mmap"}` and `{"--draft-max", ...}`.
"""

from __future__ import annotations

import json
import re
import shlex
import tarfile
from pathlib import Path

import pytest

from roles.llama_cpp import flags as lf
from roles.llama_cpp.tree import ARG_CPP, server_flags
from roles.llama_cpp.versions import SOURCES
from roles.llama_cpp.settings import LlamaCppInstance
from roles.vllm.settings import VllmInstance
from roles.vllm import flags as vf
from roles.vllm.versions import VLLM_RELEASES

NEW, OLD = SOURCES["pypi-0.3.36"].server_flags, SOURCES["pypi-0.3.16"].server_flags
KEY = "llama_cpp_instances.tiny"
ARCHIVE = Path("/var/cache/v100kit-lab/src/llama_cpp_python-0.3.36.tar.gz")


def llama(**kw) -> LlamaCppInstance:
    return LlamaCppInstance(model_path="/m.gguf", **kw)


def test_the_pins_carry_their_server_flags():
    assert NEW is not None and OLD is not None
    for flag in ("--cont-batching", "-cb", "--no-cont-batching", "--no-warmup", "--jinja", "-ub", "-md"):
        assert flag in NEW and flag in OLD, flag
    for flag in ("-p", "--prompt", "-ns", "--sequences", "--draft-max", "--mlock", "--no-mmap"):
        assert flag not in NEW, flag
    assert {"--mlock", "--no-mmap", "--draft-max"} <= OLD and "--load-mode" not in OLD
    assert {"--load-mode", "--spec-draft-n-max", "--kv-unified-per-slot", "--no-jinja"} <= NEW


@pytest.mark.skipif(not ARCHIVE.is_file(), reason="the 0.3.36 sdist is not on this machine")
def test_server_flags_from_arg_cpp_agree_with_the_text_and_the_pin():
    with tarfile.open(ARCHIVE) as tar:
        text = tar.extractfile(f"llama_cpp_python-0.3.36/vendor/llama.cpp/{ARG_CPP}").read().decode()
    # the text says what the expectations above say (a grep, not the parser)
    assert re.search(r'\{"-p", "--prompt"\}.{0,300}?\.set_excludes\(\{LLAMA_EXAMPLE_SERVER\}\)', text, re.S)
    assert re.search(r'\{"-ns", "--sequences"\}.{0,300}?\.set_examples\(\{LLAMA_EXAMPLE_PARALLEL\}\)', text, re.S)
    got = server_flags(text)
    assert got == NEW
    # a server-only option made CLI-only leaves the list; an excluded one put back enters it
    moved = text.replace('}\n    ).set_examples({LLAMA_EXAMPLE_SERVER}).set_env("LLAMA_ARG_CONT_BATCHING")',
                         '}\n    ).set_examples({LLAMA_EXAMPLE_CLI}).set_env("LLAMA_ARG_CONT_BATCHING")', 1)
    assert moved != text and "--cont-batching" not in server_flags(moved)
    back = text.replace('params.prompt = value;\n        }\n    ).set_excludes({LLAMA_EXAMPLE_SERVER})',
                        'params.prompt = value;\n        }\n    )', 1)
    assert back != text and "--prompt" in server_flags(back)


def test_owned_flags_are_refused_naming_the_setting():
    for word, setting in (("--port", "port"), ("-c", "context"), ("--ctx_size=4096", "context"),
                          ("-ngl", "n_gpu_layers"), ("--api-key", "api_key_file"), ("-ub", "ubatch_size"),
                          ("--load-mode", "mlock / mmap"), ("-kvu", "kv_unified"),
                          ("--log-prompts-dir", "llama_cpp_log_requests"), ("-lv", "llama_cpp_log_requests")):
        (p,) = lf.extra_args_problems(f"{KEY}.extra_args", [word, "1"], NEW)
        assert p.startswith(f"{KEY}.extra_args = {word!r}: set by the toolkit") and f"use the setting {setting}" in p


def test_unknown_and_equals_forms_refused_known_flags_and_values_pass():
    assert lf.extra_args_problems("k", ["--no-warmup", "-cb", "--temp", "0.7", "--seed", "-1"], NEW) == []
    (p,) = lf.extra_args_problems("k", ["--no-such-flag"], NEW)
    assert "not a flag of this llama.cpp" in p
    (p,) = lf.extra_args_problems("k", ["--prompt", "hi"], NEW)  # exists, but not for the server
    assert "'--prompt'" in p
    (p,) = lf.extra_args_problems("k", ["--temp=0.7"], NEW)
    assert "next word" in p
    assert lf.extra_args_problems("k", ["--no-such-flag"], None) == []  # unknown tree: not checked


def test_typed_settings_render_exactly_their_flags():
    assert lf.typed_args(llama(), NEW) == [] and lf.typed_args(llama(), None) == []
    s = llama(jinja=True, chat_template="chatml", chat_template_file="/t.jinja", batch_size=2048, ubatch_size=512,
              split_mode="row", tensor_split=[3, 1], main_gpu=1, threads=8, draft_model_path="/d.gguf", draft_max=16)
    tail = ["--jinja", "--chat-template", "chatml", "--chat-template-file", "/t.jinja", "-b", "2048", "-ub", "512",
            "-sm", "row", "-ts", "3,1", "-mg", "1", "-t", "8", "-md", "/d.gguf"]
    assert lf.typed_args(s, NEW) == tail + ["--spec-draft-n-max", "16"]
    assert lf.typed_args(s, OLD) == tail + ["--draft-max", "16"]
    assert lf.typed_args(llama(jinja=False), NEW) == ["--no-jinja"]
    assert lf.typed_args(llama(mlock=True), NEW) == ["--load-mode", "mmap+mlock"]
    assert lf.typed_args(llama(mlock=True, mmap=False), NEW) == ["--load-mode", "mlock"]
    assert lf.typed_args(llama(mmap=False), NEW) == ["--load-mode", "none"]
    assert lf.typed_args(llama(mlock=True, mmap=False), OLD) == ["--mlock", "--no-mmap"]
    for s in (llama(jinja=True), llama(mlock=True), s):
        assert all(a in NEW or not a.startswith("-") or a[1:].isdigit() for a in lf.typed_args(s, NEW))


def test_typed_problems():
    (p,) = lf.typed_problems(KEY, llama(batch_size=256, ubatch_size=512), NEW, 1)
    assert p.startswith(f"{KEY}.batch_size = 256: below ubatch_size 512")
    assert lf.typed_problems(KEY, llama(batch_size=512, ubatch_size=512), NEW, 1) == []
    (p,) = lf.typed_problems(KEY, llama(tensor_split=[1, 1]), NEW, 1)
    assert "tensor_split" in p
    assert lf.typed_problems(KEY, llama(tensor_split=[1, 1]), NEW, 2) == []
    (p,) = lf.typed_problems(KEY, llama(draft_max=8), NEW, 1)
    assert "draft_model_path" in p
    (p,) = lf.typed_problems(KEY, llama(jinja=False), OLD, 1)  # 0.3.16 has no --no-jinja
    assert p.startswith(f"{KEY}.jinja = False")


def test_words_systemd_would_split_are_refused_by_the_settings():
    for bad in ("a b", "'x'", "$HOME", "{\"a\":1}"):
        with pytest.raises(ValueError):
            llama(extra_args=["--alias", bad])
    assert shlex.join(llama(extra_args=["--alias", "a,b:c/d"]).extra_args) == "--alias a,b:c/d"


VLLM_NEW, VLLM_OLD = vf.known_flags("0.10.2"), vf.known_flags("0.8.5.post1")


def test_vllm_flag_files_from_the_parsers():
    assert VLLM_NEW and VLLM_OLD
    for flag in ("--enable-prefix-caching", "--max-num-batched-tokens", "--swap-space", "--tool-call-parser",
                 "--enable-auto-tool-choice", "--chat-template", "--disable-log-requests", "-tp", "--model"):
        assert flag in VLLM_OLD, flag
    assert "--no-enable-prefix-caching" in VLLM_NEW and "--no-enable-prefix-caching" in VLLM_OLD
    data = json.loads(vf.flags_file("0.10.2").read_text())
    assert data["version"] == "0.10.2" and data["flags"] == sorted(data["flags"])
    # every flag the toolkit renders exists in both releases
    s = VllmInstance(model_path="/m", enable_prefix_caching=False, enable_chunked_prefill=True,
                     max_num_batched_tokens=4096, swap_space=4, chat_template="/t.jinja", tool_call_parser="hermes",
                     enable_auto_tool_choice=True)
    rendered = [a for a in vf.typed_args(s) if a.startswith("-")]
    assert rendered == ["--no-enable-prefix-caching", "--enable-chunked-prefill", "--max-num-batched-tokens",
                        "--swap-space", "--chat-template", "--tool-call-parser", "--enable-auto-tool-choice"]
    assert set(rendered) <= VLLM_NEW and set(rendered) <= VLLM_OLD


def test_vllm_extra_args():
    key = "vllm_instances.tiny.extra_args"
    (p,) = vf.extra_args_problems(key, ["--max-model-len=4096"], VLLM_OLD)
    assert p.startswith(f"{key} = '--max-model-len=4096': set by the toolkit") and "max_model_len" in p
    (p,) = vf.extra_args_problems(key, ["-tp", "2"], VLLM_OLD)
    assert "tensor_parallel_size" in p
    assert vf.extra_args_problems(key, ["--disable-log-stats", "--seed=3", "--max_logprobs", "5"], VLLM_OLD) == []
    # request logging has its setting (prompts into the journal), in every spelling a pinned release has
    for flag in ("--disable-log-requests", "--enable-log-requests", "--no-enable-log-requests"):
        (p,) = vf.extra_args_problems(key, [flag], VLLM_NEW)
        assert "vllm_log_requests" in p
    (p,) = vf.extra_args_problems(key, ["--no-such-flag"], VLLM_OLD)
    assert "not a flag of this vLLM release" in p
    assert vf.typed_args(VllmInstance(model_path="/m")) == []
    (p,) = vf.typed_problems("vllm_instances.tiny", VllmInstance(model_path="/m", enable_auto_tool_choice=True),
                             VLLM_OLD, VLLM_RELEASES["0.8.5.post1"])
    assert "tool_call_parser" in p


@pytest.mark.parametrize("flag, why", [("-nkvo", "on the CPU"), ("--no-cont-batching", "one slot's requests"),
                                       ("--log-disable", "journal"), ("--device", "gpus"),
                                       ("--override-kv", "metadata"), ("--mmproj", "memory plan")])
def test_flags_that_undo_the_plan_or_the_checks_are_refused_saying_why(flag, why):
    """Review of issue 26: these are real llama-server flags of the pinned tree (its common/arg.cpp), accepted by
    the known-flag check alone, but each undoes what the plan counted or what the deploy's GPU check reads."""
    from roles.llama_cpp.flags import extra_args_problems
    from roles.llama_cpp.versions import DEFAULT_SOURCE

    assert flag in DEFAULT_SOURCE.server_flags
    (p,) = extra_args_problems("llama_cpp_instances.m.extra_args", [flag], DEFAULT_SOURCE.server_flags)
    assert p.startswith(f"llama_cpp_instances.m.extra_args = {flag!r}") and why in p


@pytest.mark.parametrize("flag", ["--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-cert-reqs"])
def test_vllm_tls_flags_are_refused(flag):
    # uvicorn serves HTTPS (or demands client certificates) with them, and every health check speaks HTTP; both
    # pinned parsers have them (files/vllm/<version>.flags.json)
    assert flag in VLLM_OLD and flag in VLLM_NEW
    (p,) = vf.extra_args_problems("vllm_instances.tiny.extra_args", [flag, "/etc/ssl/x.pem"], VLLM_NEW)
    assert p.startswith(f"vllm_instances.tiny.extra_args = {flag!r}") and "HTTPS" in p


NEW_VALUES = SOURCES["pypi-0.3.36"].server_flag_values


@pytest.mark.parametrize("words, shown, said", [
    (["--alias"], "--alias", "none follows"),  # the last word of the command line: "expected value for argument"
    (["--control-vector-layer-range", "1"], "--control-vector-layer-range", "fewer follow"),  # START END
    (["stray"], "stray", "invalid argument"),  # no flag takes it
    (["--no-warmup", "yes"], "yes", "invalid argument"),  # --no-warmup takes none
])
def test_words_are_read_with_each_flags_arity(words, shown, said):
    problems = lf.extra_args_problems(f"{KEY}.extra_args", words, NEW, NEW_VALUES)
    assert len(problems) == 1 and problems[0].startswith(f"{KEY}.extra_args = {shown!r}") and said in problems[0]


def test_a_flags_value_is_taken_whatever_it_looks_like():
    # llama-server takes the next word as the value (common_params_parse_ex: argv[++i]): `--alias -x` names the
    # model "-x", and "-x" is not judged as a flag; a negative number is a value too
    assert lf.extra_args_problems(f"{KEY}.extra_args", ["--alias", "-x", "--temp", "-1"], NEW, NEW_VALUES) == []
    assert lf.extra_args_problems(f"{KEY}.extra_args", ["--control-vector-layer-range", "1", "4", "--no-warmup"],
                                  NEW, NEW_VALUES) == []


def test_an_unknown_flag_is_one_refusal_not_one_more_for_its_value():
    # "--Alias" is not the tree's (its flags are case-sensitive): its value is not said again as a stray word
    problems = lf.extra_args_problems(f"{KEY}.extra_args", ["--Alias", "x"], NEW, NEW_VALUES)
    assert len(problems) == 1 and "'--Alias'" in problems[0] and "not a flag" in problems[0]
    # after a known flag, a word it does not take is still refused
    (p,) = lf.extra_args_problems(f"{KEY}.extra_args", ["--no-warmup", "x"], NEW, NEW_VALUES)
    assert "'x'" in p and "invalid argument" in p


NEW_INTS = SOURCES["pypi-0.3.36"].server_int_flags
STOI_WORDS = ["8", " 8", "\t7", "+8", "-1", "8abc", "0x10", "abc", "", "- 5", "+", "١٢", "2147483647", "2147483648",
              "-2147483648", "-2147483649", "99999999999999999999"]


def real_stoi(tmp_path: Path, words: list[str]) -> list[str | None]:
    """What the C++ standard library's std::stoi does with each word (the call common_params_parse_ex makes for a
    handler_int option), compiled here: None where it returns, else which exception it throws."""
    import shutil
    import subprocess
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine: std::stoi itself is the expected value")
    src = tmp_path / "stoi.cpp"
    src.write_text('#include <cstdio>\n#include <stdexcept>\n#include <string>\nint main(int c, char **v) {\n'
                   '  for (int i = 1; i < c; i++) {\n    try { std::stoi(std::string(v[i])); std::puts("ok"); }\n'
                   '    catch (const std::invalid_argument &) { std::puts("no integer"); }\n'
                   '    catch (const std::out_of_range &) { std::puts("out of range"); }\n  }\n}\n')
    subprocess.run([cxx, "-O0", "-o", str(tmp_path / "stoi"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "stoi"), *words], check=True, capture_output=True, text=True).stdout
    return [None if line == "ok" else line for line in out.splitlines()]


def test_stoi_refusal_is_what_std_stoi_throws(tmp_path):
    assert [lf.stoi_refusal(w) for w in STOI_WORDS] == real_stoi(tmp_path, STOI_WORDS)


def test_an_int_flag_with_a_word_stoi_cannot_read_is_refused():
    # files/llama_cpp/<ref>.json server_int_flags (handlers taking `int value` in common/arg.cpp): llama-server stops
    # at start with "error while handling argument" where std::stoi throws
    assert "--threads-http" in NEW_INTS and "--alias" not in NEW_INTS
    (p,) = lf.extra_args_problems(f"{KEY}.extra_args", ["--threads-http", "four"], NEW, NEW_VALUES, NEW_INTS)
    assert p.startswith(f"{KEY}.extra_args = 'four'") and "--threads-http takes an integer" in p and "stoi" in p
    (p,) = lf.extra_args_problems(f"{KEY}.extra_args", ["--cache-reuse", "4294967296"], NEW, NEW_VALUES, NEW_INTS)
    assert "'4294967296'" in p and "out of range" in p and "-2147483648 to 2147483647" in p
    # what stoi reads passes: a string flag's value is any word, an int flag's a leading integer (the rest ignored)
    assert lf.extra_args_problems(f"{KEY}.extra_args", ["--threads-http", "4", "--alias", "four", "--cache-reuse",
                                                        "-1", "--threads-http", "8x"], NEW, NEW_VALUES, NEW_INTS) == []
    # and without the tree's int flags nothing is judged by type
    assert lf.extra_args_problems(f"{KEY}.extra_args", ["--threads-http", "four"], NEW, NEW_VALUES) == []
