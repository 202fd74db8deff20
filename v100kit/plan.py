"""v100kit plan INVENTORY [--json] [--limit HOST ...]: what each host would get, changing nothing.

Per host: the OS, the pinned driver, the CUDA toolkits, the llama.cpp build (and its compile jobs), the vLLM release and venv, and per
llama-server@NAME / vllm@NAME instance the planner's memory plan (weights, KV cache, compute buffers, CUDA context per GPU against the VRAM budget, the
largest context that fits, layers that would run on the CPU, the decode ceiling in tokens/s), and warnings (a
bf16-trained model served in fp16 below compute capability 8.0: overflow risk). A host whose settings are refused
prints the refusal; with --json a host without a plan is {"error": "unreachable"|"refused"|"failed", "cause": ..., "problems": [...]}.

Exit status: 0 every host planned, 1 a host's settings refused, 2 a host not reached or not planned (or a bad
argument), 130 interrupted (v100kit/cli.py: the convention every command shares).
"""

from __future__ import annotations

import argparse
import json

from v100kit.hosts import HostFailure, exit_status, for_each_host, json_results
from roles.engines import describe_outside, outside_use, usable_mib
from roles.llama_cpp.jobs import host_build_jobs
from roles.preflight import HostPlan

MiB = 1 << 20


def _memory(m) -> dict | None:
    """A planner.Plan as plain data (sizes in MiB, speeds in tokens/s); None when the model was not readable."""
    return None if m is None else {
                "outcome": m.outcome, "gpus": m.n_gpus, "weights_mib": round(m.weight_bytes / MiB),
                "kv_cache_mib": round(m.kv_bytes / MiB, 2), "compute_buffer_mib": round(m.compute_buffer_bytes / MiB),
                "cuda_context_mib": round(m.cuda_context_bytes / MiB), "total_mib": round(m.total_bytes / MiB),
                "budget_mib": round(m.budget_bytes / MiB), "max_context_tokens": m.max_context_that_fits,
                "layers_offloaded": m.layers_offloaded, "decode_ceiling_tps": round(m.decode_ceiling_tps, 1),
                "reasons": m.reasons}


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
    """The plan of one host as plain data; instances keyed by their systemd unit (llama-server@NAME, vllm@NAME)."""
    out = {"platform": plan.platform.id, "driver": plan.driver.pin.version,
           "cuda": [t.version for t in plan.toolkits], "llama_cpp": None, "vllm": None, "instances": {}}
    if plan.llama_cpp:
        out["llama_cpp"] = plan.llama_cpp.prefix
        jobs, why = host_build_jobs(host, plan.settings.llama_cpp_build_jobs)  # as the deploy decides them
        out["llama_cpp_build"] = {"jobs": jobs, "why": why}
        for inst in plan.llama_cpp.instances:
            kv = inst.kv
            out["instances"][f"llama-server@{inst.name}"] = {
                "model": inst.model_path, "plan": _memory(inst.memory),
                "kv_cache": None if kv is None else {"type_k": kv.cache_type_k, "type_v": kv.cache_type_v,
                                                     "flash_attn": kv.flash_attn, "why": kv.why},
                "serving": None if inst.serving is None else {
                    "slots": inst.serving.slots, "context_per_request": inst.serving.context,
                    "kv_pool_tokens": inst.serving.pool, "kv_unified": inst.serving.unified,
                    "full_length_requests_at_once": inst.serving.slots, "why": list(inst.serving.why)}}
    out["gpus"] = gpus_summary(plan)
    if plan.ray:
        r = plan.ray
        out["ray"] = {"cluster": r.cluster, "role": r.role, "head": r.head, "nodes": list(r.nodes),
                      "node_address": r.node_address, "gcs_address": r.gcs_address, "interface": r.interface,
                      "pipeline_parallel_size": r.pipeline_parallel_size}
    if plan.vllm:
        out["vllm"] = {"version": plan.vllm.release.version, "engine": plan.vllm.release.engine,
                       "python": plan.vllm.python, "venv": plan.vllm.venv}
        for inst in plan.vllm.instances:
            out["instances"][f"vllm@{inst.name}"] = {"model": inst.model_path, "dtype": inst.dtype,
                                                     "plan": _memory(inst.memory), "warnings": list(inst.warnings),
                                                     "served_by": plan.ray.head if plan.ray else None}
    out["request_logging"] = request_logging(plan)
    m = plan.monitoring
    out["monitoring"] = None if m is None else {
        "node_exporter": m.node_exporter_args[0].split("=", 1)[1], "scrapers": list(m.scrapers),
        "textfile_dir": m.textfile_dir, "gpu_interval_s": m.gpu_interval_s, "doctor_interval_s": m.doctor_interval_s}
    return out


def request_logging(plan: HostPlan) -> dict[str, str]:
    """Per engine with instances here, whether its request logger runs and where each prompt then goes: {engine:
    one line} (llama_cpp_log_requests, vllm_log_requests)."""
    out = {}
    if plan.llama_cpp:
        out["llama-server"] = ("on: each request's prompt and generated tokens go to the journal (-lv 5; "
                               "journalctl -u llama-server@NAME)" if plan.llama_cpp.log_requests else
                               "off: -lv 4 logs no request text")
    if plan.vllm and plan.vllm.serves:
        out["vllm"] = ("on: each request's prompt goes to the journal (journalctl -u vllm@NAME)"
                       if plan.vllm.log_requests else "off: the request logger is turned off")
    return out


def table(results: dict) -> str:
    lines = []
    for name, r in results.items():
        if isinstance(r, HostFailure):
            lines += [f"== {name}: {r.error.upper()}", r.cause]
            continue
        lines.append(f"== {name}: {r['platform']}, driver {r['driver']}, CUDA {', '.join(r['cuda'])}")
        if r["llama_cpp"]:
            lines.append(f"   llama.cpp {r['llama_cpp']}" + (f", build {r['llama_cpp_build']['why']}"
                                                           if r.get("llama_cpp_build") else ""))
        if r.get("ray"):
            c = r["ray"]
            lines.append(f"   Ray cluster {c['cluster']}: {c['role']} at {c['node_address']} ({c['interface']}), GCS "
                         f"{c['gcs_address']}; nodes {', '.join(c['nodes'])}: vLLM instances span them (pipeline "
                         f"parallel {c['pipeline_parallel_size']}" + (", served here)" if c["role"] == "head" else
                                                                      f", served by {c['head']})"))
        if r["vllm"]:
            v = r["vllm"]
            lines.append(f"   vLLM {v['version']} ({v['engine']} engine, Python {v['python']}) {v['venv']}")
        for engine, how in r.get("request_logging", {}).items():
            lines.append(f"   {engine} request logging {how}")
        if r.get("monitoring"):
            mon = r["monitoring"]
            lines.append(f"   monitoring: node exporter on {mon['node_exporter']}"
                         + (f" for {', '.join(mon['scrapers'])}" if mon["scrapers"] else " (loopback only)")
                         + f"; GPU metrics every {mon['gpu_interval_s']} s, doctor every {mon['doctor_interval_s']} s")
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
            if inst.startswith("vllm@"):  # vLLM budgets VRAM x gpu_memory_utilization; the CUDA context is outside
                lines.append(f"   {inst}: {p['outcome'].upper()} on {p['gpus']} GPU(s), --dtype {d['dtype']}: weights "
                             f"{p['weights_mib']} + KV for one sequence {p['kv_cache_mib']} + activations and "
                             f"non-torch {p['compute_buffer_mib']} = {p['total_mib']} of {p['budget_mib']} MiB per "
                             f"GPU (CUDA context ~{p['cuda_context_mib']} outside); max model len "
                             f"{p['max_context_tokens']} tokens; decode <= {p['decode_ceiling_tps']} tok/s")
                continue
            lines.append(f"   {inst}: {p['outcome'].upper()} on {p['gpus']} GPU(s): weights {p['weights_mib']} + KV "
                         f"{p['kv_cache_mib']} + buffers {p['compute_buffer_mib']} + CUDA {p['cuda_context_mib']} = "
                         f"{p['total_mib']} of {p['budget_mib']} MiB per GPU; max context {p['max_context_tokens']} "
                         f"tokens; {p['layers_offloaded']} layers on the CPU; decode <= {p['decode_ceiling_tps']} tok/s")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from v100kit.cli import inventory_arguments
    inventory_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Print the plans (table or JSON); exit 0, 1 (a host refused) or 2 (a host not reached or not planned)."""
    results = for_each_host(args.inventory, args.limit, summarize)
    print(json.dumps(json_results(results), indent=2) if args.json else table(results))
    return exit_status(results)
