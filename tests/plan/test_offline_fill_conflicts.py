"""Plan-level test (facts in): `v100kit offline fill` of hosts whose settings differ where one offline deploy can
pass only one value to every host. Two Debian 13 hosts with different llama.cpp sources: filling the second into
the same directory is refused, naming the setting, instead of the deploy building the first host with the second
host's source. The apt part is not the subject here: its repository and resolver steps are replaced by no-ops (they
are tested against Debian's real archive in tests/unit/test_offline_apt.py); the archives are really downloaded
from a local server and checked against their sha256."""

from __future__ import annotations

import hashlib

import pytest
from pyinfra.context import ctx_host
from pyinfra_cli.util import load_deploy_file

from roles.preflight import preflight
from tests.plan.harness import DEBIAN_13, ROOT, _connected_in_repo, _fake_state
from v100kit import offline, offline_apt
from v100kit.offline import serve



@pytest.fixture
def no_apt(monkeypatch):
    """The apt steps of the fill as no-ops (not the subject here)."""
    for name in ("fill_repository", "fill_debs", "resolve"):
        monkeypatch.setattr(offline_apt, name, lambda *a, **k: [])
    monkeypatch.setattr(offline_apt, "_fetch", lambda *a, **k: None)


def host_plan(data: dict):
    state, host = _fake_state(DEBIAN_13, data, None)
    with _connected_in_repo(state):
        load_deploy_file(state, str(ROOT / "deploy.py"))
        with ctx_host.use(host):
            return preflight(host), offline.host_commands(state, host)


def test_hosts_with_different_llama_cpp_sources_cannot_share_a_fill(tmp_path, no_apt):
    origin = tmp_path / "origin"
    origin.mkdir()
    sums = {}
    for ref in ("b1111", "b2222"):
        (origin / f"llama-{ref}.tar.gz").write_bytes(ref.encode())
        sums[ref] = hashlib.sha256(ref.encode()).hexdigest()
    (origin / "tiny.gguf").write_bytes(b"GGUF")
    data: dict = {}
    with serve(origin, "127.0.0.1") as there:
        model = {"model_source": f"{there}/tiny.gguf", "model_sha256": hashlib.sha256(b"GGUF").hexdigest(),
                 "port": 8081}
        for i, ref in enumerate(("b1111", "b2222")):
            plan, commands = host_plan({"llama_cpp_ref": ref, "llama_cpp_source": f"{there}/llama-{ref}.tar.gz",
                                        "llama_cpp_source_sha256": sums[ref], "llama_cpp_instances": {"tiny": model}})
            if i == 0:
                offline.fill_host(tmp_path / "dir", "box-a", plan, commands, "", data)
                assert data["llama_cpp_source"] == "{base}/files/llama-b1111.tar.gz"
                continue
            with pytest.raises(offline_apt.OfflineError, match=r"box-b: llama_cpp_source would be "
                                                               r"\{base\}/files/llama-b2222\.tar\.gz, another host's is "
                                                               r"\{base\}/files/llama-b1111\.tar\.gz.*separate "
                                                               r"directories"):
                offline.fill_host(tmp_path / "dir", "box-b", plan, commands, "", data)
    assert (tmp_path / "dir/files/llama-b1111.tar.gz").read_bytes() == b"b1111"



@pytest.mark.parametrize("order", [("local", "url"), ("url", "local")])
def test_a_control_machine_source_and_a_url_source_cannot_share_a_fill(tmp_path, no_apt, order):
    """A host whose llama.cpp archive is pushed from the control machine, filled with one whose source is a URL:
    the deploy's one served llama_cpp_source would replace the first host's archive, so the second is refused
    (lab-offline, whose archive is pushed, proves that settings.json then leaves llama_cpp_source out)."""
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "llama-b1111.tar.gz").write_bytes(b"b1111")
    (origin / "tiny.gguf").write_bytes(b"GGUF")
    sha = hashlib.sha256(b"b1111").hexdigest()
    data: dict = {}
    with serve(origin, "127.0.0.1") as there:
        model = {"model_source": f"{there}/tiny.gguf", "model_sha256": hashlib.sha256(b"GGUF").hexdigest(),
                 "port": 8081}
        sources = {"local": str(origin / "llama-b1111.tar.gz"), "url": f"{there}/llama-b1111.tar.gz"}
        for i, kind in enumerate(order):
            plan, commands = host_plan({"llama_cpp_ref": "b1111", "llama_cpp_source": sources[kind],
                                        "llama_cpp_source_sha256": sha, "llama_cpp_instances": {"tiny": model}})
            assert plan.llama_cpp.source_is_local == (kind == "local")
            if i == 0:
                offline.fill_host(tmp_path / "dir", "box-a", plan, commands, "", data)
                continue
            shown = {"local": r"its own \(a control-machine archive, pushed over SSH\)",
                     "url": r"\{base\}/files/llama-b1111\.tar\.gz"}
            with pytest.raises(offline_apt.OfflineError, match=f"box-b: llama_cpp_source would be {shown[kind]}, "
                                                               f"another host's is {shown[order[0]]}: .*separate "
                                                               "directories"):
                offline.fill_host(tmp_path / "dir", "box-b", plan, commands, "", data)
