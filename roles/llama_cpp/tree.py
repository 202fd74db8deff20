"""Facts read from a llama.cpp source archive (.tar.gz) on the control machine: the model architectures it loads,
the form of its flash-attention placement code (roles/llama_cpp/attention.py has one rule function per known form),
its -fa option style and the compute capability below which it turns CUDA graphs off.

Pure and stdlib only: reads the archive's members with tarfile, imports no pyinfra and no other toolkit module.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

ARCH_CPP = "src/llama-arch.cpp"
ARG_CPP = "common/arg.cpp"
CUDA_CU = "ggml/src/ggml-cuda/ggml-cuda.cu"
COMMON_CUH = "ggml/src/ggml-cuda/common.cuh"
FATTN_CU = "ggml/src/ggml-cuda/fattn.cu"
CONTEXT_CPP = "src/llama-context.cpp"
GRAPH_CPP = "src/llama-graph.cpp"
CMAKE_GGML = "ggml/CMakeLists.txt"
CMAKE_TOP = "CMakeLists.txt"
#: Members every tree must have (read_tree raises ValueError without them).
REQUIRED = (ARCH_CPP, ARG_CPP, CUDA_CU, COMMON_CUH, FATTN_CU, CONTEXT_CPP, GRAPH_CPP, CMAKE_GGML)
#: Members some forms read; a tree without one of them is not of that form.
OPTIONAL = ("ggml/src/ggml-cuda/fattn-wmma-f16.cu", "ggml/src/ggml-cuda/fattn-tile.cu", CMAKE_TOP)
LOG_H, LOG_CPP = "common/log.h", "common/log.cpp"
#: Members only log_verbosity reads (absent: the verbosity is unknown).
LOGGING = (LOG_H, LOG_CPP)

#: The arch enum entries of LLM_ARCH_NAMES that are no loadable model: LLM_ARCH_UNKNOWN ("(unknown)";
#: src/llama-model.cpp load_arch throws for it) and LLM_ARCH_CLIP (src/llama.cpp llama_model_load: "CLIP cannot be used as main model").
NOT_LOADABLE = frozenset({"LLM_ARCH_UNKNOWN", "LLM_ARCH_CLIP"})


@dataclass(frozen=True)
class Piece:
    """A part of the source a form's rules transcribe: `function` in `member` (every definition of that name),
    or only its `case` label block (`case GGML_OP_X:` through the next label at the same depth)."""

    member: str
    function: str
    case: str | None = None


#: Per known form id (roles/llama_cpp/attention.py RULES): the pieces its rule function transcribes and the sha256
#: of their whitespace-normalised text (fingerprint()), taken from the tree the form was read from.
FORMS: dict[str, tuple[tuple[Piece, ...], str]] = {
    # llama-cpp-python 0.3.16 sdist, vendor/llama.cpp
    "cuda-fa-inline-v1": ((
        Piece(CUDA_CU, "ggml_backend_cuda_device_supports_op", "GGML_OP_FLASH_ATTN_EXT"),
        Piece(CUDA_CU, "ggml_backend_cuda_device_supports_op", "GGML_OP_MUL_MAT"),
        Piece(COMMON_CUH, "fp16_mma_available"), Piece(COMMON_CUH, "turing_mma_available"),
        Piece(COMMON_CUH, "fast_fp16_available"), Piece(COMMON_CUH, "fp16_available"),
        Piece(FATTN_CU, "ggml_cuda_flash_attn_ext_vec_f16"), Piece(FATTN_CU, "ggml_cuda_flash_attn_ext_vec_f32"),
        Piece(FATTN_CU, "ggml_cuda_flash_attn_ext"), Piece(FATTN_CU, "ggml_cuda_flash_attn_ext_mma_f16"),
        Piece("ggml/src/ggml-cuda/fattn-wmma-f16.cu", "ggml_cuda_flash_attn_ext_wmma_f16"),
        Piece(CONTEXT_CPP, "llama_init_from_model"), Piece(GRAPH_CPP, "build_attn_mha"),
    ), "84e57c004bb7a7dee3bdb45e211cb49a6fbbc42e82fd6f212a4761fc96d4bf0d"),
    # llama-cpp-python 0.3.36 sdist, vendor/llama.cpp
    "cuda-fa-best-kernel-v1": ((
        Piece(CUDA_CU, "ggml_backend_cuda_device_supports_op", "GGML_OP_FLASH_ATTN_EXT"),
        Piece(CUDA_CU, "ggml_backend_cuda_device_supports_op", "GGML_OP_MUL_MAT"),
        Piece(COMMON_CUH, "turing_mma_available"), Piece(COMMON_CUH, "volta_mma_available"),
        Piece(FATTN_CU, "ggml_cuda_get_fattn_vec_case"), Piece(FATTN_CU, "ggml_cuda_flash_attn_ext_vec"),
        Piece(FATTN_CU, "ggml_cuda_fattn_kv_type_supported"), Piece(FATTN_CU, "ggml_cuda_get_best_fattn_kernel"),
        Piece(FATTN_CU, "ggml_cuda_flash_attn_ext"), Piece(FATTN_CU, "ggml_cuda_flash_attn_ext_supported"),
        Piece(FATTN_CU, "ggml_cuda_flash_attn_ext_mma_f16"),
        Piece("ggml/src/ggml-cuda/fattn-tile.cu", "ggml_cuda_flash_attn_ext_tile"),
        Piece(CONTEXT_CPP, "llama_init_from_model"), Piece(CONTEXT_CPP, "resolve_fused_ops"),
        Piece(GRAPH_CPP, "build_attn_mha"),
    ), "39f89b0c02cd45a3a3e120458ed861a50d0da00141080537e92bb966f9580ae5"),
}


@dataclass(frozen=True)
class TreeFacts:
    """What the toolkit needs to know about one llama.cpp tree.

    architectures: every `general.architecture` name the tree loads (src/llama-arch.cpp LLM_ARCH_NAMES, less
    NOT_LOADABLE). fa_form: the id of the known flash-attention form its code has (FORMS), None for another form
    (placement unknown: quantized KV must be refused). flash_attn_style: "value" (`-fa on|off|auto`) or "flag" (a
    bare `-fa`), from common/arg.cpp. cuda_graphs_min_cc: the compute capability (major, minor) below which
    ggml-cuda.cu turns CUDA graphs off (disable_due_to_gpu_arch), None where no such rule is found.
    fa_quants_options: the CMake options of ggml/CMakeLists.txt that pick the FA vector kernels' K/V types
    (GGML_CUDA_FA_ALL_QUANTS, GGML_CUDA_FA_QUANTS). server_flag_values: every option spelling llama-server accepts
    (common/arg.cpp) with the words it takes after it (server_flag_values()); server_flags, its keys.
    server_int_flags: those of them whose value llama-server reads with std::stoi (server_int_flags()).
    llama_version: llama.cpp's own (major, minor, patch) from the top-level
    CMakeLists.txt (llama_version()), None for a tree from before semantic versioning. log_verbosity: the -lv that
    prints the library's load report and no debug line (log_verbosity()), None where common/log.h does not say."""

    architectures: frozenset[str]
    fa_form: str | None
    flash_attn_style: Literal["value", "flag"]
    cuda_graphs_min_cc: tuple[int, int] | None = None
    fa_quants_options: tuple[str, ...] = ()
    llama_version: tuple[int, int, int] | None = None
    log_verbosity: int | None = None
    server_flag_values: Mapping[str, int] = field(default_factory=dict, hash=False)
    server_int_flags: frozenset[str] = frozenset()

    @property
    def server_flags(self) -> frozenset[str]:
        """Every option spelling llama-server accepts: server_flag_values' keys."""
        return frozenset(self.server_flag_values)


def _mask(text: str) -> str:
    """`text` with comments, string and char literals blanked (same length), so braces can be counted."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def _close(masked: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at `start`; -1 if none."""
    depth = 0
    for i in range(start, len(masked)):
        if masked[i] == open_:
            depth += 1
        elif masked[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def function_texts(text: str, name: str) -> list[str]:
    """The definitions (signature through closing brace) of C/C++ function `name` in `text`, in order: an
    occurrence of `name(` (optionally `Class::name(`) whose closing parenthesis is followed by `{` (after
    qualifiers such as const/override/noexcept) starts one. [] when there is none."""
    masked = _mask(text)
    found = []
    for m in re.finditer(rf"(?<![\w.>]){re.escape(name)}\s*\(", masked):
        end = _close(masked, m.end() - 1, "(", ")")
        if end < 0:
            continue
        rest = re.match(r"\s*(?:(?:const|override|noexcept|final)\s*)*\{", masked[end:])
        if not rest:
            continue
        body = end + rest.end() - 1
        stop = _close(masked, body, "{", "}")
        if stop < 0:
            continue
        line_start = masked.rfind("\n", 0, m.start()) + 1
        found.append(text[line_start:stop])
    return found


def case_text(function: str, label: str) -> str | None:
    """The block of `case <label>:` in a function's text: the label, any labels directly after it (fall-through)
    and the statements up to the next case/default label at the same brace depth or the end of the switch.
    None when the label is absent."""
    masked = _mask(function)
    m = re.search(rf"\bcase\s+{re.escape(label)}\s*:", masked)
    if not m:
        return None
    i = m.end()
    while (nxt := re.match(r"\s*case\s+\w+\s*:", masked[i:])):
        i += nxt.end()
    depth = 0
    label_re = re.compile(r"\b(?:case\s+[\w:]+|default)\s*:(?!:)")
    j = i
    while j < len(masked):
        c = masked[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                break
        elif depth == 0 and c in "cd" and label_re.match(masked, j) and not masked[j - 1].isalnum():
            break
        j += 1
    return function[m.start():j]


def normalise(text: str) -> str:
    """`text` with every run of whitespace made one space, stripped."""
    return " ".join(text.split())


def piece_text(files: Mapping[str, str], piece: Piece) -> str | None:
    """The whitespace-normalised text of one Piece in `files` (member path -> text), None when the member, the
    function or the case is absent."""
    text = files.get(piece.member)
    if text is None:
        return None
    defs = function_texts(text, piece.function)
    if not defs:
        return None
    if piece.case is None:
        return "\n".join(normalise(d) for d in defs)
    blocks = [b for b in (case_text(d, piece.case) for d in defs) if b is not None]
    return "\n".join(normalise(b) for b in blocks) if blocks else None


def fingerprint(files: Mapping[str, str], pieces: tuple[Piece, ...]) -> str | None:
    """sha256 (hex) of the pieces' normalised texts, each headed by its member, function and case; None when a
    piece is absent."""
    h = hashlib.sha256()
    for p in pieces:
        t = piece_text(files, p)
        if t is None:
            return None
        h.update(f"{p.member}:{p.function}:{p.case or ''}\n{t}\n".encode())
    return h.hexdigest()


def fa_form(files: Mapping[str, str]) -> str | None:
    """The known form (FORMS key) whose fingerprint the tree's code has; None when it has none of them."""
    for form, (pieces, digest) in FORMS.items():
        if fingerprint(files, pieces) == digest:
            return form
    return None


def architectures(arch_cpp: str) -> frozenset[str]:
    """The loadable architecture names of src/llama-arch.cpp's LLM_ARCH_NAMES map (less NOT_LOADABLE). Raises
    ValueError when the map is not found."""
    m = re.search(r"LLM_ARCH_NAMES\s*=\s*\{(.*?)\n\};", arch_cpp, re.S)
    if not m:
        raise ValueError(f"{ARCH_CPP}: no LLM_ARCH_NAMES map")
    pairs = re.findall(r"\{\s*(LLM_ARCH_\w+)\s*,\s*\"([^\"]+)\"\s*\}", m.group(1))
    return frozenset(name for enum, name in pairs if enum not in NOT_LOADABLE)


def flash_attn_style(arg_cpp: str) -> Literal["value", "flag"]:
    """common/arg.cpp: "value" when the -fa/--flash-attn option's handler takes a string value (on|off|auto),
    "flag" when it takes none. Raises ValueError when the option is not found."""
    m = re.search(r"\{\s*\"-fa\"\s*,\s*\"--flash-attn\"\s*\}", arg_cpp)
    if not m:
        raise ValueError(f"{ARG_CPP}: no -fa/--flash-attn option")
    lam = re.search(r"\[\]\s*\(([^)]*)\)", arg_cpp[m.end():m.end() + 1500])
    if not lam:
        raise ValueError(f"{ARG_CPP}: no handler after the -fa option")
    return "value" if "std::string" in lam.group(1) else "flag"


def _top_level_parts(masked: str, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of each comma-separated argument of masked[start:end] (commas inside brackets do not count)."""
    parts, depth, last = [], 0, start
    for i in range(start, end):
        c = masked[i]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((last, i))
            last = i + 1
    parts.append((last, end))
    return parts


def server_flags(arg_cpp: str) -> frozenset[str]:
    """Every option spelling llama-server accepts (server_flag_values' keys). Raises what it raises."""
    return frozenset(server_flag_values(arg_cpp))


def _values_taken(handler: str) -> int:
    """How many words after its flag llama-server's parser takes for an option whose handler lambda is `handler`
    (masked source text starting at its '['): common/arg.cpp common_params_parse_ex calls handler_void (params
    only) and handler_bool (one bool: the flag or its --no- form) with none, handler_int and handler_string with the
    next word, handler_str_str with the next two, whatever those words look like ("expected value for argument"
    when argv ends first)."""
    start = handler.find("(")
    end = _close(handler, start, "(", ")")
    params = _top_level_parts(handler, start + 1, end - 1)
    if len(params) == 2 and re.search(r"\bbool\b", handler[params[1][0]:params[1][1]]):
        return 0
    return len(params) - 1


def _is_int_handler(handler: str) -> bool:
    """Whether the handler lambda `handler` (masked source text starting at its '[') is a handler_int: `(common_params
    & params, int value)`, whose word common_params_parse_ex converts with std::stoi (common/arg.h handler_int)."""
    start = handler.find("(")
    params = _top_level_parts(handler, start + 1, _close(handler, start, "(", ")") - 1)
    return len(params) == 2 and re.match(r"\s*int\b", handler[params[1][0]:params[1][1]]) is not None


def server_flag_values(arg_cpp: str) -> dict[str, int]:
    """{option spelling: the words llama-server takes after it (0, 1 or 2; _values_taken)} for every option
    llama-server accepts (server_handlers()). Raises what server_handlers raises."""
    return {flag: _values_taken(h) for flag, h in server_handlers(arg_cpp).items()}


def server_int_flags(arg_cpp: str) -> frozenset[str]:
    """The option spellings llama-server accepts (server_handlers()) whose one value it reads with std::stoi
    (common/arg.cpp common_params_parse_ex: `opt.handler_int(params, std::stoi(val))`; a word with no leading
    integer stops it at start: "error while handling argument ... stoi"). Raises what server_handlers raises."""
    return frozenset(flag for flag, h in server_handlers(arg_cpp).items() if _is_int_handler(h))


def server_handlers(arg_cpp: str) -> dict[str, str]:
    """{option spelling: its handler lambda's masked source text, from its '['} for every option
    llama-server accepts, read from common/arg.cpp as common_params_parser_init builds the
    options for LLAMA_EXAMPLE_SERVER: each `add_opt(common_arg({"-x", "--xx"}, [{"--no-xx"},] ...)...)` whose
    set_examples (default {LLAMA_EXAMPLE_COMMON}, common/arg.h) holds LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON
    and whose set_excludes does not hold LLAMA_EXAMPLE_SERVER (the add_opt filter), outside `if (ex == ...)` blocks
    that do not apply to the server, less the options whose handler only calls arg_removed() (they fail at parse:
    "the argument has been removed"). Raises ValueError when the function, its add_opt filter or a condition on
    `ex` has a form this reader does not know."""
    masked = _mask(arg_cpp)
    m = re.search(r"^common_params_context\s+common_params_parser_init\s*\(", masked, re.M)
    if not m:
        raise ValueError(f"{ARG_CPP}: no common_params_parser_init")
    start = masked.find("{", _close(masked, m.end() - 1, "(", ")"))
    end = _close(masked, start, "{", "}")
    body = masked[start:end]
    filt = re.search(r"auto\s+add_opt\s*=\s*\[&\]\s*\(\s*common_arg\s+arg\s*\)\s*\{(.*?)\n    \};", body, re.S)
    if not filt or "arg.in_example(LLAMA_EXAMPLE_COMMON)" not in filt.group(1) or "!arg.is_exclude(ex)" not in \
            filt.group(1):
        raise ValueError(f"{ARG_CPP}: add_opt's example filter has an unknown form")
    skipped: list[tuple[int, int]] = []  # spans of blocks that do not run for the server
    for c in re.finditer(r"\bif\s*\(([^(){};]*\bex\b[^(){};]*)\)\s*\{", body):
        cond = re.fullmatch(r"\s*ex\s*(==|!=)\s*(LLAMA_EXAMPLE_\w+)\s*", c.group(1))
        if not cond:
            raise ValueError(f"{ARG_CPP}: unknown condition on the example: {c.group(1).strip()}")
        runs = (cond.group(2) == "LLAMA_EXAMPLE_SERVER") == (cond.group(1) == "==")
        close = _close(body, c.end() - 1, "{", "}")
        if not runs:
            skipped.append((c.end(), close))
        if (e := re.match(r"\s*else\s*\{", body[close:])) and runs:
            skipped.append((close + e.end(), _close(body, close + e.end() - 1, "{", "}")))
    flags: dict[str, str] = {}
    for a in re.finditer(r"\badd_opt\s*\(\s*common_arg\s*\(", body):
        if any(lo <= a.start() < hi for lo, hi in skipped):
            continue
        arg_open = a.end() - 1
        arg_close = _close(body, arg_open, "(", ")")
        opt_close = _close(body, body.index("(", a.start()), "(", ")")
        names: list[str] = []
        parts = _top_level_parts(body, arg_open + 1, arg_close - 1)
        handlers = [(lo, hi) for lo, hi in parts if body[lo:hi].lstrip().startswith("[")]
        if not handlers:
            raise ValueError(f"{ARG_CPP}: an option without a handler lambda at offset {start + a.start()}")
        lo, hi = handlers[-1]
        handler = body[lo:hi].lstrip()
        for lo, hi in parts[:2]:  # args, then args_neg if a list
            text = arg_cpp[start + lo:start + hi].strip()
            if not text.startswith("{"):
                break
            names += re.findall(r'"([^"]+)"', text)

        def examples(method: str) -> set[str] | None:
            found = re.search(rf"\.{method}\s*\(\s*\{{([^}}]*)\}}", body[arg_close:opt_close])
            return None if found is None else set(re.findall(r"LLAMA_EXAMPLE_\w+", found.group(1)))

        if "arg_removed(" in body[arg_open:arg_close]:
            continue
        kept = examples("set_examples") or {"LLAMA_EXAMPLE_COMMON"}
        if kept & {"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"} and \
                "LLAMA_EXAMPLE_SERVER" not in (examples("set_excludes") or set()):
            flags.update(dict.fromkeys(names, handler))
    if not flags:
        raise ValueError(f"{ARG_CPP}: no server options found")
    return flags


def cuda_graphs_min_cc(cuda_cu: str, common_cuh: str) -> tuple[int, int] | None:
    """ggml-cuda.cu: the GGML_CUDA_CC_* constant in the `cc < GGML_CUDA_CC_X` test that sets
    disable_due_to_gpu_arch, as (major, minor) from its #define in common.cuh; None when not found."""
    m = re.search(r"cc\s*<\s*GGML_CUDA_CC_(\w+)\s*\)\s*\{.{0,300}?disable_due_to_gpu_arch\s*=\s*true", cuda_cu, re.S)
    if not m:
        return None
    d = re.search(rf"#define\s+GGML_CUDA_CC_{m.group(1)}\s+(\d+)", common_cuh)
    if not d:
        return None
    value = int(d.group(1))
    return value // 100, value % 100 // 10


def fa_quants_options(cmake: str) -> tuple[str, ...]:
    """ggml/CMakeLists.txt: which of GGML_CUDA_FA_ALL_QUANTS (option) and GGML_CUDA_FA_QUANTS (cache string) exist."""
    return tuple(o for o in ("GGML_CUDA_FA_ALL_QUANTS", "GGML_CUDA_FA_QUANTS")
                 if re.search(rf"(?:option|set)\s*\(\s*{o}\s", cmake))


def llama_version(cmake_top: str | None) -> tuple[int, int, int] | None:
    """llama.cpp's version as the tree states it: the top-level CMakeLists.txt's `set(LLAMA_VERSION_MAJOR n)`,
    MINOR and PATCH (semantic versioning since ggml-org/llama.cpp#26839, 2026-08; the "-dev" suffix is a build
    option, LLAMA_BUILD_IS_DEV, not a property of the tree). None when the file or any of the three is absent (a
    tree from before, whose build number and commit exist only in git: cmake/build-info.cmake)."""
    if cmake_top is None:
        return None
    parts = [re.search(rf"^\s*set\s*\(\s*LLAMA_VERSION_{p}\s+(\d+)\s*\)", cmake_top, re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return None
    major, minor, patch = (int(m.group(1)) for m in parts)
    return major, minor, patch


def _level(log_h: str, name: str) -> int | None:
    """A verbosity common/log.h defines: `#define NAME n`, or `#define NAME OTHER` followed to a number."""
    for _ in range(4):
        if name.isdigit():
            return int(name)
        m = re.search(rf"^\s*#\s*define\s+{re.escape(name)}\s+(\w+)", log_h, re.M)
        if m is None:
            return None
        name = m.group(1)
    return None


def log_verbosity(log_h: str | None, log_cpp: str | None) -> int | None:
    """The highest llama-server -lv (common_log_verbosity_thold: a message prints when its verbosity <= it) that
    still prints llama.cpp's library INFO lines (the load report: "offloaded N/M layers to GPU", which the deploy's
    GPU check reads) and no LOG_DBG line (the server's debug lines carry request text: a request body, prompt
    tokens). LOG_DBG's verbosity is LOG_DEFAULT_DEBUG (common/log.h); the library's INFO is common/log.cpp's
    common_log_get_verbosity(GGML_LOG_LEVEL_INFO) where that exists, else LOG_DEFAULT_LLAMA (older trees'
    common_init callback). 0.3.16 tree: DBG 1, library 0 -> 0; 0.3.36: DBG LOG_LEVEL_DEBUG 5, INFO LOG_LEVEL_TRACE
    4 -> 4. None when log.h does not say, or no verbosity does both."""
    if log_h is None:
        return None
    m = re.search(r"^\s*#\s*define\s+LOG_DBG\(\.\.\.\)\s+LOG_TMPL\(\s*GGML_LOG_LEVEL_DEBUG\s*,\s*(\w+)", log_h, re.M)
    debug = _level(log_h, m.group(1)) if m else None
    info = re.search(r"case\s+GGML_LOG_LEVEL_INFO\s*:\s*return\s+(\w+)\s*;", log_cpp or "")
    library = _level(log_h, info.group(1)) if info else _level(log_h, "LOG_DEFAULT_LLAMA")
    if debug is None or library is None or library > debug - 1:
        return None
    return debug - 1


def facts(files: Mapping[str, str]) -> TreeFacts:
    """TreeFacts from a tree's member texts (paths relative to the llama.cpp root). Raises ValueError naming a
    missing REQUIRED member or an unparsable one."""
    for member in REQUIRED:
        if member not in files:
            raise ValueError(f"missing member {member}")
    return TreeFacts(
        architectures=architectures(files[ARCH_CPP]),
        fa_form=fa_form(files),
        flash_attn_style=flash_attn_style(files[ARG_CPP]),
        cuda_graphs_min_cc=cuda_graphs_min_cc(files[CUDA_CU], files[COMMON_CUH]),
        fa_quants_options=fa_quants_options(files[CMAKE_GGML]),
        server_flag_values=server_flag_values(files[ARG_CPP]),
        server_int_flags=server_int_flags(files[ARG_CPP]),
        llama_version=llama_version(files.get(CMAKE_TOP)),
        log_verbosity=log_verbosity(files.get(LOG_H), files.get(LOG_CPP)),
    )


def _root(names: list[str], subdir: str | None) -> str:
    """The archive path of the llama.cpp root: `subdir`, or the shortest directory holding src/llama-arch.cpp."""
    if subdir:
        return subdir.strip("/")
    roots = [n[: -len(ARCH_CPP)].rstrip("/") for n in names if n == ARCH_CPP or n.endswith("/" + ARCH_CPP)]
    if not roots:
        raise ValueError(f"no {ARCH_CPP} in the archive")
    return min(roots, key=len)


def read_files(archive: Path, subdir: str | None = None) -> dict[str, str]:
    """The REQUIRED and OPTIONAL members' texts (UTF-8) of the llama.cpp tree in `archive` (.tar.gz), keyed by path
    relative to the llama.cpp root (`subdir` inside the archive, or found by looking). Raises ValueError naming the
    archive and the missing member, or the archive as unreadable (truncated, not a tar); OSError when it cannot be
    opened at all."""
    try:
        return _read_files(archive, subdir)
    except (tarfile.TarError, EOFError, zlib.error) as e:  # a truncated .tar.gz ends in EOFError mid-stream
        raise ValueError(f"{archive}: not a readable .tar.gz ({type(e).__name__}: {e})") from None


def _read_files(archive: Path, subdir: str | None) -> dict[str, str]:
    with tarfile.open(archive, "r:*") as tar:
        names = [m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()]
        try:
            root = _root(names, subdir)
        except ValueError as e:
            raise ValueError(f"{archive}: {e}") from None
        prefix = f"{root}/" if root else ""
        files: dict[str, str] = {}
        for member in REQUIRED + OPTIONAL + LOGGING:
            path = prefix + member
            try:
                f = tar.extractfile(path) or tar.extractfile("./" + path)
            except KeyError:
                try:
                    f = tar.extractfile("./" + path)
                except KeyError:
                    f = None
            if f is None:
                if member in REQUIRED:
                    raise ValueError(f"{archive}: missing member {path}")
                continue
            files[member] = f.read().decode("utf-8", errors="replace")
    return files


def read_tree(archive: Path, subdir: str | None = None) -> TreeFacts:
    """TreeFacts of the llama.cpp tree in `archive` (.tar.gz), reading only the members it needs. `subdir`: the
    llama.cpp root inside the archive (e.g. "llama_cpp_python-0.3.16/vendor/llama.cpp"), None to look for it.
    Raises ValueError naming the archive and the missing (or unparsable) member."""
    files = read_files(archive, subdir)
    try:
        return facts(files)
    except ValueError as e:
        raise ValueError(f"{archive}: {e}") from None
