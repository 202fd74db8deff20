"""--sweep for llama.cpp instances: the same measurement with alternative llama-server flags (KV cache types, flash
attention, -ub, -np), and each figure's default/best ratio (the toolkit's goal for its defaults: >= 0.95).

A GPU rarely holds the model twice, so the sweep stops the instance's service for its duration and starts it again
at the end, whatever happened: run() restarts it in a `finally`, so an error, a failed start of an alternative or
Ctrl-C (KeyboardInterrupt) in the middle still ends with the service started. Pure: the host is reached through a
Control that the command gives (tests give a fake one).
"""

from __future__ import annotations

import shlex
from typing import Callable, Protocol

#: llama-server's physical batch default (-ub), tokens: common/common.h n_ubatch = 512 in the 0.3.16 and 0.3.36
#: trees (also roles/planner LLAMA_CPP_N_UBATCH).
DEFAULT_UBATCH = 512
#: The figures a sweep compares; True where higher is better.
FIGURES = {"ttft_p50_ms": False, "decode_tps": True, "aggregate_tps": True}


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


def alternatives(default: str, style: str) -> list[tuple[str, list[str]]]:
    """The flag sets a sweep measures, the service's own first: [(label, llama-server argv without the binary)].
    The service's arguments (`default`, shell-quoted as in its environment file) with one change each: KV f16 and
    q8_0 with flash attention, flash attention off with an f16 KV cache (a quantized V needs it on), -ub 256 and
    1024, -np 1 and 4 (the same -c, so slots share it). Alternatives equal to the default are dropped."""
    base = shlex.split(default)
    cand = [("default", base)]
    for kv in ("f16", "q8_0"):
        cand.append((f"-ctk {kv} -ctv {kv} -fa on",
                     flash_attn(set_flag(set_flag(base, "-ctk", kv), "-ctv", kv), True, style)))
    cand.append(("-ctk f16 -ctv f16 -fa off",
                 flash_attn(set_flag(set_flag(base, "-ctk", "f16"), "-ctv", "f16"), False, style)))
    for ub in (256, 1024):
        cand.append((f"-ub {ub}", set_flag(base, "-ub", str(ub))))
    for np_ in (1, 4):
        cand.append((f"-np {np_}", set_flag(base, "-np", str(np_))))
    out, seen = [], []
    for label, args in cand:
        key = _normal(args)
        if key not in seen:
            seen.append(key)
            out.append((label, args))
    return out


def _normal(args: list[str]) -> tuple:
    """Arguments as a comparable form: explicit defaults (-ub 512) are the same as leaving them out."""
    return tuple(args if "-ub" in args else [*args, "-ub", str(DEFAULT_UBATCH)])


def ratios(runs: list[dict]) -> dict[str, float]:
    """{figure: the default's share of the best run}: default/best for speeds, best/default for latencies; only
    figures the default and at least one run measured. runs[0] is the default."""
    if not runs or not runs[0].get("figures"):
        return {}
    d, out = runs[0]["figures"], {}
    for name, higher in FIGURES.items():
        vals = [r["figures"][name] for r in runs if r.get("figures") and r["figures"].get(name)]
        if not d.get(name) or not vals:
            continue
        best = max(vals) if higher else min(vals)
        out[name] = d[name] / best if higher else best / d[name]
    return out


def run(control: Control, alts: list[tuple[str, list[str]]], measure: Callable[[object], dict],
        say: Callable[[str], None]) -> list[dict]:
    """Stop the service (after saying so), measure each alternative (`measure(handle)` -> figures), stop it, and
    always start the service again at the end. One alternative that fails to start or to measure is recorded with
    its error and the sweep goes on. [{"label", "flags", "figures" or None, "error"}] in `alts` order."""
    say("sweep: stopping the service for the sweep; it is started again at the end, also after an error or Ctrl-C")
    runs: list[dict] = []
    try:
        control.stop_service()
        for label, args in alts:
            say(f"sweep: llama-server {label}")
            entry = {"label": label, "flags": " ".join(shlex.quote(a) for a in args), "figures": None, "error": ""}
            runs.append(entry)
            handle = None
            try:
                handle = control.start_alternative(args)
                entry["figures"] = measure(handle)
            except Exception as e:  # this alternative failed; the others still run
                entry["error"] = f"{type(e).__name__}: {e}"[:300]
            finally:
                if handle is not None:
                    control.stop_alternative(handle)
    finally:
        say("sweep: starting the service again")
        control.start_service()
    return runs
