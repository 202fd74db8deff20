"""What the ray role does on one node of a Ray cluster, decided before any change from the settings and the read-only
facts of every node of the cluster: the node's role (head or worker), its address on `ray_interface`, the head's
address, the ports, and the refusals that keep the nodes alike. Pure: no pyinfra operation is imported here.

A cluster is an inventory group (`ray_cluster`) with one head host (`ray_head`). Ray is the one in the instance's
locked vLLM venv (/opt/vllm/current/bin/ray), so every node runs the same Ray as vLLM imports. vLLM's Ray executor
places one worker per GPU on every node: with N nodes of G GPUs, --pipeline-parallel-size N and
--tensor-parallel-size G (vLLM docs, "Distributed inference and serving": "the tensor parallel size to the number
of GPUs in each node, and the pipeline parallel size to the number of nodes").
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import dataclass

from roles.settings import Settings, problem

#: The cluster's environment and `ray start` arguments (RAY_ARGS), read by both units.
CONFIG_DIR = "/etc/ray"
ENV_FILE = f"{CONFIG_DIR}/ray.env"
#: Ray's temporary root on the head (sessions, logs, sockets): the head unit's StateDirectory, so that vllm@NAME,
#: the Ray driver on the head, reaches the raylet's and object store's sockets (PrivateTmp hides /tmp/ray).
HEAD_TEMP_DIR = "/var/lib/ray"
UNITS = ("ray-head", "ray-worker")
#: `ray start` port options fixed at ray_port + offset, so that a firewall can name every port (README: firewall).
#: Ray's defaults for these are random ports. The Ray client server is left at Ray's default (10001 on the head, and
#: only where the venv has grpcio: the 0.10.2 locks have none, and Ray refuses an explicit client port without it).
PORT_OFFSETS = {"--node-manager-port": 1, "--object-manager-port": 2, "--metrics-export-port": 3,
                "--dashboard-agent-grpc-port": 4, "--dashboard-agent-listen-port": 5,
                "--runtime-env-agent-port": 6}
#: Ray's own default port of its client server on the head (started when grpcio is installed).
RAY_CLIENT_PORT = 10001


@dataclass(frozen=True)
class Node:
    """One node of a cluster as its own settings and facts give it.

    vllm_version and the ray_* settings: from the node's settings. python: "3.11" (the PythonVersion fact of its
    vllm_python; None: no such executable). gpus: GPUs nvidia-smi lists there (gpu_count where no driver answers).
    address: the first IPv4 address of ray_interface there (pyinfra's Ipv4Addrs fact); None: no such interface or
    no IPv4 on it. problem: why the node could not be read at all (its settings are invalid, it is not part of this
    run); None when it was read."""

    name: str
    vllm_version: str = ""
    python: str | None = None
    gpus: int = 0
    address: str | None = None
    ray: tuple = ()  # (ray_cluster, ray_head, ray_interface, ray_port, ray_min_worker_port, ray_max_worker_port)
    problem: str | None = None
    instances: str = ""  # the node's vllm_instances settings as canonical JSON (cluster_instances)
    reachable: bool = True  # False: not read (only the read-only commands keep such a node), nothing compared


def cluster_instances(settings: Settings) -> str:
    """The vllm_instances settings as canonical JSON: every node of a cluster must have the same."""
    return json.dumps({n: i.model_dump() for n, i in settings.vllm_instances.items()}, sort_keys=True)


def ray_settings(settings: Settings) -> tuple:
    """The settings every node of a cluster must share, in Node.ray's order."""
    return (settings.ray_cluster, settings.ray_head, settings.ray_interface, settings.ray_port,
            settings.ray_min_worker_port, settings.ray_max_worker_port)


@dataclass(frozen=True)
class RayPlan:
    """One node's part of the cluster. Addresses are IPv4 strings; ports TCP."""

    cluster: str
    head: str  # inventory name of the head
    role: str  # "head" or "worker"
    nodes: tuple[str, ...]  # inventory names, head first
    node_address: str
    head_address: str  # "" where the head could not be read (the read-only commands only)
    interface: str
    port: int
    min_worker_port: int
    max_worker_port: int
    gpus_per_node: int

    @property
    def unit(self) -> str:
        """ray-head or ray-worker."""
        return f"ray-{self.role}"

    @property
    def pipeline_parallel_size(self) -> int:
        """One pipeline stage per node."""
        return len(self.nodes)

    @property
    def gcs_address(self) -> str:
        """HEAD:PORT, what workers and the vLLM driver connect to (RAY_ADDRESS)."""
        return f"{self.head_address}:{self.port}"

    def start_args(self) -> list[str]:
        """`ray start` arguments after `--block` for this node (the unit adds --block)."""
        args = ["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={HEAD_TEMP_DIR}"] \
            if self.role == "head" else [f"--address={self.gcs_address}"]
        args += [f"--node-ip-address={self.node_address}", "--disable-usage-stats",
                 f"--min-worker-port={self.min_worker_port}", f"--max-worker-port={self.max_worker_port}"]
        args += [f"{opt}={self.port + off}" for opt, off in PORT_OFFSETS.items()]
        return args

    def environment(self) -> dict[str, str]:
        """The node's environment (ray.env), inherited by Ray's worker processes (vLLM's ranks): the interface for
        NCCL and Gloo, vLLM's idea of this node's address (VLLM_HOST_IP; without it vLLM guesses it from a route to
        8.8.8.8, which a cluster-only network does not have), no usage reporting, and RAY_ARGS."""
        return {"RAY_ARGS": " ".join(shlex.quote(a) for a in self.start_args()),
                # "=NAME": NCCL matches exactly (a bare NAME is a prefix: eth1 would also take eth10)
                "NCCL_SOCKET_IFNAME": f"={self.interface}", "GLOO_SOCKET_IFNAME": self.interface,
                "VLLM_HOST_IP": self.node_address, "RAY_USAGE_STATS_ENABLED": "0"}


def fixed_ports(settings: Settings) -> list[int]:
    """The TCP ports Ray listens on besides the worker range: ray_port, the PORT_OFFSETS after it, and the client
    server's default."""
    return [settings.ray_port] + [settings.ray_port + off for off in PORT_OFFSETS.values()] + [RAY_CLIENT_PORT]


def settings_problems(settings: Settings, host_groups: list[str], members: list[str]) -> list[str]:
    """Problems of this host's ray_* settings alone: the head and interface are required with a cluster, the
    cluster is a group this host is in, the head is one of its members, the worker port range is a range (Ray
    needs max above min) and clashes neither with the fixed ports nor with an instance's port. `members`: the
    inventory names of the group's hosts. [] when none."""
    if not settings.ray_cluster:
        return []
    problems = []
    if settings.ray_cluster not in host_groups:
        groups = sorted({g for g in host_groups if not g.startswith("@")})  # not pyinfra's connector groups
        problems.append(problem("ray_cluster", settings.ray_cluster, "not an inventory group this host belongs to "
                                f"(its groups: {', '.join(groups) or 'none'})",
                                "name the group that lists the cluster's hosts, set in that group's data"))
    elif len(members) < 2:
        problems.append(problem("ray_cluster", settings.ray_cluster, f"the group has {len(members)} host: a cluster "
                                "spans at least two boxes", "add the other boxes to the group, or unset ray_cluster "
                                "(one box serves with tensor parallel alone)"))
    if not settings.ray_head:
        problems.append(problem("ray_head", None, "a cluster needs one head", f"set ray_head to one of "
                                f"{', '.join(members) or 'the group hosts'} in the group's data"))
    elif settings.ray_head not in members:
        problems.append(problem("ray_head", settings.ray_head, f"not a host of group {settings.ray_cluster} "
                                f"({', '.join(members) or 'empty'})", "name one of the group's hosts"))
    if not settings.ray_interface:
        problems.append(problem("ray_interface", None, "the nodes' network between each other is not named",
                                "set ray_interface to the interface that carries it (e.g. eth1, ib0)"))
    lo, hi = settings.ray_min_worker_port, settings.ray_max_worker_port
    if lo >= hi:  # Ray: "max_worker_port must be higher than min_worker_port"
        problems.append(problem("ray_max_worker_port", hi, f"not above ray_min_worker_port ({lo}); Ray needs "
                                "max_worker_port higher than min_worker_port", "set ray_max_worker_port above "
                                "ray_min_worker_port"))
    fixed = fixed_ports(settings)
    if clash := [p for p in fixed if lo <= p <= hi]:
        problems.append(problem("ray_port", settings.ray_port, f"Ray's fixed ports ({', '.join(map(str, fixed))}) "
                                f"overlap the worker ports {lo}-{hi} at {clash[0]}", "move ray_port or the worker "
                                "range"))
    taken = {i.port: f"llama_cpp_instances.{n}" for n, i in settings.llama_cpp_instances.items()}
    taken |= {i.port: f"vllm_instances.{n}" for n, i in settings.vllm_instances.items()}
    for port, key in sorted(taken.items()):
        if port in fixed or lo <= port <= hi:
            problems.append(problem(f"{key}.port", port, "Ray listens on it too (ray_port and the seven after it, "
                                    f"{RAY_CLIENT_PORT}, or the worker range {lo}-{hi})",
                                    "move the instance's port, or ray_port / the worker range"))
    return problems


def cluster_problems(cluster: str, nodes: list[Node]) -> list[str]:
    """Refusals across the nodes (listed in inventory order): a node that could not be read, one without an IPv4
    address on ray_interface, and nodes that differ in their ray_* settings, vLLM release, Python version or GPU
    count (vLLM's Ray executor runs one venv's code on every node and gives each the same tensor parallel
    size). [] when the nodes are alike."""
    problems = [p for n in nodes if (p := n.problem)]
    read = [n for n in nodes if n.problem is None and n.reachable]
    for n in read:
        if n.address is None:
            problems.append(problem("ray_interface", n.ray[2] if n.ray else None, f"node {n.name} has no IPv4 "
                                    "address on it", "name the interface that carries the cluster network on every "
                                    "node (the same name on each)"))
        elif ipaddress.ip_address(n.address).is_loopback:
            problems.append(problem("ray_interface", n.ray[2], f"node {n.name}'s address on it is the loopback "
                                    f"{n.address}", "name the interface between the boxes"))
    addresses: dict[str, list[str]] = {}
    for n in read:
        if n.address:
            addresses.setdefault(n.address, []).append(n.name)
    for address, names in addresses.items():
        if len(names) > 1:
            problems.append(problem("ray_interface", read[0].ray[2], f"nodes {', '.join(names)} have the same "
                                    f"address {address} on it (a bridge such as docker0 exists on every box)",
                                    "name the interface between the boxes, whose address differs per node"))

    def differ(key: str, value, what: str, fix: str) -> None:
        seen = {}
        for n in read:
            seen.setdefault(value(n), []).append(n.name)
        if len(seen) > 1:
            listing = "; ".join(f"{v!r} on {', '.join(names)}" for v, names in seen.items())
            problems.append(problem(key, listing, f"the nodes of cluster {cluster} differ in {what}", fix))

    differ("ray_*", lambda n: n.ray, "their ray_* settings", "set the ray_* settings once, in the group's data")
    differ("vllm_version", lambda n: n.vllm_version, "vLLM release (Ray runs one release's code on every node)",
           "set vllm_version once, in the group's data")
    differ("vllm_python", lambda n: n.python, "Python version (each installs the lock of its Python)",
           "give every node the same Python (vllm_python)")
    differ("gpu_count", lambda n: n.gpus, "GPU count (tensor parallel is the same on every node)",
           "put the same number of GPUs in each node, or leave the odd one out of the group")
    differ("vllm_instances", lambda n: n.instances, "vLLM instances (the head serves them, each worker holds a "
           "stage of the same model at the same path)", "set vllm_instances once, in the group's data")
    return problems


def plan(settings: Settings, host_name: str, host_groups: list[str], nodes: list[Node]) -> tuple[RayPlan | None,
                                                                                                   list[str]]:
    """This host's RayPlan and the cluster's problems: (None, []) without ray_cluster; (None, problems) when any
    setting of this host or any difference between the nodes is refused. `nodes`: every host of the group, in
    inventory order, read with its own settings and facts (Node)."""
    if not settings.ray_cluster:
        return None, []
    members = [n.name for n in nodes]
    problems = settings_problems(settings, host_groups, members)
    if problems:
        return None, problems
    problems = cluster_problems(settings.ray_cluster, nodes)
    if problems:
        return None, problems
    by_name = {n.name: n for n in nodes}
    head = by_name[settings.ray_head]
    order = (head.name,) + tuple(m for m in members if m != head.name)
    gpus = head.gpus if head.reachable else by_name[host_name].gpus  # alike on every node (cluster_problems)
    return RayPlan(settings.ray_cluster, head.name, "head" if host_name == head.name else "worker", order,
                   by_name[host_name].address, head.address or "", settings.ray_interface, settings.ray_port,
                   settings.ray_min_worker_port, settings.ray_max_worker_port, gpus), []
