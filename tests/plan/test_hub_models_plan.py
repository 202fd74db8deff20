"""Plan-level tests (facts in, commands out) of models given as a Hugging Face repository at a commit (#17):
`model_source: hf://ORG/REPO@COMMIT[/FILE.gguf]`. The hub is lab/hub.py's stand-in, speaking the hub's HTTP API on
loopback, reached through HF_ENDPOINT as a mirror would be, with the real huggingface_hub client. Expected
checksums are computed here with hashlib from the files the stand-in serves; what reaches the host is what the
plan uploads."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from lab.data import tiny_hf_model, tiny_model
from lab.hub import StandInHub
from lab.models import write_llama
from roles import hub
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, UBUNTU_2404, plan_uploads_raw

GGUF_COMMIT = "0123456789abcdef0123456789abcdef01234567"
HF_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
BIG_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
V100_16 = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-PCIE-16GB, 7.0, 16160, 0, 16160, Enabled, 550.163.01"],
           "sys.version_info": ["3.12"]}
HOME = "/var/lib/llm"  # base_service_home's default


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    """Three repositories: a GGUF one (with a README kept in git), a safetensors one (plus weights in another
    format and a subfolder, which vLLM does not need), and a 40-layer 8B-class F16 GGUF (17 GB, sparse)."""
    base = tmp_path_factory.mktemp("repos")
    gguf_repo = base / "gguf"
    gguf_repo.mkdir()
    shutil.copy(tiny_model(base / "cache"), gguf_repo / "tiny-F32.gguf")
    (gguf_repo / "README.md").write_text("a tiny llama\n")
    hf_repo = base / "hf"
    shutil.copytree(tiny_hf_model(base / "cache"), hf_repo)
    (hf_repo / "pytorch_model.bin").write_bytes(b"\0" * 1000)
    (hf_repo / "original").mkdir()
    (hf_repo / "original" / "consolidated.pth").write_bytes(b"\0" * 1000)
    big = base / "big"
    big.mkdir()
    write_llama(big / "big-F16.gguf", n_embd=4096, n_head=32, n_head_kv=8, n_layer=40, n_ff=14336,
                header_only=True)
    return {"gguf": gguf_repo, "hf": hf_repo, "big": big}


@pytest.fixture()
def stand_in(repos, tmp_path, monkeypatch):
    """The stand-in hub as HF_ENDPOINT, with empty caches (huggingface_hub's and the header copies)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("V100KIT_HUB_HEADERS", str(tmp_path / "headers"))
    hub._VERIFIED.clear()
    with StandInHub({"org/tiny-gguf": {GGUF_COMMIT: repos["gguf"]}, "org/tiny": {HF_COMMIT: repos["hf"]},
                     "org/big-gguf": {BIG_COMMIT: repos["big"]}},
                    declared_sha256={"big-F16.gguf": "b" * 64}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        yield h


def llama(source: str, **more) -> dict:
    return {"llama_cpp_instances": {"tiny": {"model_source": source, **more}}}


def llama_plan(data: dict):
    """The plan up to llama-server's start (a fake host has no process whose residency the deploy could check)."""
    return plan_uploads_raw(DEBIAN_13, data, V100_16, stops_early=True)


def test_gguf_from_the_hub_reaches_the_host_with_the_hubs_sha256(stand_in, repos):
    cmds, uploads = llama_plan(llama(f"hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf"))
    want = repos["gguf"] / "tiny-F32.gguf"
    placed = f"{HOME}/models/tiny-F32.gguf"
    assert uploads[placed] == want.read_bytes()
    assert any(sha256(want) in str(c) and placed in str(c) for c in cmds)  # checked again on the host
    assert not [p for p in uploads if p.endswith("README.md")]  # one file of the repository, not all
    served = [r for r in stand_in.requests if r["method"] == "GET" and r["path"].endswith(".gguf")]
    assert served and all(r["path"].startswith(f"/org/tiny-gguf/resolve/{GGUF_COMMIT}/") for r in served)


def test_vllm_snapshot_from_the_hub_is_the_safetensors_model_without_other_weights(stand_in, repos):
    data = {"vllm_instances": {"tiny": {"model_source": f"hf://org/tiny@{HF_COMMIT}"}}}
    _, uploads = plan_uploads_raw(UBUNTU_2404, data, V100_16)
    placed = {p.removeprefix(f"{HOME}/models/tiny/"): b for p, b in uploads.items()
              if p.startswith(f"{HOME}/models/tiny/")}
    expected = {p.name: p.read_bytes() for p in repos["hf"].iterdir() if p.is_file() and p.suffix != ".bin"}
    assert placed == expected and "model.safetensors" in placed


def test_a_model_that_does_not_fit_is_refused_after_reading_only_its_header(stand_in, monkeypatch):
    """40 layers of an 8B-class F16 model (17 GB) on one 16 GB V100: refused by the planner from the header copy;
    the hub sent a few kB of the 17 GB file, in ranges (the first read made too small to hold the header, so it
    is read again larger), and nothing is in huggingface_hub's cache."""
    monkeypatch.setattr(hub, "GGUF_FIRST_READ", 1024)
    size = (Path(stand_in.repos["org/big-gguf"][BIG_COMMIT]) / "big-F16.gguf").stat().st_size
    assert size > 16 << 30
    with pytest.raises(SettingsError) as e:
        plan_uploads_raw(DEBIAN_13, llama(f"hf://org/big-gguf@{BIG_COMMIT}/big-F16.gguf"), V100_16)
    assert "llama_cpp_instances.tiny" in str(e.value) and "would offload" in str(e.value)
    ranges = [r["range"] for r in stand_in.requests if r["path"].endswith("big-F16.gguf")]
    assert len(ranges) >= 2 and all(r and r.startswith("bytes=0-") for r in ranges)
    assert stand_in.bytes_served("big-F16.gguf") < 1 << 20
    assert not list(Path(hub.hub_cache()).rglob("*.gguf"))


def test_a_tampered_file_is_refused_with_its_name_and_removed_from_the_cache(stand_in, repos):
    true = (repos["hf"] / "model.safetensors").read_bytes()
    stand_in.tamper["model.safetensors"] = true[:-4] + b"\1\2\3\4"  # same size, same header
    data = {"vllm_instances": {"tiny": {"model_source": f"hf://org/tiny@{HF_COMMIT}"}}}
    with pytest.raises(SettingsError) as e:
        plan_uploads_raw(UBUNTU_2404, data, V100_16)
    assert "vllm_instances.tiny.model_source" in str(e.value) and "model.safetensors" in str(e.value)
    assert hashlib.sha256(true).hexdigest() in str(e.value)
    assert not [p for p in Path(hub.hub_cache()).rglob("*") if p.is_file() and p.read_bytes()[-4:] == b"\1\2\3\4"]
    # the mirror mended: the next deploy fetches the file again and passes
    del stand_in.tamper["model.safetensors"]
    hub._VERIFIED.clear()
    _, uploads = plan_uploads_raw(UBUNTU_2404, data, V100_16)
    assert uploads[f"{HOME}/models/tiny/model.safetensors"] == true


def test_a_second_deploy_needs_no_hub(stand_in, repos):
    """A new process (in-memory caches cleared) deploying the same commit with the hub gone: the file list is kept
    per commit, the files are in huggingface_hub's cache and verified again from there."""
    source = llama(f"hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf")
    first = llama_plan(source)
    stand_in.stop()
    hub._VERIFIED.clear()
    second = llama_plan(source)
    assert second[1] == first[1] and [str(c) for c in second[0]] == [str(c) for c in first[0]]
    stand_in.start()  # for the fixture's stop


@pytest.mark.parametrize("source, why", [
    (f"hf://org/tiny-gguf@main/tiny-F32.gguf", "is not a commit hash"),
    (f"hf://org/tiny-gguf@{GGUF_COMMIT}", "names no .gguf file"),
    (f"hf://org/tiny-gguf@{GGUF_COMMIT[:12]}/tiny-F32.gguf", "is not a commit hash"),
    (f"hf://org/tiny-gguf@{GGUF_COMMIT.upper()}/tiny-F32.gguf", f"in upper case: the hub names commits in lower "
                                                                f"case; write it as {GGUF_COMMIT!r}"),
    ("hf://tiny-gguf/tiny-F32.gguf", "not hf://ORG/REPO@COMMIT/FILE.gguf"),
])
def test_llama_cpp_hub_source_in_the_wrong_form_is_refused(stand_in, source, why):
    with pytest.raises(SettingsError) as e:
        plan_uploads_raw(DEBIAN_13, llama(source), V100_16)
    assert f"llama_cpp_instances.tiny.model_source = {source!r}" in str(e.value) and why in str(e.value)
    assert not stand_in.requests  # refused from the settings alone


def test_vllm_hub_source_with_a_file_path_is_refused(stand_in):
    source = f"hf://org/tiny@{HF_COMMIT}/model.safetensors"
    with pytest.raises(SettingsError, match="vLLM takes the repository's snapshot"):
        plan_uploads_raw(UBUNTU_2404, {"vllm_instances": {"tiny": {"model_source": source}}}, V100_16)


def test_unknown_commit_and_missing_file_are_refused_naming_the_source(stand_in):
    with pytest.raises(SettingsError, match=r"model_source = 'hf://org/tiny-gguf@f{40}/tiny-F32.gguf'.*file list "
                                            r"cannot be read \(404.*Invalid rev id: f{40}.*Fix: check the repository, "
                                            r"commit and file"):
        plan_uploads_raw(DEBIAN_13, llama(f"hf://org/tiny-gguf@{'f' * 40}/tiny-F32.gguf"), V100_16)
    with pytest.raises(SettingsError, match=r"has no other\.gguf at this commit \(its \.gguf files: tiny-F32\.gguf\)"):
        plan_uploads_raw(DEBIAN_13, llama(f"hf://org/tiny-gguf@{GGUF_COMMIT}/other.gguf"), V100_16)


def test_a_model_sha256_set_by_hand_must_be_the_hubs(stand_in, repos):
    with pytest.raises(SettingsError, match=rf"model_sha256 = '{'a' * 64}': the hub lists sha256 "
                                            rf"{sha256(repos['gguf'] / 'tiny-F32.gguf')}"):
        plan_uploads_raw(DEBIAN_13, llama(f"hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf",
                                          model_sha256="a" * 64), V100_16)


@pytest.mark.parametrize("cut", [64, 0.5, -64, -1, 0, 4096])
def test_the_header_copy_reads_like_the_real_file_wherever_the_first_read_ends(stand_in, repos, monkeypatch, cut):
    """The first range read ends inside the metadata, inside the tensor table, just before or at the data (cut
    relative to where gguf's own reader finds the tensor data start): the planner reads the same model from the
    header copy as from the whole file."""
    import gguf

    from roles.planner import read_gguf

    real = repos["big"] / "big-F16.gguf"
    data_start = int(gguf.GGUFReader(real).data_offset)
    first = int(cut * data_start) if isinstance(cut, float) else (data_start + cut if cut <= 0 else cut)
    monkeypatch.setattr(hub, "GGUF_FIRST_READ", first)
    copy = hub.header_copy(hub.parse(f"hf://org/big-gguf@{BIG_COMMIT}/big-F16.gguf"))
    assert read_gguf(copy) == read_gguf(real)
    assert copy.stat().st_size == real.stat().st_size


def test_two_instances_whose_files_share_a_name_are_refused(stand_in, repos, tmp_path):
    """Two repositories (here: one repository and a local copy with other bytes) each with tiny-F32.gguf would
    both be placed at models/tiny-F32.gguf: refused instead of one overwriting the other."""
    other = tmp_path / "tiny-F32.gguf"
    other.write_bytes((repos["gguf"] / "tiny-F32.gguf").read_bytes()[:-4] + b"\0\0\0\1")
    data = {"llama_cpp_instances": {
        "a": {"model_source": f"hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf", "port": 8081},
        "b": {"model_source": str(other), "model_sha256": sha256(other), "port": 8082}}}
    with pytest.raises(SettingsError, match=r"llama_cpp_instances\.b\.model_source = .*placed at "
                                            r"/var/lib/llm/models/tiny-F32\.gguf like instance 'a'"):
        llama_plan(data)


def test_a_split_gguf_is_refused_with_the_way_to_merge_it(stand_in):
    source = f"hf://org/tiny-gguf@{GGUF_COMMIT}/big-Q8_0-00001-of-00002.gguf"
    with pytest.raises(SettingsError, match=r"split GGUF.*llama-gguf-split --merge"):
        llama_plan(llama(source))
    assert not [r for r in stand_in.requests if "resolve" in r["path"]]


def test_a_tampered_small_file_is_refused_before_the_plan_reads_it(stand_in, repos):
    """config.json altered in transit (same size, another trained context): refused by its git blob id at the
    header copy, and not kept: the mended mirror then serves the plan."""
    true = (repos["hf"] / "config.json").read_bytes()
    stand_in.tamper["config.json"] = true.replace(b"8192", b"1024")
    data = {"vllm_instances": {"tiny": {"model_source": f"hf://org/tiny@{HF_COMMIT}"}}}
    with pytest.raises(SettingsError, match=r"config\.json: git blob id .* is not the hub's"):
        plan_uploads_raw(UBUNTU_2404, data, V100_16)
    del stand_in.tamper["config.json"]
    _, uploads = plan_uploads_raw(UBUNTU_2404, data, V100_16)
    assert uploads[f"{HOME}/models/tiny/config.json"] == true


def test_only_the_verified_files_of_a_snapshot_reach_the_host(stand_in, repos):
    """A file that another tool fetched into the same snapshot of the hub cache is not copied."""
    data = {"vllm_instances": {"tiny": {"model_source": f"hf://org/tiny@{HF_COMMIT}"}}}
    plan_uploads_raw(UBUNTU_2404, data, V100_16)
    snapshot = next(Path(hub.hub_cache()).glob(f"models--org--tiny/snapshots/{HF_COMMIT}"))
    (snapshot / "pytorch_model.bin").write_bytes(b"fetched by another tool")
    hub._VERIFIED.clear()
    _, uploads = plan_uploads_raw(UBUNTU_2404, data, V100_16)
    assert not [p for p in uploads if p.endswith("pytorch_model.bin")]


def test_a_hub_that_accepts_and_never_answers_is_refused_not_waited_for(tmp_path, monkeypatch):
    """A mirror that takes the connection and then says nothing (a stuck proxy): the plan is refused, naming the
    source and the timeout, after about one read timeout, not left hanging (huggingface_hub's own list_repo_tree
    waits forever there)."""
    import re
    import socket
    import threading
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("V100KIT_HUB_HEADERS", str(tmp_path / "headers"))
    monkeypatch.setattr(hub, "READ_TIMEOUT_S", 2)
    raised: list[BaseException] = []

    def plan() -> None:
        try:
            plan_uploads_raw(DEBIAN_13, llama(f"hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf"), V100_16)
        except BaseException as e:  # noqa: BLE001 (handed to the test's thread)
            raised.append(e)

    worker = threading.Thread(target=plan, daemon=True)  # a daemon: a plan that does hang fails this test, not CI
    started = time.monotonic()
    worker.start()
    worker.join(60)
    silent.close()
    assert not worker.is_alive(), "the plan still waits for a hub that never answers"
    assert time.monotonic() - started < 30
    assert raised and isinstance(raised[0], SettingsError)
    assert re.search(rf"model_source = 'hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf'.*file list cannot be read "
                     r"\(.*timed out", str(raised[0]), re.S), raised[0]


def test_a_hub_that_keeps_answering_503_with_a_day_long_retry_after_is_refused_in_seconds(tmp_path, monkeypatch):
    """A mirror in maintenance: 503 with Retry-After: 86400 to every request. The file list is asked
    hub.TREE_ATTEMPTS times, the waits capped (huggingface_hub's own backoff would sleep the day, five times)."""
    import http.server
    import threading
    import time

    seen = []

    class Maintenance(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(self.path)
            self.send_response(503)
            self.send_header("Retry-After", "86400")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Maintenance)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("V100KIT_HUB_HEADERS", str(tmp_path / "headers"))
    monkeypatch.setattr(hub, "RETRY_WAIT_MAX_S", 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(SettingsError, match=r"file list cannot be read \(.*503 Service Unavailable"):
            plan_uploads_raw(DEBIAN_13, llama(f"hf://org/tiny-gguf@{GGUF_COMMIT}/tiny-F32.gguf"), V100_16)
    finally:
        server.shutdown()
    assert len(seen) == hub.TREE_ATTEMPTS and time.monotonic() - started < 20
