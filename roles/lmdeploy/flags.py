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

from dataclasses import dataclass

from roles.lmdeploy.planner import DEFAULT_CACHE_BLOCK_SEQ_LEN, DEFAULT_CACHE_MAX_ENTRY_COUNT
from roles.lmdeploy.quant import TurbomindFormat


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
