"""v100kit bench INVENTORY [--json] [--report DIR] [--sweep [--sweep-only LABEL] [--sweep-rounds N]]
[--limit HOST ...] [the load: --depths 0,16384 --output-tokens N --concurrency 1,8,16 --requests N --time-limit-s S
...]: measure what each host serves.

Per llama-server@NAME and vllm@NAME instance: GPU residency (nvidia-smi --query-compute-apps; for llama.cpp also
its log's offloaded-layers line), VRAM against the planner's figure and its peak during each level (sampled), and
per depth (prompt tokens) and concurrency: TTFT p50/p95/p99, inter-token latency p50/p95/p99, decode tokens/s per
stream, aggregate decode tokens/s (TTFT apart) and end-to-end aggregate tokens/s (roles/bench/figures.py defines
each), streamed through the instance's OpenAI-compatible endpoint with its API key; the bandwidth-roofline
fraction per depth, and a check for degenerate output. The load is bounded in requests and time (roles/bench/
figures.py Load; the options are checked, and the bound said, before any request) and goes only to the
inventory's own endpoints: directly where the instance listens beyond loopback or the host is this machine, else
through the host's SSH connection.

Plain bench changes nothing and never stops a service. --sweep (llama.cpp instances) stops each instance's service
after saying so, runs llama-server by hand with alternative flags as the service user, and always starts the
service again at the end, also after an error, Ctrl-C or SIGTERM.

With --json a host not benched is {"error": "unreachable"|"refused"|"failed", "cause": ..., "problems": [...]}.

Exit status: 0 all measured and on the GPU, 1 any instance flagged (not on the GPU, not running, degenerate output,
failed requests) or a host's settings refused, 2 a host not reached or not benched (or a bad option), 130
interrupted, 143 terminated (SIGTERM) (v100kit/cli.py: the convention every command shares; --sweep stops its
hand-run llama-server and starts the services again first).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import re
import shlex
import sys
import time
from pathlib import Path

from roles.bench import report, roofline
from roles.bench import sweep as sweeping
from roles.bench.figures import Load, degenerate
from roles.bench.report import InstanceBench
from roles.bench.residency import judge_instance
from roles.bench.vram import PeakVram
from roles.engine_registry import by_name, by_unit
from roles.preflight import HostPlan
from v100kit import loadgen
from v100kit.hosts import NOT_CHECKED, HostFailure, exit_status, for_each_host

MiB = 1 << 20
#: The load of a plain bench, and the smaller one of each --sweep alternative (up to ten of them per instance);
#: the load options replace their fields in both.
LOAD = Load()
SWEEP_LOAD = Load(concurrency=(1, 8), requests_per_level=8, level_time_s=30.0, request_timeout_s=60.0)
#: The most flag sets sweep.alternatives gives (the default, -np 1, -np 4/8 with and without -kvu, KV f16/q8_0,
#: -fa off, -ub 256/512/1024).
MAX_ALTERNATIVES = len(sweeping.LABELS)
#: Seconds between two peak-VRAM samples during a level.
VRAM_INTERVAL_S = 1.0
#: How long an alternative llama-server or the restarted service may take to answer /health, seconds.
START_TIMEOUT_S = 300.0


def say(line: str) -> None:
    """Progress on stderr (stdout stays the table or the JSON): one updated line on a terminal."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + line[:150])
        sys.stderr.flush()
    else:
        print(line, file=sys.stderr, flush=True)


def keep(line: str) -> None:
    """A progress line that stays (a sweep's figures as each flag set ends, a cut sweep's count): whole, on a line
    of its own also on a terminal, where say() keeps one updated line cut to 150 characters."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + line + "\n")
        sys.stderr.flush()
    else:
        print(line, file=sys.stderr, flush=True)


def is_local(host) -> bool:
    """The host is this machine: pyinfra's @local connector, or an SSH host at a loopback address (the lab)."""
    if type(host.connector).__name__ == "LocalConnector":
        return True
    address = host.data.get("ssh_hostname") or host.name
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def endpoint(host, listen: str, port: int) -> tuple[str, object | None]:
    """(base URL, tunnel to close or None): the instance's own address where the host is this machine or it
    listens beyond loopback, else a Tunnel over the host's SSH connection."""
    loopback = ipaddress.ip_address(listen).is_loopback
    if is_local(host):
        return f"http://{'127.0.0.1' if loopback or listen in ('0.0.0.0', '::') else listen}:{port}", None
    if not loopback:
        address = host.data.get("ssh_hostname") or host.name
        return f"http://{address if listen in ('0.0.0.0', '::') else listen}:{port}", None
    from v100kit.tunnel import Tunnel
    t = Tunnel(host.connector.client.get_transport(), listen, port)
    return f"http://127.0.0.1:{t.local_port}", t


def shell(host, command: str) -> str:
    """Run a command on the host (sudo as the inventory says); raises RuntimeError with its output on failure."""
    from pyinfra.api.command import StringCommand
    ok, out = host.run_shell_command(StringCommand(command), _sudo=bool(host.data.get("_sudo")))
    if not ok:
        raise RuntimeError(f"`{command[:80]}` failed: {out.stderr[-300:] or out.stdout[-300:]}")
    return out.stdout


class HostControl:
    """sweep.Control on a host reached by pyinfra: systemctl for the service; an alternative llama-server started
    with nohup as the service user (runuser), with the key from the instance's key file (never in argv), its log
    in /tmp/v100kit-sweep-NAME.log, stopped by its PID."""

    def __init__(self, host, unit: str, binary: str, user: str, home: str, key_env: str, url: str, key: str | None):
        self.host, self.unit, self.binary, self.user, self.home = host, unit, binary, user, home
        self.key_env, self.url, self.key = key_env, url, key
        self.log = f"/tmp/v100kit-sweep-{unit.split('@')[-1]}.log"

    def stop_service(self) -> None:
        shell(self.host, f"systemctl stop {shlex.quote(self.unit)}")

    def start_service(self) -> None:
        shell(self.host, f"systemctl start {shlex.quote(self.unit)}")
        if not loadgen.wait_healthy(self.url, self.key, START_TIMEOUT_S):
            raise RuntimeError(f"{self.unit} started again but does not answer /health after {START_TIMEOUT_S:.0f} s")

    def start_alternative(self, args: list[str]) -> object:
        argv = " ".join(shlex.quote(a) for a in [self.binary, *args])
        inner = (f"set -a; [ -r {shlex.quote(self.key_env)} ] && . {shlex.quote(self.key_env)}; set +a; "
                 f"cd {shlex.quote(self.home)} 2>/dev/null || cd /; exec runuser -u {shlex.quote(self.user)} -- {argv}")
        pid = shell(self.host, f"nohup setsid sh -c {shlex.quote(inner)} > {self.log} 2>&1 < /dev/null & echo $!")
        handle = int(pid.strip().splitlines()[-1])

        def alive() -> bool:  # an alternative that exits at start (out of memory, a refused flag) ends the wait
            return shell(self.host, f"kill -0 {handle} 2>/dev/null && echo up || echo gone").strip() == "up"

        if not loadgen.wait_healthy(self.url, self.key, START_TIMEOUT_S, alive):
            self.stop_alternative(handle)
            tail = shell(self.host, f"tail -n 5 {self.log} 2>/dev/null || true").strip().replace("\n", " | ")
            raise RuntimeError(f"no /health within {START_TIMEOUT_S:.0f} s, or the server exited: {tail[-250:]}")
        return handle

    def stop_alternative(self, handle: object) -> None:
        p = int(handle)
        shell(self.host, f"kill -- -{p} {p} 2>/dev/null; for i in $(seq 40); do kill -0 {p} 2>/dev/null || exit 0; "
                         f"sleep 0.25; done; kill -9 -- -{p} {p} 2>/dev/null; true")


def _roofline(i: InstanceBench, memory, gpu_name: str | None, load: Load, read) -> list[dict]:
    """The roofline figures of one measured instance per depth, at concurrency 1 ([] without a plan or a known GPU;
    a depth without a decode speed is left out). llama.cpp splits layers across GPUs, read one after another: all
    weights count against one GPU's bandwidth. vLLM's tensor parallel reads each GPU's share at once: one GPU's
    weights and its share of the KV cache; its pipeline stages (`pp`, the nodes of a Ray cluster) run one after
    another for each token: each stage's share counts in turn (the planner's heaviest stage, pp times: an upper
    bound on the bytes). `read(memory)`: (weight bytes, KV bytes per context token) per token, the engine's
    BenchHooks.roofline. Context: the server's mean prompt tokens (else the depth) plus half the output."""
    bw = roofline.bandwidth(gpu_name or "")
    if memory is None or bw is None:
        return []
    weights, kv = read(memory)
    out = []
    for depth in i.depths:
        c1 = i.at(1, depth)
        if c1 is None or not c1.decode_tps_per_stream:
            continue
        context = (c1.prompt_tokens or depth) + load.output_tokens / 2
        per_token = roofline.bytes_per_token(weights, kv, context)
        out.append({"depth": depth, "gpu": gpu_name, "table_row": bw.gpu, "bandwidth_gb_s": bw.bytes_per_s / 1e9,
                    "source": bw.source, "context_tokens": context, "bytes_per_token": per_token,
                    "ceiling_tps": roofline.roofline_tps(per_token, bw.bytes_per_s),
                    "measured_tps": c1.decode_tps_per_stream,
                    "fraction": roofline.roofline_fraction(c1.decode_tps_per_stream, per_token, bw.bytes_per_s)})
    return out


def vram_sampler(host, root: int, sole: bool):
    """A factory of started PeakVram samplers of process `root` (and its descendants) on `host`."""
    return lambda: PeakVram(lambda command: shell(host, command), root, sole, VRAM_INTERVAL_S).start()


def bench_instance(host, plan: HostPlan, engine: str, inst, sole: bool, load: Load, do_sweep: bool,
                   sweep_load: Load = SWEEP_LOAD, sweep_only: tuple[str, ...] = (),
                   sweep_rounds: int = 1) -> InstanceBench:
    """Measure one instance (see the module's docstring) of the engine labelled `engine` (Engine.name; raises
    UnknownEngine for a name the registry lacks) through its BenchHooks."""
    from roles.bench.facts import InstanceEvidence
    from roles.nvidia_driver.facts import NvidiaGpus

    s = inst.settings
    hooks = by_name(engine).bench
    unit = by_name(engine).unit_of(inst.name)
    i = InstanceBench(host.name, unit, engine)
    ev = host.get_fact(InstanceEvidence, unit=unit, port=s.port)
    gpus = host.get_fact(NvidiaGpus)
    i.running = ev["main_pid"] > 0
    tp = hooks.tensor_parallel(inst)
    planned = hooks.planned_vram_bytes(plan, inst)
    if planned is not None:
        i.planned_vram_mib = planned / MiB
    if not i.running:
        i.residency = "the service has no running process"
        i.flags.append(f"{unit} is not running (systemctl status {unit})")
        return i
    verdict, used = judge_instance(engine, ev, hooks.n_gpu_layers(inst), sole)
    i.on_gpu, i.residency, i.vram_mib = verdict.on_gpu, verdict.evidence, used
    if not verdict.on_gpu:
        i.flags.append(f"not on the GPU: {verdict.evidence}")
    # a request longer than the instance serves would fail at the server: say so instead of sending the load
    limit, what = hooks.request_limit(inst)
    need = max(load.depths) + load.output_tokens
    if limit and need > limit:
        i.flags.append(f"not measured: the load needs {need} tokens per request (depth {max(load.depths)} + "
                       f"{load.output_tokens} output), above the instance's {what} {limit}; lower --depths or "
                       "--output-tokens, or raise the setting")
        return i
    url, tunnel = endpoint(host, s.listen, s.port)
    i.url = f"http://{s.listen}:{s.port}" + ("" if tunnel is None else " (through the SSH connection)")
    model = hooks.model_name(inst)
    try:
        if not loadgen.wait_healthy(url, inst.api_key, 30) and loadgen.get(url, "/v1/models", inst.api_key) != 200:
            i.flags.append(f"{unit} does not answer at {i.url}")
            return i
        i.levels, samples = loadgen.measure(url, inst.api_key, model, load, lambda line: say(f"{unit}: {line}"),
                                            vram_sampler(host, ev["main_pid"], sole))
        texts = [x.text for x in samples if x.ok]
        i.sample_text = texts[0][:200] if texts else ""
        bad = [why for t in texts if (why := degenerate(t))]
        if bad:
            i.degenerate = f"{len(bad)} of {len(texts)} completions degenerate: {bad[0]}"
            i.flags.append(f"degenerate output ({i.degenerate}); a bf16-trained model in fp16 overflows this way")
        failed = sum(lv.failed for lv in i.levels)
        if failed:
            i.flags.append(f"{failed} requests failed: {'; '.join(e for lv in i.levels for e in lv.errors)[:200]}")
        gpu = next((g["name"] for g in gpus if g["index"] == (s.gpus[0] if s.gpus else 0)), None)
        i.rooflines = _roofline(i, inst.memory, gpu, load,
                                lambda m: hooks.roofline(plan, inst, m, tp))
        if do_sweep and hooks.sweep is not None:
            _sweep(host, plan, inst, i, url, sweep_load, sole, sweep_only, sweep_rounds)
    finally:
        if tunnel is not None:
            tunnel.close()
    return i


def _sweep(host, plan: HostPlan, inst, i: InstanceBench, url: str, load: Load = SWEEP_LOAD,
           sole: bool = True, only: tuple[str, ...] = (), rounds: int = 1) -> None:
    """--sweep of one llama.cpp instance: roles/bench/sweep.py run with HostControl, each flag set measured with
    `load` (every depth and concurrency) `rounds` times and its peak VRAM sampled; its bound said before it starts;
    results into `i`."""
    engine = by_unit(i.unit)
    binary, args, flash_attn_style = engine.bench.sweep(plan, inst)
    settings = plan.settings
    control = HostControl(host, i.unit, binary, settings.base_service_user,
                          settings.base_service_home, engine.key_file(inst.name), url, inst.api_key)
    alts = sweeping.alternatives(args, flash_attn_style, only)
    i.sweep_bound = b = sweeping.bound(len(alts), load, START_TIMEOUT_S, rounds)
    say(f"{host.name} {i.unit}: sweep of {b['alternatives']} flag sets{report.rounds_text(b)} x {b['depths']} depths"
        f" x {b['levels']} levels: at most {b['max_requests']} requests and {b['max_seconds']:.0f} s")

    def measure(handle) -> dict:
        levels, _ = loadgen.measure(url, inst.api_key, inst.name, load, lambda line: say(f"{i.unit}: {line}"),
                                    vram_sampler(host, int(handle), sole))
        peaks = [lv.peak_vram_mib for lv in levels if lv.peak_vram_mib is not None]
        return {"figures": sweeping.figures_of(levels), "peak_vram_mib": max(peaks) if peaks else None,
                "peak_vram_note": "; ".join(dict.fromkeys(lv.peak_vram_note for lv in levels if lv.peak_vram_note))}

    runs = sweeping.run(control, alts, measure, lambda line: say(f"{host.name} {i.unit}: {line}"),
                        lambda line: keep(f"{host.name} {i.unit}: {line}"), rounds)
    i.sweep, i.sweep_ratios = runs, sweeping.ratios(runs)


def bench_host(host, plan: HostPlan, load: Load = LOAD, do_sweep: bool = False,
               sweep_load: Load = SWEEP_LOAD, sweep_only: tuple[str, ...] = (),
               sweep_rounds: int = 1) -> list[InstanceBench]:
    """Every llama-server@ and vllm@ instance of one host, in unit order. A Ray cluster's instances are measured
    at their endpoint on the head only (a worker serves none)."""
    instances = [(engine.name, x) for engine, p in plan.engine_plans() for x in engine.served(p)]
    out = []
    for engine, inst in instances:
        try:
            out.append(bench_instance(host, plan, engine, inst, len(instances) == 1, load, do_sweep, sweep_load,
                                      sweep_only, sweep_rounds))
        except Exception as e:  # one instance's failure (a host command, the sweep's restart) is its flag
            unit = by_name(engine).unit_of(inst.name)
            out.append(InstanceBench(host.name, unit, engine, residency="not measured",
                                     flags=[f"bench failed: {type(e).__name__}: {e}"[:400]]))
    return out


def write_reports(results: dict, directory: str, load: Load) -> list[Path]:
    """DIR/<host>.md and DIR/<host>.png per benched host (characters other than letters, digits, '.', '_' and '-'
    of the host's name become '_'); the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for host, rows in results.items():
        if isinstance(rows, HostFailure):
            continue
        name = re.sub(r"[^A-Za-z0-9._-]", "_", host)  # "@local" -> "_local": a plain file name
        png = report.plot(rows)
        if png:
            (out / f"{name}.png").write_bytes(png)
            written.append(out / f"{name}.png")
        (out / f"{name}.md").write_text(report.markdown(host, rows, load, f"{name}.png"))
        written.append(out / f"{name}.md")
    return written


def _ints(option: str):
    """argparse type of a comma-separated list of whole numbers, refusing others naming `option`."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text}: give whole numbers separated by commas, "
                                             "e.g. 1,8,16") from None
    return parse


def _number(option: str, kind):
    """argparse type of one number (int or float), refusing others naming `option`."""
    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text}: give a {'whole ' if kind is int else ''}number") \
                from None
    return parse


#: The load options: (option, Load field, type, metavar, help).
LOAD_OPTIONS = (
    ("--depths", "depths", _ints("--depths"), "N[,N...]", "prompt lengths in tokens (e.g. 0,16384): every level "
     f"is measured at each (default {','.join(map(str, LOAD.depths))})"),
    ("--prompt-tokens", "depths", lambda t: (_number("--prompt-tokens", int)(t),), "N",
     "one prompt length in tokens (the same as --depths N)"),
    ("--output-tokens", "output_tokens", _number("--output-tokens", int), "N",
     f"tokens per completion (max_tokens, ignore_eos; default {LOAD.output_tokens})"),
    ("--concurrency", "concurrency", _ints("--concurrency"), "N[,N...]", "concurrent streams of each level "
     f"(default {','.join(map(str, LOAD.concurrency))}; --sweep {','.join(map(str, SWEEP_LOAD.concurrency))})"),
    ("--requests", "requests_per_level", _number("--requests", int), "N", "requests per level, at least one per "
     f"stream (default {LOAD.requests_per_level}; --sweep {SWEEP_LOAD.requests_per_level})"),
    ("--time-limit-s", "level_time_s", _number("--time-limit-s", float), "S", "no request starts later than this "
     f"into a level (default {LOAD.level_time_s:g}; --sweep {SWEEP_LOAD.level_time_s:g})"),
    ("--request-timeout-s", "request_timeout_s", _number("--request-timeout-s", float), "S", "each request is cut "
     f"at this (default {LOAD.request_timeout_s:g}; --sweep {SWEEP_LOAD.request_timeout_s:g})"),
    ("--warmup-requests", "warmup_requests", _number("--warmup-requests", int), "N",
     f"uncounted requests before each depth (default {LOAD.warmup_requests})"),
    ("--seed", "seed", _number("--seed", int), "N", f"sampling seed (default {LOAD.seed})"),
)


def loads(args: argparse.Namespace) -> tuple[Load, Load]:
    """(the plain bench's load, each sweep flag set's load): LOAD and SWEEP_LOAD with the options given replacing
    their fields. Raises ValueError naming the option, the value and the fix (figures.load_problems)."""
    given = {}
    for option, name, _, _, _ in LOAD_OPTIONS:
        value = getattr(args, option.lstrip("-").replace("-", "_"), None)
        if value is not None:
            given[name] = value
    problems = []
    for base in (LOAD, SWEEP_LOAD):
        try:
            dataclasses.replace(base, **given)
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise ValueError("; ".join(dict.fromkeys(problems)))
    return dataclasses.replace(LOAD, **given), dataclasses.replace(SWEEP_LOAD, **given)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from v100kit.cli import inventory_arguments
    inventory_arguments(p)
    p.add_argument("--report", metavar="DIR", help="write a Markdown report and a PNG plot per host into DIR")
    p.add_argument("--sweep", action="store_true", help="llama.cpp: also measure alternative flags (stops each "
                   "instance's service for the sweep and always starts it again)")
    p.add_argument("--sweep-only", action="append", default=[], metavar="LABEL",
                   help="with --sweep: measure only this flag set beside the default (repeatable; one of "
                        + ", ".join(repr(x) for x in sweeping.LABELS if x != "default") + ")")
    p.add_argument("--sweep-rounds", type=_number("--sweep-rounds", int), default=1, metavar="N",
                   help="with --sweep: measure every flag set N times, each from its own start, in rotating order, "
                        "and compare the medians (default 1; starts of the same flags differ by up to 11 %% in "
                        "single-stream decode at 16k-token prompts on an H100, tools/gpu/README.md)")
    load = p.add_argument_group("the load (checked before any request is sent)")
    depth = load.add_mutually_exclusive_group()
    for option, _, kind, metavar, help_ in LOAD_OPTIONS:
        (depth if option in ("--depths", "--prompt-tokens") else load).add_argument(
            option, type=kind, default=None, metavar=metavar, help=help_)


def run(args: argparse.Namespace) -> int:
    """Check the load options, say the bounds, bench every instance; print the table or JSON; exit 0, 1 (a flag,
    a refusal) or 2 (a bad option, a host not benched)."""
    try:
        load, sweep_load = loads(args)
        only = tuple(args.sweep_only)
        if only and not args.sweep:
            raise ValueError(f"--sweep-only {only[0]!r} needs --sweep")
        if args.sweep_rounds != 1 and not args.sweep:
            raise ValueError(f"--sweep-rounds {args.sweep_rounds} needs --sweep")
        sweeping.check_rounds(args.sweep_rounds)
        sweeping.alternatives("", "value", only)  # an unknown label: refused before any request
    except ValueError as e:
        print(f"v100kit bench: {e}", file=sys.stderr)
        return NOT_CHECKED
    say(f"bench: per instance at most {load.max_requests} requests and {load.max_seconds:.0f} s "
        f"(depths {','.join(map(str, load.depths))} x concurrency {','.join(map(str, load.concurrency))})")
    if args.sweep:
        b = sweeping.bound(len(set(only) | {"default"}) if only else MAX_ALTERNATIVES, sweep_load, START_TIMEOUT_S,
                           args.sweep_rounds)
        say(f"bench --sweep: then per llama.cpp instance at most {b['alternatives']} flag sets"
            f"{report.rounds_text(b)} x {b['depths']} depths x {b['levels']} levels (concurrency "
            f"{','.join(map(str, sweep_load.concurrency))}) x at least "
            f"{sweep_load.requests_per_level} requests: at most {b['max_requests']} requests and "
            f"{b['max_seconds']:.0f} s")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    started = time.monotonic()
    results = for_each_host(args.inventory, args.limit,
                            lambda host, plan: bench_host(host, plan, load, args.sweep, sweep_load, only,
                                                          args.sweep_rounds))
    say(f"bench done in {time.monotonic() - started:.0f} s")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if args.report:
        for path in write_reports(results, args.report, load):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps({**as_json(results, load),
                          "sweep_load": dataclasses.asdict(sweep_load) if args.sweep else None}, indent=2))
    else:  # report.table says a host not benched from its text
        print(report.table({h: str(r) if isinstance(r, HostFailure) else r for h, r in results.items()},
                           load.concurrency))
    return exit_status(results, lambda rows: any(i.flags for i in rows))


def as_json(results: dict, load: Load) -> dict:
    """report.as_json of the benched hosts, each host not benched as its HostFailure's JSON object, in host order."""
    doc = report.as_json({h: r for h, r in results.items() if not isinstance(r, HostFailure)}, load)
    return {**doc, "hosts": {h: r.as_json() if isinstance(r, HostFailure) else doc["hosts"][h]
                             for h, r in results.items()}}
