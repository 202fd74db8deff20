"""roles/ssh.py: paramiko's sockets get TCP_NODELAY, read back from the kernel with getsockopt (the lab measured
46 ms per SSH command without it, 7.4 ms with it); and the repository's config.py, which pyinfra executes before
connecting, switches it on."""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko
import pytest

from roles import ssh

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pristine(monkeypatch):
    """paramiko.Transport.__init__ as paramiko ships it, restored after the test."""
    original = paramiko.Transport.__init__
    while getattr(original, "__wrapped__", None) is not None:
        original = original.__wrapped__
    monkeypatch.setattr(paramiko.Transport, "__init__", original)
    return original


@pytest.fixture
def client():
    """The client end of a TCP connection on the loopback (the server end accepted), closed after the test."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    sock = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    yield sock
    for s in (server, sock, peer):
        s.close()


def nodelay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_a_transport_sets_tcp_nodelay_on_its_socket(pristine, client):
    assert nodelay(client) == 0  # the kernel's default: Nagle on
    ssh.tcp_nodelay()
    ssh.tcp_nodelay()  # idempotent: wrapped once
    assert paramiko.Transport.__init__.__wrapped__ is pristine
    t = paramiko.Transport(client)
    assert nodelay(client) == 1
    t.close()


def test_without_it_paramiko_leaves_nagle_on(pristine, client):
    t = paramiko.Transport(client)
    assert nodelay(client) == 0
    t.close()


def test_the_repositorys_pyinfra_config_switches_it_on(pristine):
    exec(compile((ROOT / "config.py").read_text(), "config.py", "exec"), {})
    assert paramiko.Transport.__init__ is not pristine
    assert paramiko.Transport.__init__.__wrapped__ is pristine
