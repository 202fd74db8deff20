"""Benchmark: vLLM venv cold install (empty uv cache), warm install (cache filled), no-op deploy, on a lab host.

    .venv/bin/python tools/bench_vllm.py [HOST]     # default lab-bookworm; the lab must be provisioned

Each install uses a copy of files/vllm whose lock carries one extra comment line: new lock bytes, so a new venv
beside the host's own (the packages are the same). Cold: `uv cache clean` on the host first (the lab's shared wheel
cache: the next run downloads again). Finally the host's own settings are deployed again (the link moves back, no
install) and the benchmark's venvs are removed. Prints seconds, changed operations, venv and cache sizes.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path


from lab.harness import Lab, spec
from roles.vllm.decide import UV, UV_CACHE, VENV_ROOT
from roles.vllm.versions import LOCK_DIR
from lab.provision import deploy


def variant(tmp: Path, name: str) -> Path:
    d = tmp / name
    shutil.copytree(LOCK_DIR, d)
    for lock in d.glob("*.txt"):
        lock.write_text(lock.read_text() + f"# benchmark variant {name}\n")
    return d


def main() -> int:
    s = spec(sys.argv[1] if len(sys.argv) > 1 else "lab-bookworm")
    lab = Lab()
    before = set(lab.run(s, f"ls {VENV_ROOT}")[1].split())
    rows, sizes = [], {}
    with tempfile.TemporaryDirectory() as d:
        tmp, stamp = Path(d), int(time.time())
        for label, cold in (("cold install (empty uv cache)", True), ("warm install (uv cache filled)", False)):
            locks = variant(tmp, f"bench{stamp}-{len(rows)}")
            if cold:
                lab.run(s, f"UV_CACHE_DIR={UV_CACHE} {UV} cache clean -q")
            args = ["--limit", s.name, "--data", f'vllm_lock_dir="{locks}"']
            rows.append((label, deploy(f"bench-vllm-{len(rows)}", args)))
            if cold:
                sizes["uv cache after the cold install"] = lab.run(s, f"du -sh {UV_CACHE} | cut -f1")[1].strip()
            else:
                rows.append(("no-op deploy", deploy("bench-vllm-noop", args)))
        rows.append(("back to the host's settings", deploy("bench-vllm-back", ["--limit", s.name])))
    new = sorted(set(lab.run(s, f"ls {VENV_ROOT}")[1].split()) - before)
    if new:
        sizes["venv on disk"] = lab.run(s, f"du -sh {VENV_ROOT}/{new[0]} | cut -f1")[1].strip()
    print(f"{s.name}: vLLM venv {'':29} seconds  changed ops  rc")
    for label, run in rows:
        print(f"  {label:38} {run.seconds:7.1f}  {run.changed.get(s.name, 0):11d}  {run.rc}")
    for label, size in sizes.items():
        print(f"  {label}: {size}")
    for name in new:  # the benchmark's own venvs, never the host's
        lab.run(s, f"rm -rf {VENV_ROOT}/{name}")
    return 0 if all(run.rc == 0 for _, run in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
