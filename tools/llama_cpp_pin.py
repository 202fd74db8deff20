"""Add (or refresh) a known llama.cpp pin: the llama.cpp tree vendored in a llama-cpp-python sdist on PyPI.

    .venv/bin/python tools/llama_cpp_pin.py 0.3.36                       # look up, download, derive, write
    .venv/bin/python tools/llama_cpp_pin.py 0.3.36 --archive PATH.tar.gz  # use a local copy (checked by sha256)

The sdist's URL and sha256 come from PyPI's JSON API (https://pypi.org/pypi/llama-cpp-python/VERSION/json, or the
project's JSON releases[VERSION] where the per-version page is not served). The tree's facts come from its own code
(roles/llama_cpp/tree.py read_tree) and the placement matrix from the rules of its form
(roles/llama_cpp/attention.py matrix); the result goes to files/llama_cpp/pypi-VERSION.json, and what changed
against the default pin's data is printed. Old pins are never deleted; the default moves in roles/llama_cpp/versions.py.

A tree in a range known to be bad on Volta (roles/llama_cpp/versions.py VOLTA_RANGES: the llama.cpp version its
CMakeLists.txt states) is refused: nothing is written, the reason and what to pick instead are printed, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from roles.llama_cpp import attention
from roles.llama_cpp.tree import CMAKE_TOP, llama_version, read_files, read_tree
from roles.llama_cpp.versions import DEFAULT_REF, PIN_DIR, pin_file, volta_known_bad, volta_refusal

PROJECT = "llama-cpp-python"
FILES_HOST = "https://files.pythonhosted.org/packages/"


def normalise_url(url: str) -> str:
    """An absolute files.pythonhosted.org URL for a PyPI file URL; relative ones ("../../packages/packages/ec/e9/
    .../x.tar.gz", as some PyPI mirrors answer) become FILES_HOST + the part after the last leading packages/."""
    if re.match(r"https?://", url):
        return url
    m = re.fullmatch(r"(?:\.\./)*/?(?:packages/)+(.+)", url)
    if not m:
        raise ValueError(f"unexpected PyPI file URL {url!r}")
    return FILES_HOST + m.group(1)


def _get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def pypi_sdist(version: str) -> tuple[str, str, str]:
    """(url, sha256, the API URL that answered) of llama-cpp-python VERSION's sdist from PyPI's JSON API. Raises
    SystemExit when PyPI has no such release or no sdist for it."""
    api = f"https://pypi.org/pypi/{PROJECT}/{version}/json"
    data = _get_json(api)
    files = data["urls"] if data else None
    if files is None:
        api = f"https://pypi.org/pypi/{PROJECT}/json (releases[{version!r}])"
        project = _get_json(f"https://pypi.org/pypi/{PROJECT}/json") or {}
        files = project.get("releases", {}).get(version)
    if not files:
        raise SystemExit(f"PyPI has no {PROJECT} {version}")
    sdists = [f for f in files if f.get("packagetype") == "sdist" and f["filename"].endswith(".tar.gz")]
    if not sdists:
        raise SystemExit(f"PyPI has no sdist (.tar.gz) for {PROJECT} {version}")
    return normalise_url(sdists[0]["url"]), sdists[0]["digests"]["sha256"], api


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def volta_refusals(archive: Path, subdir: str | None) -> list[str]:
    """One line per range known bad on Volta (VOLTA_RANGES) that the llama.cpp tree in `archive` falls in, read
    from the llama.cpp version its top-level CMakeLists.txt states; [] for a tree outside every range or from
    before semantic versioning. Raises ValueError for an archive that is not a llama.cpp tree (tree.read_files)."""
    version = llama_version(read_files(archive, subdir).get(CMAKE_TOP))
    return [volta_refusal(r, version) for r in volta_known_bad(version)]


def pin_data(version: str, url: str, sha256: str, archive: Path, api: str) -> dict:
    """The data file's content for one sdist (archive already checked against sha256; `api` the PyPI JSON API URL
    its url and sha256 came from)."""
    subdir = f"llama_cpp_python-{version}/vendor/llama.cpp"
    facts = read_tree(archive, subdir)
    m = attention.matrix(facts.fa_form) if facts.fa_form else None
    return {
        "ref": f"pypi-{version}",
        "url": url,
        "sha256": sha256,
        "subdir": subdir,
        "flash_attn_style": facts.flash_attn_style,
        "fa_form": facts.fa_form,
        "cuda_graphs_min_cc": list(facts.cuda_graphs_min_cc) if facts.cuda_graphs_min_cc else None,
        "fa_quants_options": list(facts.fa_quants_options),
        "architectures": sorted(facts.architectures),
        "server_flag_values": dict(sorted(facts.server_flag_values.items())),
        "server_int_flags": sorted(facts.server_int_flags),
        "llama_version": list(facts.llama_version) if facts.llama_version else None,
        "log_verbosity": facts.log_verbosity,
        "sources": {
            "url": f"PyPI JSON API {api}: the sdist's url",
            "sha256": f"PyPI JSON API {api}: the sdist's digests.sha256",
            "flash_attn_style": "common/arg.cpp common_params_parser_init (-fa, --flash-attn)",
            "fa_form": "roles/llama_cpp/tree.py fa_form (FORMS fingerprints)",
            "cuda_graphs_min_cc": "ggml/src/ggml-cuda/ggml-cuda.cu (disable_due_to_gpu_arch)",
            "fa_quants_options": "ggml/CMakeLists.txt",
            "architectures": "src/llama-arch.cpp LLM_ARCH_NAMES",
            "server_flag_values": "common/arg.cpp common_params_parser_init, the options kept for "
                                  "LLAMA_EXAMPLE_SERVER less arg_removed ones (its keys), and each one's handler lambda "
                                  "(none, bool: 0 words; int, string: 1; two strings: 2, as common_params_parse_ex takes "
                                  "them; roles/llama_cpp/tree.py server_flag_values)",
            "server_int_flags": "common/arg.cpp: the options above whose handler lambda takes an int (handler_int, "
                                "its word read with std::stoi by common_params_parse_ex; roles/llama_cpp/tree.py "
                                "server_int_flags)",
            "llama_version": "CMakeLists.txt set(LLAMA_VERSION_MAJOR/MINOR/PATCH) (roles/llama_cpp/tree.py llama_version)",
            "log_verbosity": "common/log.h LOG_DBG and common/log.cpp / LOG_DEFAULT_LLAMA (roles/llama_cpp/tree.py "
                             "log_verbosity)",
            "matrix": "roles/llama_cpp/attention.py matrix (each cell: its sources entry)",
        },
        "matrix": m,
    }


def changes(old: dict, new: dict, cc: tuple[int, int] = (7, 0)) -> list[str]:
    """Lines describing what differs from `old` to `new` pin data: -fa style, form, architectures added/removed,
    matrix cells changed at `cc`."""
    out = []
    for key in ("flash_attn_style", "fa_form", "cuda_graphs_min_cc"):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key)} -> {new.get(key)}")
    added = sorted(set(new["architectures"]) - set(old["architectures"]))
    removed = sorted(set(old["architectures"]) - set(new["architectures"]))
    out.append(f"architectures: {len(old['architectures'])} -> {len(new['architectures'])}; "
               f"added {len(added)}: {', '.join(added) or '-'}; removed {len(removed)}: {', '.join(removed) or '-'}")
    om, nm = old.get("matrix"), new.get("matrix")
    if om is None or nm is None:
        out.append(f"matrix at cc {cc[0]}.{cc[1]}: not comparable (form {old.get('fa_form')} -> {new.get('fa_form')})")
        return out
    key = f"{cc[0]}.{cc[1]}"
    diff = []
    for heads, by_fa in nm["cells"].get(key, {}).items():
        for fa, row in by_fa.items():
            for kv, value in row.items():
                hk, hv = (int(h) for h in heads.split("/"))
                tk, tv = kv.split("/")
                now = attention.cell(nm, cc, hk, hv, tk, tv, fa == "on")[0]
                try:
                    before = attention.cell(om, cc, hk, hv, tk, tv, fa == "on")[0]
                except KeyError:
                    before = "-"
                if before != now:
                    diff.append(f"  head {heads:>7} fa {fa:<3} {kv:<13} {before:>7} -> {now}")
    counts: dict[str, int] = {}
    for line in diff:
        move = line.split(maxsplit=5)[-1]
        counts[move] = counts.get(move, 0) + 1
    summary = ", ".join(f"{m}: {n}" for m, n in sorted(counts.items()))
    out.append(f"matrix at cc {key}: {len(diff)} cells changed" + (f" ({summary}):" if diff else ""))
    return out + diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version", help="llama-cpp-python version on PyPI, e.g. 0.3.36")
    ap.add_argument("--archive", type=Path, help="a local copy of the sdist (checked against PyPI's sha256)")
    args = ap.parse_args(argv)
    url, sha256, api = pypi_sdist(args.version)
    print(f"PyPI: {url}\n      sha256 {sha256}")
    with tempfile.TemporaryDirectory() as tmp:
        archive = args.archive
        if archive is None:
            archive = Path(tmp) / Path(url).name
            print(f"downloading {url}")
            with urllib.request.urlopen(url, timeout=600) as r, archive.open("wb") as f:
                shutil.copyfileobj(r, f)
        got = sha256_of(archive)
        if got != sha256:
            print(f"{archive}: sha256 {got} differs from PyPI's {sha256}")
            return 1
        subdir = f"llama_cpp_python-{args.version}/vendor/llama.cpp"
        refused = volta_refusals(archive, subdir)
        if refused:
            print(f"refused, {PROJECT} {args.version} not pinned:")
            for line in refused:
                print(f"  {line}")
            return 2
        data = pin_data(args.version, url, sha256, archive, api)
    path = pin_file(data["ref"])
    PIN_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path} (form {data['fa_form']}, {len(data['architectures'])} architectures, "
          f"-fa style {data['flash_attn_style']}, llama.cpp {'.'.join(map(str, data['llama_version'] or [])) or 'before 0.1.0'})")
    if data["cuda_graphs_min_cc"] and tuple(data["cuda_graphs_min_cc"]) <= (7, 0):
        print("CUDA graphs run on Volta in this tree (ggml-org/llama.cpp#25749, 2026-07-16: the gate moved from "
              "Ampere to Volta)")
    default = pin_file(DEFAULT_REF)
    if data["ref"] == DEFAULT_REF or not default.is_file():
        return 0
    print(f"\nagainst the default {DEFAULT_REF}:")
    for line in changes(json.loads(default.read_text()), data):
        print(line)
    if data["fa_form"] is None:
        print("\nfa_form unknown: this tree's flash-attention code has no known form; quantized KV is refused with it "
              "until roles/llama_cpp/attention.py has its rules (and roles/llama_cpp/tree.py FORMS its fingerprint)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
