"""The bench's results per instance and how they are shown: the terminal table, JSON, the Markdown report per host
with its PNG plot. Pure (report files are written by the command)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from roles.bench.figures import Level, Load
from roles.bench.png import COLOURS, tps_chart


@dataclass
class InstanceBench:
    """What the bench measured of one instance (llama-server@NAME or vllm@NAME). Units: MiB for VRAM, ms for
    latencies, tokens/s for speeds. `flags` are the findings that make the command exit 1."""

    host: str
    unit: str
    engine: str  # "llama.cpp" or "vllm"
    url: str = ""
    running: bool = False
    on_gpu: bool | None = None  # None: not judged (not running)
    residency: str = ""  # the evidence, one line
    vram_mib: float | None = None  # nvidia-smi --query-compute-apps, the instance's processes together
    planned_vram_mib: float | None = None  # the planner's figure for the same processes (all its GPUs)
    levels: list[Level] = field(default_factory=list)
    roofline: dict | None = None  # gpu, bandwidth_gb_s, source, context_tokens, bytes_per_token, ceiling_tps, fraction
    degenerate: str | None = None  # why the output is degenerate, None when it is not
    sample_text: str = ""  # the start of one completion
    sweep: list[dict] | None = None  # llama.cpp --sweep: [{"flags", "figures", "error"}], then ratios
    sweep_ratios: dict | None = None  # {figure: default / best (latency: best / default)}
    flags: list[str] = field(default_factory=list)

    @property
    def vram_ratio(self) -> float | None:
        """Measured VRAM over the planner's figure."""
        if self.vram_mib is None or not self.planned_vram_mib:
            return None
        return self.vram_mib / self.planned_vram_mib

    def at(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    @property
    def decode_tps(self) -> float | None:
        """Single-stream decode tokens/s (the median request at concurrency 1)."""
        lv = self.at(1)
        return lv.decode_tps_per_stream if lv else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["vram_ratio"] = self.vram_ratio
        d["decode_tps"] = self.decode_tps
        return d


def as_json(results: dict[str, list[InstanceBench] | str], load: Load) -> dict:
    """{"load": the load's bounds, "hosts": {host: [instance dicts] or the error string}}."""
    return {"load": {**asdict(load), "max_requests_per_instance": load.max_requests,
                     "max_seconds_per_instance": load.max_seconds},
            "hosts": {h: r if isinstance(r, str) else [i.as_dict() for i in r] for h, r in results.items()}}


def _f(v: float | None, fmt: str = ".1f", none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def residency_word(i: InstanceBench) -> str:
    return "NOT RUNNING" if not i.running else "GPU" if i.on_gpu else "NOT ON GPU" if i.on_gpu is False else "?"


def table(results: dict[str, list[InstanceBench] | str], concurrency: tuple[int, ...]) -> str:
    """The terminal table: one block per host, one row per instance, then each flag and the sweep ratios."""
    head = (["instance", "where", "VRAM MiB", "/plan", "TTFT p50", "p95 ms", "ITL p50 ms", "tok/s 1"]
            + [f"agg c{c}" for c in concurrency] + ["roofline"])
    lines = []
    for host, rows in results.items():
        lines.append(f"== {host}")
        if isinstance(rows, str):
            lines.append(f"   cannot bench: {rows}")
            continue
        body = []
        for i in rows:
            c1 = i.at(1)
            body.append([i.unit, residency_word(i), _f(i.vram_mib, ".0f"), _f(i.vram_ratio, ".2f"),
                         _f(c1 and c1.ttft_p50_ms, ".0f"), _f(c1 and c1.ttft_p95_ms, ".0f"),
                         _f(c1 and c1.itl_p50_ms, ".1f"), _f(i.decode_tps)]
                        + [_f((lv := i.at(c)) and lv.aggregate_tps) for c in concurrency]
                        + [_f(i.roofline and i.roofline.get("fraction"), ".2f")])
        widths = [max(len(str(r[k])) for r in [head, *body]) for k in range(len(head))]
        for r in [head, *body]:
            lines.append("   " + "  ".join(str(v).ljust(w) if k < 2 else str(v).rjust(w)
                                           for k, (v, w) in enumerate(zip(r, widths))))
        for i in rows:
            lines += [f"   {i.unit}: {i.residency}"] if i.residency and i.on_gpu else []  # else a flag says it
            lines += [f"   {i.unit}: FLAG {f}" for f in i.flags]
            if i.sweep_ratios:
                lines.append(f"   {i.unit}: sweep default/best: "
                             + ", ".join(f"{k} {v:.2f}" for k, v in i.sweep_ratios.items()))
    return "\n".join(lines)


def markdown(host: str, rows: list[InstanceBench], load: Load, png_name: str) -> str:
    """The Markdown report of one host: the load, one table of figures, residency and VRAM, roofline, flags,
    sweep, and the plot (aggregate tokens/s against concurrency; its colours named here)."""
    out = [f"# v100kit bench: {host}", "",
           f"Load per instance: prompt {load.prompt_words} words, {load.output_tokens} output tokens (ignore_eos), "
           f"seed {load.seed}, concurrency {', '.join(map(str, load.concurrency))}; at most "
           f"{load.max_requests} requests and {load.max_seconds:.0f} s.", "",
           "| instance | residency | VRAM MiB | measured / plan | TTFT p50 ms | TTFT p95 ms | ITL p50 ms | "
           "ITL p95 ms | decode tok/s (1 stream) | "
           + " | ".join(f"aggregate tok/s c={c}" for c in load.concurrency) + " | roofline fraction |",
           "| --- | --- | " + " | ".join(["---:"] * (8 + len(load.concurrency))) + " |"]
    for i in rows:
        c1 = i.at(1)
        out.append(f"| {i.unit} | {residency_word(i)} | {_f(i.vram_mib, '.0f')} | {_f(i.vram_ratio, '.2f')} | "
                   f"{_f(c1 and c1.ttft_p50_ms, '.0f')} | {_f(c1 and c1.ttft_p95_ms, '.0f')} | "
                   f"{_f(c1 and c1.itl_p50_ms)} | {_f(c1 and c1.itl_p95_ms)} | {_f(i.decode_tps)} | "
                   + " | ".join(_f((lv := i.at(c)) and lv.aggregate_tps) for c in load.concurrency)
                   + f" | {_f(i.roofline and i.roofline.get('fraction'), '.2f')} |")
    out.append("")
    for i in rows:
        out.append(f"## {i.unit} ({i.engine})")
        out.append(f"- endpoint: {i.url or '-'}")
        out.append(f"- residency: {residency_word(i)}: {i.residency}")
        if i.planned_vram_mib:
            out.append(f"- VRAM: {_f(i.vram_mib, '.0f')} MiB measured, {i.planned_vram_mib:.0f} MiB planned "
                       f"(ratio {_f(i.vram_ratio, '.2f')})")
        if i.roofline:
            r = i.roofline
            out.append(f"- roofline: {r['gpu']} {r['bandwidth_gb_s']:.0f} GB/s ({r['source']}); "
                       f"{r['bytes_per_token'] / 1e9:.3f} GB read per token at {r['context_tokens']:.0f} tokens of "
                       f"context -> ceiling {r['ceiling_tps']:.1f} tok/s; measured {_f(i.decode_tps)} = "
                       f"{r['fraction']:.2f} of it")
        for lv in i.levels:
            if lv.failed:
                out.append(f"- concurrency {lv.concurrency}: {lv.failed} of {lv.requests} requests failed: "
                           + "; ".join(lv.errors))
        out.append(f"- output check: {i.degenerate or 'not degenerate'}; sample: `{i.sample_text[:80]!r}`")
        out += [f"- FLAG: {f}" for f in i.flags]
        if i.sweep:
            out += ["", "| flags | TTFT p50 ms | decode tok/s | aggregate tok/s | note |", "| --- | ---: | ---: | ---: | --- |"]
            for s in i.sweep:
                f = s.get("figures") or {}
                out.append(f"| `{s['flags']}` | {_f(f.get('ttft_p50_ms'), '.0f')} | {_f(f.get('decode_tps'))} | "
                           f"{_f(f.get('aggregate_tps'))} | {s.get('error') or ''} |")
            if i.sweep_ratios:
                out.append("")
                out.append("default/best: " + ", ".join(f"{k} {v:.2f}" for k, v in i.sweep_ratios.items()))
        out.append("")
    plotted = [i for i in rows if any(lv.aggregate_tps for lv in i.levels)]
    if plotted:
        out.append(f"![aggregate tokens/s (y) against concurrency (x)]({png_name})")
        out.append("")
        out.append("Plot: aggregate tokens/s (y, from 0) against concurrency (x). Lines: "
                   + ", ".join(f"{COLOURS[n % len(COLOURS)][0]} {i.unit}" for n, i in enumerate(plotted)) + ".")
    return "\n".join(out) + "\n"


def plot(rows: list[InstanceBench]) -> bytes | None:
    """The host's PNG (tps_chart of every instance with a measured level), None when nothing was measured; the
    same instance order as markdown's legend."""
    series = [(i.unit, [(lv.concurrency, lv.aggregate_tps) for lv in i.levels if lv.aggregate_tps])
              for i in rows if any(lv.aggregate_tps for lv in i.levels)]
    return tps_chart(series) if series else None
