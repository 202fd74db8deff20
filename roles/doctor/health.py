"""The doctor's hardware-health rows, pure: the GpuHardware fact (roles/doctor/hardware.py) in, one Row per check
out, each naming per GPU what it saw and, when broken, the fix. No GPU: each row is skipped and says so.

Sources of the judgements:
- PCIe: nvidia-smi --help-query-gpu on pcie.link.gen.current / pcie.link.width.current: "These may be reduced
  when the GPU is not in use" (quoted in NVIDIA/gpu-monitoring-tools issue 215; nvtop issue 6: an idle GPU "may
  use a lower link generation (probably to reduce power consumption)"). So the generation is judged only where the
  GPU is not idle (its "Idle" clock reason is not active); an idle GPU's lower generation is reported, not failed.
  The width is judged always: an idle GPU keeps its lanes (an idle RTX 3090 at gen 1 still shows 16x of 16x,
  NVIDIA/nvidia-docker issue 1616), and fewer lanes mean a bad seat, a riser or a slot wired narrower.
- ECC: Double Bit ECC errors are uncorrectable ("Double bit errors are detected but not corrected",
  nvidia-smi --help-query-gpu); volatile counts since the driver loaded, aggregate over the card's life.
- Retired pages (Volta and older): a page is retired after a double-bit error or repeated single-bit errors, takes
  effect only when the GPU is re-initialised ("Pending: Yes" until then), and at 64 retired pages the board is due
  for replacement (https://docs.nvidia.com/deploy/dynamic-page-retirement/, FAQ). Ampere and newer remap rows
  instead (Remapped Rows), judged the same way.
- Throttling: "HW Slowdown ... most likely indicate[s] a power or cooling issue", the other reasons "typically
  indicate that the card is idle or has been manually set into a slower mode" (Microway, nvidia-smi: Control Your
  GPUs, section 3.4); nvml.h: HW Slowdown is engaged on temperature too high, an external power brake, or power
  supply problems. So HW Slowdown, HW Thermal Slowdown, HW Power Brake Slowdown and SW Thermal Slowdown are broken;
  SW Power Cap (the card at its power limit under full load) is reported, not failed.
- Temperature: the card's own "GPU Slowdown Temp" and "GPU Shutdown Temp" from nvidia-smi -q (V100: 87 C and 90 C,
  with a max operating temperature of 83 C, tests/data/nvidia_smi_v100.txt).
- NVLink: a link listed as <inactive> on an NVLink GPU (Azure/azhpc-diagnostics issue 73: V100-SXM2 links 3 and 5
  inactive).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roles.doctor.checks import NO_GPU, Row, broken, ok

if TYPE_CHECKING:
    from roles.doctor.hardware import GpuHealth

#: Throttle reasons that mean a power or cooling fault ("Clocks Throttle Reasons" / "Clocks Event Reasons" as
#: nvidia-smi -q prints them; the hardware ones are nested under "HW Slowdown").
FAULT_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")
#: Retired pages at which NVIDIA's page retirement guide says the board should be replaced (64 pages: "the maximum
#: number of retired pages", docs.nvidia.com/deploy/dynamic-page-retirement FAQ).
RETIRED_PAGES_LIMIT = 64

PCIE = "GPU PCIe link at the card's maximum"
ECC = "GPU ECC on, no uncorrected errors"
RETIRED = "GPU memory: no retired or pending pages"
NVLINK = "GPU NVLink links up"
THROTTLE = "GPU clocks not throttled by a fault"
TEMPERATURE = "GPU temperature below the slowdown threshold"
CHECKS = (PCIE, ECC, RETIRED, NVLINK, THROTTLE, TEMPERATURE)


def hardware_rows(health: list[GpuHealth], gpus_visible: bool = True) -> list[Row]:
    """The six hardware rows (CHECKS order) for the GPUs of `health`. `gpus_visible` False (nvidia-smi lists no GPU)
    or `health` empty: each row skipped, saying why."""
    if not gpus_visible or not health:
        why = NO_GPU if not gpus_visible else "nvidia-smi -q printed no GPU block"
        return [Row(check, "skipped", why) for check in CHECKS]
    return [pcie_link(health), ecc(health), retired_pages(health), nvlink(health), throttling(health),
            temperature(health)]


def _idle(g: GpuHealth) -> bool:
    return bool(g["throttle"].get("Idle") or g["throttle"].get("GPU Idle"))


def pcie_link(health: list[GpuHealth]) -> Row:
    """Each GPU's PCIe link at its maximum width, and at its maximum generation unless idle (see the module)."""
    bad, seen, notes = [], [], []
    for g in health:
        (gc, gm), (wc, wm) = g["pcie_gen"], g["pcie_width"]
        if None in (gc, gm, wc, wm):
            seen.append(f"GPU {g['index']}: link not reported")
            continue
        seen.append(f"GPU {g['index']}: gen {gc} of {gm}, x{wc} of x{wm}")
        if wc < wm:
            bad.append(f"GPU {g['index']} ({g['bus_id']}) runs x{wc} of x{wm} lanes")
        if gc < gm:
            if _idle(g):
                notes.append(f"GPU {g['index']} idle at gen {gc} (an idle GPU lowers the generation to save power; "
                             "judged under load)")
            else:
                bad.append(f"GPU {g['index']} ({g['bus_id']}) at gen {gc} of {gm} while not idle")
    if bad:
        return broken(PCIE, "; ".join(bad + notes), "reseat the card (and its riser), check the slot's wiring and "
                      "the BIOS PCIe setting for that slot; compare `lspci -vv -s BUS | grep LnkSta` with LnkCap")
    return ok(PCIE, "; ".join(seen + notes))


def ecc(health: list[GpuHealth]) -> Row:
    """ECC mode enabled on each GPU that has it (N/A: a card without ECC, not judged), and no uncorrected (double-bit)
    errors, volatile or aggregate."""
    bad, seen = [], []
    for g in health:
        cur, pending = g["ecc_mode"]
        unc = g["ecc_uncorrected"]
        if cur is None:
            seen.append(f"GPU {g['index']}: no ECC")
            continue
        if cur != "Enabled":
            bad.append(f"GPU {g['index']} ECC {cur}" + (f" (pending {pending})" if pending and pending != cur else ""))
        if unc.get("volatile") or unc.get("aggregate"):
            bad.append(f"GPU {g['index']} ({g['bus_id']}) uncorrected ECC errors: {unc.get('volatile') or 0} since "
                       f"the driver loaded, {unc.get('aggregate') or 0} over its life")
        seen.append(f"GPU {g['index']}: ECC {cur}, uncorrected {unc.get('volatile')}/{unc.get('aggregate')}")
    if bad:
        fix = []
        if any("ECC Disabled" in b for b in bad):
            fix.append("turn ECC on (gpu_policy_ecc: true, takes effect at a reboot; or `nvidia-smi -e 1` and reboot)")
        if any("uncorrected" in b for b in bad):
            fix.append("drain the GPU, reset it (`nvidia-smi -r -i N`) or reboot so that the bad page is retired; "
                       "errors that come back mean the board needs replacing")
        return broken(ECC, "; ".join(bad), "; ".join(fix))
    return ok(ECC, "; ".join(seen))


def retired_pages(health: list[GpuHealth]) -> Row:
    """No page pending retirement and retired pages below RETIRED_PAGES_LIMIT (Volta: Retired Pages); on newer GPUs
    no pending row remapping and no remapping failure (Remapped Rows). Counts above 0 are reported."""
    bad, seen = [], []
    for g in health:
        r, m = g["retired"], g["remapped"]
        if r is not None:
            total = (r["single_bit"] or 0) + (r["double_bit"] or 0)
            seen.append(f"GPU {g['index']}: retired {r['single_bit']} single-bit, {r['double_bit']} double-bit, "
                        f"pending {'yes' if r['pending'] else 'no'}")
            if r["pending"]:
                bad.append(f"GPU {g['index']} ({g['bus_id']}) has a page pending retirement")
            if total >= RETIRED_PAGES_LIMIT:
                bad.append(f"GPU {g['index']} ({g['bus_id']}) has {total} retired pages (limit {RETIRED_PAGES_LIMIT})")
        elif m is not None:
            seen.append(f"GPU {g['index']}: remapped rows {m['correctable']} correctable, {m['uncorrectable']} "
                        f"uncorrectable, pending {'yes' if m['pending'] else 'no'}")
            if m["pending"]:
                bad.append(f"GPU {g['index']} ({g['bus_id']}) has a row remapping pending")
            if m["failure"]:
                bad.append(f"GPU {g['index']} ({g['bus_id']}) failed to remap a row")
        else:
            seen.append(f"GPU {g['index']}: no page retirement reported")
    if bad:
        fix = ("reboot (or reset the GPU with `nvidia-smi -r -i N` once nothing uses it) so that pending pages are "
               "retired; at the limit or after a remapping failure the board needs replacing")
        return broken(RETIRED, "; ".join(bad), fix)
    return ok(RETIRED, "; ".join(seen))


def nvlink(health: list[GpuHealth]) -> Row:
    """No NVLink link listed as inactive; ok saying so where no GPU lists links (PCIe cards)."""
    bad, seen = [], []
    for g in health:
        links = g["nvlink"]
        if not links:
            continue
        down = [n for n, state in links if state != "up"]
        seen.append(f"GPU {g['index']}: {len(links) - len(down)} of {len(links)} links up")
        if down:
            bad.append(f"GPU {g['index']} ({g['name']}) links {', '.join(map(str, down))} inactive")
    if bad:
        return broken(NVLINK, "; ".join(bad), "power the box off and on (a warm reboot may not retrain the links); "
                      "if links stay inactive, reseat the GPU on its SXM2 baseboard or have the board serviced")
    return ok(NVLINK, "; ".join(seen) if seen else "no NVLink links listed (PCIe cards)")


def throttling(health: list[GpuHealth]) -> Row:
    """No fault throttle reason (FAULT_REASONS) active; SW Power Cap and the others are reported."""
    bad, seen = [], []
    for g in health:
        active = [k for k, v in g["throttle"].items() if v]
        faults = [k for k in active if k in FAULT_REASONS]
        if faults:
            bad.append(f"GPU {g['index']} ({g['bus_id']}): {', '.join(faults)} active")
        seen.append(f"GPU {g['index']}: {', '.join(active) or 'none active'}" if g["throttle"] else
                    f"GPU {g['index']}: throttle reasons not reported")
    if bad:
        return broken(THROTTLE, "; ".join(bad), "check cooling (airflow, fans, dust, inlet temperature) and power "
                      "(PSUs, cables, power brake from the BMC); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`")
    return ok(THROTTLE, "; ".join(seen))


def temperature(health: list[GpuHealth]) -> Row:
    """Each GPU below its own slowdown temperature; the evidence gives the margin to slowdown and shutdown. Where the
    driver prints margins ("T.Limit", newer drivers on Hopper) instead of thresholds, the GPU's margin must stay above
    its slowdown margin (NVIDIA/NVSentinel pull request 1371 compares the same two: H100 slows down at -2 C)."""
    bad, seen = [], []
    for g in health:
        t = g["temp"]
        if t["current"] is not None and t["slowdown"] is None and t.get("tlimit") is not None:
            at = t.get("slowdown_tlimit") if t.get("slowdown_tlimit") is not None else 0
            line = (f"GPU {g['index']}: {t['current']} C, {t['tlimit']} C below its limit (T.Limit; slows down at "
                    f"{at} C, shuts off at {t.get('shutdown_tlimit') if t.get('shutdown_tlimit') is not None else '?'} C)")
            seen.append(line)
            if t["tlimit"] <= at:
                bad.append(line)
            continue
        if t["current"] is None or t["slowdown"] is None:
            seen.append(f"GPU {g['index']}: {t['current'] if t['current'] is not None else '?'} C, thresholds not "
                        "reported")
            continue
        line = (f"GPU {g['index']}: {t['current']} C (slowdown {t['slowdown']} C, shutdown "
                f"{t['shutdown'] if t['shutdown'] is not None else '?'} C)")
        seen.append(line)
        if t["current"] >= t["slowdown"]:
            bad.append(line)
    if bad:
        return broken(TEMPERATURE, "; ".join(bad), "the card is cutting its clocks to cool down and shuts off at the "
                      "shutdown threshold: check airflow and fans, inlet temperature and the server's fan profile")
    return ok(TEMPERATURE, "; ".join(seen))
