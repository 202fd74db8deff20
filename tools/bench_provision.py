"""Benchmark: wall time of a fresh lab provision per host, with cold or warm caches, and of the second run.

    .venv/bin/python tools/bench_provision.py            # warm: cached image and .debs
    .venv/bin/python tools/bench_provision.py --cold     # deletes the host's cached image and .debs first

Per host, one after the other (so figures do not share the 2 cores): destroy the host, build or reuse its image,
boot it, deploy (first run), deploy again (second run, must change nothing). Prints one line per host.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path


from lab.harness import HOSTS, Lab
from lab.provision import deploy


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cold", action="store_true", help="delete the cached image and .debs of each host first")
    p.add_argument("hosts", nargs="*", default=[s.name for s in HOSTS])
    args = p.parse_args()
    lab = Lab()
    print(f"{'host':14} {'caches':6} {'image+boot s':>12} {'1st deploy s':>12} {'1st changes':>11} "
          f"{'2nd deploy s':>12} {'2nd changes':>11}")
    for s in HOSTS:
        if s.name not in args.hosts:
            continue
        for other in HOSTS:  # one host at a time: the others are stopped so they do not compete for the cores
            if other is not s:
                lab.stop(other)
        lab.destroy(s)
        if args.cold:
            for img in (lab.cache / "images").glob(f"{s.suite}-*.tar"):
                img.unlink()
            shutil.rmtree(lab.cache / "apt" / s.suite, ignore_errors=True)
        t0 = time.monotonic()
        lab.up(s)
        up = time.monotonic() - t0
        first = deploy(f"bench-{s.name}-1", ["--limit", s.name])
        second = deploy(f"bench-{s.name}-2", ["--limit", s.name])
        print(f"{s.name:14} {'cold' if args.cold else 'warm':6} {up:12.1f} {first.seconds:12.1f} "
              f"{first.changed.get(s.name, 0):11d} {second.seconds:12.1f} {second.changed.get(s.name, 0):11d}"
              + ("" if first.rc == 0 and second.rc == 0 else f"  FAILED (rc {first.rc}/{second.rc})"), flush=True)
    for s in HOSTS:
        lab.up(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
