"""Write files/vllm/<version>.flags.json: every option string of a locked vLLM release's own OpenAI server parser.

    .venv/bin/python tools/vllm_flags.py 0.10.2                       # venv from the lock, offline from uv's cache
    .venv/bin/python tools/vllm_flags.py 0.10.2 --venv /tmp/vllm-0.10.2   # an existing venv of that release

The list is what `vllm serve` / `python -m vllm.entrypoints.openai.api_server` accept: the option strings of
make_arg_parser(FlexibleArgumentParser()) (vllm/entrypoints/openai/cli_args.py, which adds
vllm/engine/arg_utils.py AsyncEngineArgs.add_cli_args), imported from the release itself, the way
tests/lab/test_vllm.py parses VLLM_ARGS. Without a venv the tool builds one from files/vllm/vllm-VERSION-pyX.Y.txt
with `uv pip install --offline --require-hashes --no-deps` (UV_CACHE_DIR must hold the wheels; nothing is
downloaded). On a machine without a GPU vLLM cannot infer its device, so the parser is built with vLLM's CPU
platform object: no in-tree platform adds options (Platform.pre_register_and_update is a no-op in
vllm/platforms/interface.py at 0.8.5.post1 and 0.10.2), so the option strings are the same as on a V100.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roles.vllm.versions import LOCK_DIR, VLLM_RELEASES  # noqa: E402
from tools.lock_vllm import find_uv  # noqa: E402

#: Runs inside the release's venv: prints {"version", "platform", "flags"} as JSON.
PROBE = r"""
import json, vllm, vllm.platforms as P
try:
    P.current_platform.device_type  # resolves the platform; fails only on the device inference below
    platform = type(P.current_platform).__name__
except Exception:
    platform = None
try:
    from vllm.utils import FlexibleArgumentParser
except ImportError:  # 0.11+: vllm/utils/argparse_utils.py
    from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.openai.cli_args import make_arg_parser
try:
    parser = make_arg_parser(FlexibleArgumentParser())
except RuntimeError as e:  # "Failed to infer device type": no GPU here
    from vllm.platforms.cpu import CpuPlatform
    P._current_platform, platform = CpuPlatform(), "CpuPlatform (no GPU on the machine that ran the tool)"
    parser = make_arg_parser(FlexibleArgumentParser())
flags = sorted({o for a in parser._actions for o in a.option_strings})
positional = sorted(a.dest for a in parser._actions if not a.option_strings)
print(json.dumps({"version": vllm.__version__, "platform": platform, "flags": flags, "positional": positional}))
"""


def flags_file(version: str) -> Path:
    """files/vllm/<version>.flags.json."""
    return LOCK_DIR / f"{version}.flags.json"


def make_venv(version: str, python: str, where: Path) -> Path:
    """A venv of `version` under `where` from its lock for `python` ("3.11"), offline from uv's cache."""
    lock = VLLM_RELEASES[version].lock_file(python)
    venv = where / f"vllm-{version}"
    subprocess.run([find_uv(), "venv", "-q", "--python", f"python{python}", str(venv)], check=True)
    subprocess.run([find_uv(), "pip", "install", "-q", "--offline", "--python", str(venv / "bin" / "python"),
                    "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(lock)], check=True)
    return venv


def probe(venv: Path) -> dict:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version", choices=sorted(v for v, r in VLLM_RELEASES.items() if not r.refused))
    ap.add_argument("--venv", type=Path, help="an existing venv of that release (else one is built offline)")
    ap.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                    help="Python of the venv to build (one of the release's lock files)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        venv = args.venv or make_venv(args.version, args.python, Path(tmp))
        found = probe(venv)
    if found["version"] != args.version:
        print(f"{venv} holds vLLM {found['version']}, not {args.version}")
        return 1
    data = {"version": args.version, "flags": found["flags"], "positional": found["positional"],
            "source": "tools/vllm_flags.py: option strings of vllm.entrypoints.openai.cli_args.make_arg_parser"
                      f"(FlexibleArgumentParser()) imported from vLLM {args.version} (platform {found['platform']})"}
    path = flags_file(args.version)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path} ({len(data['flags'])} option strings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
