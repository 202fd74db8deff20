"""v100kit/offline_pypi.py against the real thing: the shipped vLLM lock is parsed, small real packages are fetched
from PyPI (this machine reaches it), served by http.server from pytest's temporary directory and installed by uv
with the role's own flags (roles/vllm/decide.py install_flags); a retrying download meets a local server that
fails on purpose. Nothing here mocks pip, uv or the network; everything is written under tmp_path."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from roles.vllm.decide import install_flags
from v100kit import offline_pypi
from v100kit.offline_pypi import (FetchError, HashMismatch, LockError, NoMatchingWheel, Requirement, fill_file,
                                  fill_wheels, lock_requirements, wheel_rank)

ROOT = Path(__file__).resolve().parents[2]
VLLM_LOCK = ROOT / "files" / "vllm" / "vllm-0.8.5.post1-py3.11.txt"
PYPI = "https://pypi.org/simple"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"  # the venvs below are made from this interpreter


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def uv_binary() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "uv", shutil.which("uv")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.skip("no uv: tools/setup.sh installs it in .tools/bin")


def uv(tmp_path: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """uv with no user or system configuration and its cache under tmp_path."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    res = subprocess.run([uv_binary(), *args], capture_output=True, text=True, timeout=180,
                         env={**clean, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never",
                              "UV_CACHE_DIR": str(tmp_path / "uv-cache"), **env})
    if check:
        assert res.returncode == 0, f"uv {' '.join(args)}:\n{res.stdout}\n{res.stderr}"
    return res


class Recording(SimpleHTTPRequestHandler):
    """Serves a directory and records the paths asked for instead of logging them."""

    requests: list[str]

    def log_message(self, format, *args):  # noqa: A002 (http.server's name)
        pass

    def send_head(self):
        self.requests.append(self.path)
        return super().send_head()


@contextlib.contextmanager
def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve_dir(directory: Path, requests: list[str]):
    handler = type("Handler", (Recording,), {"requests": requests})
    return serve(functools.partial(handler, directory=str(directory)))


def closed_port_url() -> str:
    """An http URL nothing listens on: a fetch from it fails at once (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


# -- the lock ---------------------------------------------------------------------------------------------------

def test_the_shipped_vllm_lock_parses_to_one_requirement_per_pin():
    text = VLLM_LOCK.read_text()
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)  # counted without the module
    reqs = lock_requirements(VLLM_LOCK)
    assert len(reqs) == len(pins) > 100
    assert [(r.name, r.version) for r in reqs] == [(normalize(n), v) for n, v in pins]
    assert sum(len(r.hashes) for r in reqs) == text.count("--hash=sha256:")
    vllm_block = re.search(r"^vllm==0\.8\.5\.post1 \\\n((?:\s+--hash=sha256:\w+(?: \\)?\n)+)", text, re.M)
    vllm = [r for r in reqs if r.name == "vllm"]
    assert vllm == [Requirement("vllm", "0.8.5.post1", tuple(re.findall(r"sha256:(\w+)", vllm_block.group(1))))]
    assert len(vllm[0].hashes) == 2


def test_a_lock_with_comments_markers_extras_and_continuations(tmp_path):
    lock = tmp_path / "lock.txt"
    a, b, c = "a" * 64, "B" * 64, "c" * 64
    lock.write_text(
        "# header comment\n"
        "--index-url https://pypi.org/simple\n"
        "\n"
        f"Typing_Extensions==4.12.2 \\\n    --hash=sha256:{a} \\\n    --hash=sha256:{b}\n    # via -r in.txt\n"
        f"requests[socks]==2.32.3 ; python_version >= \"3.8\" --hash=sha256:{c}  # trailing comment\n"
        f"numpy==1.26.4 ; python_version < '3.12' \\\n    --hash=sha512:{'d' * 128} \\\n"
        f"    --hash=sha256:{a}\n")
    assert lock_requirements(lock) == [
        Requirement("typing-extensions", "4.12.2", (a, b.lower())),
        Requirement("requests", "2.32.3", (c,), 'python_version >= "3.8"'),
        Requirement("numpy", "1.26.4", (a,), 'python_version < "3.12"'),
    ]


@pytest.mark.parametrize("line, says", [
    (f"six>=1.16 --hash=sha256:{'a' * 64}", "not pinned"),
    ("six==1.17.0", "no --hash=sha256"),
    (f"six==1.* --hash=sha256:{'a' * 64}", "not pinned"),
    ("six==1.17.0 --hash=sha256:abc", "not a sha256"),
    (f"six==1.17.0 --no-binary six --hash=sha256:{'a' * 64}", "only --hash"),
    ("-r other.txt", "-r is not supported"),
    (f"six @ https://example.org/six.whl --hash=sha256:{'a' * 64}", "not pinned"),
    (f"!!! --hash=sha256:{'a' * 64}", "not a requirement"),
])
def test_a_lock_that_cannot_be_installed_hash_locked_is_refused_with_its_line(tmp_path, line, says):
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# comment\n{line}\n")
    with pytest.raises(LockError, match=re.escape(says)) as e:
        lock_requirements(lock)
    assert f"{lock}:2" in str(e.value) and isinstance(e.value, ValueError)


# -- which wheel fits a host ------------------------------------------------------------------------------------

def test_wheel_rank_prefers_the_hosts_own_build_and_refuses_what_does_not_install():
    rank = functools.partial(wheel_rank, python="3.11")
    own = rank("aiohttp-3.11.18-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    newer_glibc = rank("x-1-cp311-cp311-manylinux_2_28_x86_64.whl")
    abi3 = rank("x-1-cp39-abi3-manylinux_2_28_x86_64.whl")
    pure = rank("six-1.17.0-py2.py3-none-any.whl")
    assert newer_glibc < own < abi3 < pure
    assert rank("x-1-cp311-cp311-manylinux1_x86_64.whl") is not None  # legacy alias of manylinux_2_5
    for other in ("aiohttp-3.11.18-cp311-cp311-musllinux_1_2_x86_64.whl",
                  "x-1-cp311-cp311-manylinux_2_31_x86_64.whl",  # newer glibc than the locks' 2.28
                  "x-1-cp312-cp312-manylinux_2_17_x86_64.whl", "x-1-cp311-cp311-manylinux_2_17_aarch64.whl",
                  "x-1-cp311-cp311-win_amd64.whl", "six-1.17.0.tar.gz"):
        assert rank(other) is None, other
    with pytest.raises(ValueError, match="3.11"):
        wheel_rank("six-1.17.0-py2.py3-none-any.whl", "311")


# -- fill_wheels: PyPI -> directory -> http.server -> uv --------------------------------------------------------

def test_filled_directory_installs_with_the_roles_uv_flags_and_refuses_other_bytes(tmp_path):
    req = tmp_path / "in.txt"
    req.write_text("six==1.17.0\ntyping_extensions==4.12.2\n")
    lock = tmp_path / "lock.txt"
    uv(tmp_path, "pip", "compile", "--quiet", "--generate-hashes", "--only-binary", ":all:", "--python-version", PY,
       "--python-platform", "x86_64-manylinux_2_28", "--index-url", PYPI, str(req), "-o", str(lock))
    # a requirement for other hosts only: neither fill_wheels nor uv may look for it
    lock.write_text(lock.read_text() + f'not-a-v100kit-package==1.0 ; python_version < "3.0" \\\n'
                                       f"    --hash=sha256:{'0' * 64}\n")
    locked = {r.name: r for r in lock_requirements(lock)}
    assert set(locked) == {"six", "typing-extensions", "not-a-v100kit-package"}

    dest = tmp_path / "mirror"
    wheels = fill_wheels(lock, PY, dest, PYPI)
    assert [w.name for w in wheels] == ["six-1.17.0-py2.py3-none-any.whl",
                                        "typing_extensions-4.12.2-py3-none-any.whl"]  # no sdist: wheels only
    assert sorted(p.name for p in (dest / "files").iterdir()) == [w.name for w in wheels]  # no .part left
    for wheel, name in zip(wheels, ("six", "typing-extensions")):
        assert sha256(wheel) in locked[name].hashes
        page = (dest / "simple" / name / "index.html").read_text()
        assert f'href="../../files/{wheel.name}#sha256={sha256(wheel)}"' in page
    assert 'href="six/"' in (dest / "simple" / "index.html").read_text()

    requests: list[str] = []
    with serve_dir(dest, requests) as base:
        flags = install_flags(f"{base}/simple")

        def install(venv: Path, **env: str) -> subprocess.CompletedProcess:
            uv(tmp_path, "venv", "--quiet", "--python", sys.executable, str(venv))
            return uv(tmp_path, "pip", "install", "--python", str(venv / "bin" / "python"), *flags,
                      "-r", str(lock), check=False, **env)

        res = install(tmp_path / "venv1")
        assert res.returncode == 0, res.stderr
        out = subprocess.run([str(tmp_path / "venv1" / "bin" / "python"), "-c",
                              "import six, typing_extensions; print(six.__file__, typing_extensions.__file__)"],
                             capture_output=True, text=True, check=True).stdout
        assert all(Path(p).is_relative_to(tmp_path / "venv1") for p in out.split())
        assert {"/simple/six/", f"/files/{wheels[0].name}", f"/files/{wheels[1].name}"} <= set(requests)

        # the served directory is itself an index fill_wheels reads (PEP 503 HTML, not PyPI's JSON): a mirror's mirror
        copies = fill_wheels(lock, PY, tmp_path / "mirror2", f"{base}/simple")
        assert [c.read_bytes() for c in copies] == [w.read_bytes() for w in wheels]

        # a second fill needs no network: the index URL below refuses every connection
        before = {w.name: (w.stat().st_ino, w.stat().st_mtime_ns) for w in wheels}
        assert fill_wheels(lock, PY, dest, closed_port_url()) == wheels
        assert {w.name: (w.stat().st_ino, w.stat().st_mtime_ns) for w in wheels} == before

        # other bytes under a wheel's name: a fresh install (no cache) refuses them
        altered = tmp_path / "altered.whl"  # a valid wheel, one module changed: what a tampered mirror serves
        with zipfile.ZipFile(wheels[0]) as src, zipfile.ZipFile(altered, "w", zipfile.ZIP_DEFLATED) as out:
            for item in src.infolist():
                data = src.read(item)
                out.writestr(item, data + b"\nALTERED = True\n" if item.filename == "six.py" else data)
        os.replace(altered, wheels[0])
        res = install(tmp_path / "venv2", UV_NO_CACHE="1")
        assert res.returncode != 0 and "hash mismatch" in res.stderr.lower(), res.stderr
        assert not (tmp_path / "venv2" / "lib" / f"python{PY}" / "site-packages" / "six.py").exists()

    # the next fill replaces the altered wheel, and only it
    assert fill_wheels(lock, PY, dest, PYPI) == wheels
    assert sha256(wheels[0]) in locked["six"].hashes
    assert (wheels[1].stat().st_ino, wheels[1].stat().st_mtime_ns) == before[wheels[1].name]


def test_fill_wheels_picks_the_build_for_each_python_among_the_locks_hashes(tmp_path):
    # aiohttp's entry of the shipped lock: hashes of every build of 3.11.18 (Pythons, musl, aarch64, ...)
    block = re.search(r"^aiohttp==3\.11\.18 \\\n(?:\s+--hash=sha256:\w+(?: \\)?\n)+", VLLM_LOCK.read_text(), re.M)
    lock = tmp_path / "lock.txt"
    lock.write_text(block.group(0))
    dest = tmp_path / "mirror"
    [py311] = fill_wheels(lock, "3.11", dest, PYPI)
    [py312] = fill_wheels(lock, "3.12", dest, PYPI)  # same dest: the index serves both
    assert py311.name == "aiohttp-3.11.18-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert py312.name == "aiohttp-3.11.18-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert {sha256(py311), sha256(py312)} <= set(lock_requirements(lock)[0].hashes)
    page = (dest / "simple" / "aiohttp" / "index.html").read_text()
    assert py311.name in page and py312.name in page


def test_no_wheel_with_a_locked_hash_is_an_error_naming_the_requirement_and_the_fix(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text(f"six==1.17.0 \\\n    --hash=sha256:{'0' * 64}\n")
    with pytest.raises(NoMatchingWheel, match=r"six==1\.17\.0.*Fix:") as e:
        fill_wheels(lock, PY, tmp_path / "mirror", PYPI)
    assert isinstance(e.value, ValueError)
    assert list((tmp_path / "mirror" / "files").iterdir()) == []


# -- fill_file: retries, verification, no partial file ----------------------------------------------------------

class Flaky(SimpleHTTPRequestHandler):
    """Answers the first `failures` GETs with `status` (or, status 0, a body cut short), then the file."""

    body = b"the pinned file\n" * 1000
    failures = 2
    status = 503
    requests: list[str]

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_GET(self):
        self.requests.append(self.path)
        if not self.path.endswith("/tool-1.0.whl"):
            self.send_error(404)
        elif len(self.requests) <= self.failures and self.status:
            self.send_error(self.status)
        else:
            cut = len(self.requests) <= self.failures  # status 0: promise the whole file, send half
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            self.wfile.write(self.body[:len(self.body) // 2] if cut else self.body)
            self.close_connection = cut


@contextlib.contextmanager
def flaky(**attrs):
    """(base URL, the paths asked for so far)."""
    requests: list[str] = []
    with serve(type("Handler", (Flaky,), {"requests": requests, **attrs})) as base:
        yield base, requests


@pytest.fixture
def no_wait(monkeypatch):
    monkeypatch.setattr(offline_pypi, "RETRY_DELAY_S", 0.01)  # the retry count is what is tested, not the pause


def test_fill_file_retries_transient_errors_and_then_does_not_fetch_again(tmp_path, no_wait):
    pinned = hashlib.sha256(Flaky.body).hexdigest()
    with flaky() as (base, requests):
        path = fill_file(f"{base}/pkgs/tool-1.0.whl", pinned, tmp_path / "dl")
        assert path == tmp_path / "dl" / "tool-1.0.whl" and path.read_bytes() == Flaky.body
        assert len(requests) == 3  # 503, 503, 200
        assert fill_file(f"{base}/pkgs/tool-1.0.whl", pinned.upper(), tmp_path / "dl") == path
        assert len(requests) == 3  # there already with this sha256: not fetched again
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["tool-1.0.whl"]


def test_fill_file_retries_a_body_cut_short(tmp_path, no_wait):
    with flaky(status=0, failures=1) as (base, requests):
        path = fill_file(f"{base}/tool-1.0.whl", hashlib.sha256(Flaky.body).hexdigest(), tmp_path)
    assert path.read_bytes() == Flaky.body and len(requests) == 2


def test_fill_file_with_another_sha256_raises_and_keeps_nothing(tmp_path, no_wait):
    with flaky(failures=0) as (base, _), pytest.raises(HashMismatch, match="nothing was kept") as e:
        fill_file(f"{base}/tool-1.0.whl", "f" * 64, tmp_path / "dl")
    assert isinstance(e.value, ValueError)
    assert list((tmp_path / "dl").iterdir()) == []


def test_fill_file_gives_up_after_the_retries_and_at_once_on_a_permanent_error(tmp_path, no_wait):
    pinned = hashlib.sha256(Flaky.body).hexdigest()
    with flaky(failures=99) as (base, requests):
        with pytest.raises(FetchError, match="HTTP 503"):
            fill_file(f"{base}/tool-1.0.whl", pinned, tmp_path)
    assert len(requests) == offline_pypi.RETRIES + 1 == 6
    with flaky(failures=0) as (base, requests):
        with pytest.raises(FetchError, match="HTTP 404") as e:
            fill_file(f"{base}/other-1.0.whl", pinned, tmp_path)
    assert e.value.status == 404 and len(requests) == 1
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="64 hex"):
        fill_file("http://127.0.0.1/x.whl", "abc", tmp_path)


def test_a_lock_resolved_for_manylinux_2_31_fills_wheels_that_need_glibc_2_31(tmp_path):
    """vLLM 0.19.1's wheel is manylinux_2_31 (its name on PyPI: vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl), so
    its locks are resolved for that platform and say so in their first line; PEP 600: a manylinux_2_31 wheel needs
    glibc 2.31 or newer, so it is not taken for a 2.28 lock and is for a 2.31 one."""
    from v100kit.offline_pypi import lock_glibc
    from roles.vllm.versions import VLLM_RELEASES
    wheel = "vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl"
    assert wheel_rank(wheel, "3.12") is None
    assert wheel_rank(wheel, "3.12", (2, 31)) is not None
    assert wheel_rank("torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl", "3.12", (2, 31)) is not None
    assert lock_glibc(VLLM_RELEASES["0.19.1"].lock_file("3.12")) == (2, 31)
    assert lock_glibc(VLLM_RELEASES["0.10.2"].lock_file("3.12")) == (2, 28)
    other = tmp_path / "lock.txt"
    other.write_text("six==1.17.0\n")
    assert lock_glibc(other) == (2, 28)  # a lock that does not say: the default
