"""Prompts stay out of the logs by default, at every pin (issue 29).

llama-server: every log call of a pinned tree's server (tools/server/*.cpp, read from the llama-cpp-python sdist
where it is on this machine) that prints request text (a prompt, a request body, a generated token) must be at
debug level (LOG_LEVEL_DEBUG, 5 in common/log.h), above the -lv 4 the toolkit runs with. llama_cpp_log_requests
uses the server's own prompt log instead (--log-prompts-dir): a tree whose flag list has it must define it in
common/arg.cpp and write the prompt to a file there; a pin without it is refused before any change. vLLM: each pinned release gets the flag of its own
parser (files/vllm/<version>.flags.json, written from make_arg_parser by tools/vllm_flags.py) that turns its request
logger off, or on with vllm_log_requests, and the deployed arguments carry it."""

from __future__ import annotations

import re
import shlex
import tarfile

import pytest

from lab.models import write_tiny_hf
from roles.llama_cpp.decide import PROMPT_LOG_FLAG, VERBOSITY, plan, prompt_log_dir, server_args
from roles.llama_cpp.engine import _request_logging
from roles.llama_cpp.versions import SOURCES
from roles.settings import Settings
from roles.vllm import decide as vllm
from roles.vllm.flags import known_flags, request_log_args
from roles.vllm.versions import VLLM_RELEASES
from tests.unit.test_llama_cpp_tree import PLACES

#: a log call of llama.cpp's server code: its macro family and level
CALL = re.compile(r"\b(SLT|SRV|QUE|LOG)_(DBG|TRC|INF|WRN|ERR|CNT)\s*\(")
#: expressions that carry request or response text into a log line
TEXT = ("detokenize", "req.body", "res.body", "generated_text", "token_str", "to_json(", "safe_json_to_str",
        "tokens_to_str", "token_to_piece", ".dump(", "prompt.c_str", "content.c_str", "body.c_str", "text.c_str",
        "effective_input", "generation_prompt", "grammar_value")
#: the known exception, read in the 0.3.36 tree: tools/server/server-chat.cpp logs an Anthropic billing header
#: (a system text starting "x-anthropic-billing-header:") at ERR when its cch= field is malformed. Not a user
#: prompt in normal use, but request text all the same: listed so that any other such line fails the test
#: common/ sources a request passes through in the server (chat templates and parsing, sampling): scanned with it
REQUEST_PATH = ("common/chat.cpp", "common/sampling.cpp", "common/common.cpp")
KNOWN_AT_ERROR = {("tools/server/server-chat.cpp", "anthropic string not as expected"),
                  # the 0.3.16 tree's HTTP exception handler logs the error response it sends (an exception's
                  # message; a JSON parse error quotes the bytes it stopped at), at WRN: not a prompt in normal use
                  ("tools/server/server.cpp", 'LOG_WRN("got exception: %s\\n", formatted_error.dump().c_str())'),
                  # error paths of the request in common/ (README: "Prompts stay out of the logs" names them):
                  # 0.3.16 logs a request's tool entry that has no function (INF); 0.3.36 the model's unparsed
                  # output when it does not match the chat format (WRN), and a grammar that fails to initialize with
                  # the chat template's generation prompt (ERR)
                  ("common/chat.cpp", "Skipping tool without function"),
                  ("common/chat.cpp", "unparsed %s output"),
                  ("common/sampling.cpp", "error initializing grammar sampler"),
                  # not request text: the vocabulary's end-of-generation pieces, logged once at load
                  ("common/common.cpp", "added %s logit bias")}


def pinned_trees() -> list[tuple[str, str]]:
    """(pin ref, sdist path) of every pinned llama.cpp source whose llama-cpp-python sdist is on this machine."""
    found = []
    for ref in SOURCES:
        version = ref.removeprefix("pypi-")
        for place in PLACES:
            path = place / f"llama_cpp_python-{version}.tar.gz"
            if path.is_file():
                found.append((ref, str(path)))
                break
    return found


def log_calls(source: str):
    """(level, whole call text) of every log call in a C++ source (parentheses matched, across lines)."""
    for m in CALL.finditer(source):
        i, depth = m.end(), 1
        while depth and i < len(source):
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        yield m.group(2), " ".join(source[m.start():i].split())


def server_sources(archive: str) -> dict[str, str]:
    """{path under llama.cpp/: text} of the tree's tools/server sources and common/log.h."""
    out = {}
    with tarfile.open(archive) as t:
        for member in t.getmembers():
            rel = member.name.split("/vendor/llama.cpp/", 1)[-1]
            if (rel.startswith("tools/server/") and rel.endswith((".cpp", ".h", ".hpp")) and "/tests/" not in rel) or \
                    rel in ("common/log.h", "common/log.cpp", "common/arg.cpp", *REQUEST_PATH):
                out[rel] = t.extractfile(member).read().decode("utf-8", "replace")
    return out


@pytest.fixture(scope="module", params=pinned_trees() or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"no pinned llama-cpp-python sdist in {', '.join(map(str, PLACES))}"))], ids=lambda p: p and p[0])
def tree(request) -> dict[str, str]:
    return {**server_sources(request.param[1]), "ref": request.param[0]}


def test_the_pins_verbosity_prints_the_load_report_and_no_debug_line(tree):
    """The pin's -lv (files/llama_cpp/<ref>.json log_verbosity) against the tree's own common/log.h and log.cpp:
    a message prints when its verbosity <= the threshold -lv sets (LOG_TMPL); LOG_DBG (which the server's SLT_DBG
    and SRV_DBG are) must stay above it, and the library's INFO lines (the load report) at or below it."""
    log_h, log_cpp = tree["common/log.h"], tree["common/log.cpp"]
    defines = dict(re.findall(r"^#define (LOG_\w+)\s+(\w+)\s*$", log_h, re.M))

    def value(name: str) -> int:
        while not name.isdigit():
            name = defines[name]
        return int(name)

    assert re.search(r"if \(\(verbosity\) <= common_log(_get)?_verbosity_thold(\(\))?\)", log_h)
    debug = value(re.search(r"#define LOG_DBG\(\.\.\.\)\s+LOG_TMPL\(GGML_LOG_LEVEL_DEBUG,\s*(\w+)", log_h).group(1))
    info = re.search(r"case GGML_LOG_LEVEL_INFO:\s*return (\w+);", log_cpp)  # the 0.3.36 tree's library callback
    library = value(info.group(1)) if info else value("LOG_DEFAULT_LLAMA")  # older: common_init's callback
    quiet = SOURCES[tree["ref"]].log_verbosity
    assert library <= quiet < debug, (tree["ref"], library, quiet, debug)
    helpers = tree.get("tools/server/server-common.h", "") + tree.get("tools/server/utils.hpp", "")
    for family in ("SLT", "SRV"):
        assert re.search(rf"#define {family}_DBG\([^)]*\)\s+LOG_DBG\(", helpers), f"{family}_DBG is not LOG_DBG here"


def test_request_text_is_logged_only_at_debug_level(tree):
    below_debug, at_debug = [], []
    for path, source in tree.items():
        if not path.startswith("tools/server/") and path not in REQUEST_PATH:
            continue
        for level, text in log_calls(source):
            if not any(k in text for k in TEXT):
                continue
            if level == "DBG":
                at_debug.append((path, text))
            elif not any(path == p and marker in text for p, marker in KNOWN_AT_ERROR):
                below_debug.append((path, level, text[:160]))
    assert below_debug == [], "request text logged at -lv 4 (prompts would reach the journal by default)"


def test_the_prompt_log_flag_is_in_the_pins_flag_list_exactly_where_the_tree_writes_prompts_with_it(tree):
    """files/llama_cpp/<ref>.json's server flags (what the plan checks) against the tree itself: common/arg.cpp
    defines --log-prompts-dir into params.path_prompts_log_dir, and the server writes the request's prompt into a
    file under that directory."""
    listed = PROMPT_LOG_FLAG in SOURCES[tree["ref"]].server_flags
    defined = re.search(r'\{"--log-prompts-dir"\}.*?params\.path_prompts_log_dir\s*=\s*value', tree["common/arg.cpp"],
                        re.S)
    writes = [p for p, src in tree.items() if p.startswith("tools/server/") and re.search(
        r"std::filesystem::path\(params\.path_prompts_log_dir\)[^;]*;\s*std::ofstream f\(file_path\);.*?"
        r"f << \(prompt\.is_string\(\)", src, re.S)]
    assert listed == bool(defined), (tree["ref"], listed)
    assert bool(writes) == listed, (tree["ref"], writes)


@pytest.mark.parametrize("ref", sorted(SOURCES))
def test_log_requests_writes_prompt_files_at_pins_with_the_flag_and_is_refused_elsewhere(tmp_path, ref):
    """Plan level: llama_cpp_log_requests renders --log-prompts-dir /var/log/llama-server/NAME at pins whose flag
    list (from the tree's common/arg.cpp) has it, -lv 4 either way; a pin without it is refused naming the setting,
    the pin and the fix."""
    from roles.cuda.versions import Toolkit
    from roles.settings import load_settings

    cuda = Toolkit("12.4", "distro", {}, "/usr/bin/nvcc", None, "g++-13")
    data = {"llama_cpp_ref": ref, "llama_cpp_instances": {"m": {"model_path": "/srv/m.gguf"}}}
    for on in (False, True):
        p, problems = plan(load_settings("box", {**data, "llama_cpp_log_requests": on}), [cuda], [], lambda _: True)
        if on and PROMPT_LOG_FLAG not in SOURCES[ref].server_flags:
            assert p is None and len(problems) == 1, problems
            assert problems[0].startswith("llama_cpp_log_requests = True:") and ref in problems[0], problems
            assert "llama_cpp_ref" in problems[0] and "pypi-0.3.36" in problems[0], problems
            continue
        assert problems == [], problems
        args = shlex.split(server_args(p.instances[0], p.source.flash_attn_style, p.log_requests))
        assert args[args.index("-lv") + 1] == str(SOURCES[ref].log_verbosity)  # 0 at 0.3.16, 4 at 0.3.36
        assert (args[args.index(PROMPT_LOG_FLAG) + 1] if PROMPT_LOG_FLAG in args else None) == (
            "/var/log/llama-server/m" if on else None)
        # `v100kit plan` says the -lv the unit runs with, not the newest pin's
        assert f"(-lv {SOURCES[ref].log_verbosity})" in _request_logging(p)[1] if on else \
            f"-lv {SOURCES[ref].log_verbosity} logs no request text" in _request_logging(p)[1], _request_logging(p)


def _plan(data: dict):
    from roles.cuda.versions import Toolkit
    from roles.settings import load_settings

    cuda = Toolkit("12.4", "distro", {}, "/usr/bin/nvcc", None, "g++-13")
    return plan(load_settings("box", {"llama_cpp_instances": {"m": {"model_path": "/srv/m.gguf"}}, **data}), [cuda],
                [], lambda _: True)


def test_a_source_without_the_flag_is_refused_naming_llama_cpp_source_not_the_ref(tmp_path):
    """llama_cpp_source wins over llama_cpp_ref: a 0.3.16 archive given as the source (its bytes from a mirror, so
    the 0.3.16 pin's facts apply) under the default ref pypi-0.3.36 is the tree without the flag; the refusal must
    not blame the ref nor tell the user to set the ref they already have."""
    old = SOURCES["pypi-0.3.16"]
    data = {"llama_cpp_source": "https://mirror.example/llama_cpp_python-0.3.16.tar.gz",
            "llama_cpp_source_sha256": old.sha256, "llama_cpp_log_requests": True}
    p, problems = _plan(data)
    assert p is None and len(problems) == 1, problems
    assert problems[0].startswith("llama_cpp_log_requests = True: llama_cpp_source (https://mirror.example/"), problems
    assert "pinned llama.cpp (pypi-0.3.36)" not in problems[0] and "unset it" in problems[0], problems
    p, problems = _plan({**data, "llama_cpp_log_requests": False})
    assert problems == [] and p.instances[0].log_verbosity == old.log_verbosity == 0


@pytest.mark.skipif(not any(ref == "pypi-0.3.16" for ref, _ in pinned_trees()), reason="no 0.3.16 sdist here")
def test_an_unpinned_local_archive_gets_its_own_trees_verbosity_and_flags(tmp_path):
    """A local llama_cpp_source that is no pin (other bytes) is read by the plan (tree.py read_tree): its -lv and
    its flag list come from the archive itself, so the 0.3.16 tree runs at -lv 0 and cannot log prompts."""
    (_, sdist), = [t for t in pinned_trees() if t[0] == "pypi-0.3.16"]
    copy = tmp_path / "llama_cpp_python-0.3.16.tar.gz"
    copy.write_bytes(open(sdist, "rb").read() + bytes(16))  # gzip ignores trailing zeros; the checksum differs
    import hashlib
    data = {"llama_cpp_source": str(copy), "llama_cpp_source_sha256": hashlib.sha256(copy.read_bytes()).hexdigest(),
            "llama_cpp_source_subdir": "llama_cpp_python-0.3.16/vendor/llama.cpp"}
    assert data["llama_cpp_source_sha256"] not in {s.sha256 for s in SOURCES.values()}
    p, problems = _plan(data)
    assert problems == [] and p.instances[0].log_verbosity == 0, problems
    args = shlex.split(server_args(p.instances[0], p.source.flash_attn_style, p.log_requests))
    assert args[args.index("-lv") + 1] == "0"
    p, problems = _plan({**data, "llama_cpp_log_requests": True})
    assert p is None and PROMPT_LOG_FLAG in problems[0] and "llama_cpp_source" in problems[0], problems


LOG_H_OLD = "#define LOG_DEFAULT_DEBUG 1\n#define LOG_DEFAULT_LLAMA 0\n" \
            "#define LOG_DBG(...) LOG_TMPL(GGML_LOG_LEVEL_DEBUG, LOG_DEFAULT_DEBUG, __VA_ARGS__)\n"
LOG_H_NEW = "#define LOG_LEVEL_DEBUG  5\n#define LOG_LEVEL_TRACE  4\n#define LOG_LEVEL_INFO   3\n" \
            "#define LOG_DEFAULT_DEBUG LOG_LEVEL_DEBUG\n#define LOG_DEFAULT_LLAMA LOG_LEVEL_INFO\n" \
            "#define LOG_DBG(...) LOG_TMPL(GGML_LOG_LEVEL_DEBUG, LOG_LEVEL_DEBUG,  __VA_ARGS__)\n"
LOG_CPP_NEW = 'case GGML_LOG_LEVEL_INFO:  return "info";\nint common_log_get_verbosity(enum ggml_log_level level) {\n' \
              "    switch (level) {\n        case GGML_LOG_LEVEL_INFO:  return LOG_LEVEL_TRACE;\n"


def test_tree_log_verbosity_is_the_highest_that_prints_the_library_and_no_debug_line():
    """roles/llama_cpp/tree.py log_verbosity on the two shapes of common/log.h and log.cpp (0.3.16: the library
    at LOG_DEFAULT_LLAMA through common_init's callback; 0.3.36: log.cpp maps library INFO to a verbosity) and on
    trees where no -lv does both, or where log.h does not say: None, never a guess."""
    from roles.llama_cpp.tree import log_verbosity

    assert log_verbosity(LOG_H_OLD, None) == 0
    assert log_verbosity(LOG_H_NEW, LOG_CPP_NEW) == 4
    assert log_verbosity(LOG_H_NEW, None) == 4  # library at LOG_DEFAULT_LLAMA (3): still printed at 4
    # the library's INFO at the debug level: no -lv prints the load report without the debug lines
    assert log_verbosity(LOG_H_NEW, LOG_CPP_NEW.replace("return LOG_LEVEL_TRACE", "return LOG_LEVEL_DEBUG")) is None
    assert log_verbosity(LOG_H_OLD.replace("LOG_DEFAULT_LLAMA 0", "LOG_DEFAULT_LLAMA 1"), None) is None
    assert log_verbosity(LOG_H_OLD.replace("#define LOG_DBG", "#define LOG_XXX"), None) is None
    assert log_verbosity(None, LOG_CPP_NEW) is None


def test_each_pinned_vllm_release_gets_its_own_parsers_flag():
    seen = 0
    for version in VLLM_RELEASES:
        known = known_flags(version)
        if known is None:  # a release refused for Volta, never planned (no flags file)
            continue
        seen += 1
        off, on = request_log_args(known, False), request_log_args(known, True)
        assert off is not None and on is not None, version
        assert set(off) | set(on) <= known, f"{version}: a flag its parser does not have"
        if "--no-enable-log-requests" in known:  # 0.10 on: enable_log_requests (default off) said explicitly
            assert (off, on) == (["--no-enable-log-requests"], ["--enable-log-requests"]), version
        else:  # 0.8.x: the logger runs unless --disable-log-requests
            assert (off, on) == (["--disable-log-requests"], []), version
    assert seen >= 3  # 0.8.5.post1, 0.10.2, 0.19.1
    assert request_log_args(known_flags("0.8.5.post1"), False) == ["--disable-log-requests"]
    assert request_log_args(known_flags("0.19.1"), False) == ["--no-enable-log-requests"]


@pytest.mark.parametrize("version", ["0.8.5.post1", "0.10.2"])
@pytest.mark.parametrize("on", [False, True])
def test_deployed_vllm_arguments_carry_the_setting(tmp_path, version, on):
    model = str(write_tiny_hf(tmp_path / "m"))
    s = Settings(vllm_version=version, vllm_log_requests=on, vllm_instances={"m": {"model_source": model}})
    gpu = {"index": 0, "name": "Tesla V100-SXM2-16GB", "compute_cap": "7.0", "memory_mib": 16160,
           "persistence_mode": True, "driver_version": "535.261.03"}
    p, problems = vllm.plan(s, "3.11", [gpu], "535.261.03", lambda path: None, {})
    assert problems == []
    env = vllm.environment(p, p.instances[0])
    args = shlex.split(env.splitlines()[0].split("=", 1)[1])
    assert set(args) & {"--disable-log-requests", "--enable-log-requests", "--no-enable-log-requests"} == \
        set(request_log_args(known_flags(version), on))


def test_llama_server_arguments_carry_the_setting():
    from roles.llama_cpp.decide import Instance
    from roles.llama_cpp.settings import LlamaCppInstance

    inst = Instance("m", LlamaCppInstance(model_path="/m.gguf"), "/m.gguf", None, None)
    quiet, loud = shlex.split(server_args(inst, "value")), shlex.split(server_args(inst, "value", log_requests=True))
    assert quiet[quiet.index("-lv") + 1] == "4" and loud[loud.index("-lv") + 1] == "4"
    assert PROMPT_LOG_FLAG not in quiet and loud[loud.index(PROMPT_LOG_FLAG) + 1] == prompt_log_dir("m") == \
        "/var/log/llama-server/m"


@pytest.mark.parametrize("on", [False, True])
def test_the_plan_does_not_promise_a_quiet_journal_for_a_tree_it_has_not_read(on):
    """A llama_cpp_source given by URL and no pin is not read before the deploy: it runs at VERBOSITY (-lv 4), at
    which an older tree (0.3.16's shape: debug lines from -lv 1) logs every request body. `v100kit plan` must not
    say that -lv logs no request text, nor that the journal gets none, for a tree whose log levels it does not
    know; a pinned tree's line is unchanged (test_log_requests_writes_prompt_files_at_pins_with_the_flag_...)."""
    p, problems = _plan({"llama_cpp_source": "https://mirror.example/llama.cpp-b4000.tar.gz",
                         "llama_cpp_source_sha256": "b" * 64, "llama_cpp_log_requests": on})
    assert problems == [] and p.instances[0].log_verbosity is None, problems
    args = shlex.split(server_args(p.instances[0], p.source.flash_attn_style, p.log_requests))
    assert args[args.index("-lv") + 1] == str(VERBOSITY)
    line = _request_logging(p)[1]
    assert "logs no request text" not in line and "gets none" not in line, line
    assert f"-lv {VERBOSITY}" in line and "may log request text" in line, line
    assert line.startswith("on: each request's prompt goes to a file" if on else "off: no prompt file"), line
