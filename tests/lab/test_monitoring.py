"""A real Prometheus from Debian's archive scrapes the bundled lab hosts through `v100kit monitoring scrape-config`
(tests/tiers.toml suite monitoring; issue 29).

The provisioned hosts are deployed with the monitoring role on (lab/data.py MONITORING_ENV: each node exporter on
its own loopback port, the hosts share the machine's network), then Prometheus (/usr/bin/prometheus of Debian's
`prometheus` package, which tools/setup.sh --lab installs) runs on the control machine's loopback with the
generated configuration, the shipped alert rules and the keyed llama-server's API key in a credentials file written
by --write-credentials. Through its HTTP API (/api/v1/targets, /api/v1/query, /api/v1/rules):
- every node exporter target is up; the GPU exporter's file reached it (v100kit_gpu_exporter_up{reason}, 0 on these
  GPU-less hosts with nvidia-smi's reason: the exporter ran and saw no GPU; v100kit_gpu_count 0; names as
  roles/monitoring/METRICS.md lists them) and so did the doctor's (v100kit_check_ok, its GPU rows skipped);
- llama-server@tiny (lab-trixie, API key set) is up through the credentials file; vllm@tiny (lab-bookworm) is down,
  and the doctor's row says why: without a GPU its unit is condition-skipped (v100kit_check_skipped{check="vllm@tiny
  running"});
- breaking lab-trixie on purpose as tests/lab/test_repair.py does (`systemctl disable --now nvidia-persistenced`)
  flips v100kit_check_ok{check="nvidia-persistenced enabled"} to 0 and puts V100kitDoctorCheckBroken in pending;
  enabling it again flips it back.
At the end the hosts are deployed with CI's settings again (monitoring off: timers and drop-in removed).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lab.data import LLAMA_HOSTS, MONITORING_ENV, MONITORING_PORTS, VLLM_HOSTS
from lab.harness import spec
from lab.provision import deploy
from roles.monitoring import deploy as monitoring_role
from v100kit.cli import main

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "files/monitoring/alerts.yml"
PROMETHEUS_PORT = 19090
API = f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1"
BROKEN_HOST = "lab-trixie"
CHECK = "nvidia-persistenced enabled"  # a row of the doctor, and of its host-local checks
LABEL = "monitoring"


def api(path: str, **params) -> dict:
    url = f"{API}/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return doc["data"]


def query(expr: str) -> list[dict]:
    return api("query", query=expr)["result"]


def wait_for(what: str, probe, timeout: float = 120, every: float = 2):
    """probe() until it returns something true; fail naming `what` and the last value after `timeout` s."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, AssertionError, KeyError):
            last = probe()
            if last:
                return last
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@pytest.fixture(scope="module")
def monitored(provisioned):
    """The bundled hosts deployed with monitoring on (MONITORING_ENV set for this module, in this process and in
    pyinfra's); after the module, deployed with CI's settings again."""
    if not monitoring_role.GPU_EXPORTER.is_file():
        pytest.fail(f"{monitoring_role.GPU_EXPORTER} (the GPU exporter of issue 29) is not in this tree: the role "
                    "installs it")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MONITORING_ENV, "1")
        first = deploy(LABEL)
        assert first.rc == 0, f"deploy with monitoring on failed: build/lab-logs/{LABEL}.log\n{first.stderr[-3000:]}"
        second = deploy(f"{LABEL}-2")
        yield first, second
    back = deploy(f"{LABEL}-back")
    assert back.rc == 0, f"hosts not deployed back to CI's settings: build/lab-logs/{LABEL}-back.log"


@pytest.fixture(scope="module")
def prometheus(monitored, tmp_path_factory):
    """Debian's Prometheus on the control machine's loopback, scraping the lab through the generated
    configuration (every 5 s) with the shipped rules; stopped (its own PID) after the module."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("no prometheus binary: tools/setup.sh --lab installs Debian's prometheus package")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = tmp / "prometheus.yml"
    with config.open("w") as out, contextlib.redirect_stdout(out), pytest.MonkeyPatch.context() as mp:
        mp.setenv(MONITORING_ENV, "1")
        rc = main(["monitoring", "scrape-config", "inventory/lab.py", "--credentials-dir", str(tmp / "keys"),
                   "--write-credentials", "--rules", str(RULES), "--scrape-interval", "5"])
    assert rc == 0, config.read_text()
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("w"))
    try:
        wait_for("Prometheus answers", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready", timeout=5).status == 200, timeout=60)
        yield {"config": config.read_text(), "dir": tmp}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def targets_by(prometheus) -> dict[tuple[str, str], dict]:
    """{(job, host): active target} once every target was scraped at least once."""
    def scraped():
        active = api("targets")["activeTargets"]
        done = active and all(t["lastScrape"] and not t["lastScrape"].startswith("0001-") for t in active)
        return {(t["labels"]["job"], t["labels"]["host"]): t for t in active} if done else None
    return wait_for("every target scraped once", scraped, timeout=90)


def test_a_second_deploy_with_monitoring_changes_nothing(monitored):
    _, second = monitored
    assert second.rc == 0 and second.changed == {}, second.changed_ops


def test_the_node_exporters_listen_on_the_loopback_only(provisioned, monitored):
    for name, port in MONITORING_PORTS.items():
        rc, out = provisioned.lab.run(spec(name), f"ss -Hltn 'sport = :{port}'")
        # ss's columns: State Recv-Q Send-Q Local:Port Peer:Port; the peer of a listener is "0.0.0.0:*" (or "*:*"),
        # so only the local addresses count: every listener on the port is on the loopback
        local = {line.split()[3] for line in out.splitlines() if line.strip()}
        assert rc == 0 and local == {f"127.0.0.1:{port}"}, (name, out)


def test_the_generated_configuration_holds_no_key(prometheus):
    key = (prometheus["dir"] / "keys" / f"{LLAMA_HOSTS[0]}_llama-server@tiny.key")
    assert key.is_file() and oct(key.stat().st_mode & 0o777) == "0o600"
    assert key.read_text().strip() not in prometheus["config"]


def test_node_gpu_exporter_doctor_and_engine_targets(prometheus):
    targets = targets_by(prometheus)
    for host in MONITORING_PORTS:
        node = targets[("v100kit-node", host)]
        assert node["health"] == "up", node
    llama = next(t for (job, host), t in targets.items() if job.startswith("v100kit-llama-server") and
                 host == LLAMA_HOSTS[0])
    assert llama["health"] == "up", llama  # /metrics needs the API key here: the credentials file carried it
    assert query(f'llamacpp:prompt_tokens_total{{host="{LLAMA_HOSTS[0]}"}}')
    for host in MONITORING_PORTS:
        # the GPU exporter's file: it ran, and said that it found no GPU (these hosts have none)
        (gpu,) = wait_for(f"v100kit_gpu_exporter_up of {host}",
                          lambda: query(f'v100kit_gpu_exporter_up{{host="{host}"}}'), timeout=60)
        assert gpu["value"][1] == "0" and gpu["metric"]["reason"], gpu  # why: nvidia-smi's own words
        (count,) = query(f'v100kit_gpu_count{{host="{host}"}}')
        assert count["value"][1] == "0", count
        assert query(f'v100kit_gpu_exporter_last_run_timestamp_seconds{{host="{host}"}}')
        # the doctor's file: recent, its GPU rows skipped, the persistence daemon enabled
        (stamp,) = wait_for(f"the doctor's timestamp of {host}",
                            lambda: query(f'v100kit_doctor_last_run_timestamp_seconds{{host="{host}"}}'), timeout=90)
        assert time.time() - float(stamp["value"][1]) < 300
        assert query(f'v100kit_check_skipped{{host="{host}",check="persistence mode on"}}')
        (ok,) = query(f'v100kit_check_ok{{host="{host}",check="{CHECK}"}}')
        assert ok["value"][1] == "1", ok
    vllm_host = VLLM_HOSTS[0]
    vllm = next(t for (job, host), t in targets.items() if job.startswith("v100kit-vllm") and host == vllm_host)
    if query(f'v100kit_gpu_exporter_up{{host="{vllm_host}"}} == 1'):
        assert vllm["health"] == "up", vllm
    else:  # no GPU: vllm@tiny is condition-skipped, so its target is down, and the doctor's row says why
        assert vllm["health"] == "down", vllm
        assert query(f'v100kit_check_skipped{{host="{vllm_host}",check="vllm@tiny running"}}')


def test_rules_loaded(prometheus):
    groups = api("rules")["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    assert {"V100kitGpuLost", "V100kitDriverLibraryMismatch", "V100kitServerNotOnGpu", "V100kitEccUncorrectedErrors",
            "V100kitGpuThrottled", "V100kitInstanceDown", "V100kitKvCacheFull"} <= names
    assert all(r.get("health") in ("ok", "unknown") for g in groups for r in g["rules"]), groups


def test_a_doctor_metric_flips_when_the_host_is_broken_and_back(provisioned, prometheus):
    lab, s = provisioned.lab, spec(BROKEN_HOST)
    targets_by(prometheus)
    selector = f'v100kit_check_ok{{host="{BROKEN_HOST}",check="{CHECK}"}}'
    was_active = lab.run(s, "systemctl is-active nvidia-persistenced")[1].strip() == "active"
    rc, out = lab.run(s, "systemctl disable --now nvidia-persistenced && systemctl start v100kit-doctor.service")
    assert rc == 0, out
    try:
        wait_for(f"{selector} == 0", lambda: query(f"{selector} == 0"), timeout=60)
        wait_for("V100kitDoctorCheckBroken pending", lambda: query(
            f'ALERTS{{alertname="V100kitDoctorCheckBroken",host="{BROKEN_HOST}",check="{CHECK}"}}'), timeout=60)
    finally:
        rc, out = lab.run(s, "systemctl enable nvidia-persistenced" + (" && systemctl start nvidia-persistenced"
                                                                       if was_active else ""))
        assert rc == 0, out
    rc, out = lab.run(s, "systemctl start v100kit-doctor.service")
    assert rc == 0, out
    wait_for(f"{selector} == 1", lambda: query(f"{selector} == 1"), timeout=60)
