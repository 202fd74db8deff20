"""Check a vLLM release for Volta and record what the toolkit needs from it: files/vllm/<version>.json.

    .venv/bin/python tools/vllm_pin.py --survey 2026-01-01   # releases since then, their torch pin (cheap)
    .venv/bin/python tools/vllm_pin.py 0.19.1                # locks, sm_70 check, facts from its code, flags
    .venv/bin/python tools/vllm_pin.py 0.19.1 --static-flags # flags read from the source instead of its parser

For VERSION it
1. finds the x86_64 wheel on PyPI (project JSON API: url, sha256, manylinux tag, upload time) and its metadata
   (PEP 658 .metadata: the torch pin, Requires-Python);
2. resolves a hash lock per Python that has wheels (tools/lock_vllm.py compile_lock, --exclude-newer the upload
   day + 14 days unless given) and refuses a torch build without sm_70 kernels (TORCH_SM70). PyPI is the only
   index reachable from the machine this was written on: torch 2.11 and later are cu130 there (no sm_70), and their
   cu126 builds are on download.pytorch.org, so releases that pin them cannot be locked here;
3. runs the sm_70 check of every CUDA binary of the lock's wheels (roles/vllm/machine_code.py check_lock) and
   refuses the release when a binary has neither sm_70 SASS nor PTX <= compute_70, naming them;
4. reads the vLLM wheel's Python sources (downloaded into --cache, sha256 checked) and derives the engine, the
   attention backend vLLM selects on compute capability 7.0 with its head sizes, the --kv-cache-dtype values, and
   V1's profile tokens (roles/vllm/release_source.py derive, each with its file and function);
5. lists the release's server flags with its own parser in a throwaway venv (tools/vllm_flags.py PROBE), or, with
   --static-flags, the "--" strings of its argument code (said so in the data);
6. writes files/vllm/<version>.json (and <version>.flags.json) and prints what changed against the default release.

A release that passes still has to be added to roles/vllm/versions.py by hand, with its Volta environment and
flags, and locked with tools/lock_vllm.py; tests/unit/test_vllm_pin.py checks the table against the data files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roles.vllm.release_source import SourceShapeError, derive  # noqa: E402
from roles.vllm.versions import (DEFAULT_VERSION, LOCK_DIR, TORCH_SM70, VLLM_RELEASES, VllmRelease,  # noqa: E402
                                 release_data_file)
from tools.llama_cpp_pin import normalise_url, sha256_of  # noqa: E402
from tools.lock_vllm import compile_lock, find_uv, machine_code, torch_build  # noqa: E402

PROJECT_JSON = "https://pypi.org/pypi/vllm/json"
CACHE = Path("/var/cache/v100kit-dev/vllm-pin")
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
#: Where torch's cu126 wheels are: the only builds of torch 2.11+ with sm_70 (pytorch#172352, PR #172598).
CU126_INDEX = "https://download.pytorch.org/whl/cu126"


# --- PyPI --------------------------------------------------------------------------------------------------------

def project_json() -> dict:
    with urllib.request.urlopen(PROJECT_JSON, timeout=120) as r:
        return json.load(r)


def pypi_wheel(project: dict, version: str) -> dict:
    """The release's x86_64 wheel from the project JSON: {filename, url, sha256, upload, manylinux}. Where PyPI has a
    rebuild with a build tag beside the plain wheel (0.20.1, 0.21.0, 0.23.0: "vllm-V-1-cp38-..."), the rebuild is
    taken, as installers prefer the highest build tag."""
    files = project.get("releases", {}).get(version)
    if not files:
        raise SystemExit(f"PyPI has no vllm {version}")
    wheels = [f for f in files if f["packagetype"] == "bdist_wheel" and f["filename"].endswith("x86_64.whl")]
    if not wheels:
        raise SystemExit(f"PyPI has no x86_64 wheel of vllm {version}")
    f = max(wheels, key=lambda f: (len(f["filename"].split("-")) == 6, f["filename"]))  # a build tag wins
    tag = re.search(r"(manylinux(?:1|2014|_\d+_\d+))_x86_64\.whl$", f["filename"])
    return {"filename": f["filename"], "url": normalise_url(f["url"]), "sha256": f["digests"]["sha256"],
            "upload": f["upload_time"][:10], "manylinux": tag.group(1) if tag else None}


def wheel_metadata(wheel: dict, cache: Path = CACHE) -> str:
    """The wheel's METADATA through PEP 658 (url + ".metadata"), or, where PyPI does not serve that file (0.30.0 and
    later answer 404), from the wheel itself (downloaded into cache/wheels, sha256 checked)."""
    try:
        with urllib.request.urlopen(wheel["url"] + ".metadata", timeout=120) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
    path = download(wheel["url"], wheel["sha256"], cache / "wheels")
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode()


def requirement(metadata: str, name: str) -> str | None:
    """"==2.10.0" for name torch in a METADATA text (the unconditional Requires-Dist), None when absent."""
    for line in metadata.splitlines():
        m = re.match(rf"Requires-Dist: {re.escape(name)}\s*([^;]*)$", line)
        if m:
            return m.group(1).strip()
    return None


def requires_python(metadata: str) -> str:
    m = re.search(r"^Requires-Python: (.+)$", metadata, re.M)
    return m.group(1).strip() if m else ""


def pythons_allowed(spec: str) -> list[str]:
    """The PYTHONS a Requires-Python spec (">=3.10,<3.14") allows."""
    def ok(v: str) -> bool:
        t = tuple(int(x) for x in v.split("."))
        for part in filter(None, (p.strip() for p in spec.split(","))):
            op, ver = re.match(r"(>=|<=|==|!=|<|>|~=)\s*([\d.]+)", part).groups()
            w = tuple(int(x) for x in ver.split("."))[:2]
            if not {">=": t >= w, "<=": t <= w, "<": t < w, ">": t > w, "==": t == w, "!=": t != w,
                    "~=": t >= w}[op]:
                return False
        return True
    return [p for p in PYTHONS if ok(p)]


def lock_platform(manylinux: str | None) -> str:
    """uv's --python-platform for a wheel's tag: manylinux_2_28 at least (the toolkit's floor), the wheel's tag if
    newer (0.12-0.19: manylinux_2_31, 0.20: manylinux_2_35)."""
    m = re.fullmatch(r"manylinux_2_(\d+)", manylinux or "")
    return f"x86_64-manylinux_2_{max(28, int(m[1])) if m else 28}"


#: The CUDA of torch's PyPI wheels per torch minor, as resolved by uv from PyPI (nvidia-cuda-runtime in the lock):
#: 2.8-2.10 cu128, 2.11+ cu130 (no sm_70: docs/volta.md "Late 2026", pytorch#172352).
def torch_verdict(torch_pin: str | None) -> str | None:
    """Why a release's torch pin cannot be locked with sm_70 kernels from PyPI (None: it may be). Cheap: from the
    pin alone, for --survey; the lock's own torch build is checked afterwards."""
    m = re.match(r"==(\d+)\.(\d+)", torch_pin or "")
    if not m:
        return f"torch pin {torch_pin!r} is not an exact version"
    if (int(m[1]), int(m[2])) >= (2, 11):
        return (f"torch {m[1]}.{m[2]}: its PyPI wheels are cu130, without sm_70; the cu126 build that keeps sm_70 is "
                f"on {CU126_INDEX}, which this machine cannot reach (pytorch#172352): not lockable from PyPI here")
    return None


def survey(project: dict, since: str) -> list[dict]:
    """Every release uploaded on or after `since` (YYYY-MM-DD), newest first: version, upload day, torch pin,
    Requires-Python, and the cheap torch verdict."""
    out = []
    for version in project["releases"]:
        try:
            w = pypi_wheel(project, version)
        except SystemExit:
            continue
        if w["upload"] < since:
            continue
        meta = wheel_metadata(w)
        torch = requirement(meta, "torch")
        out.append({"version": version, "upload": w["upload"], "torch": torch, "python": requires_python(meta),
                    "manylinux": w["manylinux"], "verdict": torch_verdict(torch)})
    return sorted(out, key=lambda r: r["upload"], reverse=True)


# --- the sm_70 check ---------------------------------------------------------------------------------------------

def sm70_check(lock: Path, cache: Path):
    """The sm_70 check of one lock (roles/vllm/machine_code.py check_lock, its wheels fetched with
    v100kit.offline_pypi.fill_wheels, as tools/lock_vllm.py runs it): its LockCheck (.ok, .failing, .binaries).
    Raises MachineCodeError when cuobjdump is missing or fails."""
    return machine_code(lock, cache)


def failing_names(check) -> list[str]:
    """The failing binaries of a LockCheck, grouped per wheel: "<wheel>: N binaries without sm_70 (e.g. <member>
    SASS sm_80 PTX compute_80)". A wheel such as flashinfer-cubin holds thousands of per-architecture cubins."""
    groups: dict[str, list] = {}
    for b in check.failing:
        groups.setdefault(getattr(b, "wheel", str(b)), []).append(b)
    out = []
    for wheel, items in groups.items():
        b = items[0]
        example = (f"{b.member} SASS {' '.join(b.sass) or '-'} PTX {' '.join(b.ptx) or '-'}"
                   if hasattr(b, "member") else str(b))
        out.append(f"{wheel}: {len(items)} binar{'y' if len(items) == 1 else 'ies'} without sm_70 (e.g. {example})")
    return out


# --- the release's sources -----------------------------------------------------------------------------------

def download(url: str, sha256: str, cache: Path) -> Path:
    """The file at `url` in `cache` (downloaded once), checked against `sha256`. Raises SystemExit on a mismatch."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / Path(url).name
    if not path.is_file() or sha256_of(path) != sha256:
        tmp = path.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=1800) as r, tmp.open("wb") as f:
            shutil.copyfileobj(r, f)
        tmp.rename(path)
    got = sha256_of(path)
    if got != sha256:
        raise SystemExit(f"{path}: sha256 {got} differs from PyPI's {sha256}")
    return path


def python_sources(wheel: Path) -> dict[str, str]:
    """{path: text} of every vllm/**.py in the wheel."""
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()
                if n.startswith("vllm/") and n.endswith(".py")}


FLAG_FILES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/cli/serve.py")


def static_flags(files: dict[str, str]) -> list[str]:
    """The option strings written out in the argument code (FLAG_FILES): every "--x" string literal, and --no-x for
    BooleanOptionalAction ones. Approximate: options whose names are built at run time are missed."""
    flags = set()
    for path in FLAG_FILES:
        flags |= set(re.findall(r"[\"'](--[a-z0-9][a-z0-9-]*)[\"']", files.get(path, "")))
    return sorted(flags)


def parser_flags(lock: Path, python: str, work: Path) -> tuple[list[str], list[str], str]:
    """The option strings of the release's own parser: a throwaway venv from `lock` (uv, hashes, from PyPI, uv's
    cache under --cache) and tools/vllm_flags.py's probe. (flags, positional arguments, platform the parser was
    built on)."""
    from tools import vllm_flags  # noqa: PLC0415
    venv = work / "venv"
    env = {"UV_CACHE_DIR": str(CACHE / "uv")}
    subprocess.run([find_uv(), "venv", "-q", "--python", f"python{python}", str(venv)], check=True, env=_env(env))
    subprocess.run([find_uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--require-hashes",
                    "--no-deps", "--only-binary", ":all:", "-r", str(lock)], check=True, env=_env(env))
    found = vllm_flags.probe(venv)
    return found["flags"], found["positional"], found["platform"]


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os  # noqa: PLC0415
    return {**os.environ, **extra}


# --- what changed ----------------------------------------------------------------------------------------------

def changes(old: dict, new: dict) -> list[str]:
    """Lines saying what differs from release data `old` to `new` (files/vllm/<version>.json): torch build, Pythons,
    engine, the attention backend on 7.0 and its head sizes, KV cache dtypes usable on Volta, profile tokens, flags
    added and removed, the sm_70 verdict."""
    out = []

    def line(key: str, a, b) -> None:
        if a != b:
            out.append(f"{key}: {a} -> {b}")

    line("torch", old.get("torch"), new.get("torch"))
    line("pythons", old.get("pythons"), new.get("pythons"))
    line("verdict", old.get("verdict"), new.get("verdict"))
    of, nf = old.get("facts") or {}, new.get("facts") or {}
    line("engine on 7.0", of.get("engine"), nf.get("engine"))
    line("V0 in the tree", of.get("v0_present"), nf.get("v0_present"))
    line("attention backend vLLM selects on 7.0", of.get("default_backend"), nf.get("default_backend"))
    line("attention backend the toolkit uses", old.get("attention_backend"), new.get("attention_backend"))
    oh = (of.get("head_sizes") or {}).get(old.get("attention_backend")) or {}
    nh = (nf.get("head_sizes") or {}).get(new.get("attention_backend")) or {}
    line("head sizes", _describe(oh), _describe(nh))
    ok = (of.get("volta_kv_cache_dtypes") or {}).get(old.get("attention_backend"))
    nk = (nf.get("volta_kv_cache_dtypes") or {}).get(new.get("attention_backend"))
    line("--kv-cache-dtype on Volta", ok, nk)
    line("--kv-cache-dtype accepted", of.get("kv_cache_dtypes"), nf.get("kv_cache_dtypes"))
    line("profile tokens (vllm serve, V1)", of.get("profile_tokens"), nf.get("profile_tokens"))
    line("profile tokens on large GPUs ([GiB, tokens, names kept below])", of.get("profile_tokens_large"),
         nf.get("profile_tokens_large"))
    line("V1 sampler's top-k/top-p", of.get("sampler_path"), nf.get("sampler_path"))
    line("chunked prefill under vllm serve", of.get("chunked_prefill"), nf.get("chunked_prefill"))
    oflags, nflags = set(old.get("flags") or []), set(new.get("flags") or [])
    if oflags != nflags:
        added, removed = sorted(nflags - oflags), sorted(oflags - nflags)
        out.append(f"flags: {len(oflags)} -> {len(nflags)}; added {len(added)}: {' '.join(added) or '-'}; "
                   f"removed {len(removed)}: {' '.join(removed) or '-'}")
    return out


def _describe(h: dict) -> str:
    if not h:
        return "-"
    if h.get("minimum") is not None:
        return f">= {h['minimum']}"
    return ", ".join(map(str, h.get("sizes") or [])) or "any"


def toolkit_backend(facts: dict) -> str:
    """The backend the toolkit runs on 7.0: vLLM's own choice, except FlexAttention (0.10.x's default below 8.0,
    which compiles a kernel per shape), where TRITON_ATTN is pinned when the release has it."""
    chain = facts["backend_chain"]
    if facts["default_backend"] == "FLEX_ATTENTION" and "TRITON_ATTN" in chain:
        return "TRITON_ATTN"
    return facts["default_backend"]


# --- main ------------------------------------------------------------------------------------------------------

def pin(version: str, exclude_newer: str | None, static: bool, cache: Path, check_refused: bool,
        facts_only: bool = False) -> dict:
    """Everything above for one release: the data written to files/vllm/<version>.json. facts_only: no locks and
    no sm_70 check (a release already in the table, whose locks tools/lock_vllm.py keeps), flags statically."""
    project = project_json()
    w = pypi_wheel(project, version)
    meta = wheel_metadata(w, cache)
    torch_pin = requirement(meta, "torch")
    day = exclude_newer or (dt.date.fromisoformat(w["upload"]) + dt.timedelta(days=14)).isoformat()
    data: dict = {"version": version, "wheel": w, "requires_python": requires_python(meta), "torch_pin": torch_pin,
                  "exclude_newer": day, "platform": lock_platform(w["manylinux"]), "locks": {}, "verdict": "passes",
                  "refused": []}
    print(f"vllm {version}: {w['filename']} ({w['upload']}), torch{torch_pin}, Python {data['requires_python']}")
    release = replace(VLLM_RELEASES.get(version) or VllmRelease(version, "", "", "", (), day),
                      exclude_newer=day, platform=data["platform"])
    work = cache / f"vllm-{version}"
    work.mkdir(parents=True, exist_ok=True)
    if (why := torch_verdict(torch_pin)) is not None:
        data["refused"].append(why)
        print(f"  refused: {why}")
    for python in [] if facts_only else pythons_allowed(data["requires_python"]):
        try:
            text = compile_lock(release, python)
        except subprocess.CalledProcessError:
            data["locks"][python] = {"resolved": False}
            print(f"  py{python}: no wheel-only resolution")
            continue
        lock = work / release.lock_file(python).name
        lock.write_text(text)
        torch, cuda = torch_build(text)
        entry = {"resolved": True, "torch": torch, "cuda": cuda, "torch_sm70": bool(TORCH_SM70.get((torch, cuda)))}
        data["locks"][python] = entry
        print(f"  py{python}: torch {torch} cu{cuda.replace('.', '')}"
              f"{'' if entry['torch_sm70'] else ' (no sm_70 kernels: TORCH_SM70)'}")
        if not entry["torch_sm70"]:
            data["refused"].append(f"py{python}: torch {torch} cu{cuda.replace('.', '')} has no sm_70 kernels")
            if not check_refused:
                continue
        check = sm70_check(lock, cache / "wheels")
        entry["sm70"] = {"ok": check.ok, "binaries": len(check.binaries), "failing": failing_names(check)}
        print(f"  py{python}: sm_70 check of {len(check.binaries)} CUDA binaries: "
              + ("every one has sm_70 SASS or PTX <= compute_70" if check.ok else
                 f"{len(check.failing)} without: " + "; ".join(failing_names(check))))
        if not check.ok:
            data["refused"].append(f"py{python}: {len(check.failing)} CUDA binaries without sm_70 SASS or PTX <= "
                                   f"compute_70: " + "; ".join(failing_names(check)))
    data["pythons"] = sorted(p for p, e in data["locks"].items()
                             if e.get("resolved") and e.get("torch_sm70") and isinstance(e.get("sm70"), dict)
                             and e["sm70"]["ok"])
    if facts_only:
        data["verdict"] = "facts only (locks and sm_70 check: tools/lock_vllm.py)"
        data["pythons"] = list(VLLM_RELEASES[version].pythons) if version in VLLM_RELEASES else []
    elif data["refused"] or not data["pythons"]:
        data["verdict"] = "refused"
    torches = {(e["torch"], e["cuda"]) for e in data["locks"].values() if e.get("resolved")}
    data["torch"] = " / ".join(f"{t} cu{c.replace('.', '')}" for t, c in sorted(torches)) or None
    wheel = download(w["url"], w["sha256"], cache / "wheels")
    files = python_sources(wheel)
    try:
        facts = derive(files).as_dict()
    except SourceShapeError as e:
        raise SystemExit(f"vllm {version}: {e}: read it by hand and teach roles/vllm/release_source.py") from e
    data["facts"] = facts
    data["attention_backend"] = toolkit_backend(facts)
    from tools.vllm_flags import flags_file  # noqa: PLC0415
    if facts_only and flags_file(version).is_file():  # the release's own parser, recorded by tools/vllm_flags.py
        recorded = json.loads(flags_file(version).read_text())
        data["flags"], data["positional"], data["flags_source"] = (recorded["flags"], recorded.get("positional", []),
                                                                   recorded["source"])
    elif static or facts_only or data["verdict"] == "refused":
        data["flags"], data["flags_source"] = static_flags(files), (
            "static: the \"--\" string literals of " + ", ".join(FLAG_FILES) + " (not the release's parser)")
    else:
        python = data["pythons"][-1 if sys.version_info[:2] > (3, 12) else 0]
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            flags, positional, platform = parser_flags(work / release.lock_file(python).name, python, Path(tmp))
        data["flags"], data["positional"], data["flags_source"] = flags, positional, (
            "tools/vllm_flags.py PROBE: make_arg_parser(FlexibleArgumentParser()) of vLLM "
            f"{version} installed from its lock for Python {python} (platform {platform})")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version", nargs="?", help="vLLM release on PyPI, e.g. 0.19.1")
    ap.add_argument("--survey", metavar="SINCE", help="list releases uploaded since SINCE (YYYY-MM-DD) with their "
                    "torch pin and the cheap torch verdict, newest first, and stop")
    ap.add_argument("--exclude-newer", help="the locks' resolution date (default: upload day + 14 days)")
    ap.add_argument("--static-flags", action="store_true", help="read flags from the source, not the parser")
    ap.add_argument("--check-refused", action="store_true",
                    help="run the sm_70 check on locks whose torch is already refused (to name every binary)")
    ap.add_argument("--facts-only", action="store_true", help="only the facts from the code and static flags (no "
                    "locks, no sm_70 check): for a release the table already has")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"downloads and work files (default {CACHE})")
    args = ap.parse_args(argv)
    if args.survey:
        for r in survey(project_json(), args.survey):
            print(f"{r['version']:>10} {r['upload']} torch{r['torch']:<9} {r['manylinux']:<16} Python {r['python']:<12}"
                  f" {r['verdict'] or 'candidate: lock and check'}")
        return 0
    if not args.version:
        ap.error("give a VERSION or --survey SINCE")
    data = pin(args.version, args.exclude_newer, args.static_flags, args.cache, args.check_refused, args.facts_only)
    path = release_data_file(args.version)
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    if data["verdict"] == "passes" and not args.static_flags:  # what roles/vllm/flags.py known_flags reads
        from tools.vllm_flags import flags_file  # noqa: PLC0415
        flags_file(args.version).write_text(json.dumps(
            {"version": args.version, "flags": data["flags"], "positional": data.get("positional", []),
             "source": data["flags_source"]}, indent=1) + "\n")
    print(f"\nwrote {path}: {data['verdict']}" + (f" ({len(data['refused'])} reasons)" if data["refused"] else
                                                   f", Pythons {', '.join(data['pythons'])}"))
    facts = data["facts"]
    heads = facts["head_sizes"].get(data["attention_backend"], {})
    print(f"  engine {facts['engine']}, vLLM selects {facts['default_backend']} on 7.0; the toolkit uses "
          f"{data['attention_backend']} (head sizes {_describe(heads)}; {heads.get('source')})")
    print(f"  --kv-cache-dtype on Volta: {facts['volta_kv_cache_dtypes'].get(data['attention_backend'])}; "
          f"profile tokens {facts['profile_tokens']}; {len(data['flags'])} flags ({data['flags_source'][:40]}...)")
    default = release_data_file(DEFAULT_VERSION)
    if args.version != DEFAULT_VERSION and default.is_file():
        print(f"\nagainst the default {DEFAULT_VERSION}:")
        for line in changes(json.loads(default.read_text()), data):
            print(f"  {line}")
    return 2 if data["verdict"] == "refused" else 0


if __name__ == "__main__":
    sys.exit(main())
