"""Record what LMDeploy's own command-line parser makes of the words roles/lmdeploy/flags.py renders.

    .venv/bin/python -m tools.lmdeploy.parse_args [--python 3.11] [--wheel-cache /var/tmp/lmdeploy-dl]

Unpacks every wheel of files/lmdeploy/lmdeploy-<version>-py<python>.txt (hash-checked by
v100kit.offline_pypi.fill_wheels, downloaded once into the wheel cache) into <cache>/site-py<python>, then, in a
subprocess of the matching CPython with only that directory on sys.path (-S: no site-packages), builds LMDeploy's
parser exactly as its entry point does (lmdeploy/cli/entrypoint.py run: CLI.add_parsers, SubCliServe.add_parsers,
SubCliLite.add_parsers) and parses each sample's words. No GPU is needed: parsing imports torch but runs no kernel.
Writes tests/data/lmdeploy/parsed-<version>.json: per sample the words and the parsed namespace (JSON-able values).
Also records every long option (--...) of the `serve api_server` subparser under "api_server_options":
{"--opt": {"nargs": action.nargs as is (None, '*', '+', '?', 0 for flags), "choices": [str(c), ...] or null,
"type": action.type.__name__ or null}}, so that tests can check the hand-written option tables against it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from roles.lmdeploy.flags import ServeArgs, serve_argv
from roles.lmdeploy.quant import TurbomindFormat
from roles.lmdeploy.versions import DEFAULT_VERSION, LMDEPLOY_RELEASES
from v100kit.offline_pypi import fill_wheels

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "lmdeploy"

#: the samples: an AWQ model on one GPU, a GPTQ model on two with int8 KV and a batch limit, an unquantized model
SAMPLES = {
    "awq": ServeArgs("/srv/v100kit/models/qwen-awq", "qwen-awq", "127.0.0.1", 23333, 8192,
                     TurbomindFormat("awq", 4, 128)),
    "gptq_tp2_int8kv": ServeArgs("/srv/v100kit/models/llama-gptq", "llama", "0.0.0.0", 8001, 32768,
                                 TurbomindFormat("gptq", 4, 128), tp=2, cache_max_entry_count=0.9,
                                 cache_block_seq_len=128, quant_policy=8, max_batch_size=16),
    "fp16": ServeArgs("/srv/v100kit/models/plain", "plain", "127.0.0.1", 23334, 4096, TurbomindFormat(None),
                      cache_max_entry_count=0.5),
}

_CHILD = r"""
import argparse, json, sys
from lmdeploy.cli.cli import CLI
from lmdeploy.cli.serve import SubCliServe
from lmdeploy.cli.lite import SubCliLite
import lmdeploy
CLI.add_parsers(); SubCliServe.add_parsers(); SubCliLite.add_parsers()
out = {"lmdeploy": lmdeploy.__version__, "samples": {}}
for name, words in json.loads(sys.argv[1]).items():
    ns = vars(CLI.parser.parse_args(words))
    out["samples"][name] = {"argv": words, "parsed": {k: v for k, v in sorted(ns.items())
                                                      if isinstance(v, (str, int, float, bool, list, type(None)))}}
def sub(parser, name):
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
api = sub(sub(CLI.parser, "serve"), "api_server")
out["api_server_options"] = {
    opt: {"nargs": a.nargs,
          "choices": None if a.choices is None else [str(c) for c in a.choices],
          "type": None if a.type is None else getattr(a.type, "__name__", repr(a.type))}
    for a in api._actions for opt in a.option_strings if opt.startswith("--")}
print(json.dumps(out))
"""


def unpack(wheels: list[Path], site: Path) -> Path:
    """Every wheel's files into `site` (once: a marker file names the wheels unpacked)."""
    marker = site / ".unpacked"
    names = "\n".join(sorted(w.name for w in wheels))
    if marker.is_file() and marker.read_text() == names:
        return site
    site.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        with zipfile.ZipFile(w) as zf:
            zf.extractall(site)
    marker.write_text(names)
    return site


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default="3.11")
    ap.add_argument("--interpreter", default=None, help="the CPython of --python (default: python<version>)")
    ap.add_argument("--wheel-cache", type=Path, default=Path("/var/tmp/lmdeploy-dl"))
    args = ap.parse_args()
    release = LMDEPLOY_RELEASES[DEFAULT_VERSION]
    lock = release.lock_file(args.python)
    site = unpack(fill_wheels(lock, args.python, args.wheel_cache), args.wheel_cache / f"site-py{args.python}")
    words = {name: serve_argv(s) for name, s in SAMPLES.items()}
    interpreter = args.interpreter or f"python{args.python}"
    done = subprocess.run([interpreter, "-S", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); " + _CHILD,
                           json.dumps(words)], capture_output=True, text=True)
    if done.returncode:
        print(done.stderr, file=sys.stderr)
        return 1
    data = json.loads(done.stdout.strip().splitlines()[-1])
    data["source"] = (f"LMDeploy's own parser (lmdeploy/cli/entrypoint.py run), {lock.name}, CPython {args.python}, "
                      "recorded by tools/lmdeploy/parse_args.py")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"parsed-{release.version}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
