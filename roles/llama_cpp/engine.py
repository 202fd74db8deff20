"""llama.cpp as an engine of the registry (roles/engine_registry.py): everything outside roles/llama_cpp needs to know
of it, in one place (roles/engines.py Engine says what each entry means).

No operation is imported here: preflight, plan, doctor, bench and verify read it. The host is read only through
PlanInputs.fact (the deploy's own facts) and, for `v100kit plan` and the bench, through the host they pass.
"""

from __future__ import annotations

from pyinfra.facts.files import File

from roles.doctor.rows import NO_GPU, Row, broken, ok
from roles.engines import BenchHooks, Engine, PlanInputs, gpu_claims
from roles.llama_cpp import decide
from roles.llama_cpp.decide import LlamaCppPlan
from roles.llama_cpp.residency import judge, parse_compute_apps
from roles.planner.units import plan_row

UNIT = "llama-server"


def _plan(i: PlanInputs) -> tuple[LlamaCppPlan | None, list[str]]:
    return decide.plan(i.settings, i.toolkits, i.gpus, lambda path: bool(i.fact(File, path=path)))


def _claims(p: LlamaCppPlan, memory) -> dict:
    """llama-server spreads its layers over every GPU it sees (gpus, else all), so it claims each of them: the
    planner's total per GPU (decide.claim_bytes)."""
    return gpu_claims([(f"{UNIT}@{i.name}", i.settings.gpus, decide.claim_bytes(i)) for i in p.instances], [], memory)


def _summary(host, p: LlamaCppPlan, plan) -> tuple[dict, dict]:
    """`v100kit plan`: the build prefix and the build jobs the deploy will use; per instance its memory plan, KV
    cache choice and serving shape."""
    from roles.llama_cpp.jobs import host_build_jobs

    jobs, why = host_build_jobs(host, plan.settings.llama_cpp_build_jobs)  # as the deploy decides them
    rows = {}
    for inst in p.instances:
        kv = inst.kv
        rows[f"{UNIT}@{inst.name}"] = {
            "model": inst.model_path, "plan": plan_row(inst.memory),
            "kv_cache": None if kv is None else {"type_k": kv.cache_type_k, "type_v": kv.cache_type_v,
                                                 "flash_attn": kv.flash_attn, "why": kv.why},
            "serving": None if inst.serving is None else {
                "slots": inst.serving.slots, "context_per_request": inst.serving.context,
                "kv_pool_tokens": inst.serving.pool, "kv_unified": inst.serving.unified,
                "full_length_requests_at_once": inst.serving.slots, "why": list(inst.serving.why)}}
    return {"llama_cpp": p.prefix, "llama_cpp_build": {"jobs": jobs, "why": why}}, rows


def _table(r: dict) -> list[str]:
    if not r.get("llama_cpp"):
        return []
    return [f"   llama.cpp {r['llama_cpp']}" + (f", build {r['llama_cpp_build']['why']}"
                                                if r.get("llama_cpp_build") else "")]


def _memory_line(inst: str, d: dict, p: dict) -> str:
    return (f"   {inst}: {p['outcome'].upper()} on {p['gpus']} GPU(s): weights {p['weights_mib']} + KV "
            f"{p['kv_cache_mib']} + buffers {p['compute_buffer_mib']} + CUDA {p['cuda_context_mib']} = "
            f"{p['total_mib']} of {p['budget_mib']} MiB per GPU; max context {p['max_context_tokens']} "
            f"tokens; {p['layers_offloaded']} layers on the CPU; decode <= {p['decode_ceiling_tps']} tok/s")


def _request_logging(p: LlamaCppPlan) -> tuple[str, str]:
    inst = p.instances[0]  # one tree per host: every instance runs the tree's own -lv
    lv = decide.verbosity(inst)
    files = (f"on: each request's prompt goes to a file in {decide.prompt_log_dir('NAME')}/ (--log-prompts-dir, "
             f"directory 0700 of the service user)")
    if inst.log_verbosity is not None:
        return UNIT, (f"{files}; the journal gets none (-lv {lv})" if p.log_requests else
                      f"off: no prompt file, and -lv {lv} logs no request text")
    # a tree whose quiet -lv is not known (a URL source, not read here; a read log.h that names none) runs at
    # VERBOSITY, the 0.3.36 tree's: an older tree logs every request body there (0.3.16's debug lines start at 1)
    unknown = (f"the journal: -lv {lv}, the default for a tree whose log levels are not known here, may log request "
               f"text (an older tree's debug lines, as 0.3.16's from -lv 1, carry each request body)")
    return UNIT, f"{files}; {unknown}" if p.log_requests else f"off: no prompt file; {unknown}"


def _sweep(plan, inst) -> tuple[str, str, str]:
    """--sweep: (the llama-server binary, the instance's arguments as the unit runs them, the build's -fa style)."""
    style = plan.llama_cpp.source.flash_attn_style
    return f"{decide.CURRENT}/bin/llama-server", decide.server_args(inst, style), style


def _roofline(plan, inst, memory, tp: int) -> tuple[float, float]:
    """llama.cpp splits layers across GPUs, read one after another: all weights count against one GPU's bandwidth."""
    return memory.weight_bytes * memory.n_gpus, memory.kv_bytes_per_token


def _evidence(host, p: LlamaCppPlan) -> dict:
    """What the doctor's llama.cpp rows read on `host` (read-only): {'current': the target of decide.CURRENT (None:
    no link), 'gpus': whether nvidia-smi lists a GPU, 'servers': {instance name: ServerEvidence of its unit}, read
    only where a GPU is visible ({} otherwise)}."""
    from pyinfra.facts.files import Link

    from roles.llama_cpp.facts import ServerEvidence
    from roles.nvidia_driver.facts import NvidiaGpus

    gpus = bool(host.get_fact(NvidiaGpus))
    return {"current": (host.get_fact(Link, path=decide.CURRENT) or {}).get("link_target"), "gpus": gpus,
            "servers": {i.name: host.get_fact(ServerEvidence, unit=f"{UNIT}@{i.name}") for i in p.instances}
            if gpus else {}}


def _doctor(p: LlamaCppPlan, ev: dict) -> list[Row]:
    """The llama.cpp current link points at the planned build; each llama-server serves from the GPU (its log and
    nvidia-smi, residency.judge), skipped, saying why, where no GPU answers nvidia-smi."""
    target = ev.get("current")
    rows = [ok("llama.cpp build in use", target) if target == p.prefix else
            broken("llama.cpp build in use", f"current -> {target}, settings say {p.prefix}", "run deploy.py")]
    for inst in p.instances:
        check = f"{UNIT}@{inst.name} serves from the GPU"
        if not ev.get("gpus"):
            rows.append(Row(check, "skipped", f"{NO_GPU}: the server can only run on the CPU here"))
            continue
        e = ev.get("servers", {}).get(inst.name) or {"log": [], "main_pid": 0, "compute_apps": []}
        verdict = judge(e["log"], e["main_pid"], parse_compute_apps(e["compute_apps"]), inst.n_gpu_layers)
        rows.append(ok(check, verdict.evidence) if verdict.on_gpu else
                    broken(check, verdict.evidence, f"run repair.py if the driver is broken, then deploy.py; "
                           f"`journalctl -u {UNIT}@{inst.name}` shows the server's own log"))
    return rows


def _watch(p: LlamaCppPlan) -> dict:
    """The doctor's host-local checks: the current link points at the planned build (no stamp: the build's own
    install is its check); each llama-server runs (also on the CPU) and serves from the GPU where one is (its -ngl:
    residency.judge on the box)."""
    return {"links": [{"check": "llama.cpp build in use", "link": decide.CURRENT, "target": p.prefix, "stamp": None}],
            "units": [{"unit": f"{UNIT}@{i.name}", "needs_gpu": False, "n_gpu_layers": i.n_gpu_layers}
                      for i in p.instances]}


BENCH = BenchHooks(
    planned_vram_bytes=lambda plan, inst: None if inst.memory is None else inst.memory.total_bytes * inst.memory.n_gpus,
    n_gpu_layers=lambda inst: inst.n_gpu_layers,
    request_limit=lambda inst: (inst.serving.context if getattr(inst, "serving", None) else None,
                                "context per request"),
    model_name=lambda inst: inst.name,
    roofline=_roofline,
    sweep=_sweep,
)

ENGINE = Engine(
    name="llama.cpp", role="llama_cpp", key="llama_cpp_instances", unit=UNIT, config_dir=decide.CONFIG_DIR,
    planner="roles.planner.llama_cpp",
    plan=_plan,
    instances=lambda p: list(p.instances),
    served=lambda p: list(p.instances),
    notes=lambda p: list(p.notes),
    ports=lambda settings: {i.port: f"{UNIT}@{n}" for n, i in settings.llama_cpp_instances.items()},
    claims=_claims,
    gpu_fix="shorten a llama-server context or set fewer slots (parallel)",
    environment=lambda p, inst: decide.environment(inst, p.source.flash_attn_style, p.log_requests),
    hub_file=True, hub_sha256=True,
    summary=_summary, table=_table, memory_line=_memory_line, request_logging=_request_logging,
    bench=BENCH,
    deploy="roles.llama_cpp.deploy:deploy_engine",
    # llama-server answers /health with 200 once its model is loaded (tools/server/README.md), also on the CPU
    claim_words="llama-server's planned total",
    health_path="/health", needs_gpu=False,
    doctor=_doctor, evidence=_evidence,
    # llama-server serves /metrics only with `metrics` (its --metrics flag)
    scrape=lambda settings, host: [(n, i) for n, i in sorted(settings.llama_cpp_instances.items()) if i.metrics],
    watch=_watch,
)
