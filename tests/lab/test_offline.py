"""Offline provisioning (#17) on a lab host that reaches nothing but the control machine's end of its veth pair:
lab-offline (lab/data.py OFFLINE_HOST), Debian 12 in its own network namespace, no registry proxy, no name server
it can reach, no shared apt or wheel cache. `v100kit offline fill` reads it over SSH and fills a directory on the
control machine; the deploy then gets every .deb, wheel and archive from that directory, served on the lab bridge
for the length of the deploy: driver, CUDA, the llama.cpp build, the vLLM venv and both services. The directory is
kept in the lab cache between runs (its wheels are GBs). The host's GGUF is given as a URL on the control
machine's loopback, up only while the directory is filled."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lab.data import OFFLINE_HOST, OFFLINE_MODEL_PORT, offline_lab, sha256_of, tiny_model
from lab.harness import LAB_BRIDGE_ADDRESS, LAB_CACHE, LAB_NET_PREFIX, Lab
from lab.provision import REUSED, ROOT, deploy
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
    lab.up(OFFLINE_HOST)
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
