"""Models from a Hugging Face hub, pinned to a commit: `model_source: hf://ORG/REPO@COMMIT[/FILE]`.

Both engines' `model_source` may name a hub repository at a commit (40 hex digits, never a branch: a branch moves,
and a colleague's rebuild would get other weights). llama.cpp takes one GGUF file of it (`/FILE`), vLLM the
snapshot (every top-level file but weights in other formats). The control machine fetches them with
`huggingface_hub` (its cache, `HF_HUB_CACHE`; `HF_ENDPOINT` names a mirror), then the roles copy them to the hosts
as they copy any control-machine model.

Two steps, so that a model that does not fit moves no weights:
1. `header_copy` (plan and preflight): the repository's file list with the hub's own checksums (its tree API), the
   small files whole, and of each weight file only its header, by HTTP range requests, written into a sparse file
   of the real size. The planner reads that copy like the real file (GGUF metadata and tensor table; safetensors
   header). Cached per commit under `~/.cache/v100kit/hub-headers` (a commit never changes).
2. `download` (deploy, after the preflight accepted the plan): `hf_hub_download` of each file (it writes to a
   temporary file and renames it only when complete: an interrupted download is never used, and starts again),
   then each file checked against the hub's checksum for that commit: the sha256 of an LFS file (its LFS object id), the git blob id (sha1 of "blob SIZE\\0" + content) of
   another. A file that differs is removed from the cache and refused with its name; a verified file is not fetched
   again (huggingface_hub returns a cached file of a commit without asking the hub).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from roles.engines import sha256_file
# the form of an hf:// source, which the settings check without this module
from roles.hub_source import COMMIT, HUB_SOURCE, is_hub_source, source_problem  # noqa: F401
from roles.settings import SettingsError, problem

#: the parts of a split GGUF (llama.cpp's gguf-split names them NAME-00001-of-00003.gguf)
SPLIT_GGUF = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
#: weights vLLM does not load from a safetensors model (left out of a snapshot: they would double the download)
OTHER_WEIGHTS = (".bin", ".pth", ".pt", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf", ".tflite", ".ot")
#: first range read of a GGUF header; doubled until the whole header (metadata + tensor table) is inside it
GGUF_FIRST_READ = 4 << 20
GGUF_MAX_HEADER = 512 << 20


class HubError(ValueError):
    """A hub source that cannot be used: unreachable, unknown repository or commit, no such file, or a file whose
    checksum differs from the hub's. The message names the source and the file."""


@dataclass(frozen=True)
class HubSource:
    """One parsed `hf://` source."""

    repo: str  # ORG/REPO
    revision: str  # 40 hex digits
    path: str | None  # one file (llama.cpp), or None for the snapshot (vLLM)

    def __str__(self) -> str:
        return f"hf://{self.repo}@{self.revision}" + (f"/{self.path}" if self.path else "")


@dataclass(frozen=True)
class HubFile:
    """A file of a repository at a commit, as the hub lists it. `size` in bytes; `sha256` is the LFS object id (None
    for a file kept in git itself); `git_oid` the git blob id."""

    path: str
    size: int
    git_oid: str
    sha256: str | None


def endpoint() -> str:
    """The hub's base URL: HF_ENDPOINT (a mirror), else https://huggingface.co. Read at each call, not at import."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_cache() -> Path:
    """huggingface_hub's cache directory: HF_HUB_CACHE as set now, else huggingface_hub's own choice (which also
    reads HUGGINGFACE_HUB_CACHE, HF_HOME and XDG_CACHE_HOME)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def headers_cache() -> Path:
    """Where header copies live: V100KIT_HUB_HEADERS, else ~/.cache/v100kit/hub-headers."""
    return Path(os.environ.get("V100KIT_HUB_HEADERS", Path.home() / ".cache" / "v100kit" / "hub-headers"))


def parse(value: str) -> HubSource:
    """The HubSource of a valid hf:// value (check it with source_problem first). Raises HubError otherwise."""
    m = HUB_SOURCE.match(value)
    if not m or not COMMIT.match(m["revision"]):
        raise HubError(f"{value}: not hf://ORG/REPO@COMMIT[/FILE]")
    return HubSource(m["repo"], m["revision"], m["path"])


#: seconds to connect to the hub, and to wait for each read: huggingface_hub's own client waits forever, so a hub
#: that accepts a connection and never answers would hang a plan or a deploy
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 10, 60
#: a file-list request answered 429 or 5xx is made this many times in all, at most this many seconds apart
TREE_ATTEMPTS, RETRY_WAIT_MAX_S = 4, 10
_CLIENT_SET = False


def _client() -> None:
    """huggingface_hub's shared HTTP client, with CONNECT_TIMEOUT_S / READ_TIMEOUT_S (once per process)."""
    global _CLIENT_SET
    if _CLIENT_SET:
        return
    import httpx2
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils._http import hf_request_event_hook

    set_client_factory(lambda: httpx2.Client(event_hooks={"request": [hf_request_event_hook]}, follow_redirects=True,
                                             timeout=httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)))
    _CLIENT_SET = True


def listing(src: HubSource) -> list[HubFile]:
    """The files `src` takes, with the hub's checksums: the one file, or the snapshot's top-level files without
    weights in other formats. Raises HubError for an unknown repository or commit, a missing file, a snapshot
    without safetensors, or a hub that cannot be reached."""
    # a commit's file list never changes: kept beside the header copies, so that a later plan or deploy of the same
    # commit needs no hub at all (the files themselves are in huggingface_hub's cache)
    kept = headers_cache() / src.repo.replace("/", "--") / src.revision / ".listing.json"
    if kept.is_file():
        files = [HubFile(**f) for f in json.loads(kept.read_text())]
    else:
        try:
            files = _tree(src)
        except Exception as e:  # noqa: BLE001 (HTTP status, connection, timeout, name validation: all one refusal)
            raise HubError(f"{src}: the hub's file list cannot be read ({_reason(e)})") from None
        kept.parent.mkdir(parents=True, exist_ok=True)
        part = kept.with_name(f"{kept.name}.{os.getpid()}.part")
        part.write_text(json.dumps([f.__dict__ for f in files]))
        os.replace(part, kept)
    if src.path:
        if SPLIT_GGUF.search(src.path):
            raise HubError(f"{src}: a split GGUF (one part of several): the toolkit places one file per instance; "
                           "merge the parts with llama.cpp's `llama-gguf-split --merge` and give that file (a local "
                           "path), or choose a quant type that fits in one file")
        chosen = [f for f in files if f.path == src.path]
        if not chosen:
            raise HubError(f"{src}: the repository has no {src.path} at this commit (its .gguf files: "
                           f"{', '.join(f.path for f in files if f.path.endswith('.gguf')) or 'none'})")
        return chosen
    chosen = [f for f in files if "/" not in f.path and not f.path.startswith(".")
              and not f.path.endswith(OTHER_WEIGHTS)]
    if any(f.path.endswith(".safetensors") and not f.path.startswith("consolidated") for f in chosen):
        # Mistral's repositories carry the same weights twice: consolidated*.safetensors (its own format) beside
        # the Hugging Face shards that vLLM loads
        chosen = [f for f in chosen if not (f.path.startswith("consolidated") and f.path.endswith(".safetensors"))]
    if not any(f.path.endswith(".safetensors") for f in chosen):
        raise HubError(f"{src}: no .safetensors weights at the top of the repository (vLLM on this toolkit loads "
                       "safetensors)")
    return chosen


def _tree(src: HubSource) -> list[HubFile]:
    """Every file of the repository at the commit, from the hub's tree API (`/api/models/REPO/tree/REV`, the
    request HfApi.list_repo_tree makes, page by page). Our own loop because list_repo_tree sends its requests with
    no timeout at all (huggingface_hub 2.4.0 passes timeout=None, which overrides the client's): here each request
    has CONNECT_TIMEOUT_S / READ_TIMEOUT_S, a timeout is not retried, and 429/5xx answers are, TREE_ATTEMPTS
    times in all, at most RETRY_WAIT_MAX_S apart whatever their Retry-After says.
    Raises huggingface_hub's errors (RepositoryNotFoundError, RevisionNotFoundError, ...) or httpx2's."""
    import httpx2
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    _client()
    url: str | None = f"{endpoint()}/api/models/{src.repo}/tree/{quote(src.revision, safe='')}"
    params: dict | None = {"recursive": True, "expand": False}
    files = []
    while url:
        for attempt in range(TREE_ATTEMPTS):  # 429 and 5xx again, a few s apart (a Retry-After is capped)
            response = get_session().get(url, params=params, headers=build_hf_headers(), follow_redirects=True,
                                         timeout=httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
            if response.status_code not in (429, 500, 502, 503, 504) or attempt == TREE_ATTEMPTS - 1:
                break
            wait = response.headers.get("Retry-After", "")
            time.sleep(min(float(wait) if wait.isdigit() else 2.0, RETRY_WAIT_MAX_S))
        hf_raise_for_status(response)
        for entry in response.json():
            if entry.get("type") == "file":
                f = RepoFile(**entry)
                files.append(HubFile(f.path, f.size, f.blob_id, f.lfs.sha256 if f.lfs else None))
        url, params = response.links.get("next", {}).get("url"), None  # the next page's URL carries its query
    return files


def _reason(e: Exception) -> str:
    """The error in one line: huggingface_hub puts the status on the first line and the hub's own words
    ("Repository Not Found for url: ...", "Invalid rev id: ...") on the next ones."""
    text = "; ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
    return text[:400]


def _get_range(src: HubSource, path: str, start: int, end: int) -> bytes:
    """Bytes start..end (inclusive) of `path` at the commit, by an HTTP range request."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    _client()
    url = hf_hub_url(src.repo, path, revision=src.revision, endpoint=endpoint())
    headers = {**build_hf_headers(), "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
    data = bytearray()
    try:
        with get_session().stream("GET", url, headers=headers, follow_redirects=True) as response:
            if response.status_code not in (200, 206):
                raise HubError(f"{src}: {path}: HTTP {response.status_code} for a range request")
            skip = start if response.status_code == 200 else 0  # a server that ignores Range sends the whole file:
            for chunk in response.iter_bytes():                 # read only up to `end`, then hang up
                data += chunk
                if len(data) >= skip + end + 1 - start:
                    break
    except HubError:
        raise
    except Exception as e:  # noqa: BLE001 (connection, timeout: one refusal)
        raise HubError(f"{src}: {path}: {_reason(e)}") from None
    return bytes(data[skip:skip + end + 1 - start])


def _sparse(path: Path, head: bytes, size: int) -> None:
    """`path` holds `head` and is `size` bytes long (the rest a hole: no disk, reads as zeros)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    with open(part, "wb") as f:
        f.write(head)
        f.truncate(size)
    os.replace(part, path)


def _gguf_header_end(path: Path) -> int:
    """Where the tensor data of the GGUF at `path` starts (bytes), read with the gguf package."""
    import gguf

    return int(gguf.GGUFReader(path).data_offset)


def _copy_gguf_header(src: HubSource, f: HubFile, dest: Path) -> None:
    want = GGUF_FIRST_READ
    while True:
        head = _get_range(src, f.path, 0, min(want, f.size, GGUF_MAX_HEADER) - 1)
        if head[:4] != b"GGUF":  # the format's magic (GGUF spec): not a GGUF at all, whatever its name
            raise HubError(f"{src}: {f.path}: not a GGUF file (it starts with {head[:4]!r}, not b'GGUF')")
        _sparse(dest, head, f.size)
        try:
            end = _gguf_header_end(dest)
        except Exception:  # noqa: BLE001 (a header cut short reads as garbage: read more)
            end = None
        # the reader parses front to back: if it ended inside the bytes read, every byte it used was real
        if end is not None and end <= len(head):
            return
        if len(head) >= f.size or len(head) >= GGUF_MAX_HEADER:
            dest.unlink(missing_ok=True)
            raise HubError(f"{src}: {f.path}: no GGUF header within its first {len(head)} bytes")
        want *= 4


def _copy_safetensors_header(src: HubSource, f: HubFile, dest: Path) -> None:
    """safetensors format: an 8-byte little-endian header length N, then N bytes of JSON header."""
    (n,) = struct.unpack("<Q", _get_range(src, f.path, 0, 7))
    if n + 8 > f.size:
        raise HubError(f"{src}: {f.path}: safetensors header length {n} does not fit the file ({f.size} bytes)")
    _sparse(dest, _get_range(src, f.path, 0, 8 + n - 1), f.size)


def header_copy(src: HubSource) -> Path:
    """A local copy of `src` for the planner: the small files whole, each weight file's header in a sparse file of
    the real size. Returns the GGUF file's path (with a file) or the directory. Cached per commit. Raises HubError
    (unreachable hub, unknown commit or file, no header)."""
    root = headers_cache() / src.repo.replace("/", "--") / src.revision
    done = root / ".complete" / (src.path or "snapshot").replace("/", "--")
    if done.is_file():
        return root / src.path if src.path else root
    for f in listing(src):
        dest = root / f.path
        if f.path.endswith(".gguf"):
            _copy_gguf_header(src, f, dest)
        elif f.path.endswith(".safetensors"):
            _copy_safetensors_header(src, f, dest)
        elif f.sha256 is None:  # a small file kept in git: config.json, the tokenizer's files, checked like a download
            data = _get_range(src, f.path, 0, max(f.size - 1, 0)) if f.size else b""
            if (have := git_blob_bytes_id(data)) != f.git_oid:
                raise HubError(f"{src}: {f.path}: git blob id {have} is not the hub's {f.git_oid} for this commit "
                               "(the mirror or the download altered it)")
            _sparse(dest, data, f.size)
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(str(src))
    return root / src.path if src.path else root


def is_header_copy(path: str | Path) -> bool:
    """True for a path inside the header copies (the planner's stand-in for weights not downloaded yet)."""
    try:
        Path(path).resolve().relative_to(headers_cache().resolve())
        return True
    except ValueError:
        return False


def git_blob_bytes_id(data: bytes) -> str:
    """The git blob id of `data`: sha1 of b"blob SIZE\\0" + data (git's object format)."""
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def git_blob_id(path: Path) -> str:
    """The git blob id of a file: sha1 of b"blob SIZE\\0" + content (git's object format)."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: (resolved blob path, size, mtime_ns) -> checksum already verified in this process (one hash per file per run)
_VERIFIED: dict[tuple[str, int, int], str] = {}


def verify(src: HubSource, f: HubFile, path: Path) -> None:
    """Raise HubError unless the file at `path` has the hub's checksum for `f` (sha256 of an LFS file, else the git
    blob id). The message names the file and both checksums."""
    blob = Path(path).resolve()
    stat = blob.stat()
    key = (str(blob), stat.st_size, stat.st_mtime_ns)
    want = f.sha256 or f.git_oid
    if _VERIFIED.get(key) == want:
        return
    have = sha256_file(blob) if f.sha256 else git_blob_id(blob)
    if have != want:
        raise HubError(f"{src}: {f.path}: {'sha256' if f.sha256 else 'git blob id'} {have} is not the hub's {want} "
                       "for this commit (the mirror or the download altered it)")
    _VERIFIED[key] = want


def download(src: HubSource) -> Path:
    """Fetch `src` into huggingface_hub's cache and verify every file against the hub's checksums. Returns the
    GGUF file's path (with a file) or the snapshot directory. A file that fails the check is removed from the cache
    (blob and link) and HubError names it."""
    from huggingface_hub import hf_hub_download

    _client()
    files, snapshot = listing(src), None
    for f in files:
        try:
            local = Path(hf_hub_download(src.repo, f.path, revision=src.revision, endpoint=endpoint(),
                                         cache_dir=hub_cache()))
        except Exception as e:  # noqa: BLE001 (HTTP status, connection, timeout: one refusal)
            raise HubError(f"{src}: {f.path}: download failed ({_reason(e)})") from None
        try:
            verify(src, f, local)
        except HubError:
            blob = local.resolve()
            local.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            raise
        snapshot = Path(str(local)[: -len(f.path)]) if snapshot is None else snapshot
    assert snapshot is not None  # listing() returns at least one file
    if src.path:
        return snapshot / src.path
    # the snapshot directory may hold more than this source takes (files fetched for this commit by other tools):
    # the model directory the roles copy is one of links to exactly the verified files
    model = headers_cache().parent / "hub-models" / src.repo.replace("/", "--") / src.revision
    model.mkdir(parents=True, exist_ok=True)
    wanted = {f.path for f in files}
    for old in model.iterdir():
        if old.name not in wanted:
            old.unlink()
    for f in files:
        link = model / f.path
        if not link.is_symlink() or link.resolve() != (snapshot / f.path).resolve():
            link.unlink(missing_ok=True)
            link.symlink_to((snapshot / f.path).resolve())
    return model


def sha256_of(src: HubSource) -> str:
    """The hub's sha256 of the one file of `src` (its LFS object id). Raises HubError for a file kept in git."""
    (f,) = listing(src)
    if f.sha256 is None:
        raise HubError(f"{src}: {f.path} is not an LFS file: the hub lists no sha256 for it")
    return f.sha256


def resolved(host_name: str, settings, fetch: bool, engines=()):
    """`settings` with every hf:// model_source replaced by a control-machine path the roles and the planner read:
    header copies (`fetch` False: plan and preflight, no weights move) or the verified download (`fetch` True:
    deploy, after the preflight accepted the header plan), for the instances of each of `engines` (Engine,
    roles/engine_registry.py ENGINES; passed in, since the engines' packages import this module). An instance of an
    engine with hub_sha256 gets the hub's sha256 as model_sha256 (a model_sha256 set by hand must equal it).
    `settings` unchanged without hf:// sources. Raises SettingsError naming the instance key, the source and the
    fix."""
    problems, tables = [], {e.key: dict(getattr(settings, e.key)) for e in engines}
    for engine in engines:
        kind, instances = engine.key, tables[engine.key]
        for name, inst in instances.items():
            if not is_hub_source(inst.model_source):
                continue
            key, src = f"{kind}.{name}.model_source", parse(inst.model_source)
            try:
                path = download(src) if fetch else header_copy(src)
                update = {"model_source": str(path)}
                if engine.hub_sha256:
                    sha = sha256_of(src)
                    if inst.model_sha256 and inst.model_sha256 != sha:
                        problems.append(problem(f"{kind}.{name}.model_sha256", inst.model_sha256,
                                                f"the hub lists sha256 {sha} for {src}",
                                                "leave model_sha256 unset for a hub source (the hub's is used), or "
                                                "check the commit"))
                        continue
                    update["model_sha256"] = sha
                instances[name] = inst.model_copy(update=update)
            except HubError as e:
                problems.append(problem(key, inst.model_source, str(e).removeprefix(f"{src}: "),
                                        "check the repository, commit and file on the hub (HF_ENDPOINT: "
                                        f"{endpoint()}); a file refused for its checksum was removed from the "
                                        "cache and is fetched again next time"))
    if problems:
        raise SettingsError(host_name, problems)
    if all(tables[k] == getattr(settings, k) for k in tables):
        return settings
    return settings.model_copy(update=tables)
