"""Preflight: everything about one host that can be refused is decided here, from settings and read-only facts,
before any operation is added. A refusal raises SettingsError, which stops the deploy on every host."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.host import Host
from pyinfra.facts.files import File
from pyinfra.facts.hardware import Ipv4Addrs
from pyinfra.facts.server import OsRelease, Sysctl, Users

from roles import hub
from roles.base import decide as base
from roles.cuda import decide as cuda
from roles.cuda.versions import Toolkit
from roles.gpu_policy import decide as gpu_policy
from roles.gpu_policy.facts import GpuPolicyCards
from roles.engine_registry import ENGINES
from roles.engines import (Engine, PlanInputs, describe_outside, gpu_claims, gpu_count, gpu_sum_problems, host_gpus,
                           outside_use, usable_mib)
from roles.llama_cpp import decide as llama_cpp
from roles.monitoring import decide as monitoring
from roles.nvidia_driver import decide as nvidia_driver
from roles.facts import HostTraits
from roles.nvidia_driver.facts import (DriverPackages, InstalledKernels, KernelMetapackages, NvidiaGpus, RunfileDriver,
                                       SecureBoot)
from roles.ray import decide as ray
from roles.platform import Platform, platform_from_os_release
from roles.settings import Settings, SettingsError, load_settings, problem
from roles.tuning import decide as tuning
from roles.tuning.facts import FreeBytes, PathFilesystem, SwapHeaderSize
from roles.vllm import decide as vllm
from roles.vllm.facts import PythonVersion


#: the repository root: pyinfra reads group_data/ (every group's settings) and config.py from the directory it runs in
ROOT = Path(__file__).resolve().parents[1]


def working_directory_problems(cwd: Path, root: Path = ROOT) -> list[str]:
    """[] when pyinfra runs in the repository root `root`; else one problem: from another directory pyinfra finds
    neither group_data/ nor config.py, so every group setting would silently fall back to its default (and roles
    without instances would unconfigure the ones an earlier deploy set up)."""
    if cwd.resolve() == root.resolve():
        return []
    return [problem("working directory", str(cwd), f"pyinfra reads group_data/ and config.py from the directory it "
                    f"runs in, and {root} holds them", f"run pyinfra from {root}, or pass --chdir {root}")]


def init_problems(traits: dict) -> list[str]:
    """[] when the host runs systemd as PID 1 (HostTraits' `systemd`); else one problem: the services, the swapfile
    and the boot-time settings are systemd units, so the deploy cannot work there."""
    if traits.get("systemd", True):
        return []
    return [problem("host", f"{traits.get('virt', 'none')} without systemd", "PID 1 is not systemd (no "
                    "/run/systemd/system): the services, the swapfile and the boot-time settings are systemd units",
                    "deploy to a host booted with systemd (a container needs systemd as its init)")]


@dataclass(frozen=True)
class HostPlan:
    """The validated settings and the resolved stack of one host."""

    settings: Settings
    platform: Platform
    driver: nvidia_driver.DriverPlan
    toolkits: list[Toolkit]  # default toolkit first
    #: {engine role: its plan, None where it has no instance}, one entry per registered engine
    #: (roles/engine_registry.py), in the registry's order
    engines: dict
    #: {GPU index: [(unit, bytes it claims or None), ...]} across the engines and the memory in use outside
    #: v100kit (roles/engines.py gpu_claims)
    gpu_claims: dict = field(default_factory=dict)
    ray: ray.RayPlan | None = None  # None: not a node of a Ray cluster
    gpus: list = field(default_factory=list)  # the NvidiaGpus fact: per GPU its memory and processes
    #: the GPU policy (power limit, application clocks, compute mode, ECC); None: none set, or no GPU visible
    gpu_policy: gpu_policy.GpuPolicyPlan | None = None
    monitoring: monitoring.MonitoringPlan | None = None  # None: monitoring_enabled off (or refused)
    #: {unit: its EnvironmentFile (arguments and environment)}, rendered once here by each engine
    environments: dict = field(default_factory=dict)

    @property
    def llama_cpp(self) -> llama_cpp.LlamaCppPlan | None:
        """None: no llama-server instance configured."""
        return self.engines.get("llama_cpp")

    @property
    def vllm(self) -> vllm.VllmPlan | None:
        """None: no vLLM instance configured (and no Ray cluster)."""
        return self.engines.get("vllm")

    def engine_plans(self) -> list[tuple[Engine, object]]:
        """(engine, its plan) of every registered engine with a plan here, in the registry's order."""
        return [(e, self.engines[e.role]) for e in ENGINES if self.engines.get(e.role) is not None]


class HostRefused(SettingsError, PyinfraError):
    """A SettingsError raised out of preflight(): also a PyinfraError, which pyinfra's command line (a deploy) and
    v100kit's host loop (v100kit/hosts.py) catch and print as the message alone."""


def preflight(host: Host, diagnosing: bool = False, deploying: bool = True) -> HostPlan:
    """Validate the host's settings and its whole stack. Raises HostRefused (a SettingsError) listing every problem.

    `diagnosing`: for the doctor, which reports host states as rows instead of refusing them (Secure Boot without
    an enrolled DKMS key: the row 'Secure Boot lets the module load'). `deploying`: False for the read-only commands
    (plan, doctor, bench, verify), which read a host without systemd as PID 1 too; a deploy refuses it."""
    try:
        return _plan_host(host, diagnosing, deploying)
    except SettingsError as e:
        raise HostRefused(e.host_name, e.problems) from None


def _plan_host(host: Host, diagnosing: bool, deploying: bool) -> HostPlan:
    """preflight() raising the plain SettingsError of the settings and the roles."""
    given = load_settings(host.name, host.data.dict())
    # hf:// models: the plan reads header copies first, so a model that does not fit moves no weights; a deploy then
    # downloads and verifies them and plans again on the real files (the same plan, read from the real headers)
    plan = _preflight(host, hub.resolved(host.name, given, fetch=False, engines=ENGINES), diagnosing, deploying)
    if not deploying or plan.settings is given:
        return plan
    return _preflight(host, hub.resolved(host.name, given, fetch=True, engines=ENGINES), diagnosing, deploying)


def _preflight(host: Host, settings: Settings, diagnosing: bool, deploying: bool) -> HostPlan:
    """preflight() for settings whose models are all on the control machine or the host."""
    platform = platform_from_os_release(host.name, host.get_fact(OsRelease))
    # the read-only commands (plan, doctor, bench, verify: deploying False) still read a host without systemd, and
    # say per check what it lacks
    problems = working_directory_problems(Path.cwd()) + (init_problems(host.get_fact(HostTraits)) if deploying else [])
    if problems:  # nothing else can be read sensibly there
        raise SettingsError(host.name, problems)
    problems = base.check(settings, host.get_fact(Users))
    swap = settings.tuning_swap_file
    problems += tuning.check(settings, host.get_fact(Sysctl, keys=list(settings.tuning_sysctl_extra)),
                             host.get_fact(SwapHeaderSize, path=swap), bool(host.get_fact(File, path=swap)),
                             host.get_fact(FreeBytes, path=swap), host.get_fact(PathFilesystem, path=swap))
    traits = host.get_fact(HostTraits)
    gpus = host.get_fact(NvidiaGpus)
    # the driver serves every GPU of the box: where nvidia-smi answers, their lowest capability decides its module
    # and branch, not gpu_compute_capability
    driver, more = nvidia_driver.plan(nvidia_driver.with_gpu_capability(settings, gpus), platform,
                                      host.get_fact(KernelMetapackages), traits["kernel"],
                                      list(host.get_fact(InstalledKernels)), container=traits["virt"] != "none")
    problems += more + ([] if diagnosing else nvidia_driver.secure_boot_refused(settings, host.get_fact(SecureBoot)))
    if driver and driver.pin.runfile and not diagnosing:
        problems += nvidia_driver.runfile_problems(settings, driver.pin, host.get_fact(RunfileDriver),
                                                   host.get_fact(DriverPackages))
    toolkits, more = cuda.plan(settings, platform, driver.pin if driver else None)
    problems += more
    for line in cuda.minor_compat_warnings(settings, platform, driver.pin if driver else None):
        logger.warning(f"[{host.name}] cuda: {line}")
    cluster, ray_problems = ray.plan(settings, host.name, list(host.groups), cluster_nodes(host, settings, deploying))
    plans, taken = {}, {}
    for engine in ENGINES:
        plans[engine.role], more = engine.plan(PlanInputs(settings, toolkits, gpus, driver.pin.version if driver else
                                                          None, cluster, dict(taken), host.get_fact))
        problems += more
        if engine is ENGINES[0]:  # said after the first engine's problems, as before the registry
            problems += ray_problems
        for line in engine.notes(plans[engine.role]) if plans[engine.role] else ():
            logger.warning(f"[{host.name}] {engine.role}: {line}")
        taken |= engine.ports(settings)
    policy, more = gpu_policy.plan(settings, host.get_fact(GpuPolicyCards) if gpu_policy.wanted(settings) and gpus
                                   else [])
    problems += more
    claims = gpu_claims_of(settings, gpus, plans)
    problems += gpu_policy.compute_mode_problems(settings, claims,
                                                 frozenset(g["index"] for g in gpus if outside_use(g)[1]))
    problems += gpu_sum_problems(claims, {g["index"]: usable_mib(g) for g in host_gpus(settings, gpus)},
                                 {g["index"]: describe_outside(g) for g in gpus})
    watch, more = (monitoring.plan(settings, driver.pin, plans) if driver
                   else (None, []))
    problems += more
    if problems or driver is None:
        raise SettingsError(host.name, problems)
    for line in filter(None, (describe_outside(g) for g in gpus)):
        logger.warning(f"[{host.name}] {line}")
    environments = {e.unit_of(i.name): e.environment(p, i) for e in ENGINES if (p := plans[e.role])
                    for i in e.served(p)}
    return HostPlan(settings, platform, driver, toolkits, plans, claims, ray=cluster, gpus=gpus,
                    gpu_policy=policy, monitoring=watch, environments=environments)


def cluster_nodes(host: Host, settings: Settings, deploying: bool = True) -> list[ray.Node]:
    """Every host of the host's Ray cluster (the inventory group ray_cluster names, in inventory order) as a
    ray.Node read with that host's own settings and facts: vLLM release, vllm_python's version, GPU count, the IPv4
    address of ray_interface. A node outside this run (--limit, unreachable) or with invalid settings is a Node
    with a problem when `deploying` (a cluster is deployed whole, so that a refusal stops every node); for the
    read-only commands an unreachable node is only marked so (the doctor is wanted most when a node is down). []
    without ray_cluster or when no such group exists (ray.plan refuses that)."""
    if not settings.ray_cluster:
        return []
    state = host.state
    nodes = []
    for node in state.inventory.get_group(settings.ray_cluster, default=[]):
        if not state.is_host_in_limit(node) or not node.connected:
            if not deploying:
                nodes.append(ray.Node(node.name, reachable=False))
                continue
            nodes.append(ray.Node(node.name, problem=problem(
                "ray_cluster", settings.ray_cluster, f"node {node.name} is not part of this run (outside --limit, "
                "or unreachable)", "deploy the cluster's hosts together (limit to the group, or to none)")))
            continue
        try:
            # as given (hf:// sources unresolved) on every node, so that the nodes' instances compare alike
            own = load_settings(node.name, node.data.dict())
        except SettingsError:
            nodes.append(ray.Node(node.name, problem=problem(
                "ray_cluster", settings.ray_cluster, f"node {node.name} has invalid settings",
                f"fix them (its own refusal lists them) before deploying the cluster")))
            continue
        addresses = node.get_fact(Ipv4Addrs).get(own.ray_interface or "") or [None]
        nodes.append(ray.Node(node.name, own.vllm_version, node.get_fact(PythonVersion, path=own.vllm_python),
                              gpu_count(own, node.get_fact(NvidiaGpus)), addresses[0], ray.ray_settings(own),
                              instances=ray.cluster_instances(own)))
    return nodes


def gpu_claims_of(settings: Settings, gpus: list, plans: dict) -> dict[int, list[tuple[str, int | None]]]:
    """Each GPU's users across the engines (`plans`: {engine role: plan or None}) with the bytes they claim
    (Engine.claims, roles/engines.py gpu_claims), and the memory in use by processes outside v100kit on it unless
    every instance there sets allow_gpu_in_use."""
    listed = host_gpus(settings, gpus)
    instances = [i for e in ENGINES if plans.get(e.role) for i in e.instances(plans[e.role])]
    sees = {id(i): set(i.settings.gpus or [g["index"] for g in listed]) for i in instances}
    outside = {g["index"]: outside_use(g)[0] for g in gpus
               if not all(i.settings.allow_gpu_in_use for i in instances if g["index"] in sees[id(i)])}
    memory = {g["index"]: usable_mib(g) for g in listed}
    claims: dict[int, list[tuple[str, int | None]]] = {}
    for e in ENGINES:
        for g, users in e.claims(plans[e.role], memory).items() if plans.get(e.role) else ():
            claims.setdefault(g, []).extend(users)
    return gpu_claims([], [], memory, outside, claims)
