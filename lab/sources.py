"""Downloads the lab shares between runs (cached under the lab cache; a cold run downloads them)."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from lab.harness import LAB_CACHE, locked
from roles.engines import sha256_file as sha256_of
from roles.llama_cpp.versions import DEFAULT_SOURCE


def retrieve(url: str, dest: Path, attempts: int = 5, delay_s: float = 3.0) -> None:
    """Download `url` to `dest`, retrying a transient failure (no connection, timeout, HTTP 408, 429 or 5xx) up
    to `attempts` times, `delay_s` seconds apart, as the deploys' curl does (roles.ops.CURL_RETRY). Raises the
    last error (urllib.error.URLError or HTTPError) when every attempt failed, an HTTPError at once otherwise."""
    for attempt in range(1, attempts + 1):
        try:
            urllib.request.urlretrieve(url, dest)
            return
        except urllib.error.HTTPError as e:
            if e.code not in (408, 429) and e.code < 500 or attempt == attempts:
                raise
        except (urllib.error.URLError, TimeoutError):
            if attempt == attempts:
                raise
        time.sleep(delay_s)


def llama_cpp_default_source(cache: Path = LAB_CACHE) -> Path:
    """The pinned default llama.cpp source archive (the llama-cpp-python sdist), checked against its sha256.
    Raises RuntimeError if the download does not match."""
    path = cache / "src" / Path(DEFAULT_SOURCE.url).name
    with locked(path):
        if path.is_file() and sha256_of(path) == DEFAULT_SOURCE.sha256:
            return path
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        try:
            retrieve(DEFAULT_SOURCE.url, part)
            if sha256_of(part) != DEFAULT_SOURCE.sha256:
                raise RuntimeError(f"{DEFAULT_SOURCE.url}: sha256 differs from the pinned {DEFAULT_SOURCE.sha256}")
            os.replace(part, path)  # a partial or wrong download never sits under the final name
        finally:
            part.unlink(missing_ok=True)
    return path
