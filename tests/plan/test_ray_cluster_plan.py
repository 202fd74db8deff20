"""Plan-level tests (facts in, commands out) of a Ray cluster of V100 boxes the lab cannot be: Ubuntu 24.04 boxes
(Python 3.12) with 32 GB V100s answering nvidia-smi, their cluster network on eth1. Every node is a fake host of
one pyinfra inventory (named @fake/n1, @fake/n2, ...: pyinfra's fake connector), deployed together as pyinfra
deploys an inventory group."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

import pytest

from lab.data import tiny_hf_model
from lab.models import N_LAYER
from roles.settings import SettingsError
from roles.doctor.checks import ray_node
from tests.plan.harness import UBUNTU_2404, plan_cluster, preflight_cluster
from v100kit.plan import summarize, table


def v100s(n: int) -> list[str]:
    """nvidia-smi --query-gpu rows of n 32 GB V100s (the NvidiaGpus fact's command)."""
    return [f"{i}, GPU-00000000-0000-0000-0000-00000000000{i}, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05" for i in range(n)]


def ip_addr(interface: str, address: str) -> list[str]:
    """`ip -j addr show` output (iproute2's JSON) of lo and one interface with one IPv4 address."""
    return [json.dumps([
        {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP"], "mtu": 65536, "operstate": "UNKNOWN",
         "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
        {"ifindex": 3, "ifname": interface, "flags": ["BROADCAST", "UP"], "mtu": 9000, "operstate": "UP",
         "address": "0c:42:a1:00:00:01",
         "addr_info": [{"family": "inet", "local": address, "prefixlen": 24}]}])]


#: Llama-3-70B's config.json (meta-llama/Meta-Llama-3-70B), served from a directory on the host: 141 GB of fp16
#: weights, more than the VRAM of two nodes of two 32 GB V100s (128 GiB), less than two nodes of four
LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
             "max_position_embeddings": 8192, "vocab_size": 128256, "torch_dtype": "bfloat16",
             "rope_theta": 500000.0, "model_type": "llama"}
LLAMA_70B_BYTES = 141_107_412_992


def model_dir(path: str, config: dict, weight_bytes: int) -> dict:
    """The HfModelDir fact's answer for a model directory on the host."""
    return {f"test -r {path}/config.json": ["#files", f"{weight_bytes} model.safetensors", "#index", "", "#config",
                                            json.dumps(config)]}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """The tiny safetensors model (written under pytest's temporary directory, never into the lab cache)."""
    return str(tiny_hf_model(tmp_path_factory.mktemp("cache")))


def cluster(model: str | None, nodes: int = 2, gpus: int | dict[str, int] = 2, python: dict | None = None,
            host_data: dict | None = None, group: dict | None = None, extra: dict | None = None,
            uploads: dict | None = None, ifaces: dict | None = None, tp: int | None = None,
            extra_instance: dict | None = None, second_instance: bool = False) -> dict[str, list[str]]:
    """Deploy a cluster group `v100s` of `nodes` boxes n1 (head), n2, ... with `gpus` V100s each (or per node) and
    the tiny model (or `group`'s own instances); `python`/`host_data`/`ifaces`: per-node Python version, host data
    and eth1 address; `tp`, `extra_instance`, `second_instance`: the tiny instance's tensor parallel size (default:
    the GPUs per node), further settings, a second instance."""
    hosts = {}
    per_node = gpus if isinstance(gpus, dict) else {f"n{i}": gpus for i in range(1, nodes + 1)}
    for i in range(1, nodes + 1):
        name = f"n{i}"
        responses = {"nvidia-smi --query-gpu": v100s(per_node[name]),
                     "sys.version_info": [(python or {}).get(name, "3.12")],
                     "ip -j addr show": ip_addr("eth1", (ifaces or {}).get(name, f"10.0.0.{i}")), **(extra or {})}
        hosts[name] = (UBUNTU_2404, (host_data or {}).get(name, {}), responses)
    data = {"ray_cluster": "v100s", "ray_head": "@fake/n1", "ray_interface": "eth1",
            "vllm_instances": {"big": {"model_source": model, "tensor_parallel_size": tp or min(per_node.values()),
                                       **(extra_instance or {})},
                               **({"second": {"model_source": model, "port": 8001,
                                              "tensor_parallel_size": min(per_node.values()),
                                              "gpu_memory_utilization": 0.4}} if second_instance else {})}
            if model else {},
            **(group or {})}
    return plan_cluster(hosts, {"v100s": ([f"n{i}" for i in range(1, nodes + 1)], data)}, uploads)


def two_nodes(model: str) -> tuple[dict, dict]:
    """(hosts, groups) for preflight_cluster: n1 (head) and n2, two V100s each, the tiny model at tensor parallel 2."""
    hosts = {f"n{i}": (UBUNTU_2404, {}, {"nvidia-smi --query-gpu": v100s(2), "sys.version_info": ["3.12"],
                                         "ip -j addr show": ip_addr("eth1", f"10.0.0.{i}")}) for i in (1, 2)}
    data = {"ray_cluster": "v100s", "ray_head": "@fake/n1", "ray_interface": "eth1",
            "vllm_instances": {"big": {"model_source": model, "tensor_parallel_size": 2}}}
    return hosts, {"v100s": (["n1", "n2"], data)}


def env_file(uploads: dict[str, bytes], path: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in uploads[path].decode().splitlines() if line)


def test_head_and_worker_units_from_the_locked_venv_with_the_cluster_network(model):
    uploads: dict = {}
    cmds = cluster(model, uploads=uploads)
    head, worker = env_file(uploads["n1"], "/etc/ray/ray.env"), env_file(uploads["n2"], "/etc/ray/ray.env")
    for env, address in ((head, "10.0.0.1"), (worker, "10.0.0.2")):
        assert env["NCCL_SOCKET_IFNAME"] == "=eth1" and env["GLOO_SOCKET_IFNAME"] == "eth1"  # NCCL: exact match
        assert env["VLLM_HOST_IP"] == address and f"--node-ip-address={address}" in shlex.split(env["RAY_ARGS"])
    assert {"--head", "--port=6379", "--include-dashboard=false"} <= set(shlex.split(head["RAY_ARGS"]))
    assert "--address=10.0.0.1:6379" in shlex.split(worker["RAY_ARGS"]) and "--head" not in worker["RAY_ARGS"]
    head_unit = uploads["n1"]["/etc/systemd/system/ray-head.service"].decode()
    worker_unit = uploads["n2"]["/etc/systemd/system/ray-worker.service"].decode()
    for unit in (head_unit, worker_unit):
        assert "ExecStart=/opt/vllm/current/bin/ray start --block $RAY_ARGS" in unit
        assert re.search(r"^User=llm$", unit, re.M) and re.search(r"^Restart=always$", unit, re.M)
    # the worker tries again until its head answers, however long: never a start limit, never a blocking start
    assert re.search(r"^StartLimitIntervalSec=0$", worker_unit, re.M) and not re.search(r"^ExecStartPre=", worker_unit, re.M)
    assert "systemctl start ray-head.service" in cmds["n1"] and "systemctl start ray-worker.service" in cmds["n2"]
    assert not [c for c in cmds["n1"] if "systemctl" in c and "ray-worker" in c]
    assert not [c for c in cmds["n2"] if "systemctl" in c and "ray-head" in c]


def test_head_serves_with_pipeline_parallel_across_the_nodes_and_the_worker_gets_venv_and_model(model):
    uploads: dict = {}
    cmds = cluster(model, nodes=2, gpus=2, uploads=uploads)
    env = env_file(uploads["n1"], "/etc/vllm/big.env")
    args = shlex.split(env["VLLM_ARGS"])
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert env["RAY_ADDRESS"] == "10.0.0.1:6379" and env["VLLM_HOST_IP"] == "10.0.0.1"
    assert "systemctl start vllm@big.service" in cmds["n1"]
    unit = uploads["n1"]["/etc/systemd/system/vllm@.service"].decode()
    assert "ReadWritePaths=/var/lib/ray" in unit and re.search(r"^After=.*ray-head\.service", unit, re.M)
    # the worker: the same venv install and the model at the same path, no vllm@ unit
    assert [c for c in cmds["n2"] if "pip install --python" in c]
    assert "/var/lib/llm/models/big/config.json" in uploads["n2"]
    assert "/etc/vllm/big.env" not in uploads["n2"] and not [c for c in cmds["n2"] if "vllm@big" in c]


@pytest.mark.parametrize("case, kwargs, expect", [
    ("vLLM release", {"host_data": {"n2": {"vllm_version": "0.10.2"}}},
     r"vllm_version = \"'0.8.5.post1' on @fake/n1; '0.10.2' on @fake/n2\": the nodes of cluster v100s differ in vLLM release"),
    ("Python", {"python": {"n2": "3.11"}},
     r"vllm_python = \"'3.12' on @fake/n1; '3.11' on @fake/n2\": the nodes of cluster v100s differ in Python version"),
    ("GPU count", {"gpus": {"n1": 2, "n2": 1}}, r"gpu_count = '2 on @fake/n1; 1 on @fake/n2': the nodes of cluster v100s differ in GPU count"),
    ("interface", {"host_data": {"n2": {"ray_interface": "eth9"}}}, r"node @fake/n2 has no IPv4 address on it"),
    ("head", {"group": {"ray_head": "n7"}}, r"ray_head = 'n7': not a host of group v100s \(@fake/n1, @fake/n2\)"),
    ("equal worker ports", {"group": {"ray_min_worker_port": 10002, "ray_max_worker_port": 10002}},
     r"ray_max_worker_port = 10002: not above ray_min_worker_port \(10002\); Ray needs max_worker_port higher"),
    ("instance port in Ray's", {"group": {"ray_port": 7995}},
     r"vllm_instances\.big\.port = 8000: Ray listens on it too"),
    ("same address", {"ifaces": {"n1": "172.17.0.1", "n2": "172.17.0.1"}},
     r"nodes @fake/n1, @fake/n2 have the same address 172\.17\.0\.1 on it"),
    ("loopback", {"ifaces": {"n1": "127.0.0.1", "n2": "10.0.0.2"}}, r"node @fake/n1's address on it is the loopback"),
    ("instances differ", {"host_data": {"n2": {"vllm_instances": {}}}},
     r"vllm_instances = .*the nodes of cluster v100s differ in vLLM instances"),
    ("tensor parallel below the GPUs", {"tp": 1},
     r"vllm_instances\.big\.tensor_parallel_size = 1: in a Ray cluster each node runs one pipeline stage on all of "
     r"its 2 GPUs.*Fix: set tensor_parallel_size to 2"),
    ("gpus", {"extra_instance": {"gpus": [0, 1]}}, r"vllm_instances\.big\.gpus = \[0, 1\]: in a Ray cluster Ray hands"),
    ("two instances", {"second_instance": True}, r"vllm_instances = \['big', 'second'\]: a Ray cluster serves one"),
])
def test_nodes_that_differ_are_refused_on_every_node_before_any_change(model, case, kwargs, expect):
    with pytest.raises(SettingsError, match=expect):
        cluster(model, **kwargs)


def test_a_layer_count_pipeline_parallel_cannot_split_is_refused(model):
    """The tiny model has N_LAYER (2) hidden layers: three nodes would leave a stage without a layer (vLLM's
    get_pp_indices splits 2 over 3 as [1, 1, 0])."""
    assert N_LAYER == 2
    with pytest.raises(SettingsError, match=r"pipeline_parallel_size 3 splits 2 hidden layers as \[1, 1, 0\]"):
        cluster(model, nodes=3, gpus=1)
    cluster(model, nodes=2, gpus=1)  # two stages of one layer each: served


def test_a_model_that_does_not_fit_per_node_is_refused_and_fits_on_more_gpus_per_node():
    """Llama-3-70B in fp16 (141 GB) cannot fit two nodes of two 32 GB V100s (4 x 32510 MiB = 127 GiB, less than
    the weights alone); on two nodes of four (254 GiB) it fits, as pipeline parallel 2 x tensor parallel 4."""
    path = "/srv/models/llama-3-70b"
    group = {"vllm_instances": {"big": {"model_path": path, "tensor_parallel_size": 2, "max_model_len": 8192}}}
    extra = model_dir(path, LLAMA_70B, LLAMA_70B_BYTES)
    with pytest.raises(SettingsError, match=r"vllm_instances\.big\.max_model_len = 8192: does not fit"):
        cluster(None, nodes=2, gpus=2, group=group, extra=extra)
    group["vllm_instances"]["big"]["tensor_parallel_size"] = 4
    cmds = cluster(None, nodes=2, gpus=4, group=group, extra=extra)
    assert "systemctl start vllm@big.service" in cmds["n1"]


def test_a_cluster_of_one_box_is_refused(model):
    with pytest.raises(SettingsError, match=r"ray_cluster = 'v100s': the group has 1 host: a cluster spans at least "
                                            r"two boxes"):
        cluster(model, nodes=1)


def test_a_node_outside_the_cluster_group_is_not_a_ray_node(model):
    """A host that is not in the group named by ray_cluster is refused (the setting would otherwise be ignored)."""
    hosts = {"solo": (UBUNTU_2404, {"ray_cluster": "v100s", "ray_head": "@fake/solo", "ray_interface": "eth1"},
                      {"ip -j addr show": ip_addr("eth1", "10.0.0.9"), "sys.version_info": ["3.12"]})}
    with pytest.raises(SettingsError, match=r"ray_cluster = 'v100s': not an inventory group this host belongs to"):
        plan_cluster(hosts, {})


def test_plan_and_doctor_know_the_cluster(model):
    """`v100kit plan`'s summary names the node's role, the GCS address and the pipeline size; the doctor has a
    'joined the cluster' row per node, broken when the cluster does not list the node's address (as a head that is
    down answers), ok when it does (Ray's ray.nodes() answer, as RayAliveNodes reads it)."""
    hosts, groups = two_nodes(model)
    worker, plan = preflight_cluster(hosts, groups, "n2")
    out = summarize(worker, plan)
    assert out["ray"] == {"cluster": "v100s", "role": "worker", "head": "@fake/n1", "nodes": ["@fake/n1", "@fake/n2"],
                          "node_address": "10.0.0.2", "gcs_address": "10.0.0.1:6379", "interface": "eth1",
                          "pipeline_parallel_size": 2}
    assert out["instances"]["vllm@big"]["served_by"] == "@fake/n1"
    assert "Ray cluster v100s: worker at 10.0.0.2 (eth1), GCS 10.0.0.1:6379" in table({"n2": out})

    rows = ray_node(RayFacts(True, ["10.0.0.1"]), plan)
    assert [(r.check, r.state) for r in rows] == [("ray-worker running", "ok"),
                                                  ("node 10.0.0.2 joined cluster v100s", "broken")]
    assert [r.state for r in ray_node(RayFacts(True, ["10.0.0.1", "10.0.0.2"]), plan)] == ["ok", "ok"]
    assert [r.state for r in ray_node(RayFacts(False, None), plan)] == ["broken", "broken"]


@dataclass
class RayFacts:
    """The two DoctorFacts fields ray_node reads."""

    ray_unit_active: bool | None
    ray_alive: list[str] | None


def test_bench_measures_the_cluster_instance_on_the_head_only(model):
    """`v100kit bench` on a worker measures nothing (the head serves the cluster's instances); on the head it
    measures vllm@big (here: found not running, the fake host runs nothing)."""
    from v100kit.bench import bench_host

    hosts, groups = two_nodes(model)
    worker, plan = preflight_cluster(hosts, groups, "n2")
    assert bench_host(worker, plan) == []
    head, plan = preflight_cluster(hosts, groups, "n1")
    measured = bench_host(head, plan)
    assert [(i.unit, i.running) for i in measured] == [("vllm@big", False)]


def test_doctor_reads_the_head_while_a_worker_is_down(model):
    """The read-only commands read the nodes they reach: with a worker outside the run (as an unreachable one is),
    the head is still planned and diagnosed; a deploy limited the same way is refused."""
    hosts, groups = two_nodes(model)
    _, plan = preflight_cluster(hosts, groups, "n1", limit=["@fake/n1"])
    assert plan.ray.role == "head" and plan.ray.nodes == ("@fake/n1", "@fake/n2")
    rows = ray_node(RayFacts(True, ["10.0.0.1"]), plan)
    assert [(r.check, r.state) for r in rows] == [("ray-head running", "ok"),
                                                  ("node 10.0.0.1 joined cluster v100s", "ok")]
    with pytest.raises(SettingsError, match=r"node @fake/n2 is not part of this run"):
        preflight_cluster(hosts, groups, "n1", limit=["@fake/n1"], deploying=True)
