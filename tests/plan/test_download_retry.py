"""Plan-level tests (facts in, commands out), then real curl: every download a deploy makes from the network (the
llama.cpp source, a GGUF model URL, the uv wheel, NVIDIA's repository key) survives a registry that answers
503 Service Unavailable twice before it serves the file. The curl arguments are the ones the plan holds; only the
URL is pointed at a local server, and the file is written to a temporary path. (CI once failed on one 503 from
PyPI's file host for the uv wheel.)"""

from __future__ import annotations

import http.server
import shlex
import subprocess
import threading

import pytest

from lab.data import tiny_hf_model
from roles.llama_cpp.versions import DEFAULT_SOURCE
from roles.vllm.versions import UV_WHEEL_URL
from tests.plan.harness import DEBIAN_13, UBUNTU_2204, UBUNTU_2404, plan_commands

MODEL_URL = "https://models.example/tiny.gguf"
BODY = b"the file\n"


class Flaky(http.server.BaseHTTPRequestHandler):
    """503 for the first `failures` requests, then BODY."""

    failures = 2
    seen: list[int] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append(1)
        if len(self.seen) <= self.failures:
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


@pytest.fixture()
def flaky_url():
    Flaky.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/file"
    server.shutdown()


def curl_words(cmds: list[str], url: str) -> list[str]:
    """The words of the one curl invocation in the plan that fetches `url` (up to and without its -o)."""
    hits = []
    for cmd in map(str, cmds):
        lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:  # simple commands, split at ; && || | and the like
            if token and set(token) <= set(";&|()"):
                if words and words[0] == "curl" and any(w.startswith(url) for w in words):
                    hits.append(words[:words.index("-o")] if "-o" in words else words)
                words = []
            else:
                words.append(token)
    assert len(hits) == 1, f"{len(hits)} curl commands fetch {url}"
    return hits[0]


LLAMA = {"llama_cpp_instances": {"tiny": {"model_source": MODEL_URL, "model_sha256": "a" * 64}}}
#: what -> (the host's os-release, its settings, the URL its plan downloads)
PLANS = {
    "llama.cpp source": (DEBIAN_13, LLAMA, DEFAULT_SOURCE.url),
    "GGUF model": (DEBIAN_13, LLAMA, MODEL_URL),
    "NVIDIA repository key": (UBUNTU_2204, {}, "https://developer.download.nvidia.com/"),
}


@pytest.mark.parametrize("what", list(PLANS))
def test_download_survives_two_503_answers(what, flaky_url, tmp_path):
    os_release, data, url = PLANS[what]
    words = curl_words(plan_commands(os_release, data), url)
    words = [flaky_url if w.startswith(url) else w for w in words]
    out = tmp_path / "out"
    done = subprocess.run([*words, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == BODY and len(Flaky.seen) == 3


def test_uv_wheel_download_survives_two_503_answers(flaky_url, tmp_path):
    model = tiny_hf_model(tmp_path / "cache")
    cmds = plan_commands(UBUNTU_2404, {"vllm_instances": {"tiny": {"model_source": str(model)}}},
                         {"sys.version_info": ["3.12"]})
    words = [flaky_url if w == UV_WHEEL_URL else w for w in curl_words(cmds, UV_WHEEL_URL)]
    out = tmp_path / "uv.whl"
    done = subprocess.run([*words, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == BODY and len(Flaky.seen) == 3


def test_without_retry_arguments_the_same_server_fails_the_download(flaky_url, tmp_path):
    """The server above really fails a plain `curl -sSLf` (what pyinfra's files.download runs by default)."""
    done = subprocess.run(["curl", "-sSLf", flaky_url, "-o", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 22 and len(Flaky.seen) == 1


def test_the_labs_own_download_survives_two_503_answers(flaky_url, tmp_path):
    from lab.sources import retrieve
    retrieve(flaky_url, tmp_path / "out", delay_s=0.1)
    assert (tmp_path / "out").read_bytes() == BODY and len(Flaky.seen) == 3


def test_the_labs_own_download_gives_up_on_a_missing_file(tmp_path):
    import urllib.error

    from lab.sources import retrieve

    class Missing(Flaky):
        def do_GET(self):  # noqa: N802
            self.seen.append(1)
            self.send_response(404)
            self.end_headers()
    Missing.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Missing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(urllib.error.HTTPError):
            retrieve(f"http://127.0.0.1:{server.server_address[1]}/x", tmp_path / "out", delay_s=0.1)
    finally:
        server.shutdown()
    assert len(Missing.seen) == 1
