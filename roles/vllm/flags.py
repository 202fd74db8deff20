"""vLLM flags users set: the typed settings' rendering (typed_args) and the checks of extra_args against the flags
the toolkit owns (OWNED) and the option strings of the locked release's own parser (files/vllm/<version>.flags.json,
written by tools/vllm_flags.py from make_arg_parser). Pure: no pyinfra import."""

from __future__ import annotations

import json
from pathlib import Path

from roles import engines
from roles.settings import problem
from roles.vllm.settings import VllmInstance
from roles.vllm.versions import LOCK_DIR, VLLM_RELEASES, VllmRelease

#: Every spelling of a flag the toolkit sets itself -> the setting to use instead.
OWNED: dict[str, str] = {
    "--model": "model_path / model_source", "--served-model-name": "served_model_name",
    "--host": "listen", "--port": "port", "--dtype": "dtype",
    "--gpu-memory-utilization": "gpu_memory_utilization", "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    **dict.fromkeys(("--tensor-parallel-size", "-tp"), "tensor_parallel_size"),
    **dict.fromkeys(("--pipeline-parallel-size", "-pp", "--distributed-executor-backend"), "ray_cluster"),
    "--kv-cache-dtype": "kv_cache_dtype",
    **dict.fromkeys(("--enforce-eager", "--no-enforce-eager"), "enforce_eager"),
    "--api-key": "api_key_file",
    "--config": "the typed settings and extra_args (a config file would bypass their checks)",
    **dict.fromkeys(("--enable-prefix-caching", "--no-enable-prefix-caching"), "enable_prefix_caching"),
    **dict.fromkeys(("--enable-chunked-prefill", "--no-enable-chunked-prefill"), "enable_chunked_prefill"),
    "--max-num-batched-tokens": "max_num_batched_tokens", "--swap-space": "swap_space",
    "--chat-template": "chat_template", "--tool-call-parser": "tool_call_parser",
    **dict.fromkeys(("--enable-auto-tool-choice", "--no-enable-auto-tool-choice"), "enable_auto_tool_choice"),
    **dict.fromkeys(("--enable-log-requests", "--no-enable-log-requests", "--disable-log-requests",
                     "--no-disable-log-requests"), "vllm_log_requests"),
}


def flags_file(version: str, lock_dir: Path = LOCK_DIR) -> Path:
    """files/vllm/<version>.flags.json (tools/vllm_flags.py)."""
    return lock_dir / f"{version}.flags.json"


def known_flags(version: str) -> frozenset[str] | None:
    """The option strings of vLLM `version`'s OpenAI server parser; None where no flags file exists (not checked)."""
    try:
        return frozenset(json.loads(flags_file(version).read_text())["flags"])
    except (OSError, ValueError, KeyError):
        return None


def request_log_args(known: frozenset[str] | None, on: bool) -> list[str] | None:
    """The flags that turn vLLM's request logger on or off, in the spelling of the release's own parser (`known`,
    files/vllm/<version>.flags.json, from make_arg_parser); None where the parser has neither spelling or is not
    known (the plan refuses that). The request logger (vllm/entrypoints/logger.py RequestLogger) logs "Received
    request %s: prompt: %r, ..." at INFO for every request: into the journal, under systemd.

    0.8.5.post1's parser has only --disable-log-requests (AsyncEngineArgs.disable_log_requests, default False: the
    OpenAI server creates the logger unless it is given), so its default logs every prompt. 0.10.2's parser has
    --[no-]enable-log-requests and the old --[no-]disable-log-requests beside it (vllm/engine/arg_utils.py of that
    line: AsyncEngineArgs.enable_log_requests = False, disable_log_requests a deprecated property "removed in
    v0.12.0"); 0.19.1's has only --[no-]enable-log-requests. Read in vLLM's code through the search corpus, not
    per pinned wheel; what the toolkit relies on is the flags files alone: it says what it wants explicitly in every
    release (--no-enable-log-requests where the parser has it), so a release whose default flips cannot log
    prompts unseen."""
    if known is None:
        return None
    if "--enable-log-requests" in known and "--no-enable-log-requests" in known:
        return ["--enable-log-requests" if on else "--no-enable-log-requests"]
    if "--disable-log-requests" in known:
        return [] if on else ["--disable-log-requests"]
    return None


def typed_args(s: VllmInstance) -> list[str]:
    """The vLLM arguments of the typed flag settings; None / default renders nothing (the release's own default)."""
    args: list[str] = []
    if s.enable_prefix_caching is not None:
        args.append("--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching")
    if s.enable_chunked_prefill is not None:
        args.append("--enable-chunked-prefill" if s.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if s.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
    if s.swap_space is not None:
        args += ["--swap-space", str(s.swap_space)]
    if s.chat_template:
        args += ["--chat-template", s.chat_template]
    if s.tool_call_parser:
        args += ["--tool-call-parser", s.tool_call_parser]
    if s.enable_auto_tool_choice:
        args.append("--enable-auto-tool-choice")
    return args


def flag_of(word: str) -> str:
    """The flag a vLLM word names (engines.flag_of), a dotted JSON-config key counting as its flag:
    `--compilation-config.cudagraph_mode=FULL` -> `--compilation-config` (vLLM's FlexibleArgumentParser turns
    `--X.key=value` into `--X '{"key": value}'`; the toolkit renders 0.19.1's CUDA-graph mode that way)."""
    flag = engines.flag_of(word)
    return flag.split(".", 1)[0] if flag.startswith("-") else flag


#: The other spellings that set what a Volta flag sets (vllm/engine/arg_utils.py add_cli_args: `"--compilation-config",
#: "-cc"` and `"--attention-config", "-ac"`, whose `backend` key is what --attention-backend sets).
VOLTA_FLAG_ALIASES: dict[str, tuple[str, ...]] = {
    "--attention-backend": ("--attention-config", "-ac"), "--compilation-config": ("-cc",)}


def extra_args_problems(key: str, args: list[str], known: frozenset[str] | None,
                        volta_flags: tuple[str, ...] = ()) -> list[str]:
    """One problem per word of extra_args (`key`: vllm_instances.NAME.extra_args) that is a flag the toolkit owns
    (naming the setting), one of the release's Volta flags the toolkit sets itself (`volta_flags`: its volta_args and
    vision_args, roles/vllm/versions.py; argparse keeps the last of a repeated option, so a second one would replace
    them), or one the release's parser does not have (`known`; None: not checked)."""
    volta = {flag_of(w) for w in volta_flags if w.startswith("--")}
    volta |= {a for f in volta for a in VOLTA_FLAG_ALIASES.get(f, ())}
    # a boolean flag's negation (argparse BooleanOptionalAction: --no-skip-mm-profiling) undoes it as surely
    volta |= {f"--no-{f[2:]}" for f in volta if f.startswith("--") and (known is None or f"--no-{f[2:]}" in known)}
    refused = {f: (f"set by the toolkit for Volta ({' '.join(volta_flags)}: roles/vllm/versions.py, with sources)",
                   "remove it; the toolkit's Volta flags of this release cannot be replaced")
               for f in volta}
    refused |= dict.fromkeys(("--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-cert-reqs"),
                             engines.TLS_REFUSAL)
    return engines.extra_args_problems(
        key, args, OWNED, known, ("not a flag of this vLLM release's server (files/vllm/<version>.flags.json, from "
                                  "its own parser)", "check the spelling against `vllm serve --help` of the "
                                  "release, or remove it"), refused=refused, flag_of=flag_of)


def typed_problems(key: str, s: VllmInstance, known: frozenset[str] | None, rel: VllmRelease,
                   unchunked: str | None = None, default_batched: int | None = None) -> list[str]:
    """The typed settings vLLM `rel` would refuse at start-up or ignore, as problem strings: enable_auto_tool_choice
    without tool_call_parser; max_num_batched_tokens below max_model_len where the release does not chunk prefill
    (unset enable_chunked_prefill included: V0 chunks only above 32768 tokens, and not for the models and flags
    decide.v0_unchunked_reason names) or below max_num_seqs, which SchedulerConfig raises on
    (files/vllm/<version>.json batched_tokens_source, found in the release's code by
    release_source.batched_tokens_checks), and max_num_seqs above the batch vLLM takes when max_num_batched_tokens
    is unset (default_batched, tokens: planner.vllm_profiled_tokens of the release; None: not checked);
    enable_chunked_prefill: false where the release chunks every generative model whatever is asked (0.10.2:
    EngineArgs._set_default_args_v1); and a typed flag the release lacks (known: its parser's flags). unchunked:
    why V0 keeps chunked prefill off for this model at any length (None: it does not, or the model is not read)."""
    problems = []
    if s.enable_auto_tool_choice and not s.tool_call_parser:
        problems.append(problem(f"{key}.enable_auto_tool_choice", True, "vLLM needs --tool-call-parser with it",
                                "set tool_call_parser (e.g. hermes)"))
    if s.enable_chunked_prefill is False and rel.chunked_prefill == "always":
        other = " or ".join(v for v, r in VLLM_RELEASES.items() if r.chunked_prefill != "always" and not r.refused)
        problems.append(problem(f"{key}.enable_chunked_prefill", False, f"vLLM {rel.version} chunks prefill for "
                                "every generative model whatever is asked (vllm/engine/arg_utils.py "
                                "_set_default_args_v1): the setting would have no effect",
                                f"leave it unset, or set vllm_version: {other}, which can turn it off"))
    tokens, length, seqs = s.max_num_batched_tokens, s.max_model_len, s.max_num_seqs
    if tokens is not None and tokens < length and not rel.chunks_prefill(s.enable_chunked_prefill, length,
                                                                         unchunked is None):
        if s.enable_chunked_prefill is False:
            why = "chunked prefill is off"
        elif unchunked:
            why = f"vLLM {rel.version} does not chunk prefill for {unchunked} unless asked"
        else:
            why = f"vLLM {rel.version} chunks prefill by default only above max_model_len {rel.chunked_prefill_above}"
        # V0's chunked prefill runs a Triton kernel that has failed on V100 (docs/volta.md §4a): not offered there
        chunk = "" if rel.engine == "V0" else ", or set enable_chunked_prefill: true"
        problems.append(problem(f"{key}.max_num_batched_tokens", tokens, f"below max_model_len {length} and {why}: "
                                "a whole prompt must fit one step, and vLLM refuses to start",
                                f"raise it to at least {length}, or leave it unset (vLLM then batches "
                                f"max_model_len){chunk}"))
    if tokens is not None and tokens < seqs:
        problems.append(problem(f"{key}.max_num_batched_tokens", tokens, f"below max_num_seqs {seqs}: "
                                "vLLM refuses to start (SchedulerConfig: \"must be greater than or equal to "
                                "max_num_seqs\")", f"raise it to at least {seqs}, or lower max_num_seqs"))
    # vLLM takes at most max_num_seqs x max_model_len of its default, which is never below max_num_seqs
    if tokens is None and default_batched is not None and default_batched < seqs:
        problems.append(problem(f"{key}.max_num_seqs", seqs, f"above the {default_batched} tokens per step vLLM "
                                f"{rel.version} batches by default here: vLLM refuses to start (SchedulerConfig: "
                                "max_num_batched_tokens \"must be greater than or equal to max_num_seqs\")",
                                f"set max_num_batched_tokens to at least {seqs}, or lower max_num_seqs to "
                                f"{default_batched}"))
    if known is not None:
        for flag in typed_args(s):
            if flag.startswith("-") and flag not in known:
                problems.append(problem(key, flag, "this vLLM release has no such flag", "leave its setting unset"))
    return problems
