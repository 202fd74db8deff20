"""LMDeploy (TurboMind) as an engine of the registry (roles/engine_registry.py): everything outside roles/lmdeploy
needs to know of it, in one place (roles/engines.py Engine says what each entry means).

No operation is imported here. The host is read only through PlanInputs.fact: the Python version and a model_path's
config.json with the vLLM role's facts (roles/vllm/facts.py PythonVersion, HfModelDir: the same readings).
"""

from __future__ import annotations

from roles.doctor.rows import venv_evidence, venv_in_use
from roles.engines import BenchHooks, Engine, PlanInputs, gpu_claims, venv_watch
from roles.lmdeploy import decide
from roles.lmdeploy.decide import CONFIG_DIR, UNIT, Instance, LmdeployPlan
from roles.lmdeploy.quant import quantization_config
from roles.vllm.facts import HfModelDir, PythonVersion

MIB = 1 << 20


def _plan(i: PlanInputs) -> tuple[LmdeployPlan | None, list[str]]:
    s = i.settings
    python = i.fact(PythonVersion, path=s.lmdeploy_python) if s.lmdeploy_instances else None
    return decide.plan(s, python, i.gpus, i.driver_version, lambda path: i.fact(HfModelDir, path=path),
                       i.taken_ports)


def _claims(p: LmdeployPlan, memory) -> dict:
    """TurboMind runs on the first tp GPUs the instance sees; on each it holds its share of the weights, the CUDA
    context and cache_max_entry_count of what was free after them (Memory.claim_bytes; None: not planned)."""
    claims: dict[int, list[tuple[str, int | None]]] = {}
    for inst in p.instances:
        for g in (inst.settings.gpus or sorted(memory))[:inst.settings.tp]:
            claims.setdefault(g, []).append((f"{UNIT}@{inst.name}",
                                             inst.memory.claim_bytes if inst.memory else None))
    return gpu_claims([], [], memory, claimed=claims)


def memory_row(inst: Instance) -> dict | None:
    """The plan of one instance as plain data for `v100kit plan` (MiB, per GPU of its group); None: not planned."""
    m = inst.memory
    if m is None:
        return None
    return {"outcome": "fits" if m.kv.fits else "does not fit", "gpus": m.gpus, "gpu_mib": m.gpu_mib,
            "outside_mib": m.outside_mib, "weights_mib": round(m.weight_bytes / MIB),
            "cuda_context_mib": round(m.cuda_context_bytes / MIB), "free_after_weights_mib": round(m.free_bytes / MIB),
            "cache_max_entry_count": inst.settings.cache_max_entry_count, "kv_cache_mib": round(m.kv.cache_bytes / MIB),
            "kv_blocks": m.kv.blocks, "block_tokens": m.block_len, "kv_tokens": m.kv.tokens,
            "session_len": inst.session_len, "total_mib": round(m.claim_bytes / MIB)}


def _summary(host, p: LmdeployPlan, plan) -> tuple[dict, dict]:
    """`v100kit plan`: the release, host Python and venv; per instance its TurboMind format and memory plan."""
    rows = {f"{UNIT}@{inst.name}": {"model": inst.model_path, "model_format": inst.fmt.model_format or "float16",
                                    "plan": memory_row(inst), "warnings": list(inst.warnings)}
            for inst in p.instances}
    return {"lmdeploy": {"version": p.release.version, "python": p.python, "venv": p.venv}}, rows


def _table(r: dict) -> list[str]:
    if not r.get("lmdeploy"):
        return []
    v = r["lmdeploy"]
    return [f"   LMDeploy {v['version']} (TurboMind engine, Python {v['python']}) {v['venv']}"]


def _memory_line(inst: str, d: dict, p: dict) -> str:
    """TurboMind reserves cache_max_entry_count of the memory free after the weights (turbomind.cc:291-301)."""
    return (f"   {inst}: {p['outcome'].upper()} on {p['gpus']} GPU(s), TurboMind {d['model_format']}: weights "
            f"{p['weights_mib']} + CUDA context ~{p['cuda_context_mib']} + KV cache {p['kv_cache_mib']} "
            f"({p['cache_max_entry_count']:g} of {p['free_after_weights_mib']} free) = {p['total_mib']} of "
            f"{p['gpu_mib']} MiB per GPU; {p['kv_blocks']} blocks of {p['block_tokens']} = {p['kv_tokens']} tokens, "
            f"session_len {p['session_len']}")


def _roofline(plan, inst, memory, tp: int) -> tuple[float, float]:
    """Tensor parallel reads each rank's share at once: one rank's weights and its KV heads' share per token."""
    return memory.weight_bytes, memory.kv_bytes_per_token


BENCH = BenchHooks(
    planned_vram_bytes=lambda plan, inst: None if inst.memory is None else inst.memory.claim_bytes * inst.settings.tp,
    n_gpu_layers=lambda inst: 0,  # no CPU fallback: memory held is the evidence (as vLLM)
    request_limit=lambda inst: (inst.session_len, "session_len"),
    model_name=lambda inst: inst.settings.served_model_name or inst.name,
    roofline=_roofline,
    tensor_parallel=lambda inst: inst.settings.tp,
)

def _quant_fix(config: dict, cc: tuple[int, int]) -> str | None:
    """Offered where another engine refuses a quantized checkpoint (`config`: its parsed config.json) on compute
    capability `cc`: a 4-bit AWQ or GPTQ one that TurboMind takes by its own instances' checks (decide.model_problems).
    TurboMind builds sm_70 (LMDeploy v0.15.0 CMakeLists.txt:237-241 "70-real") and lists W4A16 AWQ/GPTQ on V100
    (docs/en/quantization/w4a16.md)."""
    qc = quantization_config(config)
    if not qc or str(qc.get("quant_method", "")).lower() not in ("awq", "gptq") or cc < decide.MIN_CAPABILITY:
        return None
    fmt, _, problems = decide.model_problems(config, cc)
    if fmt is None or problems:
        return None
    return (f"serve it with LMDeploy's TurboMind, which runs this 4-bit {str(qc['quant_method']).upper()} checkpoint "
            f"on compute capability {cc[0]}.{cc[1]}: the same model under lmdeploy_instances")


ENGINE = Engine(
    name="lmdeploy", role="lmdeploy", key="lmdeploy_instances", unit=UNIT, config_dir=CONFIG_DIR,
    planner="roles.lmdeploy.planner",
    plan=_plan,
    instances=lambda p: list(p.instances),
    served=lambda p: list(p.instances),
    notes=lambda p: [w for i in p.instances for w in i.warnings],
    ports=lambda settings: {i.port: f"{UNIT}@{n}" for n, i in getattr(settings, "lmdeploy_instances", {}).items()},
    claims=_claims,
    gpu_fix="lower an LMDeploy instance's cache_max_entry_count",
    environment=decide.environment,
    hub_file=False, hub_sha256=False,
    summary=_summary, table=_table, memory_line=_memory_line,
    # no line in the plan: the toolkit sets no --log-level (LMDeploy 0.15.0's parser defaults to WARNING,
    # tests/data/lmdeploy/parsed-0.15.0.json); prompts are logged at REQUEST (15), below it, and extra_args
    # refuses the levels that reach it (decide.PROMPT_LOG_LEVELS)
    request_logging=lambda p: None,
    bench=BENCH,
    deploy="roles.lmdeploy.deploy:deploy_engine",
    quant_fix=_quant_fix,
    # api_server's GET /health answers 200 (lmdeploy/serve/openai/api_server.py `health`); its unit waits for a GPU
    claim_words="LMDeploy's weights and CUDA context, and cache_max_entry_count of what is free after them",
    health_path="/health", needs_gpu=True,
    # the current link points at the planned venv, installed and checked (its stamp, written after check_venv.py)
    doctor=lambda p, ev: venv_in_use("LMDeploy", p.venv, ev.get("current"), ev.get("stamped", False)),
    evidence=lambda host, p: venv_evidence(host, decide.CURRENT, p.venv, decide.STAMP),
    # every instance: api_server mounts /metrics unless --disable-metrics (serve.py: enable_metrics=not
    # args.disable_metrics, False by default: tests/data/lmdeploy/parsed-0.15.0.json; extra_args cannot set it), behind
    # the API key where one is set (serve/utils/server_utils.py AuthenticationMiddleware skips only /health, /docs,
    # /redoc, /nodes; v0.15.0): a keyed instance's job reads its credentials file
    scrape=lambda settings, host: sorted(settings.lmdeploy_instances.items()),
    watch=lambda p: venv_watch(ENGINE, "LMDeploy", p.venv, decide.CURRENT, decide.STAMP, [i.name for i in p.instances]),
)
