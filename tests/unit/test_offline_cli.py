"""`v100kit offline fill|serve|deploy` with bad arguments: one line naming the argument and the fix, exit 2, and
DIR not created (a traceback, or exit 0 with an empty settings.json, was what a new user got before). The hosts
here are real sockets on this machine: a port nothing listens on, and 192.0.2.1 (TEST-NET-1, RFC 5737), which no
machine has."""

from __future__ import annotations

import json
import socket

import pytest

from v100kit import offline
from v100kit.cli import main


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "inv.py"
    path.write_text(f'boxes = [("box-1", {{"ssh_hostname": "127.0.0.1", "ssh_port": {closed_port()}, '
                    '"ssh_connect_retries": 0}), ("box-2", {"ssh_hostname": "127.0.0.1"})]\n')
    return str(path)


@pytest.fixture
def filled(tmp_path):
    """A directory as fill leaves it (settings.json with {base})."""
    d = tmp_path / "filled"
    d.mkdir()
    (d / "settings.json").write_text(json.dumps({"base_apt_mirror": "{base}/apt/deb.debian.org/debian"}))
    return d


def refused(capsys, argv: list[str], *words: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"v100kit offline {argv[1]}: ") and err.count("\n") == 1, err  # one line, no traceback
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("action", ["fill", "deploy"])
def test_a_limit_host_the_inventory_lacks_is_refused(action, inventory, tmp_path, filled, capsys):
    d = tmp_path / "new" if action == "fill" else filled
    extra = ["--address", "127.0.0.1"] if action == "deploy" else []
    refused(capsys, ["offline", action, str(d), inventory, "--limit", "box-3", *extra],
            "--limit box-3: no such host", "box-1, box-2")
    assert action == "deploy" or not d.exists()


def test_a_host_that_does_not_answer_is_named_before_dir_is_created(inventory, tmp_path, capsys):
    d = tmp_path / "new"
    refused(capsys, ["offline", "fill", str(d), inventory, "--limit", "box-1"], "box-1: cannot connect over SSH")
    assert not d.exists()


def test_dir_that_is_a_file_is_refused(inventory, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    refused(capsys, ["offline", "fill", str(tmp_path / "afile"), inventory], "is a file", "give a directory")


@pytest.mark.parametrize("address, words", [
    ("0.0.0.0", ["--address 0.0.0.0", "IPv4 address of this machine"]),
    ("224.0.0.1", ["--address 224.0.0.1", "not multicast or broadcast"]),
    ("255.255.255.255", ["--address 255.255.255.255", "not multicast or broadcast"]),
    ("::1", ["--address ::1", "not IPv6"]),
    ("gpu.example", ["--address gpu.example: not an IP address"]),
    ("192.0.2.1", ["cannot listen on 192.0.2.1", "give an address of this machine"]),
])
def test_an_address_the_hosts_cannot_use_is_refused(address, words, filled, capsys, monkeypatch):
    # an accepted address would serve until interrupted: here it returns at once (exit 0)
    monkeypatch.setattr(offline, "wait_until_interrupted", lambda: None)
    refused(capsys, ["offline", "serve", str(filled), "--address", address, "--port", "0"], *words)


@pytest.mark.parametrize("content, words", [
    ("{not json", ["settings.json is not JSON (Expecting property name"]),
    ("{}", ["names no apt mirror"]),
    ("5", ["is not a JSON object of setting: string"]),
    ('[1, "a"]', ["is not a JSON object of setting: string"]),
    ('"base_apt_mirror"', ["is not a JSON object of setting: string"]),
    ('{"base_apt_mirror": null}', ["is not a JSON object of setting: string"]),
])
@pytest.mark.parametrize("action", ["deploy", "serve", "fill"])
def test_a_settings_json_no_fill_wrote_is_refused(action, content, words, filled, inventory, capsys):
    """deploy and serve refuse it before serving; fill (which completes a directory filled before) before it
    connects to any host."""
    (filled / "settings.json").write_text(content)
    argv = ["offline", action, str(filled)] + ([] if action == "serve" else [inventory])
    refused(capsys, argv + ([] if action == "fill" else ["--address", "127.0.0.1"]), str(filled / "settings.json"),
            *words, "run `v100kit offline fill` again")


def test_serve_of_a_file_says_so(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    refused(capsys, ["offline", "serve", str(tmp_path / "afile"), "--address", "127.0.0.1"], "afile is a file")


@pytest.mark.parametrize("value", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(value, filled, capsys):
    with pytest.raises(SystemExit) as e:
        main(["offline", "serve", str(filled), "--address", "127.0.0.1", "--port", value])
    assert e.value.code == 2 and f"--port: {value}: a TCP port is 0 to 65535" in capsys.readouterr().err


def test_an_inventory_without_hosts_is_refused_before_dir_is_created(tmp_path, capsys):
    (tmp_path / "empty.py").write_text("hosts = []\n")
    refused(capsys, ["offline", "fill", str(tmp_path / "d"), str(tmp_path / "empty.py")], "has no hosts")
    assert not (tmp_path / "d").exists()


def test_serve_stops_on_ctrl_c_with_exit_0(filled, capsys, monkeypatch):
    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(offline, "wait_until_interrupted", interrupted)
    assert main(["offline", "serve", str(filled), "--address", "127.0.0.1", "--port", "0"]) == 0
    out = capsys.readouterr().out
    assert '"base_apt_mirror": "http://127.0.0.1:' in out and out.endswith(f"stopped serving {filled}\n")


def test_a_download_that_fails_is_one_line(inventory, tmp_path, capsys, monkeypatch):
    """The fill's own errors (here the FetchError a dead model URL ends in) reach the user as the one line."""
    def fail(*_):
        raise offline.offline_pypi.FetchError("http://127.0.0.1:9/tiny.gguf: failed 6 times, 3 s apart")
    monkeypatch.setattr(offline, "fill", fail)
    refused(capsys, ["offline", "fill", str(tmp_path / "d"), inventory], "http://127.0.0.1:9/tiny.gguf: failed")
