"""Facts for the base role."""

from __future__ import annotations

from pyinfra.api import FactBase


class CaBundleStale(FactBase[bool]):
    """True when a v100kit-*.crt under /usr/local/share/ca-certificates is newer than the system CA bundle."""

    def command(self) -> str:
        return ("find /usr/local/share/ca-certificates -name 'v100kit-*.crt' -newer /etc/ssl/certs/ca-certificates.crt"
                " | head -1")

    def process(self, output: list[str]) -> bool:
        return any(line.strip() for line in output)
