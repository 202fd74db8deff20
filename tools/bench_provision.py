"""Benchmark: where a fresh lab provision's time goes, per host, with cold or warm caches, and the second run.

    .venv/bin/python tools/bench_provision.py            # warm: the lab cache as it is (images, .debs, wheels, ccache)
    .venv/bin/python tools/bench_provision.py --cold     # cold: a new empty lab cache and state directory
    .venv/bin/python tools/bench_provision.py --cold lab-trixie

Per host, one after the other (so figures do not share the 2 cores): destroy the host, build or reuse its image,
boot it, deploy (first run), deploy again (second run, must change nothing). Prints one line per host, then where
its first deploy's time went: seconds per @deploy (driver packages with their DKMS build, CUDA toolkit packages,
the llama.cpp build, the vLLM venv with its wheel downloads, ...), its slowest operations, the bytes the run added
to the lab cache (downloads: .debs, wheels; compiler cache), and the compiler cache's hits and misses. --cold sets
V100KIT_LAB_CACHE and V100KIT_LAB_STATE to new temporary directories unless they are set, and removes them after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def du_bytes(path: Path) -> int:
    """Bytes under `path` (du -sb; 0 when it does not exist)."""
    if not path.exists():
        return 0
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cold", action="store_true", help="a new empty lab cache and state directory")
    p.add_argument("hosts", nargs="*", help="bundled lab hosts (default: all)")
    args = p.parse_args()
    made = []
    if args.cold:
        for var in ("V100KIT_LAB_CACHE", "V100KIT_LAB_STATE"):
            if var not in os.environ:
                os.environ[var] = tempfile.mkdtemp(prefix="v100kit-bench-", dir="/var/tmp")
                made.append(os.environ[var])
    # read after the environment is set: lab.harness takes its directories from it
    from lab.harness import HOSTS, Lab
    from lab.provision import CCACHE_HITS, CCACHE_MISSES, DKMS_SECONDS, ccache_stats, deploy, dkms_seconds

    lab = Lab()
    lab.prepare()
    names = args.hosts or [s.name for s in HOSTS]
    print(f"lab cache {lab.cache} ({'cold' if args.cold else 'as it is'}), state {lab.state}")
    print(f"{'host':14} {'image+boot s':>12} {'1st deploy s':>12} {'1st changes':>11} "
          f"{'2nd deploy s':>12} {'2nd changes':>11}")
    try:
        for s in HOSTS:
            if s.name not in names:
                continue
            for other in HOSTS:  # one host at a time: the others are stopped so they do not compete for the cores
                if other is not s:
                    lab.stop(other)
            lab.destroy(s)
            before = {d: du_bytes(lab.cache / d) for d in ("apt", "uv", "ccache", "images")}
            t0 = time.monotonic()
            lab.up(s)
            up = time.monotonic() - t0
            lab.run(s, "ccache --zero-stats")
            first = deploy(f"bench-{s.name}-1", ["--limit", s.name])
            stats = ccache_stats(lab.run(s, "ccache --print-stats")[1])
            dkms = dkms_seconds(lab.run(s, DKMS_SECONDS)[1])
            second = deploy(f"bench-{s.name}-2", ["--limit", s.name])
            print(f"{s.name:14} {up:12.1f} {first.seconds:12.1f} {first.changed.get(s.name, 0):11d} "
                  f"{second.seconds:12.1f} {second.changed.get(s.name, 0):11d}"
                  + ("" if first.rc == 0 and second.rc == 0 else f"  FAILED (rc {first.rc}/{second.rc})"), flush=True)
            print(f"  before the first operation (inventory, connect, facts): {first.prepare_seconds:.0f} s")
            print("  by deploy: " + ", ".join(f"{r} {sec:.0f} s" for r, sec in first.by_role(s.name) if sec >= 1))
            print("  slowest: " + ", ".join(f"{n} {sec:.0f} s" for n, sec in first.host_slowest(s.name, 8)))
            print("  DKMS builds (their own log): " + (", ".join(f"{n} {sec} s" for n, sec in dkms.items()) or "none"))
            grown = {d: (du_bytes(lab.cache / d) - b) / 2**20 for d, b in before.items()}
            print("  added to the lab cache: " + ", ".join(f"{d} {mib:.0f} MiB" for d, mib in grown.items()))
            hits = sum(stats.get(k, 0) for k in CCACHE_HITS)
            misses = sum(stats.get(k, 0) for k in CCACHE_MISSES)
            print(f"  compiler cache: {hits} hits, {misses} misses"
                  + (f" (hit rate {hits / (hits + misses):.1%})" if hits + misses else ""), flush=True)
        if not args.cold:
            for s in HOSTS:
                lab.up(s)
    finally:
        if made:
            for s in HOSTS:
                lab.destroy(s)
            for d in made:
                shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
