"""Regenerate the vLLM lock files in files/vllm/ from roles/vllm/versions.py, with uv, and check their machine code.

    .venv/bin/python tools/lock_vllm.py              # every supported release x Python: locks and sm_70 evidence
    .venv/bin/python tools/lock_vllm.py --check      # fail if a lock or its evidence differs from a fresh run
    .venv/bin/python tools/lock_vllm.py --sm70-table # the committed evidence as a table (no download)
    .venv/bin/python tools/lock_vllm.py --sm70-lock LOCK [--evidence OUT]   # check any lock file
    .venv/bin/python tools/lock_vllm.py --sm70-candidate 0.21.0 --python 3.12 --exclude-newer 2026-05-16 \
        [--evidence OUT]                            # resolve a release not in the table the same way, and check it

Each lock is `uv pip compile vllm==V --generate-hashes --only-binary :all:` for manylinux_2_28 x86_64 and one
Python version, from PyPI, with the release's --exclude-newer date: the same inputs give the same bytes. A lock
whose torch build has no sm_70 kernels (TORCH_SM70, a quick look-up before any download) is refused, and so is a
Python the table does not list. Then the sm_70 check of machine code (roles/vllm/machine_code.py) downloads the
lock's wheels (hash-checked, into --wheel-cache), lists the SASS and PTX of every ELF member with the pinned
cuobjdump, and writes files/vllm/vllm-<version>-py<python>.sm70.json beside the lock. A lock with a binary that
cannot run on compute capability 7.0 is refused, naming the binaries. The first run downloads about 5 GB per
release and Python (shared wheels once) and reads for minutes; later runs reuse the cache.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from roles.vllm.machine_code import (LockCheck, check_lock, evidence_path, read_evidence, render_evidence,
                                     write_evidence)
from roles.vllm.versions import LOCK_DIR, TORCH_SM70, UV_VERSION, VLLM_RELEASES, VllmRelease
from v100kit.offline_pypi import fill_wheels

INDEX = "https://pypi.org/simple"
WHEEL_CACHE = Path.home() / ".cache" / "v100kit" / "sm70"


def torch_build(lock_text: str) -> tuple[str, str]:
    """(torch major.minor, CUDA major.minor) of a lock: torch's pin and the CUDA runtime wheel's version
    (nvidia-cuda-runtime-cu12 up to CUDA 12; nvidia-cuda-runtime, without the suffix, for CUDA 13)."""
    torch = re.search(r"^torch==(\d+\.\d+)", lock_text, re.M)
    cuda = re.search(r"^nvidia-cuda-runtime(?:-cu1\d)?==(\d+\.\d+)", lock_text, re.M)
    if not torch or not cuda:
        raise SystemExit("lock has no torch or no nvidia-cuda-runtime pin")
    return torch.group(1), cuda.group(1)


def compile_lock(release: VllmRelease, python: str) -> str:
    """The lock text of `release` for CPython `python` ("3.12"): a two-line header, then uv's hash-locked output."""
    return compile_release_lock("vllm", "vLLM", "tools/lock_vllm.py", release, python)


ROOT = Path(__file__).resolve().parents[1]


def find_uv() -> str:
    """The uv binary locks are made with: `uv` on PATH where it is uv UV_VERSION, else the repository's
    .tools/bin/uv (where tools/setup.sh installs UV_VERSION when PATH has another or none). Raises SystemExit naming
    what was found and tools/setup.sh when neither is UV_VERSION (a lock from another uv differs in its layout)."""
    seen = []
    for candidate in (shutil.which("uv"), str(ROOT / ".tools" / "bin" / "uv")):
        if candidate and os.access(candidate, os.X_OK):
            words = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout.split()
            version = words[1] if len(words) > 1 else "(unreadable)"
            if version == UV_VERSION:
                return candidate
            seen.append(f"uv {version} at {candidate}")
    raise SystemExit(f"no uv {UV_VERSION}: {'; '.join(seen) or 'none on PATH or in .tools/bin'}; run "
                     "tools/setup.sh, which installs it in .tools/bin")


def compile_release_lock(package: str, title: str, tool: str, release, python: str, uv: str | None = None) -> str:
    """`uv pip compile package==release.version --generate-hashes --only-binary :all:` for the release's platform
    and CPython `python`, from PyPI, with the release's --exclude-newer date (any engine's release: version,
    platform, exclude_newer), under a two-line header naming `title` and the `tool` that made it."""
    with tempfile.TemporaryDirectory() as tmp:
        req, out = Path(tmp, "in.txt"), Path(tmp, "out.txt")
        req.write_text(f"{package}=={release.version}\n")
        subprocess.run(
            [uv or find_uv(), "pip", "compile", "--quiet", "--no-config", "--generate-hashes", "--only-binary", ":all:",
             "--python-platform", release.platform, "--python-version", python,
             "--exclude-newer", release.exclude_newer, "--index-url", INDEX, "--no-header", "--no-annotate",
             str(req), "-o", str(out)], check=True)
        body = out.read_text()
    header = (f"# {title} {release.version} for Python {python}, {release.platform.replace('-', ' ')}, wheels only, "
              "from PyPI.\n"
              f"# Generated by {tool} with uv {UV_VERSION} (--exclude-newer {release.exclude_newer}); "
              "do not edit.\n")
    return header + body


def machine_code(lock: Path, cache: Path) -> LockCheck:
    """The sm_70 check of one lock file (roles/vllm/machine_code.py), its wheels fetched into cache/files."""
    return check_lock(lock, cache, fill_wheels)


def fresh_check(path: Path, text: str, check: Callable[[Path], LockCheck]) -> LockCheck:
    """`check` (an engine's machine_code, its wheel cache given) of the lock `text` before it is kept: written under
    path's name in a temporary directory, so that the check reads the fresh lock."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp, path.name)
        fresh.write_text(text)
        return check(fresh)


def refused(path: Path, check: LockCheck) -> str:
    """The line that refuses the lock `path` whose `check` failed, with its failing binaries."""
    return f"{path.name}: refused, binaries without sm_70 SASS or PTX <= compute_70:\n{describe_failure(check)}"


def same_as_kept(path: Path, text: str, check: LockCheck) -> bool:
    """Whether the kept lock `path` and its evidence are those of a fresh run (`text`, `check`); prints which
    differs."""
    same = path.is_file() and path.read_text() == text
    evidence = evidence_path(path)
    same_evidence = evidence.is_file() and evidence.read_text() == render_evidence(check)
    print(f"{path.name}: {'same' if same else 'DIFFERS'}; {evidence.name}: {'same' if same_evidence else 'DIFFERS'}")
    return same and same_evidence


def describe_failure(check: LockCheck) -> str:
    """The binaries of a failing check, one line each: wheel, member, what it holds."""
    return "\n".join(f"  {b.wheel}: {b.member}: SASS {' '.join(b.sass) or '-'}, PTX {' '.join(b.ptx) or '-'}"
                     for b in check.failing)


def sm70_table(checks: list[LockCheck]) -> str:
    """A text table per lock: binary (wheel distribution and member), SASS archs, PTX, verdict (runs: code for
    7.0; NOT LAUNCHED: no code for 7.0 and never launched there; LIMIT: launched by one feature only; FAILS)."""
    out = []
    for c in checks:
        out.append(f"{c.lock}: {'ok' if c.ok else 'FAILS'} ({len(c.binaries)} binaries with device code in "
                   f"{len(c.wheels)} wheels; {len(c.failing)} fail, {len(c.limits)} limit, "
                   f"{len(c.not_launched)} never launched)")
        width = max((len(f"{b.distribution} {b.member}") for b in c.binaries), default=0)
        for b in c.binaries:
            verdict = ("runs" if b.runs_on_sm70 else "NOT LAUNCHED" if b.not_launched_reason
                       else "LIMIT" if b.limit(c.vllm_version) else "FAILS")
            out.append(f"  {f'{b.distribution} {b.member}':<{width}}  {verdict:<12}  SASS {' '.join(b.sass) or '-'}"
                       f"  PTX {' '.join(b.ptx) or '-'}")
        for w in c.wheels:
            if w.cubins:
                out.append(f"  {w.name}: {sum(n for _, n in w.cubins)} standalone cubins (loaded per architecture "
                           f"by their library, not in the verdict): "
                           + ", ".join(f"{archs or '?'} x{n}" for archs, n in w.cubins))
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--sm70-table", nargs="*", metavar="EVIDENCE", default=None,
                    help="print the sm_70 table of the supported locks' evidence (or of the files given)")
    ap.add_argument("--sm70-lock", type=Path, metavar="LOCK",
                    help="run the sm_70 check on one lock file (vllm-<version>-py<python>.txt) and print it")
    ap.add_argument("--sm70-candidate", metavar="VERSION", help="resolve vllm==VERSION as the locks are resolved "
                    "(--python, --exclude-newer) into a temporary lock and run the sm_70 check on it")
    ap.add_argument("--python", default="3.12", help="with --sm70-candidate: the Python version (default 3.12)")
    ap.add_argument("--exclude-newer", help="with --sm70-candidate: the resolution date (YYYY-MM-DD)")
    ap.add_argument("--evidence", type=Path, help="with --sm70-lock or --sm70-candidate: write the evidence here")
    ap.add_argument("--wheel-cache", type=Path, default=WHEEL_CACHE,
                    help=f"where the locks' wheels and what was read of them are kept (default {WHEEL_CACHE})")
    args = ap.parse_args()
    if args.sm70_table is not None:
        files = [Path(f) for f in args.sm70_table] or [
            evidence_path(r.lock_file(py)) for r in VLLM_RELEASES.values() for py in r.pythons]
        print(sm70_table([read_evidence(f) for f in files]))
        return 0
    if args.sm70_candidate and not args.exclude_newer:
        ap.error("--sm70-candidate needs --exclude-newer (the release's date: the same inputs give the same lock)")
    if args.sm70_lock or args.sm70_candidate:
        with tempfile.TemporaryDirectory() as tmp:
            lock = args.sm70_lock
            if args.sm70_candidate:
                release = VllmRelease(args.sm70_candidate, "", "", "", (args.python,), args.exclude_newer)
                lock = Path(tmp, release.lock_file(args.python).name)
                lock.write_text(compile_lock(release, args.python))
            check = machine_code(lock, args.wheel_cache)
        if args.evidence:
            args.evidence.write_text(render_evidence(check))
        print(sm70_table([check]))
        return 0 if check.ok else 1
    find_uv()  # before any work: SystemExit naming what was found
    if not args.check:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
    status = 0
    expected = {r.lock_file(py).name for r in VLLM_RELEASES.values() for py in r.pythons}
    expected |= {evidence_path(LOCK_DIR / name).name for name in expected}
    stale = sorted(p.name for p in [*LOCK_DIR.glob("*.txt"), *LOCK_DIR.glob("*.sm70.json")]
                   if p.name not in expected) if LOCK_DIR.is_dir() else []
    for name in stale:  # a release or Python left the table: its lock goes too
        print(f"{name}: no longer in the table{'' if args.check else ', removed'}")
        if not args.check:
            (LOCK_DIR / name).unlink()
    status |= bool(stale and args.check)
    for release in VLLM_RELEASES.values():
        for python in release.pythons:
            text = compile_lock(release, python)
            build = torch_build(text)
            if not TORCH_SM70.get(build):
                print(f"{release.version} py{python}: torch {build[0]} cu{build[1]} has no sm_70 kernels: refused")
                return 1
            path = release.lock_file(python)
            check = fresh_check(path, text, lambda lock: machine_code(lock, args.wheel_cache))
            if not check.ok:
                print(refused(path, check))
                return 1
            for b in check.limits:
                print(f"{path.name}: LIMIT {b.wheel}: {b.member} has no code for sm_70, used for "
                      f"{b.limit(release.version).split(':')[0]} (the evidence says why)")
            n = len(re.findall(r"^[A-Za-z0-9_.-]+==", text, re.M))
            if args.check:
                status |= not same_as_kept(path, text, check)
            else:
                path.write_text(text)
                write_evidence(check, path)
                print(f"{path.name}: {n} packages, torch {build[0]} cu{build[1].replace('.', '')}; sm_70: "
                      f"{len(check.binaries)} binaries, {len(check.not_launched)} never launched on Volta, "
                      f"{len(check.limits)} limits")
    return status


if __name__ == "__main__":
    sys.exit(main())
