"""Downloads the lab shares between runs (cached under the lab cache; a cold run downloads them)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from lab.harness import LAB_CACHE
from roles.llama_cpp import sha256_file as sha256_of
from roles.llama_cpp.versions import DEFAULT_SOURCE


def llama_cpp_default_source(cache: Path = LAB_CACHE) -> Path:
    """The pinned default llama.cpp source archive (the llama-cpp-python sdist), checked against its sha256.
    Raises RuntimeError if the download does not match."""
    path = cache / "src" / Path(DEFAULT_SOURCE.url).name
    if path.exists() and sha256_of(path) == DEFAULT_SOURCE.sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    urllib.request.urlretrieve(DEFAULT_SOURCE.url, part)
    if sha256_of(part) != DEFAULT_SOURCE.sha256:
        part.unlink()
        raise RuntimeError(f"{DEFAULT_SOURCE.url}: sha256 differs from the pinned {DEFAULT_SOURCE.sha256}")
    part.rename(path)
    return path
