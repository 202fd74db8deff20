"""The apt part of an offline directory: for each repository a host's sources name (roles/base/decide.py
managed_repositories), its signed InRelease as the archive publishes it, the package indexes apt reads for the
host's architecture (each checked against the InRelease's SHA256 list, also stored under by-hash/SHA256/, where apt
asks for them), and every .deb a host is missing for the packages the deploy installs (checked against the
index's SHA256). Laid out as the archive is: DIR/apt/<host>/<path>/dists/..., .../pool/...; so one HTTP server
on the control machine is the host's mirror (base_apt_mirror, base_apt_security_mirror, cuda_nvidia_repo_url) and
the host's apt checks the archive's signature, the indexes and the .debs as it would online.

Which .debs: apt itself decides, on the control machine, with the host's own dpkg status file, the indexes of
the directory (served on loopback) and `apt-get install --print-uris` of the packages the deploy's commands
install (`apt_packages`)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from roles.engines import sha256_file

#: apt's preferred compression order (apt.conf Acquire::CompressionTypes::Order, defaults): the first one the
#: InRelease lists is the one a host downloads
COMPRESSION = (".xz", ".bz2", ".lzma", ".gz", ".zst", ".lz4", "")


class OfflineError(ValueError):
    """A repository, index or package that cannot be put into the offline directory; the message names it."""


@dataclass(frozen=True)
class Deb:
    """One .deb to fetch: its URL on the original mirror, size in bytes, sha256 from the archive's index."""

    url: str
    size: int
    sha256: str


def local_path(root: Path, url: str) -> Path:
    """Where `url` lives in the offline directory: ROOT/<host>/<path> (the archive's own layout)."""
    u = urlparse(url)
    if u.scheme not in ("http", "https") or ".." in u.path.split("/"):
        raise OfflineError(f"{url}: not an http(s) URL of an archive file")
    return root / u.netloc / u.path.lstrip("/")


def served_url(base: str, url: str) -> str:
    """`url` as the offline server at `base` (http://ADDRESS:PORT/apt) serves it."""
    u = urlparse(url)
    return f"{base.rstrip('/')}/{u.netloc}/{u.path.lstrip('/')}"


def _fetch(url: str, dest: Path, sha256: str | None = None) -> Path:
    """Download `url` to `dest` with offline_pypi's downloader (a .part file renamed once complete, transient
    failures retried); with `sha256`, keep an existing file that has it and refuse a download that does not.
    Prints the file's progress line on stderr (offline_pypi.said). Raises OfflineError."""
    from v100kit.offline_pypi import OfflinePypiError, _download, said

    if sha256 and dest.is_file() and sha256_file(dest) == sha256:
        return said(dest, "cached")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        _download(url, dest, {sha256} if sha256 else None)
    except (OfflinePypiError, OSError) as e:
        raise OfflineError(f"{url}: {e}") from None
    return said(dest, "downloaded")


def release_sha256(inrelease: str) -> dict[str, tuple[str, int]]:
    """The SHA256 section of a Release/InRelease file: {path relative to the Release: (sha256, bytes)}."""
    out, inside = {}, False
    for line in inrelease.splitlines():
        if line.startswith("SHA256:"):
            inside = True
            continue
        if inside:
            if not line.startswith(" "):
                inside = False
                continue
            sha, size, path = line.split()
            out[path] = (sha, int(size))
    return out


def wanted_indexes(listed: dict[str, tuple[str, int]], components: tuple[str, ...], arch: str,
                   all_in_arch: bool = False) -> dict[str, tuple[str, int]]:
    """The index files apt downloads for `arch`: per component (none for a flat repository) the Packages index
    (and binary-all's, unless `all_in_arch`: the Release says No-Support-for-Architecture-all, so apt reads
    architecture-independent packages from binary-ARCH) and the English translations, each in the first
    compression of COMPRESSION that the Release lists."""
    prefixes = [f"{c}/" for c in components] or [""]
    chosen = {}
    for prefix in prefixes:
        bases = [f"{prefix}binary-{arch}/Packages", f"{prefix}i18n/Translation-en"]
        bases += [] if all_in_arch else [f"{prefix}binary-all/Packages"]
        bases += [] if components else ["Packages"]
        for base in bases:
            for ext in COMPRESSION:
                if base + ext in listed:
                    chosen[base + ext] = listed[base + ext]
                    break
    return chosen


def release_dir(uri: str, suite: str) -> str:
    """The URL of the directory holding the InRelease of `suite` (a flat repository's suite is '/')."""
    return uri.rstrip("/") + "/" if suite == "/" else f"{uri.rstrip('/')}/dists/{suite}/"


def fill_repository(root: Path, uri: str, suite: str, components: tuple[str, ...], arch: str) -> list[Path]:
    """InRelease and the indexes of one suite of one repository into ROOT (the archive's layout, by-hash copies
    as hard links). Returns the files written or kept. Raises OfflineError (unreachable, an index whose sha256
    differs from the InRelease)."""
    base = release_dir(uri, suite)
    inrelease = _fetch(base + "InRelease", local_path(root, base + "InRelease"))
    text = inrelease.read_text(errors="replace")
    listed = release_sha256(text)
    if not listed:
        raise OfflineError(f"{base}InRelease: no SHA256 list")
    files = [inrelease]
    # apt reads binary-all only where the Release lists the 'all' architecture and does not say that those
    # packages are in binary-ARCH too
    archs = (re.search(r"^Architectures: (.*)$", text, re.M) or [None, ""])[1].split()
    all_in_arch = "all" not in archs or re.search(r"^No-Support-for-Architecture-all: Packages$", text, re.M) is not None
    for rel, (sha, _) in wanted_indexes(listed, () if suite == "/" else components, arch, all_in_arch).items():
        # by its hash first: the file under its name may already be newer than this InRelease (an archive that
        # updates, like the security archive, or a cache in between); a repository without by-hash serves the name
        directory, name = rel.rpartition("/")[0], rel.rpartition("/")[2]
        hashed = f"{base}{directory + '/' if directory else ''}by-hash/SHA256/{sha}"
        try:
            by_hash = _fetch(hashed, local_path(root, hashed), sha)
        except OfflineError:
            by_hash = _fetch(base + rel, local_path(root, hashed), sha)
        path = local_path(root, base + rel)
        if not path.exists() or not os.path.samefile(path, by_hash):
            tmp = path.with_name(f"{path.name}.{os.getpid()}.link")
            os.link(by_hash, tmp)
            os.replace(tmp, path)
        files += [path, by_hash]
    return files


def apt_packages(commands: list[str]) -> list[str]:
    """The package arguments (NAME or NAME=VERSION) of every `apt-get ... install` in a deploy's commands, in
    order, each once."""
    out: list[str] = []
    for command in commands:
        for part in re.split(r"&&|\|\||;|\|", command):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            if "apt-get" not in words or "install" not in words:
                continue
            words = words[words.index("install") + 1:]
            for w in words:
                if not w.startswith("-") and w not in out:
                    out.append(w)
    return out


def resolve(root: Path, repositories: list[tuple[str, tuple[str, ...], tuple[str, ...]]], packages: list[str],
            dpkg_status: str, arch: str, serve_base: str) -> list[Deb]:
    """The .debs a host with `dpkg_status` (its /var/lib/dpkg/status) is missing for `packages`, as apt decides
    with the directory's indexes: apt-get update from `serve_base` (the offline server on loopback: this also
    proves the directory answers every index a host asks for), then install --print-uris. `repositories`:
    (URI, suites, components). Raises OfflineError with apt's own message."""
    with tempfile.TemporaryDirectory(prefix="v100kit-apt-") as tmp:
        t = Path(tmp)
        for d in ("etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d", "lists/partial",
                  "cache/archives/partial", "state"):
            (t / d).mkdir(parents=True, exist_ok=True)
        lines = []
        for uri, suites, components in repositories:
            for suite in suites:
                served = served_url(serve_base, uri)
                lines.append(f"deb [trusted=yes arch={arch}] {served} {suite} {' '.join(components) if suite != '/' else ''}"
                             .rstrip())
        (t / "etc/apt/sources.list").write_text("\n".join(lines) + "\n")
        (t / "state/status").write_text(dpkg_status)
        opts = ["-o", f"Dir::Etc={t}/etc/apt", "-o", f"Dir::State::Lists={t}/lists",
                "-o", f"Dir::State::status={t}/state/status", "-o", f"Dir::Cache={t}/cache",
                "-o", f"APT::Architecture={arch}", "-o", "APT::Architectures::=", "-o", "Debug::NoLocking=1",
                "-o", "Acquire::Languages=en", "-o", "Acquire::http::Proxy=DIRECT", "-o", "Dir::Etc::Parts=/dev/null",
                "-o", f"APT::Sandbox::User={os.environ.get('USER') or 'root'}", "-o", "Acquire::Retries=0"]
        env = {**os.environ, "LC_ALL": "C"}
        update = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, env=env)
        if update.returncode != 0 or "Failed to fetch" in update.stdout + update.stderr:
            raise OfflineError(f"apt-get update from the offline directory failed: {(update.stderr or update.stdout)[-1500:]}")
        run = subprocess.run(["apt-get", *opts, "install", "--print-uris", "-qq", "-y", "--no-install-recommends",
                              *packages], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            raise OfflineError(f"apt cannot install {' '.join(packages)} from the offline directory: "
                               f"{run.stderr.strip()[-1500:]}")
    checksums = pool_checksums(root, repositories)
    debs, prefix = [], serve_base.rstrip("/") + "/"
    for line in run.stdout.splitlines():
        if not line.startswith("'"):
            continue
        # 'URL' FILE SIZE HASH, where HASH is empty when the index lists only SHA256 (the security archive)
        m = re.match(r"^'([^']+)' \S+ (\d+)(?: \S*)?$", line.strip())
        if not m or not m[1].startswith(prefix):
            raise OfflineError(f"apt-get --print-uris printed a line this cannot read: {line!r}")
        url = "http://" + unquote(m[1][len(prefix):])
        if url not in checksums:
            raise OfflineError(f"{url}: apt chose it, but no index of the offline directory lists its sha256")
        debs.append(Deb(url, int(m[2]), checksums[url]))
    return debs


def pool_checksums(root: Path, repositories: list[tuple[str, tuple[str, ...], tuple[str, ...]]]) -> dict[str, str]:
    """{http://HOST/PATH/pool/... of each package: its SHA256} from the Packages indexes stored under ROOT (the
    archive's own checksums, which the host's apt checks too)."""
    import bz2
    import gzip
    import lzma

    opener = {".xz": lzma.open, ".lzma": lzma.open, ".bz2": bz2.open, ".gz": gzip.open, "": open}
    out = {}
    for uri, suites, components in repositories:
        for suite in suites:
            base = release_dir(uri, suite)
            top = local_path(root, base)
            for index in sorted(top.rglob("Packages*")):
                if "by-hash" in index.parts or index.suffix not in opener:
                    continue
                archive_root = "http://" + urlparse(uri).netloc + urlparse(uri).path.rstrip("/") + "/"
                # a flat repository's Filename is relative to its own directory, a pool's to the archive root
                rel_to = "http://" + urlparse(base).netloc + urlparse(base).path if suite == "/" else archive_root
                with opener[index.suffix](index, "rt", errors="replace") as f:
                    filename = sha = None
                    for line in f:
                        if line.startswith("Filename: "):
                            filename = line[10:].strip()
                        elif line.startswith("SHA256: "):
                            sha = line[8:].strip()
                        elif not line.strip():
                            if filename and sha:
                                out[rel_to + filename.removeprefix("./")] = sha
                            filename = sha = None
                    if filename and sha:
                        out[rel_to + filename.removeprefix("./")] = sha
    return out


def fill_debs(root: Path, debs: list[Deb], scheme_of: dict[str, str]) -> list[Path]:
    """Download each .deb from its original mirror into ROOT, checked against its index's sha256 (a verified file
    already there is kept). `scheme_of`: {host: 'http' or 'https'} of the original repositories."""
    out = []
    for deb in debs:
        u = urlparse(deb.url)
        original = f"{scheme_of.get(u.netloc, 'http')}://{u.netloc}{u.path}"
        out.append(_fetch(original, local_path(root, original), deb.sha256))
    return out
