"""The lab's registry proxy: an HTTP forward proxy on the lab bridge for hosts in their own network namespace.

Such a host has no route beyond the lab bridge (docs/lab.md: test traffic stays on the loopback and the lab's own
hosts); it reaches the package registries the way a host behind a site proxy does, through this proxy
(http_proxy/https_proxy in its /etc/environment, Acquire::http::Proxy for apt). Only the registries' host names
are forwarded (Debian's archive and security archive, PyPI and its file host): anything else is answered 403.
Plain http requests (apt) are forwarded one per connection; https goes through CONNECT, end to end encrypted.

    python -m lab.proxy ADDRESS PORT HOST [HOST ...]
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _handle(allowed: set[str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    request, *headers = head.decode("latin-1").split("\r\n")
    method, target, _version = (request.split(" ") + ["", ""])[:3]
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        port = int(port or 443)
    else:
        url = urlsplit(target)
        host, port = url.hostname or "", url.port or 80
    if host not in allowed or (method == "CONNECT") != (port == 443):
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        return
    try:
        up_reader, up_writer = await asyncio.open_connection(host, port)
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        return
    if method == "CONNECT":
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    else:  # origin-form request line, one request per connection
        path = url.path or "/"
        kept = [h for h in headers if h and not h.lower().startswith(("proxy-", "connection:", "keep-alive:"))]
        up_writer.write((f"{method} {path}{'?' + url.query if url.query else ''} HTTP/1.1\r\n"
                         + "".join(f"{h}\r\n" for h in kept) + "Connection: close\r\n\r\n").encode("latin-1"))
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def serve(address: str, port: int, allowed: set[str]) -> None:
    """Serve until killed."""
    server = await asyncio.start_server(lambda r, w: _handle(allowed, r, w), address, port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2]), set(sys.argv[3:])))
