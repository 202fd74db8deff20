"""vLLM as an engine of the registry (roles/engine_registry.py): everything outside roles/vllm needs to know of it,
in one place (roles/engines.py Engine says what each entry means).

No operation is imported here: preflight, plan, doctor, bench and verify read it. The host is read only through
PlanInputs.fact (the deploy's own facts).
"""

from __future__ import annotations

from roles.doctor.rows import venv_evidence, venv_in_use
from roles.engines import BenchHooks, Engine, PlanInputs, gpu_claims, venv_watch
from roles.planner import VLLM_CUDA_CONTEXT_BYTES
from roles.planner.units import plan_row
from roles.vllm import decide
from roles.vllm.decide import VllmPlan
from roles.vllm.facts import HfModelDir, PythonVersion

UNIT = "vllm"


def _plan(i: PlanInputs) -> tuple[VllmPlan | None, list[str]]:
    s = i.settings
    python = i.fact(PythonVersion, path=s.vllm_python) if s.vllm_instances or s.ray_cluster else None
    return decide.plan(s, python, i.gpus, i.driver_version, lambda path: i.fact(HfModelDir, path=path),
                       i.taken_ports, i.cluster)


def _claims(p: VllmPlan, memory) -> dict:
    """vLLM takes its gpu_memory_utilization share of the whole GPU on the first tensor_parallel_size GPUs it sees;
    its CUDA context and graphs come on top (the planner's figure where it read the model, else
    decide.unread_graph_bytes, as llama.cpp's plan counts it)."""
    return gpu_claims([], [
        (f"{UNIT}@{i.name}", i.settings.gpus, i.settings.tensor_parallel_size, i.settings.gpu_memory_utilization,
         i.memory.outside_bytes if i.memory and i.memory.outside_bytes else
         VLLM_CUDA_CONTEXT_BYTES + decide.unread_graph_bytes(i.settings, p.release))
        for i in p.instances], memory)


def _summary(host, p: VllmPlan, plan) -> tuple[dict, dict]:
    """`v100kit plan`: the release, host Python and venv; per instance its dtype, memory plan, warnings and the
    cluster head that serves it."""
    rows = {f"{UNIT}@{inst.name}": {"model": inst.model_path, "dtype": inst.dtype, "plan": plan_row(inst.memory),
                                    "encoder_mib": round(decide.encoder_bytes(inst.settings) / (1 << 20)),
                                    "gpu_memory_utilization": inst.settings.gpu_memory_utilization,
                                    "rendered_gpu_memory_utilization": decide.rendered_utilization(inst, p.release),
                                    "warnings": list(inst.warnings), "served_by": plan.ray.head if plan.ray else None}
            for inst in p.instances}
    return {"vllm": {"version": p.release.version, "engine": p.release.engine, "python": p.python,
                     "venv": p.venv}}, rows


def _table(r: dict) -> list[str]:
    lines = []
    if r.get("ray"):  # the cluster spans vLLM's instances
        c = r["ray"]
        lines.append(f"   Ray cluster {c['cluster']}: {c['role']} at {c['node_address']} ({c['interface']}), GCS "
                     f"{c['gcs_address']}; nodes {', '.join(c['nodes'])}: vLLM instances span them (pipeline "
                     f"parallel {c['pipeline_parallel_size']}" + (", served here)" if c["role"] == "head" else
                                                                  f", served by {c['head']})"))
    if r.get("vllm"):
        v = r["vllm"]
        lines.append(f"   vLLM {v['version']} ({v['engine']} engine, Python {v['python']}) {v['venv']}")
    return lines


def _memory_line(inst: str, d: dict, p: dict) -> str:
    """vLLM budgets VRAM x gpu_memory_utilization; the CUDA context is outside. A vision encoder's term
    (encoder_memory_gib) is named with the activations it is counted beside."""
    enc = d.get("encoder_mib") or 0
    act = (f"activations and non-torch {p['compute_buffer_mib'] - enc} + vision encoder {enc}" if enc else
           f"activations and non-torch {p['compute_buffer_mib']}")
    util, setting = d.get("rendered_gpu_memory_utilization"), d.get("gpu_memory_utilization")
    return (f"   {inst}: {p['outcome'].upper()} on {p['gpus']} GPU(s), --dtype {d['dtype']}: weights "
            f"{p['weights_mib']} + KV for one sequence {p['kv_cache_mib']} + {act} = {p['total_mib']} of "
            f"{p['budget_mib']} MiB per "
            f"GPU (CUDA context ~{p['cuda_context_mib']} outside); max model len "
            f"{p['max_context_tokens']} tokens; decode <= {p['decode_ceiling_tps']} tok/s"
            + (f"; vLLM gets --gpu-memory-utilization {util}, not {setting}: the encoder's share is left free "
               "(--skip-mm-profiling)" if enc and util is not None and setting is not None and util < setting
               else ""))


def _request_logging(p: VllmPlan) -> tuple[str, str] | None:
    if not p.serves:
        return None
    return UNIT, (f"on: each request's prompt goes to the journal (journalctl -u {UNIT}@NAME)"
                  if p.log_requests else "off: the request logger is turned off")


def _roofline(plan, inst, memory, tp: int) -> tuple[float, float]:
    """Tensor parallel reads each GPU's share at once: one GPU's weights and its share of the KV cache; the pipeline
    stages (the nodes of a Ray cluster) run one after another for each token: the planner's heaviest stage, pp
    times (an upper bound on the bytes)."""
    pp = plan.ray.pipeline_parallel_size if plan is not None and plan.ray else 1
    return memory.weight_bytes * pp, memory.kv_bytes_per_token / tp


BENCH = BenchHooks(
    # the bench reads what the instance's settings have (getattr): it measures what the plan gives it
    planned_vram_bytes=lambda plan, inst: None if inst.memory is None else
    (inst.memory.budget_bytes + inst.memory.cuda_context_bytes) * getattr(inst.settings, "tensor_parallel_size", 1),
    n_gpu_layers=lambda inst: 0,  # no CPU fallback on a CUDA build: memory held is the evidence
    request_limit=lambda inst: (getattr(inst.settings, "max_model_len", None), "max_model_len"),
    model_name=lambda inst: getattr(inst.settings, "served_model_name", None) or inst.name,
    roofline=_roofline,
    tensor_parallel=lambda inst: getattr(inst.settings, "tensor_parallel_size", 1),
)

ENGINE = Engine(
    name="vllm", role="vllm", key="vllm_instances", unit=UNIT, config_dir=decide.CONFIG_DIR,
    planner="roles.planner.vllm",
    plan=_plan,
    instances=lambda p: list(p.instances),
    served=lambda p: list(p.instances) if p.serves else [],
    notes=lambda p: [w for i in p.instances for w in i.warnings],
    ports=lambda settings: {i.port: f"{UNIT}@{n}" for n, i in settings.vllm_instances.items()},
    claims=_claims,
    gpu_fix="lower a vLLM instance's gpu_memory_utilization",
    environment=decide.environment,
    hub_file=False, hub_sha256=False,
    summary=_summary, table=_table, memory_line=_memory_line, request_logging=_request_logging,
    bench=BENCH,
    deploy="roles.vllm.deploy:deploy_engine",
    # the OpenAI server answers /health with 200 once the engine runs; its unit waits for a GPU
    claim_words="vLLM's gpu_memory_utilization share with its CUDA context and graphs outside it",
    health_path="/health", needs_gpu=True,
    # the current link points at the planned venv, installed and checked (its stamp); a Ray worker's too
    doctor=lambda p, ev: venv_in_use("vLLM", p.venv, ev.get("current"), ev.get("stamped", False)),
    evidence=lambda host, p: venv_evidence(host, decide.CURRENT, p.venv, decide.STAMP),
    # a Ray cluster's instance is served by its head alone: the other nodes list no vLLM target
    scrape=lambda settings, host: sorted(settings.vllm_instances.items())
    if not (settings.ray_cluster and settings.ray_head) or host == settings.ray_head else [],
    watch=lambda p: venv_watch(ENGINE, "vLLM", p.venv, decide.CURRENT, decide.STAMP,
                               [i.name for i in p.instances] if p.serves else []),
)
