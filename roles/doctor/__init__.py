"""doctor: read-only diagnosis of a provisioned box against its pinned state, one row per check.

    .venv/bin/python -m roles.doctor inventory/lab.py [--json] [--limit HOST]

Each check gives a state (ok, broken, skipped), the evidence it saw and the fix. The exit status is 1 when any
check is broken. Nothing on a host is changed. `repair.py` converges a broken host back to the pinned state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pyinfra.api.host import Host
from pyinfra.facts.files import File, Link
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from roles.doctor.facts import (DpkgAudit, KernelXid, ModprobeConfig, NvccRelease, NvidiaProcVersion, PendingUpgrades,
                                RunfileMarkers, UnattendedNotBlocked)
from roles.facts import AptHolds, HostTraits, PackageInstalled
from roles.nvidia_driver import BLACKLIST
from roles.nvidia_driver.facts import (DkmsStatus, DriverPackages, InitramfsLacking, InstalledKernels, NvidiaGpus,
                                      split_driver_packages, upstream)
from roles.vllm import decide as vllm
from roles.preflight import HostPlan

#: Xid codes that mean the GPU or its link failed (NVIDIA Xid catalog): 48 double-bit ECC, 79 fallen off the bus,
#: 62/64 internal/ECC page retirement failures, 74 NVLink error, 92 high single-bit ECC rate, 94/95 contained /
#: uncontained ECC errors.
SERIOUS_XIDS = {48, 62, 64, 74, 79, 92, 94, 95}


@dataclass(frozen=True)
class Row:
    """One check on one host: state is 'ok', 'broken' or 'skipped'."""

    check: str
    state: str
    evidence: str
    fix: str = ""


def ok(check: str, evidence: str) -> Row:
    return Row(check, "ok", evidence)


def broken(check: str, evidence: str, fix: str) -> Row:
    return Row(check, "broken", evidence, fix)


def diagnose(host: Host, plan: HostPlan) -> list[Row]:
    """All checks for one host (facts read now; nothing changed)."""
    pin = plan.driver.pin
    rows: list[Row] = []
    pkgs = host.get_fact(DriverPackages)
    traits = host.get_fact(HostTraits)

    # driver packages: exact versions, other branches, module vs userland
    wrong = {n: p["version"] for n, p in pkgs.items() if n in pin.packages and p["version"] != pin.packages[n]}
    missing = sorted(set(pin.packages) - set(pkgs))
    rows.append(broken("driver packages at the pinned versions",
                       f"differ: {wrong}" if wrong else f"missing: {missing}", "run repair.py")
                if wrong or missing else ok("driver packages at the pinned versions", f"{len(pin.packages)} at {pin.version}"))
    ours, other_pkgs = split_driver_packages(pkgs, pin.packages, pin.version)
    others = {n: p["version"] for n, p in other_pkgs.items()}
    rows.append(broken("no other driver branch installed", f"also installed: {others}",
                       "run repair.py (purges them before reinstalling the pin)")
                if others else ok("no other driver branch installed", "only the pinned driver's packages"))
    versions = {upstream(p["version"]) for n, p in pkgs.items() if p["source"].startswith("nvidia-graphics-drivers")}
    rows.append(broken("one driver version among the packages", f"versions: {sorted(versions)}",
                       "run repair.py") if len(versions) > 1 else
                ok("one driver version among the packages", f"{sorted(versions) or 'none installed'}"))
    loaded = host.get_fact(NvidiaProcVersion)
    if loaded is None:
        rows.append(Row("loaded module matches the userland", "skipped",
                        f"no nvidia module loaded ({traits['virt']}, kernel {traits['kernel']})"))
    elif loaded != pin.version or (versions and versions != {loaded}):
        rows.append(broken("loaded module matches the userland",
                           f"module {loaded}, userland {sorted(versions)}, pinned {pin.version}: "
                           "'Failed to initialize NVML: Driver/library version mismatch'",
                           "run repair.py with nvidia_driver_reboot: true (the module changes only at a reboot)"))
    else:
        rows.append(ok("loaded module matches the userland", f"module {loaded}"))
    audit = host.get_fact(DpkgAudit)
    rows.append(broken("no half-installed packages", "; ".join(audit)[:300], "run repair.py (dpkg --configure -a)")
                if audit else ok("no half-installed packages", "dpkg --audit is clean"))

    # every installed kernel can come up with a driver
    kernels = host.get_fact(InstalledKernels)
    built = {r["kernel"] for r in host.get_fact(DkmsStatus)
             if r["module"].startswith(pin.dkms_module) and r["state"] == "installed"}
    no_headers = sorted(k for k, h in kernels.items() if not h)
    unbuilt = sorted(k for k in kernels if k not in built)
    rows.append(broken("headers for every installed kernel", f"no headers: {no_headers}", "run repair.py")
                if no_headers else ok("headers for every installed kernel", f"{sorted(kernels)}"))
    rows.append(broken("nvidia module built for every installed kernel", f"not built: {unbuilt}",
                       "run repair.py (dkms autoinstall per kernel)")
                if unbuilt else ok("nvidia module built for every installed kernel", f"{sorted(built)}"))
    meta = plan.driver.headers_package
    rows.append(ok("headers metapackage installed", meta) if host.get_fact(PackageInstalled, package=meta)
                else broken("headers metapackage installed", f"{meta} is not installed",
                            "run repair.py (headers must follow kernel upgrades)"))

    # nouveau
    rows.append(broken("nouveau not loaded", "nouveau owns the GPU", "run repair.py with nvidia_driver_reboot: true")
                if traits["nouveau_loaded"] else ok("nouveau not loaded", "not loaded"))
    config = host.get_fact(ModprobeConfig)
    blacklisted = "blacklist nouveau" in config and host.get_fact(File, path=BLACKLIST)
    rows.append(ok("nouveau blacklisted", "; ".join(config)) if blacklisted else
                broken("nouveau blacklisted", f"{BLACKLIST} missing or not in effect ({config})", "run repair.py"))
    lacking = host.get_fact(InitramfsLacking, path=BLACKLIST)
    rows.append(broken("blacklist inside every initramfs", f"missing in initramfs of {lacking}", "run repair.py")
                if lacking else ok("blacklist inside every initramfs", "present"))

    # protection against upgrades
    held = set(host.get_fact(AptHolds))
    unheld = sorted(set(ours) - held)
    pending = {n: v for n, v in host.get_fact(PendingUpgrades).items() if n in pkgs}
    rows.append(broken("driver packages held", f"not held: {unheld}" + (f"; apt would upgrade {pending}"
                                                                        if pending else ""), "run repair.py")
                if unheld or pending else ok("driver packages held", f"{len(held & set(pin.packages))} held"))
    open_ = host.get_fact(UnattendedNotBlocked, packages=sorted(pkgs)) if pkgs else []
    if open_ is None:
        rows.append(Row("unattended-upgrades cannot touch the driver", "skipped", "unattended-upgrades not installed"))
    else:
        rows.append(broken("unattended-upgrades cannot touch the driver", f"not blacklisted: {open_}",
                           "run repair.py") if open_ else
                    ok("unattended-upgrades cannot touch the driver", "all driver packages blacklisted"))
    markers = host.get_fact(RunfileMarkers)
    rows.append(broken("no runfile installation mixed with packages", f"found {markers}",
                       "run repair.py (runs nvidia-uninstall, then reinstalls the packages)")
                if markers else ok("no runfile installation mixed with packages", "no runfile traces"))

    # GPU health
    gpus = host.get_fact(NvidiaGpus)
    enabled = host.get_fact(SystemdEnabled).get("nvidia-persistenced.service")
    active = host.get_fact(SystemdStatus).get("nvidia-persistenced.service")
    if not enabled:
        rows.append(broken("nvidia-persistenced enabled", "disabled", "run repair.py"))
    elif gpus and not active:
        rows.append(broken("nvidia-persistenced enabled", "enabled but not running", "run repair.py"))
    else:
        rows.append(ok("nvidia-persistenced enabled", "enabled" + (", running" if active else "")))
    if gpus:
        off = [g["index"] for g in gpus if not g["persistence_mode"]]
        rows.append(broken("persistence mode on", f"off on GPUs {off}", "run repair.py") if off
                    else ok("persistence mode on", f"{len(gpus)} GPUs"))
        xids = [e for e in host.get_fact(KernelXid) if e["xid"] in SERIOUS_XIDS]
        rows.append(broken("no serious Xid errors this boot", f"{xids[:3]}",
                           "check cooling, power and seating of the GPU; Xid 79: reseat or replace, then reboot")
                    if xids else ok("no serious Xid errors this boot", "none"))
    else:
        rows.append(Row("persistence mode on", "skipped", "no GPU visible (nvidia-smi)"))
        rows.append(Row("no serious Xid errors this boot", "skipped", "no GPU visible (nvidia-smi)"))

    # toolkits and service binaries still what the settings say
    for tk in plan.toolkits:
        release = host.get_fact(NvccRelease, nvcc=tk.nvcc)
        rows.append(ok(f"CUDA {tk.version} nvcc", f"{tk.nvcc}: release {release}") if release == tk.version else
                    broken(f"CUDA {tk.version} nvcc", f"{tk.nvcc}: {release or 'missing'}", "run repair.py"))
    if plan.llama_cpp:
        target = (host.get_fact(Link, path="/opt/llama.cpp/current") or {}).get("link_target")
        rows.append(ok("llama.cpp build in use", target) if target == plan.llama_cpp.prefix else
                    broken("llama.cpp build in use", f"current -> {target}, settings say {plan.llama_cpp.prefix}",
                           "run deploy.py"))
    if plan.vllm:
        target = (host.get_fact(Link, path=vllm.CURRENT) or {}).get("link_target")
        stamped = bool(host.get_fact(File, path=f"{plan.vllm.venv}/{vllm.STAMP}"))
        rows.append(ok("vLLM venv in use", f"{target} (checked at install)") if target == plan.vllm.venv and stamped
                    else broken("vLLM venv in use", f"current -> {target}, settings say {plan.vllm.venv}"
                                f"{'' if stamped else ' (not installed and checked)'}", "run deploy.py"))
    return rows


def as_dict(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]
