"""The pinned llama.cpp sources and the CUDA architectures each toolkit can build.

The known pins live in files/llama_cpp/<ref>.json, written by tools/llama_cpp_pin.py from the PyPI sdist and the
tree's own code (roles/llama_cpp/tree.py read_tree, roles/llama_cpp/attention.py matrix)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: Where the known pins' data files are (files/llama_cpp/<ref>.json).
PIN_DIR = Path(__file__).resolve().parents[2] / "files" / "llama_cpp"


@dataclass(frozen=True)
class Source:
    """A llama.cpp source archive: `ref` (name used in the install prefix), `url`, `sha256`, and `subdir`, the
    directory inside the archive with llama.cpp's top-level CMakeLists.txt (None: found by looking)."""

    ref: str
    url: str
    sha256: str
    subdir: str | None = None
    flash_attn_style: str = "value"  # "value": -fa on|off|auto (since about b6327); "flag": a bare -fa
    #: every general.architecture the tree loads (src/llama-arch.cpp LLM_ARCH_NAMES); None: not known (no check)
    architectures: frozenset[str] | None = None
    #: the tree's flash-attention form (roles/llama_cpp/attention.py RULES key); None: unknown form or not read
    fa_form: str | None = None
    #: every llama-server flag spelling the tree accepts (common/arg.cpp); None: not known
    server_flags: frozenset[str] | None = None
    #: {flag: the words llama-server takes after it (0, 1 or 2)} (tree.py server_flag_values); None: not known
    server_flag_values: Mapping[str, int] | None = field(default=None, hash=False)
    #: the flags whose value llama-server reads with std::stoi (tree.py server_int_flags); None: not known
    server_int_flags: frozenset[str] | None = None
    #: llama.cpp's own (major, minor, patch) from the tree's CMakeLists.txt (tree.py llama_version); None: a tree
    #: from before semantic versioning, or not read
    llama_version: tuple[int, int, int] | None = None
    #: the llama-server -lv that prints the load report and no debug line (request text) in this tree
    #: (tree.py log_verbosity); None: not known
    log_verbosity: int | None = None


def pin_file(ref: str) -> Path:
    """The data file of a known pin: files/llama_cpp/<ref>.json."""
    return PIN_DIR / f"{ref}.json"


def load_pin(path: Path) -> dict:
    """A pin's data (tools/llama_cpp_pin.py writes it: ref, url, sha256, subdir, flash_attn_style, fa_form,
    architectures, matrix, sources). Raises OSError / json.JSONDecodeError for a missing or broken file."""
    return json.loads(path.read_text())


def source_of(data: dict) -> Source:
    """The Source of a pin's data (load_pin). Raises KeyError for a missing field."""
    return Source(ref=data["ref"], url=data["url"], sha256=data["sha256"], subdir=data["subdir"],
                  flash_attn_style=data["flash_attn_style"], architectures=frozenset(data["architectures"]),
                  fa_form=data["fa_form"],
                  # the flags are the keys of their arities (tools/llama_cpp_pin.py writes the one mapping)
                  server_flags=frozenset(data["server_flag_values"]) if data.get("server_flag_values") else None,
                  server_flag_values=dict(data["server_flag_values"]) if data.get("server_flag_values") else None,
                  server_int_flags=frozenset(data["server_int_flags"]) if "server_int_flags" in data else None,
                  llama_version=tuple(data["llama_version"]) if data.get("llama_version") else None,
                  log_verbosity=data.get("log_verbosity"))


#: The known pins by ref, from files/llama_cpp/*.json (tools/llama_cpp_pin.py). Old pins stay here.
SOURCES: dict[str, Source] = {p.stem: source_of(load_pin(p)) for p in sorted(PIN_DIR.glob("*.json"))}

#: The ref of the default source.
DEFAULT_REF = "pypi-0.3.36"


#: The default source: the llama.cpp tree vendored in the llama-cpp-python 0.3.16 sdist on PyPI. PyPI publishes
#: its sha256 (checked 2026-11-29), so the default is verifiable byte for byte; a GitHub tag archive has no
#: published checksum. Pin a release tag instead with llama_cpp_ref + llama_cpp_source + llama_cpp_source_sha256.
#: Its data: files/llama_cpp/pypi-0.3.16.json (url and sha256 from PyPI; -fa a bare flag, per its common/arg.cpp).
if DEFAULT_REF not in SOURCES:  # a copy of roles/ without files/: say where the data should be
    raise RuntimeError(f"{pin_file(DEFAULT_REF)} is missing: the pinned llama.cpp source's data "
                       "(tools/llama_cpp_pin.py writes it)")
DEFAULT_SOURCE = SOURCES[DEFAULT_REF]

#: Lowest and highest real architecture (sm_NN) each CUDA toolkit can compile for. CUDA 12.0 removed Kepler
#: (sm_35/37); 11.8 added sm_89/sm_90; 12.8 added sm_100/120; 13.0 removed sm_50..sm_72. (CUDA release notes; H)
CUDA_ARCH_RANGE: dict[str, tuple[int, int]] = {
    "11.7": (35, 87), "11.8": (35, 90), "12.1": (50, 90), "12.4": (50, 90), "12.6": (50, 90), "12.8": (50, 120),
    "12.9": (50, 121),  # 12.9 added sm_103 and sm_121 (CUDA 12.9 release notes; M)
}


#: llama.cpp built with CUDA 12.9 fails to allocate its weights buffer on an empty 32 GB V100 ("cudaMalloc failed:
#: out of memory" for 16.4 GiB with 31 GiB free), while the same source built with 12.8 loads and serves; reported
#: on commit 1863ac033 with toolkits 12.9.86 and 12.8.93, driver 580.173.02, and open with no known cause or fix
#: (ggml-org/llama.cpp#28416, 2026-09-04). The llama.cpp role therefore refuses to build with it on Volta unless
#: llama_cpp_allow_cuda_12_9 is set, and prefers 12.8 where it is installed (roles/llama_cpp/decide.py toolkit).
CUDA_BAD_ON_VOLTA: dict[str, str] = {"12.9": "ggml-org/llama.cpp#28416"}
#: the toolkit the role prefers on Volta instead (the last 12.x before 12.9; the same issue's working build)
CUDA_PREFERRED_ON_VOLTA = "12.8"


@dataclass(frozen=True)
class VoltaRange:
    """A stretch of llama.cpp history known to be wrong (or only different) on Volta (compute capability 7.x).

    `versions`: the llama.cpp version lines (the (major, minor, patch) that the tree's top-level CMakeLists.txt
    sets as LLAMA_VERSION_MAJOR/MINOR/PATCH; roles/llama_cpp/tree.py llama_version) whose trees may hold
    `broken_by` without `fixed_by`. `refuse`: True when such a tree is refused on Volta, False for a range that is
    only reported. `pick`: what to choose instead. `sources`: where each fact comes from."""

    id: str
    what: str
    broken_by: str
    fixed_by: str | None
    versions: frozenset[tuple[int, int, int]]
    refuse: bool
    pick: str
    sources: tuple[str, ...]


#: Known llama.cpp ranges on Volta. The detector is the tree's own llama.cpp version (CMakeLists.txt), because the
#: code of #28536 and #29224 could not be read here: neither PR is in the search corpus, ggml-org/llama.cpp's history
#: is too large to fetch, and the ggml-org/ggml and whisper.cpp mirrors (which carry llama.cpp's ggml changes as
#: "(llama/NNNNN)" commits) end on 2026-08-21/22, before #28536. The version lines follow from dates:
#: - #28536 was opened after #28416 (2026-09-04; numbers are shared by issues and PRs and rise with time), and
#:   llama.cpp's v0.4.0 tag existed by 2026-09-05 03:39 UTC (dramaturg/llama.cpp-cuda built it then); every
#:   version line before 0.4.0 (0.1.0 .. 0.3.x, and the b-numbered trees without a version before semantic
#:   versioning, ggml-org/llama.cpp#26839, 2026-08) predates the break.
#: - #29224 is the fix: on 2026-09-21 ggml-org/llama.cpp#29232 ("fix fa Volta issue caused by #28536") was closed
#:   after its author confirmed "it is fixed with #29224". v0.5.0 was built on 2026-09-24 (dramaturg/llama.cpp-cuda);
#:   llama.cpp moves the version at a release, as ggml does (ggml-org/ggml 91147d0c "ggml : bump version to 0.21.0"
#:   is the v0.21.0 tag), so the 0.5.0 line starts after the fix. The llama-cpp-python 0.3.36 sdist (2026-10-01,
#:   llama.cpp@0c1e57098) vendors a 0.5.0 tree.
#: - The 0.4.0 and 0.4.1 lines span the break and the fix, and a tree of theirs does not say which side of either
#:   it is on (its build number and commit come from git at build time: cmake/build-info.cmake), so all of both
#:   lines is refused on Volta: some good trees are refused with the bad ones, never the other way round.
#: CUDA graphs on Volta (#25749) is reported only: the tree's own code says whether it has it (tree.py
#: cuda_graphs_min_cc), so that range needs no version.
VOLTA_RANGES: tuple[VoltaRange, ...] = (
    VoltaRange(
        id="fa-volta-28536",
        what="flash attention broken on Volta (sm_70)",
        broken_by="ggml-org/llama.cpp#28536", fixed_by="ggml-org/llama.cpp#29224",
        versions=frozenset({(0, 4, 0), (0, 4, 1)}), refuse=True,
        pick="a llama.cpp tree of version 0.5.0 or later (the default pypi-0.3.36 is 0.5.0), or one before 0.4.0 "
             "(pypi-0.3.16)",
        sources=("ggml-org/llama.cpp#29232 (2026-09-21): 'fix fa Volta issue caused by #28536' closed as fixed "
                 "via #29224",
                 "ggml-org/llama.cpp#28416 (2026-09-04): commit 1863ac033 is on the 0.4.0 line",
                 "dramaturg/llama.cpp-cuda releases: v0.4.0 built 2026-09-05, v0.4.1 2026-09-15, v0.5.0 2026-09-24",
                 "ggml-org/ggml 91147d0c: the version moves at the release"),
    ),
)


def volta_known_bad(llama_version: tuple[int, int, int] | None) -> list[VoltaRange]:
    """The refused VOLTA_RANGES a tree of llama.cpp version `llama_version` ((major, minor, patch) from its
    CMakeLists.txt) falls in; [] for None (a tree from before semantic versioning, 2026-08, or a version not read)."""
    if llama_version is None:
        return []
    return [r for r in VOLTA_RANGES if r.refuse and tuple(llama_version) in r.versions]


def volta_refusal(r: VoltaRange, llama_version: tuple[int, int, int]) -> str:
    """One sentence for a tree in range `r`: which PR broke it, which fixed it, what to pick instead."""
    v = ".".join(map(str, llama_version))
    return (f"llama.cpp {v} is in a range known bad on Volta: {r.what}, broken by {r.broken_by}, fixed by "
            f"{r.fixed_by}; the {v} line holds trees from before and after both, and a tree does not say which "
            f"side it is on; pick {r.pick}")
