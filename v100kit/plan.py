"""v100kit plan INVENTORY [--json] [--limit HOST ...]: what each host would get, changing nothing.

Per host: the OS, the pinned driver, the CUDA toolkits, the llama.cpp build (and its compile jobs), the vLLM release and venv, and per
instance of each engine (llama-server@NAME, vllm@NAME, lmdeploy@NAME) its planner's memory plan (weights, KV cache, compute buffers, CUDA context per GPU against the VRAM budget, the
largest context that fits, layers that would run on the CPU, the decode ceiling in tokens/s), and warnings (a
bf16-trained model served in fp16 below compute capability 8.0: overflow risk). A host whose settings are refused
prints the refusal; with --json a host without a plan is {"error": "unreachable"|"refused"|"failed", "cause": ..., "problems": [...]}.

Exit status: 0 every host planned, 1 a host's settings refused, 2 a host not reached or not planned (or a bad
argument), 130 interrupted, 143 terminated (SIGTERM) (v100kit/cli.py: the convention every command shares).
"""

from __future__ import annotations

import argparse
import json

from v100kit.hosts import HostFailure, exit_status, for_each_host, json_results
from roles.engines import describe_outside, outside_use, usable_mib
from roles.gpu_policy import decide as gpu_policy
from roles.engine_registry import ENGINES, by_unit
from roles.preflight import HostPlan

MiB = 1 << 20


def gpus_summary(plan: HostPlan) -> dict:
    """Per GPU index (str): what each instance claims of it and the total (MiB), and where nvidia-smi answered its
    name, compute capability, usable memory and the memory in use by processes outside v100kit with their PIDs."""
    facts = {g["index"]: g for g in plan.gpus}
    out: dict = {}
    for g in sorted(set(plan.gpu_claims) | set(facts)):
        users = plan.gpu_claims.get(g, [])
        gpu = facts.get(g)
        out[str(g)] = {
            "claims_mib": {u: None if b is None else round(b / MiB) for u, b in users},
            "total_mib": round(sum(b or 0 for _, b in users) / MiB),
            **({} if gpu is None else {
                "name": gpu["name"], "compute_capability": gpu["compute_cap"], "memory_mib": usable_mib(gpu),
                "outside_v100kit_mib": outside_use(gpu)[0],
                "outside_v100kit": [{"pid": p["pid"], "name": p["name"], "used_mib": p["used_mib"]}
                                    for p in outside_use(gpu)[1]],
                "outside_v100kit_why": describe_outside(gpu)})}
    return out


def summarize(host, plan: HostPlan) -> dict:
    """The plan of one host as plain data; instances keyed by their systemd unit (llama-server@NAME, vllm@NAME).
    Each engine of the registry gives its own part (Engine.summary): its key (None without instances) and rows."""
    out = {"platform": plan.platform.id, "driver": plan.driver.pin.version,
           "cuda": [t.version for t in plan.toolkits], **{e.role: None for e in ENGINES}, "instances": {}}
    for engine, p in plan.engine_plans():
        top, rows = engine.summary(host, p, plan)
        out.update(top)
        out["instances"].update(rows)
    out["gpus"] = gpus_summary(plan)
    if plan.ray:
        r = plan.ray
        out["ray"] = {"cluster": r.cluster, "role": r.role, "head": r.head, "nodes": list(r.nodes),
                      "node_address": r.node_address, "gcs_address": r.gcs_address, "interface": r.interface,
                      "pipeline_parallel_size": r.pipeline_parallel_size}
    out["request_logging"] = request_logging(plan)
    out["gpu_policy"] = gpu_policy.summary(plan.settings, plan.gpu_policy)
    m = plan.monitoring
    out["monitoring"] = None if m is None else {
        "node_exporter": m.node_exporter_args[0].split("=", 1)[1], "scrapers": list(m.scrapers),
        "textfile_dir": m.textfile_dir, "gpu_interval_s": m.gpu_interval_s, "doctor_interval_s": m.doctor_interval_s}
    return out


def request_logging(plan: HostPlan) -> dict[str, str]:
    """Per engine with instances here, whether its request logger runs and where each prompt then goes: {engine:
    one line} (llama_cpp_log_requests, vllm_log_requests; Engine.request_logging)."""
    return dict(filter(None, (engine.request_logging(p) for engine, p in plan.engine_plans())))


def table(results: dict) -> str:
    lines = []
    for name, r in results.items():
        if isinstance(r, HostFailure):
            lines += [f"== {name}: {r.error.upper()}", r.cause]
            continue
        lines.append(f"== {name}: {r['platform']}, driver {r['driver']}, CUDA {', '.join(r['cuda'])}")
        for engine in ENGINES:
            lines += engine.table(r)
        for engine, how in r.get("request_logging", {}).items():
            lines.append(f"   {engine} request logging {how}")
        if r.get("monitoring"):
            mon = r["monitoring"]
            lines.append(f"   monitoring: node exporter on {mon['node_exporter']}"
                         + (f" for {', '.join(mon['scrapers'])}" if mon["scrapers"] else " (loopback only)")
                         + f"; GPU metrics every {mon['gpu_interval_s']} s, doctor every {mon['doctor_interval_s']} s")
        if r.get("gpu_policy"):
            gp = r["gpu_policy"]
            lines.append(f"   GPU policy: {gp['policy']}, " + (
                f"at each boot ({gpu_policy.UNIT})" + (f"; changes {'; '.join(gp['changes'])}" if gp["changes"]
                                                        else "; the cards have it already")
                + (f"; ECC current after a reboot on GPU {', '.join(map(str, gp['ecc_reboot']))}"
                   if gp["ecc_reboot"] else "") if gp["applied"] else f"NOT APPLIED: {gp['why']}"))
        for g, d in r.get("gpus", {}).items():
            users = ", ".join(f"{u} {'?' if m is None else m}" for u, m in d["claims_mib"].items())
            of = (f" of {d['memory_mib']} ({d['name']}, compute capability {d['compute_capability']})"
                  if "memory_mib" in d else "")
            lines.append(f"   GPU {g}: {d['total_mib']} MiB claimed{of}" + (f" ({users})" if users else ""))
            if d.get("outside_v100kit_why"):
                lines.append(f"   GPU {g}: {d['outside_v100kit_why']}")
        for inst, d in r["instances"].items():
            p = d["plan"]
            lines += [f"   WARNING {w}" for w in d.get("warnings", [])]
            if d.get("kv_cache"):
                kv = d["kv_cache"]
                lines.append(f"   {inst}: KV cache -ctk {kv['type_k']} -ctv {kv['type_v']}: {kv['why']}")
            if d.get("serving"):
                sv = d["serving"]
                lines.append(f"   {inst}: {sv['slots']} slot(s): {sv['full_length_requests_at_once']} request(s) of up "
                             f"to {sv['context_per_request']} tokens at once, KV pool -c {sv['kv_pool_tokens']}"
                             + (" unified" if sv["kv_unified"] else "") + f" ({'; '.join(sv['why'])})")
            if p is None:
                lines.append(f"   {inst}: {d['model']}: not planned (the model is not readable before the deploy)")
                continue
            if d.get("served_by"):
                lines.append(f"   {inst}: served by {d['served_by']} across the cluster; per node:")
            lines.append(by_unit(inst).memory_line(inst, d, p))
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from v100kit.cli import inventory_arguments
    inventory_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Print the plans (table or JSON); exit 0, 1 (a host refused) or 2 (a host not reached or not planned)."""
    results = for_each_host(args.inventory, args.limit, summarize)
    print(json.dumps(json_results(results), indent=2) if args.json else table(results))
    return exit_status(results)
