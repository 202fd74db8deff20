"""A local TCP port forwarded over a host's existing SSH connection (paramiko's direct-tcpip channel), so that the
bench reaches an instance that listens on the host's loopback only, as the toolkit's default `listen` does."""

from __future__ import annotations

import select
import socket
import threading


class Tunnel:
    """127.0.0.1:<local_port> here -> (remote_host, remote_port) as seen from the SSH server. `transport`: a
    paramiko Transport (pyinfra's SSH connector: host.connector.client.get_transport()). close() ends it."""

    def __init__(self, transport, remote_host: str, remote_port: int):
        self.transport, self.remote = transport, (remote_host, remote_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.local_port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, addr = self.sock.accept()
            except OSError:
                return
            try:
                chan = self.transport.open_channel("direct-tcpip", self.remote, addr)
            except Exception:  # the host refused the forward: the client sees a closed connection
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, chan), daemon=True).start()

    @staticmethod
    def _pump(client: socket.socket, chan) -> None:
        try:
            while True:
                ready, _, _ = select.select([client, chan], [], [], 1.0)
                for src, dst in ((client, chan), (chan, client)):
                    if src in ready:
                        data = src.recv(65536)
                        if not data:
                            return
                        dst.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            chan.close()

    def close(self) -> None:
        self.closed = True
        self.sock.close()
