"""Lab fixtures: one provision per test run, shared by every check; one testinfra host per bundled lab host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from lab.data import host_data
from lab.harness import HOSTS, HostSpec
from roles.cuda import decide as cuda
from roles.cuda.versions import Toolkit
from roles.llama_cpp import decide as llama_cpp
from roles.llama_cpp.decide import LlamaCppPlan
from roles.nvidia_driver import decide as nvidia_driver
from roles.nvidia_driver.decide import DriverPlan
from roles.platform import SUPPORTED
from roles.settings import Settings, load_settings
from lab.provision import CCACHE_HITS, CCACHE_MISSES, LOGS, Provision, provision

SUITE_PLATFORM = {"bookworm": "debian12", "trixie": "debian13"}


_PROVISION: list[Provision] = []


@pytest.fixture(scope="session")
def provisioned() -> Provision:
    p = provision()
    _PROVISION.append(p)
    if p.first.rc != 0:
        pytest.fail(f"lab deploy failed (rc {p.first.rc}); log: build/lab-logs/deploy-1.log\n{p.first.stderr[-4000:]}")
    return p


@dataclass
class Target:
    """A provisioned lab host: its spec, a testinfra host, and what the settings say it should have."""

    spec: HostSpec
    host: testinfra.host.Host
    settings: Settings
    driver: DriverPlan
    toolkits: list[Toolkit]
    llama: LlamaCppPlan | None  # None: this lab host serves no llama.cpp instance


@pytest.fixture(scope="session", params=HOSTS, ids=[s.name for s in HOSTS])
def target(request, provisioned) -> Target:
    return make_target(request.param, provisioned)


@pytest.fixture(scope="session")
def first_deploy_log() -> Path:
    """The log of the deploy that first set up the hosts' instances (the shared provision's first deploy)."""
    return LOGS / "deploy-1.log"


def make_target(spec: HostSpec, provisioned: Provision) -> Target:
    """The Target of a provisioned lab host, with what its settings (lab/data.py host_data, read now) plan."""
    platform = SUPPORTED[SUITE_PLATFORM[spec.suite]]
    settings = load_settings(spec.name, host_data(spec))
    installed = {"linux-image-amd64": ["lab image"]}
    driver, problems = nvidia_driver.plan(settings, platform, installed)
    toolkits, cuda_problems = cuda.plan(settings, platform, driver.pin)
    llama, llama_problems = llama_cpp.plan(settings, toolkits, [], lambda path: True)
    assert not problems and not cuda_problems and not llama_problems
    host = testinfra.get_host(provisioned.lab.testinfra_url(spec))
    return Target(spec, host, settings, driver, toolkits, llama)


def pytest_terminal_summary(terminalreporter):
    """Print what the shared provision measured (seconds, changed operations per host)."""
    if not _PROVISION:
        return
    p = _PROVISION[0]
    tr = terminalreporter
    tr.section("lab provision")
    tr.write_line(f"hosts booted (image cached or built): {p.up_seconds:.1f} s")
    for label, run in (("first deploy", p.first), ("second deploy", p.second)):
        per_host = ", ".join(f"{h} {n}" for h, n in sorted(run.changed.items())) or "none"
        tr.write_line(f"{label}: {run.seconds:.1f} s, rc {run.rc}, changed operations: {per_host}")
        hosts = ", ".join(f"{h} {sec:.1f} s" for h, sec in sorted(run.host_seconds.items()))
        tr.write_line(f"  before the first operation (inventory, connect, facts): {run.prepare_seconds:.1f} s; "
                      f"each host's last operation done at: {hosts}")
        for h in sorted(run.host_ops):  # where each host's time went: per @deploy, and its slowest operations
            roles = ", ".join(f"{role} {sec:.0f} s" for role, sec in run.by_role(h) if sec >= 1)
            ops = ", ".join(f"{name} {sec:.0f} s" for name, sec in run.host_slowest(h))
            tr.write_line(f"  {h} by deploy: {roles}")
            tr.write_line(f"  {h} slowest: {ops}")
            if run is p.first and p.dkms.get(h):  # DKMS builds during the first deploy only
                tr.write_line(f"  {h} DKMS builds (their own log): "
                              + ", ".join(f"{name} {sec} s" for name, sec in sorted(p.dkms[h].items())))
    rate = p.ccache_hit_rate()
    if p.ccache:
        tr.write_line(f"compiler cache during the first deploy: {sum(p.ccache.get(k, 0) for k in CCACHE_HITS)} hits, "
                      f"{sum(p.ccache.get(k, 0) for k in CCACHE_MISSES)} misses"
                      + (f" (hit rate {rate:.1%})" if rate is not None else "")
                      + f", cache size {p.ccache.get('cache_size_kibibyte', 0) / 1024:.0f} MiB")
    for name, (old, new) in sorted(p.reboots.items()):
        tr.write_line(f"reboot {name}: boot_id {old} -> {new}")
