"""A model given as a Hugging Face repository at a commit (#17), deployed to a real lab host: the control machine
fetches it from lab/hub.py's stand-in hub (the hub's HTTP API on loopback, reached as HF_ENDPOINT), checks it
against the hub's sha256, and places it on the host; a second deploy with the hub gone changes nothing; a tampered
file is refused by name and the host is left as it was. Expected checksums: hashlib over the served file."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from lab.data import host_data
from lab.harness import HOSTS
from lab.hub import StandInHub
from lab.provision import deploy
from tests.lab.test_deploy import SNAPSHOT, TINY, data_args, tiny

pytestmark = pytest.mark.disruptive

SPEC = HOSTS[1]  # the lab host whose tiny llama-server instance the refusal tests use too
COMMIT = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
TAMPERED = "5e6f708192a3b4c5d6e7f8091a2b3c4d1a2b3c4d"
FILE = "tiny-hub-F32.gguf"


@pytest.fixture()
def hub_repo(tmp_path, monkeypatch, provisioned):
    """The lab's tiny GGUF as FILE of lab/tiny-gguf at COMMIT and (tampered in transit) at TAMPERED; empty hub
    caches for the deploy's pyinfra process. Afterwards the host gets its usual settings back."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(host_data(SPEC)[TINY]["tiny"]["model_source"], repo / FILE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("V100KIT_HUB_HEADERS", str(tmp_path / "headers"))
    stand_in = StandInHub({"lab/tiny-gguf": {COMMIT: repo, TAMPERED: repo}})
    stand_in.start()
    monkeypatch.setenv("HF_ENDPOINT", stand_in.endpoint)
    yield stand_in, repo / FILE
    try:
        stand_in.stop()
    except Exception:  # noqa: BLE001 (the test may have stopped it)
        pass
    restore = deploy("hub-model-restore", ["--limit", SPEC.name])
    assert restore.rc == 0, restore.stderr[-2000:]


def hub_data(commit: str) -> list[str]:
    return [*data_args(tiny(host_data(SPEC), model_source=f"hf://lab/tiny-gguf@{commit}/{FILE}", model_sha256=None)),
            "--limit", SPEC.name]


def test_hub_model_is_placed_verified_and_needs_no_hub_the_second_time(provisioned, hub_repo):
    stand_in, served = hub_repo
    lab = provisioned.lab
    first = deploy("hub-model-first", hub_data(COMMIT))
    assert first.rc == 0, first.stderr[-3000:]
    want = hashlib.sha256(served.read_bytes()).hexdigest()
    placed = f"/var/lib/llm/models/{FILE}"
    assert lab.run(SPEC, f"sha256sum {placed}")[1].split()[0] == want
    assert placed in lab.run(SPEC, "cat /etc/llama-server/tiny.env")[1]
    assert lab.run(SPEC, "systemctl is-active llama-server@tiny")[1].strip() == "active"
    assert any(r["path"] == f"/lab/tiny-gguf/resolve/{COMMIT}/{FILE}" and r["range"] is None
               for r in stand_in.requests)  # the whole file once, after the header reads
    stand_in.stop()
    second = deploy("hub-model-second", hub_data(COMMIT))
    assert second.rc == 0 and second.changed == {}, (second.changed, second.stderr[-2000:])


def test_tampered_hub_file_is_refused_by_name_and_changes_nothing(provisioned, hub_repo):
    stand_in, served = hub_repo
    lab = provisioned.lab
    true = served.read_bytes()
    stand_in.tamper[FILE] = true[:-8] + b"tampered"
    before = lab.run(SPEC, SNAPSHOT)[1]
    run = deploy("hub-model-tampered", hub_data(TAMPERED))
    assert run.rc != 0
    assert f"{FILE}: sha256" in run.stderr and hashlib.sha256(true).hexdigest() in run.stderr, run.stderr[-2000:]
    assert run.changed == {}
    assert lab.run(SPEC, SNAPSHOT)[1] == before
