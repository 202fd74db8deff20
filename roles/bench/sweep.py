"""--sweep for llama.cpp instances: the same measurement (every depth, every concurrency) with alternative
llama-server flags (slots with the unified KV pool, KV cache types, flash attention, -ub), and each figure's
default/best ratio per depth (the toolkit's goal for its defaults: >= 0.95).

A GPU rarely holds the model twice, so the sweep stops the instance's service for its duration and starts it again
at the end, whatever happened: run() restarts it in a `finally`, so an error, a failed start of an alternative,
Ctrl-C or SIGTERM (KeyboardInterrupt; v100kit/cli.py Terminated) in the middle still ends with the service
started. Pure: the host is reached through a Control that the command gives (tests give a fake one).
"""

from __future__ import annotations

import shlex
import statistics
from typing import Callable, Protocol

#: llama-server's physical batch default (-ub), tokens: common/common.h n_ubatch = 512 in the 0.3.16 and 0.3.36
#: trees (also roles/planner LLAMA_CPP_N_UBATCH).
DEFAULT_UBATCH = 512
#: The figures a sweep compares; True where higher is better. aggregate_e2e_tps beside aggregate_decode_tps: the
#: decode figure leaves out the time a request waits for its first token, so a flag set that serves requests one at a
#: time (-np 1) scores one stream's speed there at any concurrency (on the H200 at 16384-token prompts, 1B model:
#: 490 against the 8-slot default's 104, tools/gpu/README.md); the end-to-end figure counts that wait.
FIGURES = {"decode_tps": True, "aggregate_decode_tps": True, "aggregate_e2e_tps": True, "ttft_p50_ms": False}
#: Each figure's name in reports and in the sweep's progress lines.
FIGURE_NAMES = {"decode_tps": "decode tok/s", "aggregate_decode_tps": "agg decode tok/s",
                "aggregate_e2e_tps": "agg e2e tok/s", "ttft_p50_ms": "TTFT p50 ms"}


class Control(Protocol):
    """What the sweep does on the host. Every method raises on failure."""

    def stop_service(self) -> None: ...

    def start_service(self) -> None: ...

    def start_alternative(self, args: list[str]) -> object:
        """Start llama-server by hand with `args` as the service user; returns a handle once it answers /health."""

    def stop_alternative(self, handle: object) -> None: ...


def set_flag(args: list[str], flag: str, value: str | None) -> list[str]:
    """`args` with `flag` set to `value` (replacing an existing one; appended otherwise); value None: a bare flag
    (added once); removing is without_flag."""
    out, i, done = [], 0, False
    while i < len(args):
        if args[i] == flag:
            has_value = i + 1 < len(args) and not args[i + 1].startswith("-")
            if not done:
                out += [flag] + ([value] if value is not None else [])
                done = True
            i += 2 if has_value and value is not None else 1
            continue
        out.append(args[i])
        i += 1
    return out if done else out + [flag] + ([value] if value is not None else [])


def without_flag(args: list[str], flag: str) -> list[str]:
    """`args` without a bare `flag` (the -fa of builds whose -fa takes no value)."""
    return [a for a in args if a != flag]


def flash_attn(args: list[str], on: bool, style: str) -> list[str]:
    """-fa on/off ("value" style builds) or a bare -fa present or absent ("flag" style builds)."""
    if style == "value":
        return set_flag(args, "-fa", "on" if on else "off")
    return set_flag(args, "-fa", None) if on else without_flag(args, "-fa")


def flag_value(args: list[str], *flags: str) -> str | None:
    """The value after the first of `flags` in `args`, None when absent."""
    for k, a in enumerate(args):
        if a in flags and k + 1 < len(args):
            return args[k + 1]
    return None


def without_valued_flag(args: list[str], flag: str) -> list[str]:
    """`args` without `flag` and its value."""
    out, i = [], 0
    while i < len(args):
        if args[i] == flag:
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def per_request_context(args: list[str]) -> int | None:
    """The context one request gets: --kv-unified-per-slot where given, else -c over -np (-np absent: 1); None
    without -c (llama-server then takes the model's own context, not known here)."""
    per = flag_value(args, "--kv-unified-per-slot")
    if per is not None and per.isdigit():
        return int(per)
    c, np_ = flag_value(args, "-c", "--ctx-size"), flag_value(args, "-np", "--parallel") or "1"
    return int(c) // max(1, int(np_)) if c is not None and c.isdigit() and np_.isdigit() else None


def with_slots(args: list[str], slots: int, unified: bool = True) -> list[str]:
    """`args` with `slots` parallel slots and each request's context kept: -np SLOTS, -c SLOTS x per-request
    context (per_request_context). unified, for more than one slot: the unified KV pool (-kvu, added where neither
    it nor --kv-unified is there) with --kv-unified-per-slot set to the per-request context where the default gives
    it (builds without that option are not given it); unified False: no -kvu, --kv-unified or
    --kv-unified-per-slot, so -c is split evenly over the slots (llama.cpp's own layout for an explicit -np: each
    slot a KV stream of its own, src/llama-context.cpp n_ctx_seq = n_ctx / n_seq_max). One slot drops them too
    (one sequence: unified is moot)."""
    per = per_request_context(args)
    out = [{"--parallel": "-np", "--ctx-size": "-c"}.get(a, a) for a in args]  # one spelling: set_flag replaces it
    out = set_flag(out, "-np", str(slots))
    if per is not None:
        out = set_flag(out, "-c", str(slots * per))
    if slots == 1 or not unified:
        out = without_valued_flag(without_flag(without_flag(out, "-kvu"), "--kv-unified"), "--kv-unified-per-slot")
    else:
        if "-kvu" not in out and "--kv-unified" not in out:
            out = set_flag(out, "-kvu", None)
        if "--kv-unified-per-slot" in out and per is not None:
            out = set_flag(out, "--kv-unified-per-slot", str(per))
    return out


#: Every label alternatives() can give, in its order; `v100kit bench --sweep-only LABEL` picks among them. "-np N":
#: N slots, each with a KV stream of its own (no -kvu); "-np N -kvu": the unified pool.
LABELS = ("default", "-np 1", "-np 4 -kvu", "-np 8 -kvu", "-np 4", "-np 8", "-ctk f16 -ctv f16 -fa on",
          "-ctk q8_0 -ctv q8_0 -fa on", "-ctk f16 -ctv f16 -fa off", "-ub 256", "-ub 512", "-ub 1024")


def alternatives(default: str, style: str, only: tuple[str, ...] = ()) -> list[tuple[str, list[str]]]:
    """The flag sets a sweep measures, the service's own first: [(label, llama-server argv without the binary)].
    The service's arguments (`default`, shell-quoted as in its environment file) with one change each:
    -np 1, 4 and 8 with the per-request context kept (with_slots: -c = slots x per-request), for 4 and 8 with the
    unified KV pool and with a KV stream per slot, KV f16 and q8_0 with flash attention, flash attention off with
    an f16 KV cache (a quantized V needs it on), -ub 256, 512 and 1024. Alternatives equal to the default (or to
    one before them) are dropped (_normal). only: LABELS to keep besides the default (empty: all); a label not in
    LABELS raises ValueError naming it and the labels there are."""
    unknown = [x for x in only if x not in LABELS]
    if unknown:
        raise ValueError(f"--sweep-only {unknown[0]!r} is no flag set of the sweep: use one of "
                         + ", ".join(repr(x) for x in LABELS))
    base = shlex.split(default)
    cand = [("default", base)]
    for slots in (1, 4, 8):
        cand.append((f"-np {slots}" + (" -kvu" if slots > 1 else ""), with_slots(base, slots)))
    for slots in (4, 8):
        cand.append((f"-np {slots}", with_slots(base, slots, unified=False)))
    for kv in ("f16", "q8_0"):
        cand.append((f"-ctk {kv} -ctv {kv} -fa on",
                     flash_attn(set_flag(set_flag(base, "-ctk", kv), "-ctv", kv), True, style)))
    cand.append(("-ctk f16 -ctv f16 -fa off",
                 flash_attn(set_flag(set_flag(base, "-ctk", "f16"), "-ctv", "f16"), False, style)))
    for ub in (256, 512, 1024):
        cand.append((f"-ub {ub}", set_flag(base, "-ub", str(ub))))
    assert [label for label, _ in cand] == list(LABELS)
    out, seen = [], []
    for label, args in cand:
        key = _normal(args)
        if key not in seen:
            seen.append(key)
            if label == "default" or not only or label in only:
                out.append((label, args))
    return out


def _normal(args: list[str]) -> tuple:
    """Arguments as a comparable form: explicit defaults (-ub 512, -np 1) are the same as leaving them out, and
    --kv-unified is -kvu."""
    a = ["-kvu" if x == "--kv-unified" else x for x in args]
    a = a if "-ub" in a else [*a, "-ub", str(DEFAULT_UBATCH)]
    a = a if "-np" in a or "--parallel" in a else [*a, "-np", "1"]
    return tuple(a)


def figures_of(levels) -> list[dict]:
    """The figures a sweep compares, from one run's Levels (figures.Level), per depth: decode tokens/s of one
    stream (concurrency 1), aggregate decode and end-to-end tokens/s at each concurrency above 1, TTFT p50 at each
    concurrency. [{"figure", "depth", "concurrency", "value"}] in (depth, figure, concurrency) order; a figure whose
    value is None also has "why": "all M requests failed: <errors>" when none succeeded, else "none of the K
    requests that succeeded measured it" (e.g. one-token completions) with the failures beside it (a sweep's
    request is cut at its --request-timeout-s, 60 s by default: queued 16k-token prompts at 16 clients outlast it).
    <errors>: the level's distinct errors (figures.Level.errors, at most three), all of them, so none is named as
    the cause of the others."""
    def fig(name: str, lv, value) -> dict:
        out = {"figure": name, "depth": lv.depth, "concurrency": lv.concurrency, "value": value}
        if value is None:
            errors = f": {'; '.join(lv.errors)}" if lv.errors else ""
            good = lv.requests - lv.failed
            out["why"] = (f"all {lv.requests} requests failed{errors}" if lv.requests and not good else
                          f"none of the {good} requests that succeeded measured it"
                          + (f"; {lv.failed} failed{errors}" if lv.failed else ""))
        return out

    out = []
    for d in dict.fromkeys(lv.depth for lv in levels):
        at = [lv for lv in levels if lv.depth == d]
        out += [fig("decode_tps", lv, lv.decode_tps_per_stream) for lv in at if lv.concurrency == 1]
        out += [fig("aggregate_decode_tps", lv, lv.aggregate_decode_tps) for lv in at if lv.concurrency > 1]
        out += [fig("aggregate_e2e_tps", lv, lv.aggregate_e2e_tps) for lv in at if lv.concurrency > 1]
        out += [fig("ttft_p50_ms", lv, lv.ttft_p50_ms) for lv in at]
    return out


def shown(f: dict) -> str:
    """One figure of figures_of as the sweep shows it everywhere (progress line, report, comparison): its value to
    one decimal, or "- (why)" where no request measured it ("-" without a why); a median of several rounds
    (combined) with its rounds' values, "-" for a round that measured none: "520.0 (505.6/551.7/520.0)"."""
    if f.get("value") is None:
        return f"- ({f['why']})" if f.get("why") else "-"
    if len(f.get("values") or ()) > 1:
        return f"{f['value']:.1f} ({'/'.join('-' if v is None else f'{v:.1f}' for v in f['values'])})"
    return f"{f['value']:.1f}"


def figures_line(entry: dict) -> str:
    """One line of a run's figures ({"figures": figures_of(...) or None, "error": str}) for the sweep's progress:
    "d=0 decode tok/s c=1 240.1; d=0 TTFT p50 ms c=8 1006.0; ..." (tokens/s, milliseconds; "- (why)" where a level
    measured none, why as figures_of gives it), or "failed: <error>"."""
    if entry.get("error"):
        return f"failed: {entry['error']}"
    return "; ".join(f"d={f['depth']} {FIGURE_NAMES[f['figure']]} c={f['concurrency']} {shown(f)}"
                     for f in entry.get("figures") or []) or "no figures"


def _key(f: dict) -> tuple:
    return f["figure"], f["depth"], f["concurrency"]


def ratios(runs: list[dict]) -> list[dict]:
    """Per figure of the default (runs[0]) that it measured: {"figure", "depth", "concurrency", "higher_is_better",
    "default", "best", "best_label", "ratio"}: the best of every run that measured it (the default included; the
    first one on a tie), and the default's share of it: default/best for speeds, best/default for latencies
    (1.0: the default is the best). [] when the default measured nothing."""
    if not runs or not runs[0].get("figures"):
        return []
    out = []
    for f in runs[0]["figures"]:
        if not f.get("value"):
            continue
        higher = FIGURES[f["figure"]]
        vals = [(g["value"], r["label"]) for r in runs for g in (r.get("figures") or [])
                if _key(g) == _key(f) and g.get("value")]
        best, label = vals[0]
        for v, lab in vals[1:]:
            if (v > best) if higher else (v < best):
                best, label = v, lab
        out.append({"figure": f["figure"], "depth": f["depth"], "concurrency": f["concurrency"],
                    "higher_is_better": higher, "default": f["value"], "best": best, "best_label": label,
                    "ratio": f["value"] / best if higher else best / f["value"]})
    return out


#: The most rounds a sweep takes (`--sweep-rounds`): each round restarts every flag set (a full sweep of one round is
#: about 10 minutes on an H100 at two depths), so more than this is a typo, not a measurement.
MAX_ROUNDS = 20


def check_rounds(rounds: int) -> None:
    """Raises ValueError naming --sweep-rounds, the value and the range unless 1 <= rounds <= MAX_ROUNDS."""
    if not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"--sweep-rounds {rounds}: give 1 to {MAX_ROUNDS} (each flag set measured that many "
                         "times; 5 read issue 26's goal)")


def bound(n_alternatives: int, load, start_timeout_s: float, rounds: int = 1) -> dict:
    """The sweep's bound on one instance: every alternative gets `load` (figures.Load: depths x levels x requests)
    after a start of at most `start_timeout_s`, `rounds` times."""
    return {"alternatives": n_alternatives, "depths": len(load.depths), "levels": len(load.concurrency),
            "rounds": rounds, "max_requests": rounds * n_alternatives * load.max_requests,
            "max_seconds": rounds * n_alternatives * (load.max_seconds + start_timeout_s)}


def combined(measured: list[dict]) -> dict:
    """One flag set's figures over its rounds (each a measure() result, or {"error": str} for a round that failed):
    {"figures": per figure (figures_of's keys, in the order first measured) the median of the rounds that measured
    it (statistics.median: with an even count, the mean of the middle two), with "values": every round's value in
    round order, None where that round failed or measured none; a figure no round measured keeps the last such
    round's "why"} or None when no round measured, "error": the last round's error when no round measured, else
    "K of N rounds failed: <the last error>" or "", "peak_vram_mib": the highest of the rounds' (None when none
    sampled it), "peak_vram_note": the rounds' distinct notes}. Why medians: one start of a flag set against
    another start of the same flags differs by up to 11 % in single-stream decode at 16384-token prompts on the
    H100 (tools/gpu/README.md, "Noise between starts"), so a single round's best is partly the luckiest start."""
    good = [m for m in measured if m.get("figures") is not None]
    errors = [m["error"] for m in measured if m.get("error")]
    out = {"error": (errors[-1] if errors else "") if not good else
           (f"{len(measured) - len(good)} of {len(measured)} rounds failed: {errors[-1]}" if errors else ""),
           "figures": None,
           "peak_vram_mib": max((m["peak_vram_mib"] for m in measured if m.get("peak_vram_mib") is not None),
                                default=None),
           "peak_vram_note": "; ".join(dict.fromkeys(m["peak_vram_note"] for m in measured
                                                     if m.get("peak_vram_note")))}
    if not good:
        return out
    keys = list(dict.fromkeys(_key(f) for m in good for f in m["figures"]))
    figures = []
    for k in keys:
        per_round = [next((f for f in m.get("figures") or [] if _key(f) == k), None) for m in measured]
        values = [None if f is None else f.get("value") for f in per_round]
        known = [v for v in values if v is not None]
        if known:
            figures.append({"figure": k[0], "depth": k[1], "concurrency": k[2], "value": statistics.median(known),
                            "values": values})
        else:
            figures.append([f for f in per_round if f is not None][-1])
    out["figures"] = figures
    return out


def run(control: Control, alts: list[tuple[str, list[str]]], measure: Callable[[object], dict],
        say: Callable[[str], None], keep: Callable[[str], None] | None = None, rounds: int = 1) -> list[dict]:
    """Stop the service (after saying so), measure each alternative (`measure(handle)` -> {"figures": figures_of
    its levels, and any other keys to record, e.g. "peak_vram_mib"}), stop it, and always start the service again
    at the end. One alternative that fails to start or to measure is recorded with its error and the sweep goes on.
    `rounds` > 1 measures every alternative that many times, round r in `alts` order rotated by r (so that a flag
    set's place in the order, and what ran just before it, changes from round to round), each from its own start;
    an alternative's figures are then the medians of its rounds (combined), its "rounds" each round's result
    (measure()'s other keys are kept there only, but for the peak VRAM and its note). Each measurement's figures
    are said as it ends (figures_line; "LABEL (round R of N)" when rounds > 1), and a KeyboardInterrupt says how
    many were measured before it is raised again, so a cut sweep's output keeps what it measured: those lines go to
    `keep` (default `say`), for a `say` that shows one updated line on a terminal (v100kit/bench.py say and keep).
    [{"label", "flags", "figures" or None, "error", "rounds", ...}] in `alts` order. Raises ValueError
    (check_rounds) for rounds outside 1 to MAX_ROUNDS."""
    check_rounds(rounds)
    say("sweep: stopping the service for the sweep; it is started again at the end, also after an error, Ctrl-C or SIGTERM")
    keep = keep or say
    results: list[list[dict]] = [[] for _ in alts]  # each alternative's measurements, in round order
    runs = [{"label": label, "flags": " ".join(shlex.quote(a) for a in args), "figures": None, "error": "",
             **({"rounds": results[n]} if rounds > 1 else {})} for n, (label, args) in enumerate(alts)]
    order = [(r, (k + r) % len(alts)) for r in range(rounds) for k in range(len(alts))]
    pending = None  # (alternative's index, its label) of a measurement done but not yet said
    told = 0  # measurements whose figures line was said

    def tell() -> None:
        nonlocal told, pending
        (n, label), pending = pending, None  # cleared first: a Ctrl-C inside keep() does not say it twice
        keep(f"sweep: {label}: {figures_line(results[n][-1])}")
        told += 1

    try:
        control.stop_service()
        for r, n in order:
            (label, args), entry = alts[n], runs[n]
            shown_as = label if rounds == 1 else f"{label} (round {r + 1} of {rounds})"
            say(f"sweep: llama-server {shown_as}")
            result = {"figures": None, "error": ""}
            handle, cut = None, True
            try:
                handle = control.start_alternative(args)
                result.update(measure(handle))
                cut = False
            except Exception as e:  # this alternative failed; the others still run
                result["error"] = f"{type(e).__name__}: {e}"[:300]
                cut = False
            finally:
                if not cut:  # measured or failed, not cut by a KeyboardInterrupt
                    results[n].append(result)
                    entry.update(combined(results[n]) if rounds > 1 else result)
                    pending = (n, shown_as)
                if handle is not None:
                    control.stop_alternative(handle)
            # said as each measurement ends, so that a sweep cut later (`timeout`, Ctrl-C) still leaves its figures
            tell()
    except KeyboardInterrupt:
        # a measurement done (or failed) but cut before its line, e.g. in stop_alternative's wait: said now, so
        # that the count below matches the lines above
        if pending is not None:
            tell()
        of = f"{len(alts)} flag sets" if rounds == 1 else \
            f"{rounds * len(alts)} measurements ({rounds} rounds of {len(alts)} flag sets)"
        keep(f"sweep: cut after {told} of {of}; the figures of those measured are in the 'sweep:' lines above, the "
             "report has none")
        raise
    finally:
        try:
            say("sweep: starting the service again")
        finally:  # a line that cannot be written (a closed stderr) still leaves the service started
            control.start_service()
    return runs
