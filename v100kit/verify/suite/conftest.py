"""pytest plugin of the host suite: `--inventory FILE [--limit HOST ...] [--expect-driver-version V]` turns each
host of a pyinfra inventory into a Target (v100kit/verify/expect.py) through the same preflight as the deploy, and
every check runs once per host (test ids end in [HOST]). A host the preflight refuses or cannot reach gets one
failing check that says why. Run through `v100kit verify INVENTORY`, or directly:
    pytest --pyargs v100kit.verify.suite --inventory inventory/example.py -p no:cacheprovider
"""

from __future__ import annotations

import pytest
import testinfra

from v100kit.hosts import HostFailure
from v100kit.verify.expect import Target, target
from v100kit.verify.readonly import guard


def pytest_addoption(parser):
    g = parser.getgroup("v100kit verify")
    g.addoption("--inventory", help="pyinfra inventory file (e.g. inventory/lab.py)")
    g.addoption("--limit", action="append", metavar="HOST", help="only this host (repeatable)")
    g.addoption("--expect-driver-version", metavar="VERSION",
                help="the driver version a machine whose driver did not come from v100kit must run (replaces the "
                     "pin: its packages are then not checked)")


_TARGETS: dict[str, Target | HostFailure] = {}


def targets(config) -> dict[str, Target | HostFailure]:
    """{host name: Target, or why the host cannot be checked}, computed once per run (read-only: facts only)."""
    if not _TARGETS:
        from v100kit.hosts import for_each_host
        inventory = config.getoption("inventory")
        if not inventory:
            raise pytest.UsageError("the host suite needs --inventory FILE")
        expect = config.getoption("expect_driver_version")
        _TARGETS.update(for_each_host(inventory, config.getoption("limit"),
                                      lambda host, plan: target(host.name, host.data.dict(), plan, expect)))
        if not _TARGETS:  # a suite with no host would pass having checked nothing
            raise pytest.UsageError(f"no host to check in {inventory} (limit: {config.getoption('limit')})")
    return _TARGETS


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        found = targets(metafunc.config)
        metafunc.parametrize("target", list(found.values()), ids=list(found), scope="session")


_HOSTS: dict[str, testinfra.host.Host] = {}


@pytest.fixture(scope="session")
def host(target) -> testinfra.host.Host:
    """The testinfra host of `target`, every command of which passes the read-only guard (readonly.py)."""
    if isinstance(target, HostFailure):
        pytest.fail(f"this host cannot be checked: {target}", pytrace=False)
    if target.name not in _HOSTS:
        _HOSTS[target.name] = guard(testinfra.get_host(target.url))
    return _HOSTS[target.name]
