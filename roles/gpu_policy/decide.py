"""GPU policy decisions, pure: settings and the cards (GpuPolicyCards) in, refusals and the plan out. No operations
are imported here.

What nvidia-smi sets and how long it lasts (nvidia-smi -h, its device modification options, as Microway's "nvidia-smi:
Control Your GPUs" section 3.7 quotes them): `-pl` "maximum power management limit in watts", `-ac MEM,GR`
application clocks, `-c` compute mode 0/DEFAULT, 1/EXCLUSIVE_PROCESS, 2/PROHIBITED, `-e` "Toggle ECC support". Power
limits and application clocks are lost when the driver unloads (Microway section 3.1: persistence mode "is also
necessary if you've assigned specific clock speeds or power limits to the GPUs (as those changes are lost when the
NVIDIA driver is unloaded)"), hence a oneshot unit at every boot. An ECC change is stored on the card and becomes
current only at the next reboot (nvidia-smi -q shows it as "Ecc Mode Pending" until then).

What a V100 allows, from real nvidia-smi -q output (tests/data/nvidia_smi_v100.txt): Tesla V100-PCIE-32GB 100..250 W
(default 250 W), supported clocks memory 877 MHz with graphics 135..1380 MHz (Microway); Tesla V100-SXM2-32GB
150..300 W (default 300 W), max graphics clock 1530 MHz (Princeton's Traverse log). Each card's own range is what is
checked, never these numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from roles.engines import OUTSIDE
from roles.settings import Settings, problem

if TYPE_CHECKING:
    from roles.gpu_policy.shapes import GpuCard

UNIT = "v100kit-gpu-policy.service"
#: nvidia-smi as the distributions' driver packages and NVIDIA's installer put it
NVIDIA_SMI = "/usr/bin/nvidia-smi"
SETTINGS = ("gpu_policy_power_limit_w", "gpu_policy_application_clocks", "gpu_policy_compute_mode", "gpu_policy_ecc")


@dataclass(frozen=True)
class GpuPolicyPlan:
    """The policy to apply on every GPU of the host. exec_lines: the unit's ExecStart commands in order; differs:
    what the cards have now that the policy changes ('GPU 0 power limit 250 W -> 200 W'); ecc_reboot: GPUs whose
    current ECC mode differs from the wanted one (a reboot makes it current); reboot: gpu_policy_reboot."""

    exec_lines: list[str]
    differs: list[str] = field(default_factory=list)
    ecc_reboot: list[int] = field(default_factory=list)
    reboot: bool = False
    summary: str = ""


def wanted(settings: Settings) -> bool:
    """True when any gpu_policy_ setting (besides gpu_policy_reboot) is set."""
    return any(getattr(settings, key) is not None for key in SETTINGS)


def application_clocks(settings: Settings) -> tuple[int, int] | None:
    """gpu_policy_application_clocks 'MEMORY,GRAPHICS' as (memory MHz, graphics MHz)."""
    value = settings.gpu_policy_application_clocks
    if value is None:
        return None
    memory, graphics = value.split(",")
    return int(memory), int(graphics)


def _card(c: GpuCard) -> str:
    return f"GPU {c['index']} ({c['name'] or c['bus_id']})"


def _watts(w: float) -> str:
    return f"{w:g}"


def check(settings: Settings, cards: list[GpuCard]) -> list[str]:
    """Refusals (SettingsError lines, each naming the setting, the value, the card's range and the fix) of the
    gpu_policy_ settings against every card; [] when all fit, when nothing is set, or when no card is visible (then
    nothing is applied: plan() returns None)."""
    problems: list[str] = []
    if not wanted(settings):
        return problems
    pl, ac = settings.gpu_policy_power_limit_w, application_clocks(settings)
    for c in cards:
        if pl is not None:
            lo, hi = c["power_min_w"], c["power_max_w"]
            if lo is None or hi is None:
                problems.append(problem("gpu_policy_power_limit_w", pl, f"{_card(c)} does not report a power limit "
                                        "range (nvidia-smi -q: Min/Max Power Limit N/A): its limit cannot be set",
                                        "leave gpu_policy_power_limit_w unset (None) for this host"))
            elif not lo <= pl <= hi:
                problems.append(problem("gpu_policy_power_limit_w", pl, f"{_card(c)} allows {_watts(lo)}.."
                                        f"{_watts(hi)} W (nvidia-smi -q: Min/Max Power Limit)",
                                        f"set it within {_watts(lo)}..{_watts(hi)} W, or None to keep the card's "
                                        f"{_watts(c['power_limit_w']) if c['power_limit_w'] else 'current'} W"))
        if ac is not None:
            memory, graphics = ac
            supported = c["supported"]
            if not supported:
                problems.append(problem("gpu_policy_application_clocks", settings.gpu_policy_application_clocks,
                                        f"{_card(c)} lists no supported clocks (nvidia-smi -q -d SUPPORTED_CLOCKS)",
                                        "leave gpu_policy_application_clocks unset (None) for this host"))
            elif memory not in supported:
                problems.append(problem("gpu_policy_application_clocks", settings.gpu_policy_application_clocks,
                                        f"{_card(c)} supports memory clocks {sorted(supported)} MHz only",
                                        f"use one of them, e.g. '{max(supported)},{max(supported[max(supported)])}' "
                                        "(nvidia-smi -q -d SUPPORTED_CLOCKS lists the pairs)"))
            elif graphics not in supported[memory]:
                gr = supported[memory]
                near = min(gr, key=lambda g: abs(g - graphics))
                problems.append(problem("gpu_policy_application_clocks", settings.gpu_policy_application_clocks,
                                        f"{_card(c)} supports graphics clocks {min(gr)}..{max(gr)} MHz with memory "
                                        f"{memory} MHz, in steps; {graphics} is not one of them",
                                        f"use '{memory},{near}' (the nearest) or another pair nvidia-smi -q -d "
                                        "SUPPORTED_CLOCKS lists"))
        if settings.gpu_policy_ecc is not None and c["ecc"][0] is None:
            problems.append(problem("gpu_policy_ecc", settings.gpu_policy_ecc, f"{_card(c)} has no ECC mode "
                                    "(nvidia-smi -q: Ecc Mode N/A)", "leave gpu_policy_ecc unset (None)"))
    return problems


def compute_mode_problems(settings: Settings, claims: Mapping[int, list[tuple[str, int | None]]],
                          busy: frozenset[int] = frozenset()) -> list[str]:
    """Refusals of gpu_policy_compute_mode against the GPUs' users (`claims`: {GPU index: [(unit or
    roles.engines.OUTSIDE, bytes)]}, roles/preflight.py gpu_claims_of): PROHIBITED lets no process create a CUDA
    context, so any instance on a GPU cannot start; EXCLUSIVE_PROCESS allows one process's context per device, so a
    second instance on one GPU, or an instance beside a process outside v100kit (`busy`: the GPU indexes nvidia-smi
    lists such a process on, counted whatever allow_gpu_in_use says: that setting is about memory, and the process
    still holds its context), fails at its CUDA initialisation.
    Source: the CUDA driver API's CUcomputemode ("Compute-exclusive-process mode (Only one context used by a single
    process can be present on this device at a time)", "Compute-prohibited mode (No contexts can be created on this
    device at this time)"). [] for DEFAULT or None."""
    mode = settings.gpu_policy_compute_mode
    problems: list[str] = []
    if mode not in ("PROHIBITED", "EXCLUSIVE_PROCESS"):
        return problems
    for g, users in sorted(claims.items()):
        if g in busy and not any(u == OUTSIDE for u, _ in users):
            users = [*users, (OUTSIDE, None)]
        units = [u for u, _ in users if u != OUTSIDE]
        if mode == "PROHIBITED" and units:
            problems.append(problem("gpu_policy_compute_mode", mode, f"no process may create a CUDA context on a "
                                    f"PROHIBITED GPU, and {', '.join(units)} use{'s' if len(units) == 1 else ''} "
                                    f"GPU {g}: {'it' if len(units) == 1 else 'they'} would not start",
                                    "use DEFAULT or EXCLUSIVE_PROCESS, or give the instances no GPU here"))
        elif mode == "EXCLUSIVE_PROCESS" and len(users) > 1 and units:
            who = " and ".join(units) + (f" beside a process {OUTSIDE}" if len(units) < len(users) else "")
            problems.append(problem("gpu_policy_compute_mode", mode, f"an EXCLUSIVE_PROCESS GPU takes one process's "
                                    f"CUDA context, and {who} use GPU {g}: all but the first to start fail",
                                    "give each instance its own GPUs (gpus: [...])"
                                    + (", stop the process outside v100kit" if len(units) < len(users) else "")
                                    + ", or use DEFAULT"))
    return problems


def describe(settings: Settings) -> str:
    """The gpu_policy_ settings in words ('power limit 200 W, compute mode EXCLUSIVE_PROCESS'); '' when none is set."""
    ac = application_clocks(settings)
    parts = [f"power limit {_watts(settings.gpu_policy_power_limit_w)} W" if settings.gpu_policy_power_limit_w
             is not None else "", f"application clocks {ac[0]},{ac[1]} MHz" if ac else "",
             f"compute mode {settings.gpu_policy_compute_mode}" if settings.gpu_policy_compute_mode else "",
             "" if settings.gpu_policy_ecc is None else f"ECC {'on' if settings.gpu_policy_ecc else 'off'}"]
    return ", ".join(p for p in parts if p)


def summary(settings: Settings, policy: GpuPolicyPlan | None) -> dict | None:
    """The policy as `v100kit plan` shows it: None without any gpu_policy_ setting; else {"policy": describe's
    words, "applied": whether the deploy applies it, "changes": what differs on the cards now, "ecc_reboot": GPU
    indexes, "why": why not applied or ""}. Not applied means no GPU was visible: the values were checked against no
    card's range."""
    if not wanted(settings):
        return None
    if policy is None:
        return {"policy": describe(settings), "applied": False, "changes": [], "ecc_reboot": [],
                "why": "no GPU visible (nvidia-smi): not checked against a card's range and not applied"}
    return {"policy": describe(settings), "applied": True, "changes": list(policy.differs),
            "ecc_reboot": list(policy.ecc_reboot), "why": ""}


def plan(settings: Settings, cards: list[GpuCard]) -> tuple[GpuPolicyPlan | None, list[str]]:
    """(the plan, refusals): None without any gpu_policy_ setting (the cards are left as they are, no unit) or
    without a visible card (nothing can be checked, so nothing is applied: the deploy says so)."""
    problems = check(settings, cards)
    if not wanted(settings) or not cards or problems:
        return None, problems
    pl, ac, mode, ecc = (settings.gpu_policy_power_limit_w, application_clocks(settings),
                         settings.gpu_policy_compute_mode, settings.gpu_policy_ecc)
    lines, differs, ecc_reboot, parts = [], [], [], []
    if pl is not None:
        lines.append(f"{NVIDIA_SMI} -pl {_watts(pl)}")
        parts.append(f"power limit {_watts(pl)} W")
        differs += [f"{_card(c)} power limit {_watts(c['power_limit_w']) if c['power_limit_w'] else '?'} W -> "
                    f"{_watts(pl)} W" for c in cards if c["power_limit_w"] != pl]
    if ac is not None:
        lines.append(f"{NVIDIA_SMI} -ac {ac[0]},{ac[1]}")
        parts.append(f"application clocks {ac[0]},{ac[1]} MHz")
        differs += [f"{_card(c)} application clocks {c['app_clocks'][0]},{c['app_clocks'][1]} -> {ac[0]},{ac[1]}"
                    for c in cards if tuple(c["app_clocks"]) != ac]
    if mode is not None:
        lines.append(f"{NVIDIA_SMI} -c {mode}")
        parts.append(f"compute mode {mode}")
        differs += [f"{_card(c)} compute mode {c['compute_mode']} -> {mode}" for c in cards if c["compute_mode"] != mode]
    if ecc is not None:
        lines.append(f"{NVIDIA_SMI} -e {1 if ecc else 0}")
        parts.append(f"ECC {'on' if ecc else 'off'}")
        differs += [f"{_card(c)} ECC pending {c['ecc'][1]} -> {ecc}" for c in cards if c["ecc"][1] != ecc]
        ecc_reboot = [c["index"] for c in cards if c["ecc"][0] != ecc]
    return GpuPolicyPlan(lines, differs, ecc_reboot, settings.gpu_policy_reboot, ", ".join(parts)), []
