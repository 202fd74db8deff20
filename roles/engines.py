"""Rules both engine roles (roles/llama_cpp, roles/vllm) share: one port per instance on a host, a network listener
only when protected, exactly one model setting, the GPUs to plan for, and control-machine file checksums; and the
engine interface (Engine) that each engine's package declares once (roles/NAME/engine.py) and the registry
(roles/engine_registry.py) lists, which preflight, plan, doctor, bench, verify and the hub loop over.

Pure: settings and facts in, values or problem lines (roles.settings.problem) out; no pyinfra operation is
imported here. Each role passes its own wording where the two word a rule differently, so users see the same
texts as before this module existed.
"""

from __future__ import annotations

import hashlib
import importlib
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse, urlsplit

from jinja2 import FileSystemLoader

from roles import planner
from roles.nvidia_driver.shapes import GpuInfo, GpuProcess
from roles.settings import InstanceOnGpus, Settings, problem

MIB = 1 << 20
#: The templates every engine's unit shares (engine-hardening.j2: the hardening block), beside each role's own.
SHARED_TEMPLATES = Path(__file__).resolve().parent / "templates"


def unit_jinja(role_templates: Path) -> dict:
    """The jinja_env_kwargs of files.template for an engine's unit template: a loader that finds the role's own
    templates and the shared ones (`{% include "engine-hardening.j2" %}`). A new dict per call: pyinfra's
    get_template pops the loader from the dict it is given."""
    return {"loader": FileSystemLoader([str(role_templates), str(SHARED_TEMPLATES)])}


@dataclass(frozen=True)
class PlanInputs:
    """What preflight hands each engine's `plan`: the validated settings, the host's CUDA toolkits (default first),
    its GPUs (the NvidiaGpus fact, [] without a driver), the pinned driver version (None: no driver plan), the host's
    Ray cluster plan (None: not a node of one), `taken_ports` {port: unit} of the engines planned before it, and
    `fact(FactClass, **kwargs)`: host.get_fact, the engine's way to read the host (read-only)."""

    settings: Any
    toolkits: list
    gpus: list
    driver_version: str | None
    cluster: Any
    taken_ports: dict[int, str]
    fact: Callable[..., Any]


@dataclass(frozen=True)
class BenchHooks:
    """How `v100kit bench` reaches an engine's instance and judges it (v100kit/bench.py). Every callable takes the
    HostPlan and the instance of the engine's plan.

    planned_vram_bytes(plan, inst): the planner's VRAM of the instance over all its GPUs, bytes (None: not planned).
    n_gpu_layers(inst): the layers it is asked to put on the GPU (roles/bench/residency.py judge_instance; 0 where
    the engine has no CPU fallback and memory held is the evidence). request_limit(inst): (tokens one request may
    hold or None, the setting's words). model_name(inst): the `model` of its OpenAI requests. roofline(plan, inst,
    memory, tp): (weight bytes read per token, KV bytes per context token) for roles/bench/roofline.py.
    sweep(plan, inst): for --sweep of alternative flags (roles/bench/sweep.py), (server binary, the instance's
    arguments, the build's -fa style); None where the engine has no sweep. tensor_parallel(inst): the GPUs one
    instance splits its model over (its tensor-parallel size; 1 for an engine without tensor parallel), handed to
    roofline as `tp`."""

    planned_vram_bytes: Callable[[Any, Any], float | None]
    n_gpu_layers: Callable[[Any], int]
    request_limit: Callable[[Any], tuple[int | None, str]]
    model_name: Callable[[Any], str]
    roofline: Callable[[Any, Any, Any, int], tuple[float, float]]
    sweep: Callable[[Any, Any], tuple[str, str, str]] | None = None
    tensor_parallel: Callable[[Any], int] = field(default=lambda inst: 1)


@dataclass(frozen=True)
class Engine:
    """One inference engine, declared once in its own package (roles/NAME/engine.py `ENGINE`) and listed in
    roles/engine_registry.py. Everything outside the package reaches the engine through this.

    Names: `name` the engine's label ('llama.cpp': bench rows, verify), `role` its package and its HostPlan entry
    ('llama_cpp'), `key` its settings key ('llama_cpp_instances': {instance name: settings}), `unit` the stem of
    its systemd template (unit 'llama-server@NAME'), `config_dir` where each instance's NAME.env and NAME.key.env
    live, `planner` the memory planner's module ('roles.planner.llama_cpp').

    Hooks (pure unless said): plan(PlanInputs) -> (the engine's plan or None, problems: roles.settings.problem
    lines) - the decision, reading the host only through PlanInputs.fact; instances(plan): every instance the plan
    holds (GPU claims, verify); served(plan): those this host runs as units (bench, request logging; a Ray worker
    runs none); notes(plan): warnings preflight logs; ports(settings): {port: unit} its instances listen on;
    claims(plan, memory): {GPU index: [(unit, bytes or None)]} that the instances claim (roles/engines.py
    gpu_claims; memory {index: MiB}); gpu_fix: the words that fix an over-claimed GPU on this engine's side;
    environment(plan, inst): the instance's service environment {VAR: value}, the arguments included, rendered once
    into HostPlan.environments at plan time; hub_file: an hf:// source names one file (True) or a snapshot;
    hub_sha256: the hub's sha256 of that file becomes the instance's model_sha256; summary(host, plan,
    hostplan) -> ({top-level key: value}, {unit: instance row}) and table(row of the host) -> lines, and
    memory_line(unit, instance row, plan row) -> line: `v100kit plan`; request_logging(plan): (label, words) or
    None; doctor(plan, evidence) -> rows and evidence(host, plan) -> dict: the doctor's rows and what they read;
    bench: BenchHooks; health_path and needs_gpu: what `verify` asks of each instance, and whether only with a GPU;
    deploy: 'MODULE:FUNCTION'
    of its operations (roles/NAME/deploy.py), FUNCTION(settings, plan or None, host_plan) converging the engine
    (with plan None: removing what an earlier deploy set up), imported only when deploy.py calls `converge`, so
    that reading the registry imports nothing of pyinfra."""

    name: str
    role: str
    key: str
    unit: str
    config_dir: str
    planner: str
    plan: Callable[[PlanInputs], tuple[Any, list[str]]]
    instances: Callable[[Any], list]
    served: Callable[[Any], list]
    notes: Callable[[Any], list[str]]
    ports: Callable[[Any], dict[int, str]]
    claims: Callable[[Any, Mapping[int, int]], dict[int, list[tuple[str, int | None]]]]
    gpu_fix: str
    environment: Callable[[Any, Any], dict[str, str]]
    hub_file: bool
    hub_sha256: bool
    summary: Callable[[Any, Any, Any], tuple[dict, dict]]
    table: Callable[[dict], list[str]]
    memory_line: Callable[[str, dict, dict], str]
    request_logging: Callable[[Any], tuple[str, str] | None]
    bench: BenchHooks
    deploy: str
    doctor: Callable[[Any, dict], list] = field(default=lambda plan, evidence: [])
    evidence: Callable[[Any, Any], dict] = field(default=lambda host, plan: {})
    #: quant_fix(config.json as a dict, (major, minor) compute capability) -> the words that offer this engine for a
    #: quantized checkpoint another engine refuses (None: it would refuse the model too); read by the other
    #: engines' refusals
    quant_fix: Callable[[dict, tuple[int, int]], str | None] = field(default=lambda config, cc: None)
    #: what one instance's claim on a GPU is made of, for the refusal of an over-claimed GPU
    claim_words: str = "its planned memory"
    #: the HTTP path `verify` asks each instance (GET; 200: the model is loaded and the server answers)
    health_path: str = "/health"
    #: True where the unit waits for a GPU (ConditionPathExistsGlob=/proc/driver/nvidia/gpus/*): `verify` then asks
    #: for its health only on a host with a GPU; False for an engine that also serves on the CPU
    needs_gpu: bool = True
    #: scrape(settings, host) -> [(instance name, its settings)] whose /metrics (on the instance's own listen:port) the
    #: monitoring role's scrape configuration lists for inventory host `host`; default: every instance of `key`
    scrape: Callable[[Any, str], list[tuple[str, Any]]] | None = None
    #: watch(plan) -> {"links": [...], "units": [...]}: what the doctor's host-local checks on the box expect of
    #: this engine (roles/monitoring/doctor_local.py; the shapes in roles/monitoring/decide.py expectations)
    watch: Callable[[Any], dict] = field(default=lambda plan: {"links": [], "units": []})

    def converge(self, host_plan: Any) -> Any:
        """Run the engine's deploy hook (`deploy`) for `host_plan` (roles.preflight.HostPlan): its settings, this
        engine's plan there (None: no instance) and the whole plan for what else the engine reads (a Ray
        cluster's). Returns what the hook returns. Adds pyinfra operations: deploy.py only."""
        module, _, function = self.deploy.partition(":")
        hook = getattr(importlib.import_module(module), function)
        return hook(host_plan.settings, host_plan.engines.get(self.role), host_plan)

    def scraped(self, settings: Any, host: str) -> list[tuple[str, Any]]:
        """[(instance name, instance settings)] of this engine whose /metrics is scraped on `host` (the `scrape`
        hook, else every instance of the settings key, sorted by name)."""
        if self.scrape is not None:
            return self.scrape(settings, host)
        return sorted(getattr(settings, self.key, {}).items())

    def unit_of(self, name: str) -> str:
        """The systemd unit of instance `name`: 'llama-server@chat'."""
        return f"{self.unit}@{name}"

    def key_file(self, name: str) -> str:
        """The instance's API key file on the host: '/etc/llama-server/chat.key.env' (0600, never in argv)."""
        return f"{self.config_dir}/{name}.key.env"


def venv_watch(engine: Engine, label: str, venv: str, current: str, stamp: str, units: Iterable[str]) -> dict:
    """An engine's Engine.watch for one installed venv: its current link must point at `venv`, which carries its
    `stamp` (installed and checked), checked as '`label` venv in use' (the doctor's row name), and each instance in
    `units` (names) runs; the units wait for a GPU where engine.needs_gpu."""
    return {"links": [{"check": f"{label} venv in use", "link": current, "target": venv, "stamp": f"{venv}/{stamp}"}],
            "units": [{"unit": engine.unit_of(n), "needs_gpu": engine.needs_gpu} for n in units]}


def registered() -> tuple[Engine, ...]:
    """The registry's engines (roles/engine_registry.py ENGINES), in its order. Imported by name when called: the
    registry imports each engine's package, whose decision modules import this module."""
    return importlib.import_module("roles.engine_registry").ENGINES


def quant_fixes(config: dict, cc: tuple[int, int], besides: str) -> list[str]:
    """The fixes other registered engines (all but the one whose role is `besides`) offer for the quantized model
    of `config` (its parsed config.json, quantization_config included) on compute capability `cc`, in the
    registry's order ([] when none would run it)."""
    return [fix for e in registered() if e.role != besides and (fix := e.quant_fix(config, cc))]


def engine_of_unit(unit: str) -> Engine | None:
    """The engine whose systemd template `unit` ('vllm@chat', 'vllm@chat.service') is an instance of; None for
    any other unit."""
    stem = unit.partition("@")[0] if "@" in unit else None
    return next((e for e in registered() if e.unit == stem), None)


def is_url(s: str) -> bool:
    """True for an http(s) URL; anything else is a path on the control machine."""
    return urlparse(s).scheme in ("http", "https")


def url_file_name(url: str) -> str:
    """The file name a URL names: the last segment of its path, percent-decoded ('' for a URL that ends in '/').
    `v100kit offline fill` stores a download under it, and the roles place a model under it."""
    return unquote(PurePosixPath(urlsplit(url).path).name)


def sha256_file(path: str) -> str:
    """Hex sha256 (64 characters) of a file on the control machine, read in 1 MiB chunks. Raises OSError when
    the file cannot be read."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def port_clashes(section: str, ports: Iterable[tuple[str, int]], holder: Callable[[str], str],
                 taken: Mapping[int, str] | None = None) -> dict[str, list[str]]:
    """Per instance name, the problem when its port is already used on the host ([] when not).

    `ports`: (instance name, TCP port) in the order the role walks its instances (sorted by name). `holder(name)`
    is how the role names an instance in the message ("instance 'a'", "vllm@a"); `taken`: port -> holder text of
    ports other roles already use on the host. A port used twice is reported at every later use, naming the
    instance seen last before it."""
    seen = dict(taken or {})
    out: dict[str, list[str]] = {}
    for name, port in ports:
        out[name] = [problem(f"{section}.{name}.port", port, f"{seen[port]} already uses it",
                             "give every instance its own port")] if port in seen else []
        seen[port] = holder(name)
    return out


def network_listener(key: str, listen: str, protected: bool, why: str, fix: str) -> list[str]:
    """[] when `listen` (an IP address, validated by the settings) is a loopback address or the role calls the
    listener `protected`; else one problem naming `key`.listen with the role's own `why` and `fix`."""
    if protected or ipaddress.ip_address(listen).is_loopback:
        return []
    return [problem(f"{key}.listen", listen, why, fix)]


def one_model(key: str, inst: InstanceOnGpus, fix: str, shown: dict | None = None) -> list[str]:
    """[] when exactly one of inst.model_path and inst.model_source is set; else one problem naming `key`, whose
    value is `shown` (default: the two settings) and whose fix is the role's `fix`."""
    if bool(inst.model_path) != bool(inst.model_source):
        return []
    if shown is None:
        shown = {"model_path": inst.model_path, "model_source": inst.model_source}
    return [problem(key, shown, "needs exactly one of model_path and model_source", fix)]


def model_files(directory: Path) -> tuple[tuple[str, str], ...]:
    """Every file of a model directory as (resolved source, relative destination), following symlinks (a Hugging
    Face cache snapshot is all links to blobs) and skipping hidden entries (.cache, .git)."""
    out = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        out.append((str(path.resolve()), rel.as_posix()))
    return tuple(out)


def hf_instance_model(key: str, inst: InstanceOnGpus, copy_to: str, host_model: Callable[[str], dict | None]):
    """(model_path on the host, files to copy, config.json dict or None, planner.HfModel or None, problems) of an
    instance whose model is a Hugging Face directory (vLLM's, LMDeploy's): a model_source directory is read here
    (planner.read_hf) and copied to `copy_to`, its own directory per instance (two sources with the same basename
    never share one); a model_path is read on the host (`host_model`: the HfModelDir fact)."""
    if more := one_model(key, inst, "set model_path (a directory on the host) or model_source (one here)"):
        return inst.model_path or "", (), None, None, more
    if inst.model_source:
        source = Path(inst.model_source).expanduser()
        try:
            if not source.is_dir():
                raise ValueError("not a directory")
            config = json.loads((source / "config.json").read_text())
            hf = planner.read_hf(source)
        except (OSError, ValueError) as e:
            return "", (), None, None, [problem(f"{key}.model_source", inst.model_source, f"not a readable Hugging "
                                                f"Face model directory ({e})", "give a directory with config.json, "
                                                "*.safetensors and the tokenizer files")]
        return copy_to, model_files(source), config, hf, []
    found = host_model(inst.model_path)
    if not found or found["config"] is None:
        return inst.model_path, (), None, None, [problem(
            f"{key}.model_path", inst.model_path, "no readable config.json (a JSON object) there on the host",
            "copy the model directory there, or use model_source")]
    try:
        hf = planner.hf_model_from_config(found["config"], found["safetensors_bytes"], f"{inst.model_path}/config.json")
    except ValueError as e:
        return inst.model_path, (), None, None, [problem(f"{key}.model_path", inst.model_path, str(e),
                                                         "fix the model's config.json")]
    return inst.model_path, (), found["config"], hf, []


#: The systemd units of v100kit's own processes on a GPU (the engines' instances, roles/ray's units): their memory is
#: what a re-deploy replaces, not memory in use by others. An instance unit counts where its template is a registered
#: engine's (is_own_unit).
OWN_UNIT = re.compile(r"^(?:(?P<template>[^@]+)@.+|ray)\.service$")


def is_own_unit(unit: str) -> bool:
    """Whether `unit` (GpuProcess.unit: 'llama-server@chat.service') is v100kit's own (OWN_UNIT)."""
    m = OWN_UNIT.match(unit)
    return bool(m) and (m["template"] is None or any(e.unit == m["template"] for e in registered()))


#: memory.used no process accounts for, in MiB: 0 MiB on an idle H200 and 20 MiB beyond its processes' own figures
#: under load (driver 590.48.01: 32362 MiB used, processes 2566 + 1542 + 28234; utkuozdemir/nvidia_gpu_exporter
#: internal/captures/linux-x86_64__nvidia-h200__590.48.01.txt), 0-1 MiB in public nvidia-smi tables of idle V100s.
#: Up to this much is subtracted but not named as memory in use by others (no doctor row, no line in the plan).
IDLE_USED_MIB = 64
#: How a GPU's users name the memory in use by processes outside v100kit (roles/engines.py gpu_claims).
OUTSIDE = "outside v100kit"


def host_gpus(settings: Settings, gpus: list[GpuInfo]) -> list[GpuInfo]:
    """The NvidiaGpus fact, else (no driver answers yet) gpu_count GPUs of gpu_memory_mib MiB and compute capability
    gpu_compute_capability, indices 0..gpu_count-1, nothing in use."""
    return gpus or [GpuInfo(index=i, name="", compute_cap=settings.gpu_compute_capability,
                            memory_mib=settings.gpu_memory_mib, persistence_mode=False, driver_version="")
                    for i in range(settings.gpu_count)]


def given_gpus(settings: Settings, gpus: list[GpuInfo], indices: list[int] | None) -> list[GpuInfo]:
    """The GPUs an instance is given: those its `gpus` setting lists (nvidia-smi's indices: the units set
    CUDA_DEVICE_ORDER=PCI_BUS_ID, so that CUDA counts in the same order), else all of host_gpus. An index the host
    lacks is left out (the roles refuse it)."""
    listed = host_gpus(settings, gpus)
    if indices is None:
        return listed
    by_index = {g["index"]: g for g in listed}
    return [by_index[i] for i in indices if i in by_index]


def gpu_index_problems(key: str, asked: list[int] | None, listed: list[int], answered: bool) -> list[str]:
    """A problem for `<key>.gpus` when it names an index outside `listed` (the indices nvidia-smi lists, or
    0..gpu_count-1 when no driver answered: host_gpus), or none. nvidia-smi's indices need not be contiguous (a GPU
    that fell off the bus leaves a gap), so the message names those there are."""
    if not asked or all(i in listed for i in asked):
        return []
    known = sorted(listed)
    have = f"0..{known[-1]}" if known == list(range(len(known))) else ", ".join(map(str, known))
    missing = ", ".join(str(i) for i in asked if i not in listed)
    return [problem(f"{key}.gpus", asked, f"this host has GPUs {have}"
                    + ("" if answered else " (gpu_count; no driver answers yet)")
                    + ("" if known == list(range(len(known))) else f": nvidia-smi lists no GPU {missing}"),
                    "list existing GPU indices, or leave gpus unset")]


def compute_capability(settings: Settings, gpus: list[GpuInfo]) -> tuple[int, int]:
    """(major, minor) of the lowest compute capability among `gpus` (the GPUs an instance is given, given_gpus; an
    instance must run on each of them), else of gpu_compute_capability. Raises ValueError for a capability not
    written "M.m"."""
    caps = [g["compute_cap"] for g in gpus] or [settings.gpu_compute_capability]
    return min(tuple(int(x) for x in c.split(".")) for c in caps)  # type: ignore[return-value]


def gpu_count(settings: Settings, gpus: list[GpuInfo]) -> int:
    """How many GPUs the NvidiaGpus fact lists, else gpu_count (a host whose driver does not answer yet)."""
    return len(gpus) or settings.gpu_count


def usable_mib(gpu: GpuInfo) -> int:
    """The VRAM processes can have on one GPU, in MiB: memory.used + memory.free where nvidia-smi gives both (drivers
    that report memory.reserved leave the driver's reservation out of both: an idle H200 on 590.48.01 shows 143771
    total, 614 reserved, 0 used, 143158 free), else memory.total."""
    used, free = gpu.get("memory_used_mib"), gpu.get("memory_free_mib")
    return gpu["memory_mib"] if used is None or free is None else min(gpu["memory_mib"], used + free)


def gpu_memory_mib(settings: Settings, gpus: list[GpuInfo]) -> int:
    """VRAM in MiB (usable_mib) of the smallest of `gpus` (the GPUs an instance is given: the planners split an
    instance evenly over them), else gpu_memory_mib."""
    return min(usable_mib(g) for g in gpus) if gpus else settings.gpu_memory_mib


def outside_use(gpu: GpuInfo) -> tuple[int, list[GpuProcess]]:
    """(MiB of `gpu` in use by processes v100kit does not manage, those of its listed processes): nvidia-smi's
    memory.used less what the processes of v100kit's own units (is_own_unit: what a re-deploy replaces) hold. Memory no
    listed process accounts for (a process of another container, invisible here) counts as outside too, where
    nvidia-smi lists any process on the GPU; where it lists none (inside a container every process is hidden, the
    toolkit's own included) nothing is counted: 0. Where memory.used or an own process's figure is "[N/A]", the
    other processes' own figures. Never raises."""
    procs = gpu.get("processes", [])
    if not procs:  # nvidia-smi lists no process: a container's PID namespace hides every one, ours included (a
        return 0, []  # re-deploy there must not count its own running instance as another's); nothing to name
    own = [p for p in procs if is_own_unit(p["unit"])]
    others = [p for p in procs if not is_own_unit(p["unit"])]
    used = gpu.get("memory_used_mib")
    if used is None or any(p["used_mib"] is None for p in own):
        return sum(p["used_mib"] or 0 for p in others), others
    return max(0, used - sum(p["used_mib"] or 0 for p in own)), others


def describe_outside(gpu: GpuInfo) -> str:
    """The memory outside v100kit on one GPU in words: "GPU 0 (Tesla V100-SXM2-32GB): 31589 MiB used by PID 299381
    (python)"; "" up to IDLE_USED_MIB."""
    mib, procs = outside_use(gpu)
    if mib <= IDLE_USED_MIB:
        return ""
    who = ", ".join(f"{p['pid']} ({p['name'] or 'name not shown'}"
                    + ("" if p["used_mib"] is None else f", {p['used_mib']} MiB") + ")" for p in procs)
    name = f" ({gpu['name']})" if gpu["name"] else ""
    return (f"GPU {gpu['index']}{name}: {mib} MiB in use by processes outside v100kit"
            + (f": PID{'s' if len(procs) > 1 else ''} {who}" if procs else
               " (no process nvidia-smi lists here: another container or PID namespace)"))


def gpu_claims(llama_instances: list[tuple[str, list[int] | None, int | None]],
               vllm_instances: list[tuple[str, list[int] | None, int, float, int]], memory: Mapping[int, int],
               outside: Mapping[int, int] | None = None,
               claimed: Mapping[int, list[tuple[str, int | None]]] | None = None) -> dict[int, list[tuple[str, int | None]]]:
    """Who claims how much of each GPU, across both engines: {GPU index: [(unit, bytes or None), ...]}.

    llama_instances: (llama-server@NAME, gpus setting or None, the planner's total bytes per GPU, None when the
    model is not readable before the deploy); llama-server spreads its layers over every GPU it sees (gpus, else
    all), so it claims each of them.
    vllm_instances: (vllm@NAME, gpus setting or None, tensor_parallel_size, gpu_memory_utilization, bytes outside
    the share); vLLM takes its share of the whole GPU on the first tensor_parallel_size GPUs it sees, and its CUDA
    context and CUDA graphs come on top of that share (roles/planner/vllm.py: vllm#11251 ran out of memory capturing
    graphs with too little left outside it).
    memory: {GPU index: VRAM in MiB} of every GPU of the host. outside: {GPU index: MiB in use by processes outside
    v100kit} to count as the user OUTSIDE (outside_use), on the GPUs that hold any. claimed: claims already
    gathered (other engines', Engine.claims), which come first.
    """
    claims: dict[int, list[tuple[str, int | None]]] = {g: list(u) for g, u in (claimed or {}).items()}
    for unit, gpus, per_gpu in llama_instances:
        for g in gpus or sorted(memory):
            claims.setdefault(g, []).append((unit, per_gpu))
    for unit, gpus, tp, share, outside_share in vllm_instances:
        for g in (gpus or sorted(memory))[:tp]:
            claims.setdefault(g, []).append((unit, int(share * memory.get(g, 0) * MIB) + outside_share))
    for g, mib in sorted((outside or {}).items()):
        if mib and g in claims:
            claims[g].append((OUTSIDE, mib * MIB))
    return claims


def setting_of(unit: str) -> str:
    """The `gpus` setting of a unit: "llama-server@big" -> "llama_cpp_instances.big.gpus", "vllm@chat" ->
    "vllm_instances.chat.gpus"; any other name as it is."""
    engine, name = engine_of_unit(unit), unit.partition("@")[2]
    return f"{engine.key}.{name}.gpus" if engine and name else unit


def gpu_sum_problems(claims: dict[int, list[tuple[str, int | None]]], memory: Mapping[int, int],
                     outside_words: Mapping[int, str] | None = None) -> list[str]:
    """One problem per GPU whose users together claim more than its memory (`memory`: {index: MiB}), within an
    engine and across engines and with the memory in use outside v100kit (the user OUTSIDE; `outside_words`: {index:
    describe_outside's words} for the message). Unknown sizes (a model not readable before the deploy) count 0.
    The second instance to start on such a GPU runs out of memory, so this refuses before any change."""
    problems = []
    for g, users in sorted(claims.items()):
        total = sum(b or 0 for _, b in users)
        units = [u for u, _ in users if u != OUTSIDE]
        if total <= memory.get(g, 0) * MIB or (len(units) < 2 and not any(u == OUTSIDE for u, _ in users)):
            continue
        shown = ", ".join(f"{unit} {(b or 0) / MIB:.0f} MiB" for unit, b in users)
        keys = ", ".join(setting_of(u) for u in units)
        fixes = ["give the instances different GPUs (gpus: [...] on each)"]
        fixes += [e.gpu_fix for e in registered() if any(engine_of_unit(u) is e for u in units)]
        if any(u == OUTSIDE for u, _ in users):
            fixes.append("stop the processes outside v100kit, or set allow_gpu_in_use: true on every instance of "
                         "this GPU where they will have stopped before it starts")
        why = (f"{' and '.join(units)} claim{'s' if len(units) == 1 else ''} {total / MIB:.0f} MiB of GPU {g}'s "
               f"{memory.get(g, 0)} MiB" + (" together" if len(units) > 1 else "") + f" ({shown})"
               + (f" with {outside_words[g]}" if outside_words and outside_words.get(g) else "")
               + f" ({', '.join(e.claim_words for e in registered() if any(engine_of_unit(u) is e for u in units))})"
               ": the last to start runs out of memory")
        problems.append(problem(keys, f"GPU {g}", why, "; or ".join(fixes)))
    return problems


#: (why, fix) for a server flag that makes the instance serve HTTPS (llama-server --ssl-key-file/--ssl-cert-file,
#: vLLM --ssl-keyfile/--ssl-certfile and the client-certificate options beside them)
TLS_REFUSAL = ("it serves HTTPS (or asks for client certificates), and the deploy's, verify's, the doctor's and the "
               "bench's checks speak plain HTTP to its /health and API",
               "remove it; terminate TLS in a reverse proxy in front of the instance")
#: A word of extra_args that is a value, not a flag: it does not start with '-', or is a negative number.
#: the flags that print the server's help and exit 0: llama-server's -h/--help/--usage (common/arg.cpp), vLLM's
#: argparse -h/--help
HELP_FLAGS = frozenset({"-h", "--help", "--usage"})
ARG_VALUE = re.compile(r"^(?:[^-].*|-\d.*|-)$")


def flag_of(word: str) -> str:
    """The flag a word names: `--flag=value` counts as `--flag`, and both engines read `_` in a `--` flag as `-`
    (llama.cpp's common/arg.cpp parse_cli_args, vLLM's FlexibleArgumentParser)."""
    flag = word.split("=", 1)[0]
    return flag.replace("_", "-") if flag.startswith("--") else flag


def extra_args_problems(key: str, args: list[str], owned: Mapping[str, str], known: frozenset[str] | None,
                        unknown: tuple[str, str], refused: Mapping[str, tuple[str, str]] | None = None,
                        also: Callable[[str, str], list[str]] = lambda word, flag: [],
                        flag_of: Callable[[str], str] = flag_of) -> list[str]:
    """One problem per flag word of an instance's extra_args (`key`): a flag the toolkit owns (`owned`: flag ->
    the setting to use), one refused with its own (why, fix) (`refused`), one the engine does not have (`known`;
    None: not checked; `unknown`: the (why, fix) to say), else whatever `also(word, flag)` finds. Values pass.
    `flag_of`: how a word names its flag (an engine's own spelling rules)."""
    problems = []
    for word in args:
        if ARG_VALUE.match(word):
            continue
        flag = flag_of(word)
        if flag in HELP_FLAGS:
            problems.append(problem(key, word, "the server prints its help and exits 0, and the unit's "
                                    "Restart=on-failure does not restart a clean exit: the instance stays down",
                                    "remove it"))
        elif flag in owned:
            problems.append(problem(key, word, "set by the toolkit", f"use the setting {owned[flag]}"))
        elif refused and flag in refused:
            problems.append(problem(key, word, *refused[flag]))
        elif known is not None and flag not in known:
            problems.append(problem(key, word, *unknown))
        else:
            problems += also(word, flag)
    return problems

