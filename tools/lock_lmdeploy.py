"""Regenerate the LMDeploy lock files in files/lmdeploy/ from roles/lmdeploy/versions.py, with uv, and check their
machine code for sm_70 (compute capability 7.0, V100).

    .venv/bin/python -m tools.lock_lmdeploy               # every release x Python: lock and sm_70 evidence
    .venv/bin/python -m tools.lock_lmdeploy --check       # fail if a lock or its evidence differs from a fresh run
    .venv/bin/python -m tools.lock_lmdeploy --locks-only  # resolve and write the locks, no download

Each lock is `uv pip compile lmdeploy==V --generate-hashes --only-binary :all:` for the release's manylinux x86_64
platform and one Python, from PyPI, with the release's --exclude-newer date, as tools/lock_vllm.py makes vLLM's. A
lock whose torch build has no sm_70 kernels (roles/vllm/versions.py TORCH_SM70) is refused. The sm_70 check
downloads the lock's wheels (hash-checked, v100kit.offline_pypi.fill_wheels) into --wheel-cache (default
/var/tmp/lmdeploy-dl), lists every ELF member's SASS and PTX with the pinned cuobjdump and writes
files/lmdeploy/lmdeploy-<version>-py<python>.sm70.json; a lock with a binary that cannot run on 7.0 is refused,
naming the binaries. About 4 GB per Python the first time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from roles.lmdeploy.machine_code import check_lock
from roles.lmdeploy.versions import LMDEPLOY_RELEASES, LOCK_DIR, LmdeployRelease
from roles.vllm.machine_code import LockCheck, evidence_path, write_evidence
from roles.vllm.versions import TORCH_SM70, UV_VERSION
from tools.lock_vllm import compile_release_lock, find_uv, fresh_check, refused, same_as_kept, sm70_table, torch_build
from v100kit.offline_pypi import fill_wheels

WHEEL_CACHE = Path("/var/tmp/lmdeploy-dl")


def compile_lock(release: LmdeployRelease, python: str, uv: str | None = None) -> str:
    """The lock text of `release` for CPython `python` ("3.11"): a two-line header, then uv's hash-locked output."""
    return compile_release_lock("lmdeploy", "LMDeploy", "tools/lock_lmdeploy.py", release, python, uv)


def machine_code(lock: Path, cache: Path) -> LockCheck:
    """The sm_70 check of one lock (roles/lmdeploy/machine_code.py), its wheels fetched into cache/files."""
    return check_lock(lock, cache, fill_wheels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--locks-only", action="store_true", help="resolve and write the locks; no sm_70 check")
    ap.add_argument("--uv", default=None, help=f"the uv binary (must be uv {UV_VERSION}; default: uv on PATH "
                                              "where it is that version, else .tools/bin/uv)")
    ap.add_argument("--wheel-cache", type=Path, default=WHEEL_CACHE,
                    help=f"where the locks' wheels and what was read of them are kept (default {WHEEL_CACHE})")
    args = ap.parse_args()
    args.uv = args.uv or find_uv()
    version = subprocess.run([args.uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    if version != UV_VERSION:
        print(f"uv {version} at {args.uv}; the locks are made with uv {UV_VERSION} (tools/setup.sh installs it)")
        return 1
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    status = 0
    for release in LMDEPLOY_RELEASES.values():
        for python in release.pythons:
            text = compile_lock(release, python, args.uv)
            build = torch_build(text)
            path = release.lock_file(python)
            if not TORCH_SM70.get(build):
                print(f"{path.name}: torch {build[0]} cu{build[1]} has no sm_70 kernels: refused")
                return 1
            if build != (".".join(release.torch.split(".")[:2]), release.torch_cuda):
                print(f"{path.name}: resolves torch {build[0]} cu{build[1]}, the table says {release.torch} "
                      f"cu{release.torch_cuda}: correct roles/lmdeploy/versions.py")
                return 1
            if args.locks_only:
                same = path.is_file() and path.read_text() == text
                if args.check:
                    print(f"{path.name}: {'same' if same else 'DIFFERS'}")
                    status |= not same
                else:
                    path.write_text(text)
                    print(f"{path.name}: written")
                continue
            check = fresh_check(path, text, lambda lock: machine_code(lock, args.wheel_cache))
            print(sm70_table([check]))
            if not check.ok:
                print(refused(path, check))
                return 1
            if args.check:
                status |= not same_as_kept(path, text, check)
            else:
                path.write_text(text)
                write_evidence(check, path)
                print(f"{path.name}: written with {evidence_path(path).name}")
    return status


if __name__ == "__main__":
    sys.exit(main())
