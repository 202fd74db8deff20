"""Offline provisioning (#17) on a lab host that reaches nothing but the control machine's end of its veth pair:
lab-offline (lab/data.py OFFLINE_HOST), Debian 12 in its own network namespace, no registry proxy, no name server
it can reach, no shared apt or wheel cache. `v100kit offline fill` reads it over SSH and fills a directory on the
control machine; the deploy then gets every .deb, wheel and archive from that directory, served on the lab bridge
for the length of the deploy: driver, CUDA, the llama.cpp build, the vLLM venv and both services. The directory is
kept in the lab cache between runs (its wheels are GBs). The host's GGUF is given as a URL on the control
machine's loopback, up only while the directory is filled. Then the same host gets a model given as a hub
repository at a commit, from lab/hub.py's stand-in hub on the control machine's loopback: placed verified, and a
file tampered in transit refused by name with the host unchanged."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from lab.data import OFFLINE_HOST, OFFLINE_MODEL_PORT, offline_lab, sha256_of, tiny_model
from lab.harness import HOST_DISK_GIB, LAB_BRIDGE_ADDRESS, LAB_CACHE, LAB_NET_PREFIX, Lab
from lab.provision import REUSED, ROOT, deploy
from tests.lab.test_deploy import SNAPSHOT
from v100kit.offline import DEFAULT_PORT, data_args, deploy_data, serve

pytestmark = pytest.mark.cluster  # ordered last with the cluster: it frees the bundled hosts for disk

DIRECTORY = LAB_CACHE / "offline"
INVENTORY = "inventory/lab_offline.py"
V100KIT = [sys.executable, "-m", "v100kit.cli"]


@pytest.fixture(scope="module")
def offline():
    """Boot lab-offline (fresh unless V100KIT_LAB_REUSE=1), fill the directory, deploy twice from it; yield
    (lab, fill output, first run, second run, requests the server answered)."""
    lab = offline_lab()
    lab.prepare()
    if not REUSED:
        bundled = Lab()
        for s in bundled.hosts:
            bundled.destroy(s)
        lab.destroy(OFFLINE_HOST)
    # the host, and the directory when it is not filled yet (its .debs and wheels: about 6 GiB)
    lab.check_disk((OFFLINE_HOST,), HOST_DISK_GIB + (0 if (DIRECTORY / "settings.json").is_file() else 6))
    lab.up(OFFLINE_HOST)
    (DIRECTORY / "settings.json").unlink(missing_ok=True)  # filled anew for this host (its files stay, checked)
    with serve(tiny_model().parent, "127.0.0.1", OFFLINE_MODEL_PORT):  # the model's URL exists for the fill only
        fill = subprocess.run([*V100KIT, "offline", "fill", str(DIRECTORY), INVENTORY], capture_output=True,
                              text=True)
    assert fill.returncode == 0, fill.stdout[-2000:] + fill.stderr[-4000:]
    requests: list[tuple[str, str]] = []
    # the port `v100kit offline deploy` uses: the same URLs in the host's sources, so its deploy changes nothing
    with serve(DIRECTORY, LAB_BRIDGE_ADDRESS, DEFAULT_PORT, record=requests) as base:
        args = data_args(deploy_data(DIRECTORY, base))
        first = deploy("offline-deploy-1", args, inventory=INVENTORY)
        assert first.rc == 0, f"offline deploy failed; log: build/lab-logs/offline-deploy-1.log\n{first.stderr[-4000:]}"
        second = deploy("offline-deploy-2", args, inventory=INVENTORY)
    yield lab, fill, first, second, requests
    if not REUSED:
        lab.destroy(OFFLINE_HOST)


def run(lab, command: str) -> str:
    rc, out = lab.run(OFFLINE_HOST, command, 120)
    assert rc == 0, out
    return out


def test_the_host_has_no_way_out(offline):
    lab = offline[0]
    routes = run(lab, "ip -4 route show; ip -6 route show | grep -v '^fe80' || true").split("\n")
    assert [r for r in routes if r.strip()] == [f"10.231.0.0/{LAB_NET_PREFIX} dev lab0 proto kernel scope link src "
                                                 f"{OFFLINE_HOST.address} "]
    assert "proxy" not in run(lab, "cat /etc/environment; ls /etc/apt/apt.conf.d/").lower()
    # a registry by address: no route (the name server in resolv.conf is unreachable as well)
    assert lab.run(OFFLINE_HOST, "curl -sS --max-time 5 http://151.101.2.132/ -o /dev/null")[0] != 0


def test_every_request_came_from_the_host_to_the_directory(offline):
    requests = offline[4]
    assert requests and {client for client, _ in requests} == {OFFLINE_HOST.address}
    paths = [p for _, p in requests]
    assert any(p.endswith("InRelease") for p in paths)
    if not REUSED:  # a fresh host installs everything: its .debs and wheels came from the directory
        assert any(p.endswith(".deb") for p in paths)
        assert any("/pypi/simple/" in p for p in paths) and any(p.endswith(".whl") for p in paths)
        # the model given as a URL that only the control machine's loopback served, from the directory by sha256
        model = tiny_model()
        assert f"/models/{sha256_of(model)}/{model.name}" in paths


def test_offline_deploy_provisions_the_whole_stack_and_a_second_changes_nothing(offline):
    lab, _, first, second, _ = offline
    assert first.changed.get(OFFLINE_HOST.name)
    assert second.rc == 0 and second.changed == {}, second.changed
    # driver (Debian's 535 packages, held), CUDA 11.8, the llama.cpp build, the vLLM venv, both services
    held = run(lab, "apt-mark showhold")
    assert "nvidia-kernel-dkms" in held
    assert "release 11.8" in run(lab, "nvcc --version")
    assert "version" in run(lab, "/opt/llama.cpp/current/bin/llama-server --version 2>&1")
    assert run(lab, "/opt/vllm/current/bin/python -c 'import vllm; print(vllm.__version__)'").strip().endswith(
        "0.8.5.post1")
    assert run(lab, "systemctl is-active llama-server@tiny").strip() == "active"
    assert run(lab, "systemctl is-enabled vllm@tiny").strip() == "enabled"
    # the host's sources and the venv's index point at the directory's server, nowhere else
    uris = [line.split()[1] for line in run(lab, "cat /etc/apt/sources.list.d/*.sources").splitlines()
            if line.startswith("URIs:")]
    assert len(uris) == 2 and all(u.startswith(f"http://{LAB_BRIDGE_ADDRESS}:") for u in uris), uris


def test_the_offline_cli_deploys_from_the_directory_and_changes_nothing(offline):
    """`v100kit offline deploy` (its own server, its own data from settings.json): a third deploy, no change."""
    cli = subprocess.run([*V100KIT, "offline", "deploy", str(DIRECTORY), INVENTORY, "--address", LAB_BRIDGE_ADDRESS,
                          "--", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr[-3000:]
    operations = json.loads(cli.stdout)["results"]["operations"]
    changed = [op["name"] for op in operations if op["success"]]
    assert not [op["name"] for op in operations if op["error"]] and changed == [], changed


HUB_COMMIT = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
HUB_TAMPERED = "5e6f708192a3b4c5d6e7f8091a2b3c4d1a2b3c4d"
HUB_FILE = "tiny-hub-F32.gguf"


@pytest.fixture()
def hub(offline, tmp_path, monkeypatch):
    """lab/hub.py's stand-in hub on the control machine's loopback (HF_ENDPOINT) serving the lab's tiny GGUF as
    HUB_FILE of lab/tiny-gguf at HUB_COMMIT and at HUB_TAMPERED, with empty hub caches; the offline directory served
    on the lab bridge as for the deploys above. Yields (stand-in, the served file, deploy arguments for a commit).
    Afterwards the host gets its usual settings back."""
    from lab.data import host_data
    from lab.hub import StandInHub

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / HUB_FILE).write_bytes(tiny_model().read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("V100KIT_HUB_HEADERS", str(tmp_path / "headers"))
    with StandInHub({"lab/tiny-gguf": {HUB_COMMIT: repo, HUB_TAMPERED: repo}}) as stand_in, \
            serve(DIRECTORY, LAB_BRIDGE_ADDRESS, DEFAULT_PORT) as base:
        monkeypatch.setenv("HF_ENDPOINT", stand_in.endpoint)
        served = deploy_data(DIRECTORY, base)

        def args(commit: str) -> list[str]:
            inst = dict(host_data(OFFLINE_HOST)["llama_cpp_instances"]["tiny"], model_sha256=None,
                        model_source=f"hf://lab/tiny-gguf@{commit}/{HUB_FILE}")
            return data_args({**served, "llama_cpp_instances": {"tiny": inst}})

        yield stand_in, repo / HUB_FILE, args
        restore = deploy("offline-hub-restore", data_args(served), inventory=INVENTORY)
        assert restore.rc == 0, restore.stderr[-2000:]


def test_a_hub_model_reaches_the_offline_host_verified(offline, hub):
    """The hub is reachable from the control machine only: the file is fetched there, checked against the hub's
    sha256, and placed on the host; the host itself asks nothing of the hub."""
    lab = offline[0]
    stand_in, served, args = hub
    run_ = deploy("offline-hub-first", args(HUB_COMMIT), inventory=INVENTORY)
    assert run_.rc == 0, run_.stderr[-3000:]
    placed = f"/var/lib/llm/models/{HUB_FILE}"
    assert run(lab, f"sha256sum {placed}").split()[0] == hashlib.sha256(served.read_bytes()).hexdigest()
    assert placed in run(lab, "cat /etc/llama-server/tiny.env")
    assert run(lab, "systemctl is-active llama-server@tiny").strip() == "active"
    assert stand_in.requests and all(r["client"] == "127.0.0.1" for r in stand_in.requests)


def test_a_tampered_hub_file_is_refused_by_name_and_the_offline_host_is_unchanged(offline, hub):
    lab = offline[0]
    stand_in, served, args = hub
    true = served.read_bytes()
    stand_in.tamper[HUB_FILE] = true[:-8] + b"tampered"
    before = run(lab, SNAPSHOT)
    refused = deploy("offline-hub-tampered", args(HUB_TAMPERED), inventory=INVENTORY)
    assert refused.rc != 0
    assert f"{HUB_FILE}: sha256" in refused.stderr and hashlib.sha256(true).hexdigest() in refused.stderr, \
        refused.stderr[-2000:]
    assert refused.changed == {} and run(lab, SNAPSHOT) == before
