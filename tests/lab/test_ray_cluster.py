"""The lab's Ray cluster (#16): two Debian 12 hosts, each in its own network namespace (a veth pair on the lab
bridge, addresses the lab assigns), deployed together with deploy.py as group raylab. CPU only: no GPU in the lab.

What is real here: Ray from the locked vLLM venv in ray-head / ray-worker units, joined over the cluster network
between two node addresses; the worker's return after the head restarts; its leaving when its unit stops; the
multi-node vllm@ arguments read by vLLM's own parser; the pipeline split read from the installed vLLM."""

from __future__ import annotations

import ipaddress
import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lab.data import CLUSTER_HOSTS, cluster_lab
from lab.harness import LAB_BRIDGE_ADDRESS, LAB_NET_PREFIX, Lab
from lab.provision import FRESH_ONLY, REUSED, deploy
from roles.planner.vllm import pp_partition
from roles.ray.facts import RayAliveNodes
from v100kit.doctor import diagnose_all as doctor

pytestmark = pytest.mark.cluster

HEAD, WORKER = CLUSTER_HOSTS
PY = "/opt/vllm/current/bin/python"
GCS = f"{HEAD.address}:6379"
LAB_NET = ipaddress.ip_network(f"{LAB_BRIDGE_ADDRESS}/{LAB_NET_PREFIX}", strict=False)
#: The doctor's own fact for the alive nodes (Ray's ray.nodes(), asked with the venv's Ray as the service user)
ALIVE = RayAliveNodes()


@pytest.fixture(scope="module")
def cluster():
    """Boot both hosts (fresh unless V100KIT_LAB_REUSE=1), deploy the group twice (the second must change
    nothing); yield (lab, first run, second run); destroy the hosts afterwards (kept with reuse)."""
    lab = cluster_lab()
    lab.prepare()
    if not REUSED:
        bundled = Lab()
        for s in bundled.hosts:  # every other lab test ran before this module (tests/conftest.py orders it last)
            bundled.destroy(s)
        for s in CLUSTER_HOSTS:
            lab.destroy(s)
    lab.check_disk(CLUSTER_HOSTS)
    with ThreadPoolExecutor(len(CLUSTER_HOSTS)) as pool:
        list(pool.map(lab.up, CLUSTER_HOSTS))
    first = deploy("cluster-deploy-1", inventory="inventory/lab_cluster.py")
    assert first.rc == 0, f"cluster deploy failed; log: build/lab-logs/cluster-deploy-1.log\n{first.stderr[-4000:]}"
    second = deploy("cluster-deploy-2", inventory="inventory/lab_cluster.py")
    yield lab, first, second
    if not REUSED:
        for s in CLUSTER_HOSTS:
            lab.destroy(s)


def alive(lab, timeout: float = 0) -> list[str]:
    """The alive nodes' addresses, asked on the head as the service user; waits up to `timeout` seconds for both."""
    deadline = time.monotonic() + timeout
    while True:
        rc, out = lab.run(HEAD, ALIVE.command(python=PY, gcs_address=GCS, user="llm"), 120)
        nodes = (ALIVE.process(out.splitlines()) if rc == 0 else None) or []
        if len(nodes) == 2 or time.monotonic() >= deadline:
            return nodes
        time.sleep(3)


def _last_json(out: str):
    """The last line of `out` that is JSON (Ray may print log lines after it), else None."""
    for line in reversed(out.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def test_second_deploy_changes_nothing(cluster):
    _, first, second = cluster
    assert second.rc == 0 and not second.changed, second.changed_ops


def test_ray_status_on_the_head_lists_both_nodes(cluster):
    lab = cluster[0]
    assert alive(lab, timeout=120) == [HEAD.address, WORKER.address]
    rc, out = lab.run(HEAD, f"runuser -u llm -- env HOME=/tmp /opt/vllm/current/bin/ray status --address {GCS}")
    assert rc == 0, out
    active = out.split("Active:", 1)[1].split("Pending:", 1)[0]
    assert len([line for line in active.splitlines() if "node_" in line]) == 2, out


def test_units_run_ray_from_the_locked_venv_as_the_service_user(cluster):
    lab = cluster[0]
    for s, unit in ((HEAD, "ray-head"), (WORKER, "ray-worker")):
        rc, out = lab.run(s, f"systemctl is-active {unit} && "
                             f"ps -o user= -p $(systemctl show {unit} -p MainPID --value) && "
                             "readlink -f /opt/vllm/current && cat /opt/vllm/current/.v100kit-venv.json")
        state, user, venv, stamp = out.strip().splitlines()[:4]
        assert (state, user) == ("active", "llm"), out
        assert json.loads(stamp)["vllm"] in venv


def test_cluster_traffic_runs_between_the_node_addresses_only(cluster):
    """Every TCP connection of the service user's processes on both nodes is between lab addresses (the cluster
    network) or on the loopback, and the worker talks to the head's address."""
    lab = cluster[0]
    peers = {}
    for s in CLUSTER_HOSTS:
        rc, uid = lab.run(s, "id -u llm")
        rc, out = lab.run(s, "ss -Htne state established")  # columns: Recv-Q Send-Q local peer, then uid:N ...
        assert rc == 0, out
        pairs = [line.split()[2:4] for line in out.splitlines() if f" uid:{uid.strip()} " in f"{line} "]
        assert pairs, out
        # Ray listens on IPv6 sockets: IPv4 peers show as IPv4-mapped addresses (::ffff:a.b.c.d)
        peers[s.name] = {p.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:") for pair in pairs for p in pair}
        for address in peers[s.name]:
            ip = ipaddress.ip_address(address)
            assert ip.is_loopback or ip in LAB_NET, (s.name, address)
    assert HEAD.address in peers[WORKER.name], peers


def test_restarting_the_head_brings_the_worker_back(cluster):
    lab = cluster[0]
    assert lab.run(HEAD, "systemctl restart ray-head")[0] == 0
    assert alive(lab, timeout=240) == [HEAD.address, WORKER.address]


def test_stopping_the_worker_unit_removes_it_from_the_cluster(cluster):
    lab = cluster[0]
    try:
        assert lab.run(WORKER, "systemctl stop ray-worker")[0] == 0
        deadline = time.monotonic() + 120
        while (nodes := alive(lab)) != [HEAD.address] and time.monotonic() < deadline:
            time.sleep(3)
        assert nodes == [HEAD.address]
    finally:
        lab.run(WORKER, "systemctl start ray-worker")
    assert alive(lab, timeout=240) == [HEAD.address, WORKER.address]


def test_multi_node_vllm_unit_is_read_by_vllm_and_condition_skipped_without_gpu(cluster):
    """vLLM's own CLI parser reads the head's /etc/vllm/tiny.env: the Ray executor, one pipeline stage per node;
    the worker has no vllm@ instance; without a GPU the unit's condition skips it."""
    lab = cluster[0]
    script = ("import json, shlex\n"
              "from vllm.entrypoints.openai.cli_args import make_arg_parser\n"
              "from vllm.utils import FlexibleArgumentParser\n"
              "env = dict(l.split('=', 1) for l in open('/etc/vllm/tiny.env').read().splitlines())\n"
              "a = make_arg_parser(FlexibleArgumentParser()).parse_args(shlex.split(env['VLLM_ARGS']))\n"
              "print(json.dumps([a.pipeline_parallel_size, a.tensor_parallel_size, a.distributed_executor_backend,"
              " env['RAY_ADDRESS'], env['VLLM_HOST_IP'], env['NCCL_SOCKET_IFNAME']]))\n")
    rc, out = lab.run(HEAD, f"cd /tmp && HOME=/tmp {PY} -c {shlex.quote(script)} 2>/dev/null")
    assert rc == 0, out
    assert _last_json(out) == [2, 1, "ray", GCS, HEAD.address, "=lab0"]
    rc, out = lab.run(HEAD, "systemd-analyze verify vllm@tiny.service && systemctl is-enabled vllm@tiny && "
                            "systemctl show vllm@tiny -p ConditionResult --value")
    assert rc == 0 and out.strip().splitlines()[-2:] == ["enabled", "no"], out
    assert lab.run(WORKER, "test ! -e /etc/vllm/tiny.env && test -s /var/lib/llm/models/tiny/config.json")[0] == 0


def test_doctor_has_a_joined_row_per_node(cluster):
    """`v100kit doctor` on the cluster's inventory: each node's unit runs and the cluster lists it as alive. The
    node list comes from Ray (the venv's ray.nodes() on each node), against the addresses the lab assigned."""
    rows = doctor("inventory/lab_cluster.py", None)
    for s, unit in ((HEAD, "ray-head"), (WORKER, "ray-worker")):
        got = {r.check: r for r in rows[s.name]}
        assert got[f"{unit} running"].state == "ok", got[f"{unit} running"]
        joined = got[f"node {s.address} joined cluster raylab"]
        assert joined.state == "ok" and f"{HEAD.address}, {WORKER.address}" in joined.evidence, joined


@pytest.mark.parametrize("layers, stages", [(2, 2), (32, 3), (80, 3), (61, 4), (28, 5), (3, 4)])
def test_pipeline_split_agrees_with_the_installed_vllm(cluster, layers, stages):
    """The planner's pp_partition against vLLM's own get_pp_indices in the deployed venv."""
    lab = cluster[0]
    script = ("from vllm.distributed.utils import get_pp_indices\n"
              f"print([(lambda r: r[1] - r[0])(get_pp_indices({layers}, i, {stages})) for i in range({stages})])")
    rc, out = lab.run(HEAD, f"cd /tmp && HOME=/tmp {PY} -c {shlex.quote(script)} 2>/dev/null")
    assert rc == 0, out
    assert pp_partition(layers, stages) == _last_json(out)


def test_fresh_cluster_hosts_were_booted(cluster):
    """The two hosts are the lab's namespaced ones: each answers on its own address only."""
    if REUSED:
        pytest.skip(FRESH_ONLY)
    lab = cluster[0]
    for s in CLUSTER_HOSTS:
        rc, out = lab.run(s, "ip -4 -o addr show lab0")
        assert rc == 0 and f"inet {s.address}/" in out, out
