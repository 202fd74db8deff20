"""The bench's results per instance and how they are shown: the terminal table, JSON, the Markdown report per host
with its PNG plot. Pure (report files are written by the command)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from roles.bench.figures import Level, Load
from roles.bench.png import COLOURS, tps_chart
from roles.bench import sweep
from roles.bench.sweep import FIGURE_NAMES


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
    levels: list[Level] = field(default_factory=list)  # in (depth, concurrency) order
    rooflines: list[dict] = field(default_factory=list)  # per depth at concurrency 1: depth, gpu, bandwidth_gb_s,
    # source, context_tokens, bytes_per_token, ceiling_tps, fraction
    degenerate: str | None = None  # why the output is degenerate, None when it is not
    sample_text: str = ""  # the start of one completion
    sweep: list[dict] | None = None  # llama.cpp --sweep: [{"label", "flags", "figures", "peak_vram_mib", "error"}]
    sweep_ratios: list[dict] | None = None  # sweep.ratios: per figure and depth the default, the best, its ratio
    sweep_bound: dict | None = None  # sweep.bound: alternatives, depths, levels, max_requests, max_seconds
    flags: list[str] = field(default_factory=list)

    @property
    def vram_ratio(self) -> float | None:
        """Measured VRAM over the planner's figure."""
        if self.vram_mib is None or not self.planned_vram_mib:
            return None
        return self.vram_mib / self.planned_vram_mib

    @property
    def depths(self) -> list[int]:
        return list(dict.fromkeys(lv.depth for lv in self.levels))

    def at(self, concurrency: int, depth: int | None = None) -> Level | None:
        """The level at `concurrency` and `depth` (None: the first depth measured)."""
        depth = (self.depths or [None])[0] if depth is None else depth
        return next((lv for lv in self.levels if lv.concurrency == concurrency and lv.depth == depth), None)

    @property
    def decode_tps(self) -> float | None:
        """Single-stream decode tokens/s (the median request at concurrency 1) at the first depth."""
        lv = self.at(1)
        return lv.decode_tps_per_stream if lv else None

    @property
    def roofline(self) -> dict | None:
        """The first depth's roofline."""
        return self.rooflines[0] if self.rooflines else None

    def roofline_at(self, depth: int) -> dict | None:
        return next((r for r in self.rooflines if r.get("depth") == depth), None)

    @property
    def peak_vram_mib(self) -> float | None:
        """The most VRAM the instance's processes held during any level."""
        peaks = [lv.peak_vram_mib for lv in self.levels if lv.peak_vram_mib is not None]
        return max(peaks) if peaks else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["vram_ratio"] = self.vram_ratio
        d["decode_tps"] = self.decode_tps
        d["roofline"] = self.roofline
        d["peak_vram_mib"] = self.peak_vram_mib
        return d


def as_json(results: dict[str, list[InstanceBench] | str], load: Load) -> dict:
    """{"load": the load and its bounds, "hosts": {host: [instance dicts] or the error string}}."""
    return {"load": {**asdict(load), "max_requests_per_instance": load.max_requests,
                     "max_seconds_per_instance": load.max_seconds},
            "hosts": {h: r if isinstance(r, str) else [i.as_dict() for i in r] for h, r in results.items()}}


def _f(v: float | None, fmt: str = ".1f", none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def residency_word(i: InstanceBench) -> str:
    return "NOT RUNNING" if not i.running else "GPU" if i.on_gpu else "NOT ON GPU" if i.on_gpu is False else "?"


#: The per-level columns of the table and the report: (heading, Level -> value, format).
LEVEL_COLUMNS = (
    ("depth", lambda lv: lv.depth, "d"), ("c", lambda lv: lv.concurrency, "d"),
    ("prompt tok", lambda lv: lv.prompt_tokens, ".0f"),
    ("TTFT p50 ms", lambda lv: lv.ttft_p50_ms, ".0f"), ("p95", lambda lv: lv.ttft_p95_ms, ".0f"),
    ("p99", lambda lv: lv.ttft_p99_ms, ".0f"),
    ("ITL p50 ms", lambda lv: lv.itl_p50_ms, ".1f"), ("p95", lambda lv: lv.itl_p95_ms, ".1f"),
    ("p99", lambda lv: lv.itl_p99_ms, ".1f"),
    ("tok/s/stream p50", lambda lv: lv.decode_tps_per_stream, ".1f"),
    ("agg decode tok/s", lambda lv: lv.aggregate_decode_tps, ".1f"),
    ("agg e2e tok/s", lambda lv: lv.aggregate_e2e_tps, ".1f"),
    ("peak VRAM MiB", lambda lv: lv.peak_vram_mib, ".0f"),
)
#: What the sweep's figures are called where they are shown.
def _rows(i: InstanceBench) -> list[list[str]]:
    """One row per level (the instance's own columns on its first row only), or one row without levels."""
    own = [i.unit, residency_word(i), _f(i.vram_mib, ".0f"), _f(i.vram_ratio, ".2f")]
    if not i.levels:
        return [own + ["-"] * (len(LEVEL_COLUMNS) + 1)]
    out = []
    for n, lv in enumerate(i.levels):
        r = i.roofline_at(lv.depth) if lv.concurrency == 1 else None
        out.append((own if n == 0 else [i.unit, "", "", ""]) + [_f(get(lv), fmt) for _, get, fmt in LEVEL_COLUMNS]
                   + [_f(r and r.get("fraction"), ".2f")])
    return out


def sweep_lines(i: InstanceBench) -> list[str]:
    """The sweep's comparison, one line per figure and depth: the default's value, the best alternative's value and
    label, default/best (latency: best/default); then each figure the default did not measure (no ratio), with
    why (sweep.figures_of)."""
    default = next((s for s in i.sweep or [] if s.get("label") == "default"), {})
    return [f"d={r['depth']} {FIGURE_NAMES[r['figure']]} c={r['concurrency']}: default {_f(r['default'])}, best "
            f"{_f(r['best'])} ({r['best_label']}), {'default/best' if r['higher_is_better'] else 'best/default'} "
            f"{r['ratio']:.2f}" for r in i.sweep_ratios or []] + [
        f"d={f['depth']} {FIGURE_NAMES[f['figure']]} c={f['concurrency']}: default {sweep.shown(f)}, no ratio"
        for f in default.get("figures") or [] if f.get("value") is None and f.get("why")]


def table(results: dict[str, list[InstanceBench] | str], concurrency: tuple[int, ...] = ()) -> str:
    """The terminal table: one block per host, one row per instance and level (depth, concurrency), then each flag
    and the sweep's comparison. `concurrency` is not needed any more (the levels say it); kept for callers."""
    head = ["instance", "where", "VRAM MiB", "/plan"] + [h for h, _, _ in LEVEL_COLUMNS] + ["roofline"]
    lines = []
    for host, rows in results.items():
        lines.append(f"== {host}")
        if isinstance(rows, str):
            lines.append(f"   cannot bench: {rows}")
            continue
        body = [r for i in rows for r in _rows(i)]
        widths = [max(len(str(r[k])) for r in [head, *body]) for k in range(len(head))]
        for r in [head, *body]:
            lines.append("   " + "  ".join(str(v).ljust(w) if k < 2 else str(v).rjust(w)
                                           for k, (v, w) in enumerate(zip(r, widths))))
        for i in rows:
            lines += [f"   {i.unit}: {i.residency}"] if i.residency and i.on_gpu else []  # else a flag says it
            lines += [f"   {i.unit}: FLAG {f}" for f in i.flags]
            notes = {lv.peak_vram_note for lv in i.levels if lv.peak_vram_note and lv.peak_vram_mib is None}
            lines += [f"   {i.unit}: peak VRAM not measured: {n}" for n in sorted(notes)]
            if i.sweep_bound:
                b = i.sweep_bound
                lines.append(f"   {i.unit}: sweep of {b['alternatives']} flag sets{rounds_text(b)} (at most "
                             f"{b['max_requests']} "
                             f"requests, {b['max_seconds']:.0f} s)")
            for s in i.sweep or []:
                if s.get("error"):
                    lines.append(f"   {i.unit}: sweep {s['label']}: {s['error']}")
            lines += [f"   {i.unit}: sweep {x}" for x in sweep_lines(i)]
    return "\n".join(lines)


def load_line(load: Load) -> str:
    """The load in one sentence, with its bounds."""
    return (f"Load per instance: prompts of {', '.join(map(str, load.depths))} tokens (words; each prompt starts with "
            f"its own request number, so no prompt cache skips the prefill), {load.output_tokens} output tokens "
            f"(ignore_eos), seed {load.seed}, concurrency {', '.join(map(str, load.concurrency))}, "
            f"{load.requests_per_level} requests per level (at least one per stream), none started after "
            f"{load.level_time_s:g} s into a level, each cut at {load.request_timeout_s:g} s; at most "
            f"{load.max_requests} requests and {load.max_seconds:.0f} s.")


DEFINITIONS = ("TTFT: send to first streamed token. ITL: gaps between consecutive streamed chunks, pooled over the "
               "level's requests. tok/s/stream p50: the median request's (completion tokens - 1) / (last token - "
               "first token). agg decode tok/s: the level's completion tokens after each request's first, over the "
               "union of the requests' decode spans (first to last token). agg e2e tok/s: all completion tokens "
               "over first send to last token. prompt tok: the server's mean usage.prompt_tokens. peak VRAM: the "
               "most nvidia-smi --query-compute-apps showed for the instance's processes during the level.")


def markdown(host: str, rows: list[InstanceBench], load: Load, png_name: str) -> str:
    """The Markdown report of one host: the load, one table of figures (a row per instance and level), residency
    and VRAM, roofline, flags, sweep, and the plot (aggregate decode tokens/s against concurrency; its colours named
    here)."""
    head = ["instance", "residency", "VRAM MiB", "measured / plan"] + [h for h, _, _ in LEVEL_COLUMNS] + \
           ["roofline fraction"]
    out = [f"# v100kit bench: {host}", "", load_line(load), "", DEFINITIONS, "",
           "| " + " | ".join(head) + " |", "| --- | --- | " + " | ".join(["---:"] * (len(head) - 2)) + " |"]
    for i in rows:
        out += ["| " + " | ".join(r) + " |" for r in _rows(i)]
    out.append("")
    for i in rows:
        out.append(f"## {i.unit} ({i.engine})")
        out.append(f"- endpoint: {i.url or '-'}")
        out.append(f"- residency: {residency_word(i)}: {i.residency}")
        if i.planned_vram_mib:
            out.append(f"- VRAM: {_f(i.vram_mib, '.0f')} MiB measured, {i.planned_vram_mib:.0f} MiB planned "
                       f"(ratio {_f(i.vram_ratio, '.2f')}); peak during the load {_f(i.peak_vram_mib, '.0f')} MiB")
        notes = {lv.peak_vram_note for lv in i.levels if lv.peak_vram_note}
        out += [f"- peak VRAM: {n}" for n in sorted(notes)]
        for r in i.rooflines:
            out.append(f"- roofline at depth {r.get('depth')}: {r['gpu']} {r['bandwidth_gb_s']:.0f} GB/s "
                       f"({r['source']}); {r['bytes_per_token'] / 1e9:.3f} GB read per token at "
                       f"{r['context_tokens']:.0f} tokens of context -> ceiling {r['ceiling_tps']:.1f} tok/s; "
                       f"measured {_f(r.get('measured_tps'))} = {r['fraction']:.2f} of it")
        for lv in i.levels:
            if lv.failed:
                out.append(f"- depth {lv.depth} concurrency {lv.concurrency}: {lv.failed} of {lv.requests} "
                           "requests failed: " + "; ".join(lv.errors))
        out.append(f"- output check: {i.degenerate or 'not degenerate'}; sample: `{i.sample_text[:80]!r}`")
        out += [f"- FLAG: {f}" for f in i.flags]
        if i.sweep:
            out += _sweep_markdown(i)
        out.append("")
    plotted = [i for i in rows if _series(i)]
    if plotted:
        out.append(f"![aggregate decode tokens/s (y) against concurrency (x)]({png_name})")
        out.append("")
        out.append("Plot: aggregate decode tokens/s (y, from 0) against concurrency (x), at each instance's first "
                   "depth. Lines: " + ", ".join(f"{COLOURS[n % len(COLOURS)][0]} {i.unit}"
                                               for n, i in enumerate(plotted)) + ".")
    return "\n".join(out) + "\n"


def rounds_text(bound: dict) -> str:
    """" x N rounds (medians)" of a sweep.bound measuring each flag set more than once, else ""."""
    return f" x {bound['rounds']} rounds (medians)" if bound.get("rounds", 1) > 1 else ""


def _sweep_markdown(i: InstanceBench) -> list[str]:
    """The sweep of one instance: its bound, each flag set measured (a column per flag set, a row per figure), and
    the comparison per figure and depth (default, best, the best's label, ratio)."""
    out = [""]
    if i.sweep_bound:
        b = i.sweep_bound
        out += [f"Sweep: {b['alternatives']} flag sets{rounds_text(b)} x {b['depths']} depths x {b['levels']} "
                f"levels: at most "
                f"{b['max_requests']} requests and {b['max_seconds']:.0f} s (starts included).", ""]
    out += ["| flag set | flags | peak VRAM MiB | note |", "| --- | --- | ---: | --- |"]
    out += [f"| {s['label']} | `{s['flags']}` | {_f(s.get('peak_vram_mib'), '.0f')} | {s.get('error') or ''} |"
            for s in i.sweep]
    keys = list(dict.fromkeys((f["figure"], f["depth"], f["concurrency"]) for s in i.sweep
                              for f in s.get("figures") or []))
    if keys:
        out += ["", "| figure | depth | c | " + " | ".join(s["label"] for s in i.sweep) + " |",
                "| --- | ---: | ---: | " + " | ".join("---:" for _ in i.sweep) + " |"]
        for k in keys:
            figs = [next((f for f in s.get("figures") or [] if (f["figure"], f["depth"], f["concurrency"]) == k),
                         {}) for s in i.sweep]
            out.append(f"| {FIGURE_NAMES[k[0]]} | {k[1]} | {k[2]} | " + " | ".join(sweep.shown(f) for f in figs) + " |")
    if i.sweep_ratios:
        out += ["", "| figure | depth | c | default | best | best flag set | ratio |",
                "| --- | ---: | ---: | ---: | ---: | --- | ---: |"]
        out += [f"| {FIGURE_NAMES[r['figure']]} | {r['depth']} | {r['concurrency']} | {_f(r['default'])} | "
                f"{_f(r['best'])} | {r['best_label']} | {r['ratio']:.2f} "
                f"({'default/best' if r['higher_is_better'] else 'best/default'}) |" for r in i.sweep_ratios]
    return out


def _series(i: InstanceBench) -> list[tuple[int, float]]:
    first = (i.depths or [None])[0]
    return [(lv.concurrency, lv.aggregate_decode_tps) for lv in i.levels
            if lv.depth == first and lv.aggregate_decode_tps]


def plot(rows: list[InstanceBench]) -> bytes | None:
    """The host's PNG (tps_chart of every instance with a measured level: aggregate decode tokens/s at its first
    depth), None when nothing was measured; the same instance order as markdown's legend."""
    series = [(i.unit, _series(i)) for i in rows if _series(i)]
    return tps_chart(series) if series else None
