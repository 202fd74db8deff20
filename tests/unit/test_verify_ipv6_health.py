"""The host suite's health URL for an instance listening on an IPv6 loopback (failed before the brackets were added).

`listen: "::1"` is accepted by the settings (a loopback address, so no expose_to_network is needed), and
v100kit/verify/suite/test_host.py health() asks `http://{address}:{port}/health`. An IPv6 literal in a URL must be
in brackets (RFC 3986 section 3.2.2, IP-literal = "[" IPv6address "]"); curl exits 3 (URL malformed) on
`http://::1:23333/health` and prints 000, so test_*_instances_answer_health failed for a healthy instance."""

from __future__ import annotations

from v100kit.verify.expect import Service
from v100kit.verify.suite import test_host


class _Host:
    def __init__(self):
        self.commands: list[str] = []

    def run(self, command: str):
        self.commands.append(command)

        class Result:
            stdout = "200"
        return Result()


def test_an_ipv6_loopback_listener_is_asked_with_a_bracketed_url():
    host = _Host()
    test_host.health(host, Service("lmdeploy@q", "lmdeploy", 23333, "::1", None))
    assert "http://[::1]:23333/health" in host.commands[0], host.commands
