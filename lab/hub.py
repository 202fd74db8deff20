"""A local stand-in for the Hugging Face hub: the part of its HTTP API that huggingface_hub and roles/hub.py use,
served from directories on this machine, for tests without the internet.

- `GET /api/models/ORG/REPO/tree/COMMIT[/PATH]?recursive=..`: the file list as the hub gives it (type, path, size,
  oid = git blob id, lfs = {oid: sha256, size, pointerSize} for the file types the hub keeps in LFS).
- `HEAD|GET /ORG/REPO/resolve/COMMIT/PATH`: the file, with the hub's headers (X-Repo-Commit, ETag, and for an
  LFS file X-Linked-Etag = its sha256 and X-Linked-Size), and HTTP range requests (206 + Content-Range).
- An unknown repository, commit or file answers 404 with the hub's X-Error-Code (RepoNotFound, RevisionNotFound,
  EntryNotFound).

`tamper` serves other bytes for a file while listing the true checksums: what a broken mirror or a man in the
middle would do. Every request is recorded (method, path, Range header) in `requests`.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

#: suffixes the hub stores in LFS (the hub's default .gitattributes)
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".onnx", ".model", ".ckpt")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclass
class StandInHub:
    """repos: {"ORG/REPO": {COMMIT: directory}}; call start() then use .endpoint as HF_ENDPOINT; stop() when done."""

    repos: dict[str, dict[str, Path]]
    tamper: dict[str, bytes] = field(default_factory=dict)  # path in the repository -> bytes served instead
    #: one per request: {"method", "path", "range" (the Range header or None), "bytes" (body bytes sent)}
    requests: list[dict] = field(default_factory=list)
    host: str = "127.0.0.1"
    #: path -> sha256 to list for a file instead of hashing it: a sparse many-GB GGUF that a test never serves whole
    declared_sha256: dict[str, str] = field(default_factory=dict)
    _sha256: dict[Path, str] = field(default_factory=dict)

    def start(self) -> StandInHub:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):  # noqa: N802 (http.server's names)
                hub._answer(self, body=False)

            def do_GET(self):  # noqa: N802
                hub._answer(self, body=True)

        self._server = http.server.ThreadingHTTPServer((self.host, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> StandInHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def bytes_served(self, path_suffix: str) -> int:
        """Body bytes sent for files whose path ends with `path_suffix` (GET only; a range counts its length)."""
        return sum(r["bytes"] for r in self.requests if r["method"] == "GET" and r["path"].endswith(path_suffix))

    # -- the API ------------------------------------------------------------------------------------------

    def _files(self, repo: str, commit: str) -> dict[str, Path] | None:
        root = self.repos.get(repo, {}).get(commit)
        if root is None:
            return None
        return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}

    def _error(self, handler, code: int, error_code: str, message: str, body: bool) -> None:
        data = json.dumps({"error": message}).encode()
        handler.send_response(code)
        handler.send_header("X-Error-Code", error_code)
        handler.send_header("X-Error-Message", message)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def _answer(self, handler, body: bool) -> None:
        url = urlparse(handler.path)
        path = unquote(url.path)
        handler.record = {"method": handler.command, "path": path, "range": handler.headers.get("Range"), "bytes": 0,
                          "client": handler.client_address[0]}
        self.requests.append(handler.record)
        if m := re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path):
            return self._tree(handler, m[1], m[2], m[3] or "", body)
        if m := re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path):
            return self._resolve(handler, m[1], m[2], m[3], body)
        return self._error(handler, 404, "EntryNotFound", f"{path}: not part of the stand-in's API", body)

    def _lfs_oid(self, rel: str, p: Path) -> str:
        """The sha256 of the true file (declared_sha256 for a file too large to hash in a test)."""
        if rel in self.declared_sha256:
            return self.declared_sha256[rel]
        if p not in self._sha256:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self._sha256[p] = h.hexdigest()
        return self._sha256[p]

    def _pointer(self, rel: str, p: Path) -> bytes:
        """The git-lfs pointer file that git stores instead of the content (git-lfs spec v1)."""
        return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self._lfs_oid(rel, p)}\n"
                f"size {p.stat().st_size}\n").encode()

    def _missing(self, handler, repo: str, commit: str, body: bool) -> bool:
        if repo not in self.repos:
            self._error(handler, 404, "RepoNotFound", f"Repository Not Found for url: {repo}", body)
            return True
        if commit not in self.repos[repo]:
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {commit}", body)
            return True
        return False

    def _tree(self, handler, repo: str, commit: str, under: str, body: bool) -> None:
        if self._missing(handler, repo, commit, body):
            return
        entries, dirs = [], set()
        for rel, p in self._files(repo, commit).items():
            if under and not rel.startswith(under.rstrip("/") + "/"):
                continue
            size = p.stat().st_size
            entry = {"type": "file", "path": rel, "size": size}
            if rel.endswith(LFS_SUFFIXES):
                pointer = self._pointer(rel, p)
                entry.update(oid=git_blob_id(pointer), lfs={"oid": self._lfs_oid(rel, p), "size": size,
                                                             "pointerSize": len(pointer)})
            else:
                entry["oid"] = git_blob_id(p.read_bytes())
            entries.append(entry)
            dirs.update("/".join(rel.split("/")[:i]) for i in range(1, rel.count("/") + 1))
        entries += [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in sorted(dirs)]
        data = json.dumps(entries).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)
        handler.record["bytes"] = len(data) if body else 0

    def _resolve(self, handler, repo: str, commit: str, rel: str, body: bool) -> None:
        if self._missing(handler, repo, commit, body):
            return
        files = self._files(repo, commit)
        if rel not in files:
            return self._error(handler, 404, "EntryNotFound", f"{rel} does not exist on {commit}", body)
        p = files[rel]
        size = len(self.tamper[rel]) if rel in self.tamper else p.stat().st_size
        status, start, end = 200, 0, size - 1
        if (r := handler.headers.get("Range")) and (m := re.match(r"^bytes=(\d+)-(\d*)$", r)):
            start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
            status = 206
        handler.send_response(status)
        handler.send_header("X-Repo-Commit", commit)
        handler.send_header("Accept-Ranges", "bytes")
        if rel.endswith(LFS_SUFFIXES):
            handler.send_header("ETag", f'"{git_blob_id(self._pointer(rel, p))}"')
            handler.send_header("X-Linked-Etag", f'"{self._lfs_oid(rel, p)}"')
            handler.send_header("X-Linked-Size", str(size))
        else:
            handler.send_header("ETag", f'"{git_blob_id(p.read_bytes())}"')
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        handler.send_header("Content-Length", str(end + 1 - start))
        handler.end_headers()
        if not body:
            return
        if rel in self.tamper:
            handler.wfile.write(self.tamper[rel][start:end + 1])
        else:
            with open(p, "rb") as f:
                f.seek(start)
                left = end + 1 - start
                while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                    handler.wfile.write(chunk)
                    left -= len(chunk)
        handler.record["bytes"] = end + 1 - start
