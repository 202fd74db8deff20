"""The command line of one LMDeploy instance: `lmdeploy serve api_server MODEL ...` (LMDeploy 0.15.0, TurboMind).

Option names are LMDeploy's own (lmdeploy/cli/serve.py SubCliServe.add_parser_api_server and
lmdeploy/cli/utils.py ArgumentHelper, v0.15.0); tests/unit/test_lmdeploy_flags.py checks the rendered words against
what LMDeploy's own parser made of them (tests/data/lmdeploy/parsed-0.15.0.json, recorded by
tools/lmdeploy/parse_args.py from the release's wheel).

API keys are not rendered: LMDeploy 0.15.0 reads them only from `--api-keys KEY...` on its command line
(cli/utils.py ArgumentHelper.api_keys; serve/openai/api_server.py:1644 adds AuthenticationMiddleware when given),
with no environment variable or file, and argv is readable by every local user (/proc/PID/cmdline). The unit must
therefore start LMDeploy through a launcher that reads the key file (systemd LoadCredential) and appends
`--api-keys` to sys.argv inside the Python process before calling lmdeploy.cli.entrypoint.run(): see
roles/lmdeploy/launch.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roles.lmdeploy.planner import DEFAULT_CACHE_BLOCK_SEQ_LEN, DEFAULT_CACHE_MAX_ENTRY_COUNT
from roles.lmdeploy.quant import TurbomindFormat


#: Every long option of `lmdeploy serve api_server` in LMDeploy 0.15.0, as its parser defines them
#: (lmdeploy/cli/serve.py SubCliServe.add_parser_api_server with cli/utils.py ArgumentHelper, tag v0.15.0; read with
#: the parser built from that source). tests/unit/test_lmdeploy_flags.py checks it against the namespace the
#: release's own wheel parsed (tests/data/lmdeploy/parsed-0.15.0.json). extra_args are read against it as argparse
#: reads them: an exact option, else a unique prefix of one (allow_abbrev, argparse's default).
API_SERVER_OPTIONS = (
    "--adapters", "--allow-credentials", "--allow-headers", "--allow-methods", "--allow-origins",
    "--allow-terminate-by-client", "--allowed-media-domains", "--api-keys", "--async", "--backend",
    "--cache-block-seq-len", "--cache-max-entry-count", "--chat-template", "--communicator", "--cp",
    "--cudagraph-capture-batch-sizes", "--device", "--disable-fastapi-docs", "--disable-metrics", "--dist-init-addr",
    "--distributed-executor-backend", "--dllm-block-length", "--dllm-confidence-threshold", "--dllm-denoising-steps",
    "--dllm-unmasking-strategy", "--download-dir", "--dp", "--dtype", "--eager-mode", "--enable-abort-handling",
    "--enable-eplb", "--enable-microbatch", "--enable-prefix-caching", "--enable-return-routed-experts", "--ep",
    "--generation-config", "--help", "--hf-overrides", "--kernel-block-size", "--language-model-only", "--log-level",
    "--logprobs-mode", "--max-batch-size", "--max-concurrent-requests", "--max-log-len", "--max-prefill-iters",
    "--max-prefill-token-num", "--migration-backend", "--model-format", "--model-name", "--nnodes", "--node-rank",
    "--num-tokens-per-iter", "--prefix-cache-decode-state-interval", "--prefix-cache-state-budget", "--proxy-url",
    "--quant-policy", "--reasoning-parser", "--revision", "--role", "--rope-scaling-factor", "--server-name",
    "--server-port", "--session-len", "--speculative-algorithm", "--speculative-draft-model",
    "--speculative-num-draft-tokens", "--ssl", "--tool-call-parser", "--tp", "--trust-remote-code",
    "--vision-max-batch-size",
)


#: the options of API_SERVER_OPTIONS that take no value (action='store_true'; --help), and those that take any
#: number of values (nargs '*' or '+'); every other option takes exactly one (lmdeploy/cli/utils.py and
#: cli/serve.py at v0.15.0, their add_argument calls). extra_args_problems reads a word after these as argparse does.
NO_VALUE_OPTIONS = frozenset({
    "--allow-credentials", "--allow-terminate-by-client", "--disable-fastapi-docs", "--disable-metrics",
    "--eager-mode", "--enable-abort-handling", "--enable-eplb", "--enable-microbatch", "--enable-prefix-caching",
    "--enable-return-routed-experts", "--help", "--language-model-only", "--ssl", "--trust-remote-code",
})
MANY_VALUE_OPTIONS = frozenset({
    "--adapters", "--allow-headers", "--allow-methods", "--allow-origins", "--allowed-media-domains", "--api-keys",
    "--cudagraph-capture-batch-sizes",
})
#: the options of MANY_VALUE_OPTIONS with nargs '+': argparse refuses them with no value ("expected at least one
#: argument"); --adapters and --api-keys are nargs '*'
AT_LEAST_ONE_VALUE_OPTIONS = frozenset({
    "--allow-headers", "--allow-methods", "--allow-origins", "--allowed-media-domains",
    "--cudagraph-capture-batch-sizes",
})
#: the options whose value argparse checks against choices, as the words it accepts (after the option's type:
#: --async is type=int, so "01" is 1). --log-level's are logging._nameToLevel's names when the parser is built,
#: REQUEST among them (lmdeploy/utils.py:19 addLevelName, imported with the package): case matters ("info" is an
#: invalid choice). --logprobs-mode lists None, which no word is. Owned and plan-changing options are left out
#: (refused whatever their value). lmdeploy/cli/utils.py ArgumentHelper at v0.15.0.
CHOICES: dict[str, tuple[str, ...]] = {
    "--log-level": ("CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET", "REQUEST"),
    "--async": ("0", "1"),
    "--communicator": ("nccl", "native", "cuda-ipc"),
    "--role": ("Hybrid", "Prefill", "Decode"),
    "--migration-backend": ("DLSlime", "Mooncake"),
    "--logprobs-mode": ("raw_logits", "raw_logprobs"),
    "--dllm-unmasking-strategy": ("low_confidence_dynamic", "low_confidence_static", "sequential"),
    "--speculative-algorithm": ("eagle", "eagle3", "deepseek_mtp", "qwen3_5_mtp"),
    "--distributed-executor-backend": ("uni", "mp", "ray"),
}


#: the options whose values argparse converts with int() or float() ("invalid int value" otherwise); the owned and
#: plan-changing ones among them are refused whatever their value (lmdeploy/cli/utils.py and cli/serve.py, v0.15.0)
INT_OPTIONS = frozenset({
    "--async", "--cache-block-seq-len", "--cp", "--cudagraph-capture-batch-sizes", "--dllm-block-length",
    "--dllm-denoising-steps", "--dp", "--ep", "--kernel-block-size", "--max-batch-size", "--max-concurrent-requests",
    "--max-log-len", "--max-prefill-iters", "--max-prefill-token-num", "--nnodes", "--node-rank",
    "--num-tokens-per-iter", "--prefix-cache-decode-state-interval", "--prefix-cache-state-budget", "--server-port",
    "--session-len", "--speculative-num-draft-tokens", "--tp", "--vision-max-batch-size",
})
FLOAT_OPTIONS = frozenset({"--cache-max-entry-count", "--dllm-confidence-threshold", "--rope-scaling-factor"})
#: argparse's own test for a word that looks like a negative number (Python 3.11 argparse
#: _negative_number_matcher): a value, where the parser has no option that looks like one (api_server has none)
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def is_value_word(word: str) -> bool:
    """Whether argparse (Python 3.11 _parse_optional) reads `word` as a value, not an option: one not starting with
    '-', '-' alone, else (not an option, nor a prefix of one) a negative number or a word with a space."""
    if not word or word[0] != "-" or word == "-":
        return True
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        option, candidates = resolve_option("--" + name[2:].replace("_", "-").split(".", 1)[0])
        if option or candidates:
            return False
    elif word == "-h":
        return False
    return bool(NEGATIVE_NUMBER.match(word)) or " " in word


def value_ok(option: str, value: str) -> bool:
    """Whether argparse accepts `value` for `option`: its type (INT_OPTIONS, FLOAT_OPTIONS: Python's int() and
    float(), as argparse calls them), then its choices (CHOICES, compared after the type: --async "01" is 1)."""
    try:
        if option in INT_OPTIONS:
            value = str(int(value))
        elif option in FLOAT_OPTIONS:
            float(value)
    except ValueError:
        return False
    return option not in CHOICES or value in CHOICES[option]


def resolve_option(flag: str) -> tuple[str | None, list[str]]:
    """What LMDeploy 0.15.0's api_server parser takes the long option word `flag` ('--server-p', without '=value';
    '_' already read as '-') for: (the option, []) for an exact option or a unique prefix of one; (None, the options
    it is a prefix of) when ambiguous (argparse: "ambiguous option"); (None, []) when no option starts so (argparse:
    "unrecognized arguments")."""
    if flag in API_SERVER_OPTIONS:
        return flag, []
    found = [o for o in API_SERVER_OPTIONS if o.startswith(flag)]
    return (found[0], []) if len(found) == 1 else (None, found)


@dataclass(frozen=True)
class ServeArgs:
    """What one instance's command line says. model: the model directory on the host (absolute); served_name:
    the OpenAI model name clients use; host/port: where the API listens; tp: tensor-parallel GPUs; session_len:
    the longest sequence (tokens); cache_max_entry_count: the share of free GPU memory after the weights for the
    KV cache, in (0, 1); cache_block_seq_len: tokens per KV block; quant_policy: 0, 4 or 8 (int4/int8 KV);
    fmt: the checkpoint's TurboMind format (roles/lmdeploy/quant.py); max_batch_size: concurrent sequences (None:
    LMDeploy's own choice from the GPU)."""

    model: str
    served_name: str
    host: str
    port: int
    session_len: int
    fmt: TurbomindFormat
    tp: int = 1
    cache_max_entry_count: float = DEFAULT_CACHE_MAX_ENTRY_COUNT
    cache_block_seq_len: int = DEFAULT_CACHE_BLOCK_SEQ_LEN
    quant_policy: int = 0
    max_batch_size: int | None = None


def serve_argv(a: ServeArgs) -> list[str]:
    """The words after the executable: ["serve", "api_server", MODEL, "--backend", "turbomind", ...], each a
    plain word (no quoting needed). dtype is float16 for every checkpoint because a V100 has no bfloat16
    (compute capability 8.0 needed; TurboMind also falls back itself: lmdeploy/turbomind/converter.py
    _resolve_dtype)."""
    argv = ["serve", "api_server", a.model, "--backend", "turbomind", *a.fmt.args(),
            "--model-name", a.served_name, "--server-name", a.host, "--server-port", str(a.port),
            "--tp", str(a.tp), "--session-len", str(a.session_len),
            "--cache-max-entry-count", repr(float(a.cache_max_entry_count)),
            "--cache-block-seq-len", str(a.cache_block_seq_len), "--quant-policy", str(a.quant_policy),
            "--dtype", "float16"]
    if a.max_batch_size is not None:
        argv += ["--max-batch-size", str(a.max_batch_size)]
    return argv
