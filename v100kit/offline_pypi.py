"""Offline provisioning: the control machine fetches every wheel of a hash-locked lock (files/vllm/*.txt) into a
directory and serves it as a PEP 503 simple index, so that hosts without internet install the same venv with the
same uv command (roles/vllm/decide.py install_flags) through vllm_index_url (roles/settings.py).

    DEST/files/<wheel>                  the wheels, each checked against the lock's sha256
    DEST/simple/index.html              one link per project
    DEST/simple/<project>/index.html    <a href="../../files/<wheel>#sha256=<hex>"><wheel></a>

Serve DEST with any static HTTP server (`python3 -m http.server -d DEST PORT`) and set
vllm_index_url: http://<control machine>:<PORT>/simple. Only the standard library and `packaging` are used (no
pip): the index is read through its simple API, so a mirror of PyPI works as well as PyPI itself.
"""

from __future__ import annotations

import hashlib
import html
import http.client
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Callable, Collection, TypeVar
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as _PackagingRequirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from roles.engines import sha256_file, url_file_name
from roles.vllm.versions import MANYLINUX_GLIBC, lock_glibc  # noqa: F401 (lock_glibc: part of this module's API)

#: MANYLINUX_GLIBC, lock_glibc: the platform a lock was resolved for (roles/vllm/versions.py, which the sm_70 check
#: shares; roles may not import v100kit).

#: Transient failures (HTTP 408, 429, 5xx, connection errors, timeouts) are retried RETRIES times, RETRY_DELAY_S
#: seconds apart: RETRIES + 1 attempts in all.
RETRIES = 5
RETRY_DELAY_S = 3.0
TIMEOUT_S = 60.0  # per connect and per read, not per download: a 1 GB wheel takes longer than that
_CHUNK = 1 << 20
_USER_AGENT = "v100kit-offline-pypi"
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"  # PEP 691; PEP 503 HTML as the fallback
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

T = TypeVar("T")


class OfflinePypiError(ValueError):
    """Base of this module's errors about content: a lock, a file's hash, a missing wheel."""


class LockError(OfflinePypiError):
    """A lock line that is not `name==version` with --hash=sha256:<hex> options (or names a file to include)."""


class NoMatchingWheel(OfflinePypiError):
    """No file on the index has a sha256 of the lock and installs on CPython <python>, manylinux x86_64."""


class HashMismatch(OfflinePypiError):
    """A downloaded file's sha256 is not one the lock or the pin allows; nothing was kept."""


class FetchError(OSError):
    """A URL could not be fetched: a permanent HTTP status (status set), or transient failures on every attempt."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Requirement:
    """One pinned entry of a lock. name: PEP 503 normalized ("typing-extensions"); version: the pin as written
    ("0.8.5.post1"); hashes: the lowercase hex sha256 digests of its --hash options, in lock order (a tuple, so that
    the dataclass stays hashable); marker: its environment marker as text (None: always installed)."""

    name: str
    version: str
    hashes: tuple[str, ...]
    marker: str | None = None


# -- the lock ---------------------------------------------------------------------------------------------------

_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's rule: '#' at the start or after whitespace (not in a URL fragment)
_HASH_OPTION = re.compile(r"--hash(?:=|\s+)(\S+)")
_INCLUDES = ("-r", "-c", "-e", "--requirement", "--constraint", "--editable")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, text) per entry: comments stripped, `\\` continuations joined."""
    out: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw).rstrip()
        if not parts:
            start = number
        continued = line.endswith("\\")
        parts.append(line[:-1] if continued else line)
        if continued:
            continue
        joined = " ".join(p.strip() for p in parts).strip()
        parts = []
        if joined:
            out.append((start, joined))
    if parts and " ".join(parts).strip():  # a last line ending in '\': still an entry
        out.append((start, " ".join(p.strip() for p in parts).strip()))
    return out


def lock_requirements(lock: Path) -> list[Requirement]:
    """The pinned requirements of a `uv pip compile --generate-hashes` (or pip-compile) lock, in file order.

    Each entry is `name[extras]==version [; marker] --hash=sha256:<hex> ...`, possibly spread over lines joined by
    a trailing backslash; comment lines and `# via` annotations are skipped, and so are global option lines such as
    --index-url (the index is the caller's choice). Other hash algorithms than sha256 are ignored.

    Raises LockError (a ValueError) naming the file and line for: an entry that does not parse, is not pinned with
    `==` to one exact version, is a direct URL, has no sha256 hash or an option other than --hash; a -r/-c/-e line
    (a lock must be self-contained). OSError if the file cannot be read.
    """
    requirements = []
    for number, line in _logical_lines(Path(lock).read_text()):
        where = f"{lock}:{number}"
        if line.startswith("-"):
            if line.split()[0].split("=")[0] in _INCLUDES:
                raise LockError(f"{where}: {line.split()[0]} is not supported: a lock must list every package "
                                "itself (regenerate it with tools/lock_vllm.py)")
            continue
        spec, sep, options = line.partition(" --")
        options = sep.strip() + options
        if options and not re.fullmatch(r"(?:--hash(?:=|\s+)\S+\s*)+", options):
            raise LockError(f"{where}: only --hash options can follow a requirement, got {options[:80]!r}")
        try:
            parsed = _PackagingRequirement(spec.strip())
        except InvalidRequirement as e:
            raise LockError(f"{where}: not a requirement: {e}") from None
        specs = list(parsed.specifier)
        if parsed.url or len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
            raise LockError(f"{where}: {spec.strip()!r} is not pinned to one version with '==': a hash-locked "
                            "install needs exact pins (regenerate the lock with --generate-hashes)")
        hashes = []
        for value in _HASH_OPTION.findall(options):
            algorithm, _, digest = value.partition(":")
            if algorithm != "sha256":
                continue
            if not _SHA256_HEX.fullmatch(digest.lower()):
                raise LockError(f"{where}: {value!r} is not a sha256 digest (64 hex digits)")
            hashes.append(digest.lower())
        if not hashes:
            raise LockError(f"{where}: {parsed.name} has no --hash=sha256:<hex>: regenerate the lock with "
                            "--generate-hashes")
        requirements.append(Requirement(canonicalize_name(parsed.name), specs[0].version, tuple(hashes),
                                        str(parsed.marker) if parsed.marker else None))
    return requirements


# -- which wheel installs on a host -----------------------------------------------------------------------------

def _python_version(python: str) -> tuple[int, int]:
    m = re.fullmatch(r"3\.(\d+)", python)
    if not m:
        raise ValueError(f"python {python!r}: expected a CPython 3 version as 'major.minor', e.g. '3.11'")
    return 3, int(m.group(1))


@lru_cache(maxsize=None)
def _supported_tags(python: str, glibc: tuple[int, int] = MANYLINUX_GLIBC) -> dict[Tag, int]:
    """Tag -> preference (0 best) for CPython `python` on manylinux x86_64 up to glibc, the order in which
    pip and uv prefer them (packaging.tags): cpXY-cpXY, abi3, none, then pure-Python tags."""
    version = _python_version(python)
    interpreter = f"cp{version[0]}{version[1]}"
    platforms = []
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # PEP 599/571/513 aliases
    for minor in range(glibc[1], 4, -1):  # newest glibc first: the best-optimized build wins
        platforms.append(f"manylinux_{glibc[0]}_{minor}_x86_64")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_x86_64")
    # the ABI given explicitly: the default reads the running interpreter's build (debug, free-threaded)
    ordered = [*cpython_tags(version, [interpreter], platforms), *compatible_tags(version, interpreter, platforms)]
    ranks: dict[Tag, int] = {}
    for rank, tag in enumerate(ordered):
        ranks.setdefault(tag, rank)
    return ranks


def wheel_rank(filename: str, python: str, glibc: tuple[int, int] = MANYLINUX_GLIBC) -> int | None:
    """How much a host with CPython `python` ("3.11") on x86_64 (glibc >= 2.28) prefers this wheel: 0 is best,
    larger is worse; None if it does not install there (another Python or ABI, musllinux, aarch64, a manylinux
    newer than `glibc`) or if `filename` is not a wheel's name. Raises ValueError for a bad `python`."""
    ranks = _supported_tags(python, glibc)
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    fitting = [ranks[t] for t in tags if t in ranks]
    return min(fitting) if fitting else None


def _environment(python: str) -> dict[str, str]:
    """PEP 508 marker environment of a Linux x86_64 host with CPython `python`: the lock's markers are evaluated
    for the host, not for the control machine."""
    return {"implementation_name": "cpython", "implementation_version": f"{python}.0", "os_name": "posix",
            "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_system": "Linux",
            "python_full_version": f"{python}.0", "python_version": python, "sys_platform": "linux"}


def _applies(requirement: Requirement, python: str) -> bool:
    return requirement.marker is None or Marker(requirement.marker).evaluate(_environment(python))


# -- HTTP -------------------------------------------------------------------------------------------------------

_TRANSIENT_EXCEPTIONS = (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException)


def _transient(status: int) -> bool:
    return status in (408, 429) or 500 <= status <= 599


def _retrying(url: str, consume: Callable[[http.client.HTTPResponse], T], accept: str | None = None) -> T:
    """consume(response) of a GET of url, the whole attempt (connect and body) repeated on a transient failure.
    Raises FetchError after the last attempt, or at once for a permanent HTTP status (404, 403, ...)."""
    headers = {"User-Agent": _USER_AGENT, **({"Accept": accept} if accept else {})}
    failures = []
    for attempt in range(RETRIES + 1):
        if attempt:
            time.sleep(RETRY_DELAY_S)
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as resp:
                return consume(resp)
        except urllib.error.HTTPError as e:  # before URLError: it is one
            e.close()
            if not _transient(e.code):
                raise FetchError(f"{url}: HTTP {e.code} {e.reason}", e.code) from None
            failures.append(f"HTTP {e.code}")
        except _TRANSIENT_EXCEPTIONS as e:
            failures.append(f"{type(e).__name__}: {getattr(e, 'reason', e)}")
    raise FetchError(f"{url}: failed {RETRIES + 1} times, {RETRY_DELAY_S:g} s apart ({'; '.join(failures)})")


def _download(url: str, target: Path, allowed: Collection[str] | None) -> str:
    """url -> target, whose sha256 must be in `allowed` (None: any, for a file checked by what it lists, such as a
    signed InRelease); returns it. The bytes go to a hidden .part file beside
    target, renamed over target only once complete and verified, so target is never partial; on any failure the
    .part file is removed and target is left as it was. Raises HashMismatch or FetchError."""
    fd, part = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            def consume(resp: http.client.HTTPResponse) -> str:
                out.seek(0)
                out.truncate()  # a retry starts over
                digest = hashlib.sha256()
                while chunk := resp.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                if resp.length:  # the server closed early: http.client returns short data silently
                    raise http.client.IncompleteRead(b"", resp.length)
                return digest.hexdigest()

            got = _retrying(url, consume)
            out.flush()
            os.fsync(out.fileno())  # renamed only once on disk: a crash leaves the old file or the whole new one
        if allowed is not None and got not in allowed:
            raise HashMismatch(f"{url}: sha256 {got} is not the pinned {' or '.join(sorted(allowed))}: the server "
                               "sent other bytes than the pinned file (a mirror must serve PyPI's exact files); "
                               "nothing was kept")
        os.replace(part, target)
        return got
    finally:
        if os.path.exists(part):
            os.unlink(part)


def said(path: Path, how: str) -> Path:
    """Print one progress line of `offline fill` for a file now in the directory, on stderr (stdout keeps the
    report): `offline fill: HOW SIZE PATH`, HOW "downloaded" or "cached" (there before, with the checksum it must
    have), SIZE in binary units (B, KiB, MiB, GiB). Returns `path`."""
    size = float(path.stat().st_size)
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    print(f"offline fill: {how} {size:.0f} {unit} {path}" if unit == "B" else
          f"offline fill: {how} {size:.1f} {unit} {path}", file=sys.stderr, flush=True)
    return path


def fill_file(url: str, sha256: str, dest: Path) -> Path:
    """Download one pinned file, e.g. the uv wheel (roles/vllm/versions.py UV_WHEEL_URL, UV_WHEEL_SHA256), into the
    directory dest (created if missing) under the last segment of the URL's path; returns its path.

    A file already there with this sha256 is not downloaded again. The download is verified before it takes the
    final name (see _download); transient HTTP failures (408, 429, 5xx, connection errors) are retried RETRIES
    times, RETRY_DELAY_S apart. Raises ValueError for a sha256 that is not 64 hex digits or a URL without a file
    name, HashMismatch (a ValueError; nothing kept) for other bytes, FetchError (an OSError) when the URL fails.
    """
    sha256 = sha256.lower()
    if not _SHA256_HEX.fullmatch(sha256):
        raise ValueError(f"sha256 {sha256!r}: expected 64 hex digits")
    name = url_file_name(url)
    if name in ("", ".", "..") or "/" in name:
        raise ValueError(f"{url}: the URL's path names no file")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    if target.is_file() and sha256_file(target) == sha256:
        return said(target, "cached")
    _download(url, target, {sha256})
    return said(target, "downloaded")


# -- the index --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Listed:
    filename: str
    url: str  # without the fragment
    sha256: str | None  # None: the index gives no sha256 for it (PEP 503 makes it optional)


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def _project_files(index_url: str, name: str) -> list[_Listed]:
    """The files an index's simple API lists for a project (PEP 691 JSON if offered, else PEP 503 HTML); [] if
    the index has no such project (404)."""
    url = f"{index_url.rstrip('/')}/{name}/"
    try:
        body, ctype, base = _retrying(url, lambda r: (r.read(), r.headers.get_content_type(), r.geturl()),
                                      accept=f"{_SIMPLE_JSON}, text/html;q=0.1")
    except FetchError as e:
        if e.status == 404:
            return []
        raise
    listed = []
    if ctype == _SIMPLE_JSON:
        for f in json.loads(body)["files"]:
            sha = (f.get("hashes") or {}).get("sha256")
            listed.append(_Listed(f["filename"], urljoin(base, f["url"]).split("#")[0], sha and sha.lower()))
        return listed
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    for href in parser.hrefs:
        parts = urlsplit(urljoin(base, href))
        algorithm, _, digest = parts.fragment.partition("=")
        listed.append(_Listed(unquote(PurePosixPath(parts.path).name), urlunsplit(parts._replace(fragment="")),
                              digest.lower() if algorithm == "sha256" else None))
    return listed


def _wheel_of(filename: str, requirement: Requirement) -> bool:
    """filename is a safe local name and a wheel of exactly this project and version."""
    if Path(filename).name != filename or filename.startswith("."):
        return False
    try:
        name, version, _, _ = parse_wheel_filename(filename)
        return name == requirement.name and version == Version(requirement.version)
    except (InvalidWheelFilename, InvalidVersion):
        return False


def fill_wheels(lock: Path, python: str, dest: Path, index_url: str = "https://pypi.org/simple") -> list[Path]:
    """Fill dest with one wheel per requirement of `lock` for hosts with CPython `python` ("3.11") on Linux x86_64,
    and write dest as a PEP 503 simple index; returns the wheels' paths, in lock order.

    Requirements whose environment marker is false on such a host are skipped. For each other one, the wheel is a
    file whose sha256 is among the lock's hashes and whose tags install there (wheel_rank; the best rank wins when
    several do), already in dest/files (then nothing is fetched: a second run needs no network) or listed by the
    simple index at index_url and downloaded to dest/files (verified before it takes its name; see _download).

    dest/simple/ then lists every wheel in dest/files, so that locks for several Pythons can share one dest:
    dest/simple/index.html and dest/simple/<normalized name>/index.html with
    <a href="../../files/<file>#sha256=<hex>"><file></a>; pages are replaced whole. Point vllm_index_url at
    http://<server>/simple. Every wheel in dest/files is hashed on each run (seconds per GB).

    Raises LockError (see lock_requirements) and ValueError for a bad `python`; NoMatchingWheel (a ValueError)
    naming every requirement without a matching wheel, after fetching the others (the index is then not
    rewritten); HashMismatch if the index lists a file under a lock hash but serves other bytes; FetchError (an
    OSError) if index_url fails.
    """
    glibc = lock_glibc(lock)  # the platform the lock was resolved for
    _supported_tags(python, glibc)  # a bad python fails before any work
    requirements = [r for r in lock_requirements(lock) if _applies(r, python)]
    files = Path(dest) / "files"
    files.mkdir(parents=True, exist_ok=True)
    have = {p.name: sha256_file(p) for p in sorted(files.glob("*.whl")) if p.is_file()}
    chosen: list[Path] = []
    missing: list[str] = []
    for req in requirements:
        local = [(rank, name) for name, sha in have.items()
                 if sha in req.hashes and _wheel_of(name, req) and (rank := wheel_rank(name, python, glibc)) is not None]
        if local:
            chosen.append(said(files / min(local)[1], "cached"))
            continue
        candidates = sorted(
            ((rank, f.sha256 is None, f.filename, f) for f in _project_files(index_url, req.name)
             if (f.sha256 is None or f.sha256 in req.hashes) and _wheel_of(f.filename, req)
             and (rank := wheel_rank(f.filename, python, glibc)) is not None),
            key=lambda c: c[:3])  # listed hashes first at equal rank: no download to find out
        got = None
        for _, _, filename, listed in candidates:
            try:
                have[filename] = _download(listed.url, files / filename,
                                           {listed.sha256} if listed.sha256 else set(req.hashes))
            except HashMismatch:
                if listed.sha256:  # listed under a lock hash, served otherwise: a broken mirror, not a choice
                    raise
                continue  # an unhashed listing of another build: try the next
            got = said(files / filename, "downloaded")
            break
        if got is None:
            missing.append(f"{req.name}=={req.version}")
        else:
            chosen.append(got)
    if missing:
        raise NoMatchingWheel(
            f"{', '.join(missing)}: no wheel on {index_url} whose sha256 is in {lock} and that installs on CPython "
            f"{python} manylinux_{glibc[0]}_{glibc[1]} x86_64. Fix: use the lock made for Python {python} "
            "(tools/lock_vllm.py), or an index that serves PyPI's files for these versions")
    _write_index(Path(dest), have)
    return chosen


def _write_atomic(path: Path, text: str) -> None:
    """Whole or not at all: a server may be serving the old page meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a server under another user must read it
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _page(title: str, links: list[tuple[str, str]]) -> str:
    anchors = "\n".join(f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>' for href, text in links)
    return (f'<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.0">\n'
            f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n{anchors}\n  </body>\n</html>\n")


def _write_index(dest: Path, hashes: dict[str, str]) -> None:
    """dest/simple from the wheels in dest/files (name -> sha256); pages of projects no longer there go."""
    projects: dict[str, list[str]] = {}
    for filename in sorted(hashes):
        try:
            projects.setdefault(parse_wheel_filename(filename)[0], []).append(filename)
        except InvalidWheelFilename:
            continue  # not a wheel uv could use
    simple = dest / "simple"
    for project, filenames in projects.items():
        _write_atomic(simple / project / "index.html", _page(
            f"Links for {project}", [(f"../../files/{quote(f)}#sha256={hashes[f]}", f) for f in filenames]))
    _write_atomic(simple / "index.html", _page("Simple index", [(f"{p}/", p) for p in sorted(projects)]))
    for page in simple.glob("*/index.html"):
        if page.parent.name not in projects:
            page.unlink()
            if not any(page.parent.iterdir()):
                page.parent.rmdir()
