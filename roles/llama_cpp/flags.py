"""llama-server flags users set: the typed settings' rendering (typed_args) and the checks of extra_args against the
flags the toolkit owns (OWNED) and the flags the pinned tree's server accepts (files/llama_cpp/<ref>.json
server_flag_values: each flag and the words it takes, derived from common/arg.cpp by roles/llama_cpp/tree.py).
Pure: no pyinfra import.

Where trees spell a setting differently, the tree's own flags pick the spelling: the 0.3.36 tree has no --mlock /
--no-mmap (one --load-mode) and has removed --draft-max (--spec-draft-n-max); 0.3.16 has the older spellings.
A tree whose flags are unknown (an unpinned source URL) gets the older spellings and no known-flag check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from roles import engines
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import problem

#: what std::stoi reads (strtol, base 10): C isspace, then an optional sign and decimal digits; the rest is ignored
STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")

#: Every spelling of a flag the toolkit sets itself -> the setting to use instead (both pinned trees' spellings).
OWNED: dict[str, str] = {
    **dict.fromkeys(("-m", "--model"), "model_path / model_source"),
    **dict.fromkeys(("-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file"),
                    "model_path / model_source"),
    "--host": "listen", "--port": "port",
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers"),
    **dict.fromkeys(("-c", "--ctx-size"), "context"),
    **dict.fromkeys(("-ctk", "--cache-type-k"), "cache_type_k"),
    **dict.fromkeys(("-ctv", "--cache-type-v"), "cache_type_v"),
    **dict.fromkeys(("-np", "--parallel"), "parallel"),
    **dict.fromkeys(("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified", "--kv-unified-per-slot"), "kv_unified"),
    **dict.fromkeys(("-fa", "--flash-attn"), "flash_attn"),
    **dict.fromkeys(("--api-key", "--api-key-file"), "api_key_file"),
    **dict.fromkeys(("--metrics", "--no-metrics"), "metrics"),
    **dict.fromkeys(("-lv", "--verbosity", "--log-verbosity", "-v", "--verbose", "--log-verbose"),
                    "llama_cpp_log_requests (-lv: the pin's own, which prints the load report the GPU check reads)"),
    "--log-prompts-dir": "llama_cpp_log_requests",
    "--rope-scaling": "rope_scaling", "--rope-scale": "rope_scale", "--yarn-orig-ctx": "yarn_orig_ctx",
    **dict.fromkeys(("--jinja", "--no-jinja"), "jinja"),
    "--chat-template": "chat_template", "--chat-template-file": "chat_template_file",
    **dict.fromkeys(("-b", "--batch-size"), "batch_size"),
    **dict.fromkeys(("-ub", "--ubatch-size"), "ubatch_size"),
    **dict.fromkeys(("--mlock", "--no-mlock"), "mlock"),
    **dict.fromkeys(("--mmap", "--no-mmap"), "mmap"),
    **dict.fromkeys(("-lm", "--load-mode"), "mlock / mmap"),
    **dict.fromkeys(("-sm", "--split-mode"), "split_mode"),
    **dict.fromkeys(("-ts", "--tensor-split"), "tensor_split"),
    **dict.fromkeys(("-mg", "--main-gpu"), "main_gpu"),
    **dict.fromkeys(("-t", "--threads"), "threads"),
    **dict.fromkeys(("-md", "--model-draft", "--spec-draft-model"), "draft_model_path"),
    **dict.fromkeys(("--draft-max", "--draft", "--draft-n", "--spec-draft-n-max"), "draft_max"),
}

#: Flags of the server that undo what the plan counted or what the deploy's checks read -> (why, fix).
UNPLANNED: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("-nkvo", "--no-kv-offload"), (
        "puts the KV cache and attention on the CPU (tens of times slower), which the plan counts on the GPU",
        "remove it; for less KV memory use cache_type_k/v or a shorter context")),
    **dict.fromkeys(("-nocb", "--no-cont-batching"), (
        "decodes one slot's requests at a time: the slots' aggregate throughput is gone", "remove it")),
    **dict.fromkeys(("--log-disable", "--log-file"), (
        "the deploy's GPU check and the doctor read llama-server's log from the journal", "remove it")),
    **dict.fromkeys(("-dev", "--device"), (
        "the GPUs an instance uses are set by gpus (CUDA_VISIBLE_DEVICES), which the plan counts", "use gpus")),
    "--override-kv": ("changes the model's metadata that the planner read (context, heads, layers)", "remove it"),
    **dict.fromkeys(("-mm", "--mmproj", "-mmu", "--mmproj-url"), (
        "a multimodal projector's weights and buffers are not in the memory plan", "remove it")),
    "--swa-full": ("a full-size sliding-window cache is not in the memory plan", "remove it"),
    **dict.fromkeys(("--ssl-key-file", "--ssl-cert-file"), engines.TLS_REFUSAL),
}


def _pick(known: frozenset[str] | None, *spellings: str) -> str | None:
    """The first of `spellings` the tree knows; the first of them when its flags are unknown; None when it has none."""
    if known is None:
        return spellings[0]
    return next((f for f in spellings if f in known), None)


def typed_args(s: LlamaCppInstance, known: frozenset[str] | None = None) -> list[str]:
    """The llama-server arguments of the typed flag settings, in the tree's spelling (`known`: its server_flags;
    None: the older spellings); a setting at its default renders nothing. A setting the tree has no flag for renders
    nothing here and is refused by typed_problems."""
    args: list[str] = []
    if s.jinja is not None and (f := _pick(known, "--jinja" if s.jinja else "--no-jinja")):
        args.append(f)
    if s.chat_template:
        args += ["--chat-template", s.chat_template]
    if s.chat_template_file:
        args += ["--chat-template-file", s.chat_template_file]
    if s.batch_size is not None:
        args += ["-b", str(s.batch_size)]
    if s.ubatch_size is not None:
        args += ["-ub", str(s.ubatch_size)]
    if s.mlock or not s.mmap:
        if known is not None and "--load-mode" in known:  # one flag: mmap, mlock, both or neither
            args += ["--load-mode", {(True, True): "mmap+mlock", (False, True): "mlock"}.get((s.mmap, s.mlock), "none")]
        else:
            args += (["--mlock"] if s.mlock else []) + ([] if s.mmap else ["--no-mmap"])
    if s.split_mode:
        args += ["-sm", s.split_mode]
    if s.tensor_split:
        args += ["-ts", ",".join(f"{x:g}" for x in s.tensor_split)]
    if s.main_gpu is not None:
        args += ["-mg", str(s.main_gpu)]
    if s.threads is not None:
        args += ["-t", str(s.threads)]
    if s.draft_model_path:
        args += ["-md", s.draft_model_path]
    if s.draft_max is not None and (f := _pick(known, "--draft-max", "--spec-draft-n-max")):
        args += [f, str(s.draft_max)]
    return args


def stoi_refusal(word: str) -> str | None:
    """Why std::stoi (base 10, int of 32 bits) throws on `word`, as llama-server's parser calls it for a handler_int
    option (common/arg.cpp common_params_parse_ex): "no integer" (std::invalid_argument: no digits after optional
    leading whitespace and one sign), "out of range" (std::out_of_range: beyond -2147483648..2147483647); None
    where it returns (it reads the leading integer and ignores what follows, as strtol does)."""
    m = STOI.match(word)
    if m is None:
        return "no integer"
    return None if -2**31 <= int(m.group(1)) < 2**31 else "out of range"


def extra_args_problems(key: str, args: list[str], known: frozenset[str] | None,
                        values: Mapping[str, int] | None = None, ints: frozenset[str] | None = None) -> list[str]:
    """One problem per word of extra_args (`key`: llama_cpp_instances.NAME.extra_args) that is a flag the toolkit
    owns (naming the setting), one that undoes the plan (UNPLANNED), a flag the tree's server does not accept
    (`known`; None: not checked), or a known flag written --flag=value (llama-server looks the whole word up:
    "invalid argument"). Where the tree's arities are known (`values`: files/llama_cpp/<ref>.json
    server_flag_values) the words are read as llama-server's parser reads them (common/arg.cpp
    common_params_parse_ex): a flag takes its next 0, 1 or 2 words as values whatever they look like, a flag whose
    values argv does not have is refused ("expected value for argument"; extra_args are the command line's last
    words), and a word no flag takes is refused ("invalid argument"). The value of a flag in `ints`
    (files/llama_cpp/<ref>.json server_int_flags) is refused where std::stoi throws on it (stoi_refusal). Without
    them values pass unchecked (roles/engines.py extra_args_problems)."""
    def two_words(word: str, flag: str) -> list[str]:
        return [] if "=" not in word else [problem(
            key, word, "llama-server takes a flag's value as the next word, not after '='",
            f"write it as two words: {flag!r}, {word.split('=', 1)[1]!r}")]

    def check(words: list[str]) -> list[str]:
        return engines.extra_args_problems(
            key, words, OWNED, known, ("not a flag of this llama.cpp's llama-server (common/arg.cpp; "
                                       "files/llama_cpp/<ref>.json server_flag_values)",
                                       "check the spelling against `llama-server --help` of the pinned tree, or "
                                       "remove it"),
            UNPLANNED, two_words)

    if values is None:
        return check(args)
    problems, i = [], 0
    unknown_before = False  # the flag before is not the tree's: how many words it takes is unknown
    while i < len(args):
        word = args[i]
        looked_up = word.replace("_", "-") if word.startswith("--") else word  # arg.cpp: `_` is `-` in a -- flag
        if looked_up not in values and engines.ARG_VALUE.match(word) and unknown_before:
            i += 1  # its value, most likely: the flag's own refusal says what to do, once
            continue
        if looked_up not in values and engines.ARG_VALUE.match(word):
            problems.append(problem(key, word, "no flag before it takes a value, so llama-server reads it as an "
                                    "argument and has none by that name (invalid argument)",
                                    "remove it, or put it right after the flag it is the value of"))
            i += 1
            continue
        problems += check([word])
        unknown_before = looked_up not in values
        taken = values.get(looked_up, 0)
        if i + taken >= len(args) and taken:
            problems.append(problem(key, word, f"it takes {taken} value{'s' if taken > 1 else ''} and "
                                    f"{'none follows' if i + 1 == len(args) else 'fewer follow'}: llama-server "
                                    "stops at start (expected value for argument)",
                                    "give its value as the next word, or remove it"))
        elif ints is not None and looked_up in ints and (why := stoi_refusal(args[i + 1])):
            problems.append(problem(key, args[i + 1], f"{word} takes an integer and llama-server reads this one with "
                                    f"std::stoi: {why}, so it stops at start (error while handling argument)",
                                    f"give {word} a whole number"
                                    + (" from -2147483648 to 2147483647" if why == "out of range" else "")))
        i += 1 + taken
    return problems


def typed_problems(key: str, s: LlamaCppInstance, known: frozenset[str] | None, n_gpus: int) -> list[str]:
    """Refusals of the typed flag settings (`key`: llama_cpp_instances.NAME): batch_size below ubatch_size,
    tensor_split with one GPU or not one share per GPU, draft_max without draft_model_path, and a setting the tree
    has no flag for (`known`; None: not checked)."""
    problems = []
    if s.batch_size is not None and s.ubatch_size is not None and s.batch_size < s.ubatch_size:
        problems.append(problem(f"{key}.batch_size", s.batch_size, f"below ubatch_size {s.ubatch_size} (a physical "
                                "batch is cut from the logical one)", "set batch_size >= ubatch_size"))
    if s.tensor_split is not None and n_gpus < 2:
        problems.append(problem(f"{key}.tensor_split", s.tensor_split, f"the instance sees {n_gpus} GPU",
                                "leave tensor_split unset, or give the instance more GPUs"))
    elif s.tensor_split is not None and len(s.tensor_split) != n_gpus:
        problems.append(problem(f"{key}.tensor_split", s.tensor_split, f"{len(s.tensor_split)} shares for the "
                                f"{n_gpus} GPUs the instance sees", f"give {n_gpus} shares"))
    if s.draft_max is not None and not s.draft_model_path:
        problems.append(problem(f"{key}.draft_max", s.draft_max, "no draft model", "set draft_model_path"))
    if known is not None:
        wanted = {"jinja": None if s.jinja is None else ("--jinja" if s.jinja else "--no-jinja"),
                  "draft_max": None if s.draft_max is None else ("--draft-max", "--spec-draft-n-max"),
                  "mlock": ("--mlock", "--load-mode") if s.mlock else None,
                  "mmap": None if s.mmap else ("--no-mmap", "--load-mode")}
        for name, flags in wanted.items():
            flags = (flags,) if isinstance(flags, str) else flags
            if flags and not any(f in known for f in flags):
                problems.append(problem(f"{key}.{name}", getattr(s, name), f"this llama.cpp's llama-server has "
                                        f"no {' / '.join(flags)}", f"leave {name} unset, or pin another llama_cpp_ref"))
    return problems
