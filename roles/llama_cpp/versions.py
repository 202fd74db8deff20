"""The pinned llama.cpp sources and the CUDA architectures each toolkit can build.

The known pins live in files/llama_cpp/<ref>.json, written by tools/llama_cpp_pin.py from the PyPI sdist and the
tree's own code (roles/llama_cpp/tree.py read_tree, roles/llama_cpp/attention.py matrix)."""

from __future__ import annotations

import json
from dataclasses import dataclass
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
                  server_flags=frozenset(data["server_flags"]) if data.get("server_flags") else None)


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
}
