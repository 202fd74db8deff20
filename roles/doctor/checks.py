"""The doctor's judgement, pure: DoctorFacts and the host's plan in, one Row per check out. Nothing here reads a
host; gather.py reads the facts."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from roles.doctor.rows import NO_GPU, Row, broken, ok  # noqa: F401 (the rows checks.py has always offered)
from roles.base.decide import NVIDIA_SOURCE_FILE, managed_repositories, our_source_file, stray_sources
from roles.engines import IDLE_USED_MIB, describe_outside, outside_use
from roles.nvidia_driver.decide import (BLACKLIST, built_kernels, compute_capability, open_module_packages,
                                        split_driver_packages, upstream)
from roles.tuning.decide import retired_swapfiles, swap_size_bytes
from roles.volta import OPEN_MODULE_MIN_COMPUTE_CAPABILITY

if TYPE_CHECKING:
    from roles.cuda.versions import Toolkit
    from roles.doctor.gather import DoctorFacts
    from roles.nvidia_driver.decide import DriverPlan
    from roles.nvidia_driver.shapes import DriverPackage
    from roles.nvidia_driver.versions import DriverPin
    from roles.preflight import HostPlan

#: Xid codes that mean the GPU or its link failed (NVIDIA Xid catalog): 48 double-bit ECC, 79 fallen off the bus,
#: 62/64 internal/ECC page retirement failures, 74 NVLink error, 92 high single-bit ECC rate, 94/95 contained /
#: uncontained ECC errors.
SERIOUS_XIDS = {48, 62, 64, 74, 79, 92, 94, 95}


def as_dict(rows: list[Row]) -> list[dict]:
    """Rows as plain dicts {'check', 'state', 'evidence', 'fix'} (for --json)."""
    return [asdict(r) for r in rows]


def diagnose(f: DoctorFacts, plan: HostPlan) -> list[Row]:
    """All checks for one host, in a fixed order: driver packages, kernels, nouveau, upgrade protection, GPU health,
    hardware health (health.py), toolkits and service binaries."""
    from roles.doctor.health import hardware_rows  # health.py builds its rows with this module's Row

    pin, pkgs = plan.driver.pin, f.driver_packages
    return [
        driver_packages_pinned(pkgs, pin), other_branches(pkgs, pin), one_version(pkgs),
        module_matches_userland(f, pin), open_module(f, plan), secure_boot(f), half_installed(f.dpkg_audit),
        headers_per_kernel(f.kernels), dkms_per_kernel(f, pin), headers_metapackage(f, plan.driver),
        nouveau_not_loaded(f), nouveau_blacklisted(f), blacklist_in_initramfs(f.initramfs_lacking),
        driver_held(f, pin), sources_of_managed_repositories(f, plan), swapfile(f, plan), unattended_upgrades(f.unattended_open),
        runfile(f.runfile_markers, pin), persistenced(f), persistence_mode(f), *gpu_memory_outside(f), serious_xids(f),
        *hardware_rows(f.hardware, bool(f.gpus)),
        *nvcc_per_toolkit(f.nvcc_releases, plan.toolkits),
        *engine_rows(f, plan), *ray_node(f, plan),
    ]


def ray_node(f: DoctorFacts, plan: HostPlan) -> list[Row]:
    """A Ray cluster's node: its unit runs, and the cluster lists this node's address as alive ("joined the
    cluster"); no rows without a cluster."""
    r = plan.ray
    if r is None:
        return []
    unit = (ok(f"{r.unit} running", f"cluster {r.cluster}, node {r.node_address}") if f.ray_unit_active else
            broken(f"{r.unit} running", f"{r.unit}.service is not active", f"systemctl start {r.unit} (journalctl -u "
                   f"{r.unit} says why it stopped), or run deploy.py"))
    check = f"node {r.node_address} joined cluster {r.cluster}"
    if not r.head_address:
        return [unit, broken(check, f"the head {r.head} cannot be reached from here", f"bring {r.head} back (its "
                             "own doctor run says what is wrong there)")]
    if f.ray_alive is None:
        return [unit, broken(check, f"Ray at {r.gcs_address} did not answer", f"start ray-head on {r.head} "
                             "(and check the cluster network: the README's firewall table)")]
    if r.node_address not in f.ray_alive:
        return [unit, broken(check, f"alive nodes: {', '.join(f.ray_alive) or 'none'}",
                             f"systemctl restart {r.unit}; check that {r.interface} reaches {r.head_address}")]
    return [unit, ok(check, f"{len(f.ray_alive)} of {len(r.nodes)} nodes alive: {', '.join(f.ray_alive)}")]


def driver_versions(pkgs: dict[str, DriverPackage]) -> set[str]:
    """Upstream driver versions among the installed packages of nvidia-graphics-drivers* sources."""
    return {upstream(p["version"]) for p in pkgs.values() if p["source"].startswith("nvidia-graphics-drivers")}


def driver_packages_pinned(pkgs: dict[str, DriverPackage], pin: DriverPin) -> Row:
    """Every package of the pin installed at its exact version."""
    wrong = {n: p["version"] for n, p in pkgs.items() if n in pin.packages and p["version"] != pin.packages[n]}
    missing = sorted(set(pin.packages) - set(pkgs))
    if wrong or missing:
        return broken("driver packages at the pinned versions",
                      f"differ: {wrong}" if wrong else f"missing: {missing}", "run repair.py")
    return ok("driver packages at the pinned versions", f"{len(pin.packages)} at {pin.version}")


def other_branches(pkgs: dict[str, DriverPackage], pin: DriverPin) -> Row:
    """No driver package of another branch or version beside the pin."""
    others = {n: p["version"] for n, p in split_driver_packages(pkgs, pin)[1].items()}
    if others:
        return broken("no other driver branch installed", f"also installed: {others}",
                      "run repair.py (purges them before reinstalling the pin)")
    return ok("no other driver branch installed", "only the pinned driver's packages")


def one_version(pkgs: dict[str, DriverPackage]) -> Row:
    """All driver-source packages at one upstream version."""
    versions = driver_versions(pkgs)
    if len(versions) > 1:
        return broken("one driver version among the packages", f"versions: {sorted(versions)}", "run repair.py")
    return ok("one driver version among the packages", f"{sorted(versions) or 'none installed'}")


def module_matches_userland(f: DoctorFacts, pin: DriverPin) -> Row:
    """The loaded module is the pinned version and that of the userland; skipped where no module is loaded."""
    loaded, versions = f.loaded_module, driver_versions(f.driver_packages)
    if loaded is None:
        return Row("loaded module matches the userland", "skipped",
                   f"no nvidia module loaded ({f.traits['virt']}, kernel {f.traits['kernel']})")
    if loaded != pin.version or (versions and versions != {loaded}):
        return broken("loaded module matches the userland",
                      f"module {loaded}, userland {sorted(versions)}, pinned {pin.version}: "
                      "'Failed to initialize NVML: Driver/library version mismatch'",
                      "run repair.py with nvidia_driver_reboot: true (the module changes only at a reboot)")
    return ok("loaded module matches the userland", f"module {loaded}")


def open_module(f: DoctorFacts, plan: HostPlan) -> Row:
    """GPUs below compute capability 7.5 need the proprietary module: the open one needs GSP (docs/volta.md §1), and
    with it loaded a V100 does not show up at all. Recognised from /proc/driver/nvidia/version ('NVIDIA UNIX Open
    Kernel Module' against 'NVIDIA UNIX x86_64 Kernel Module') and from installed -open packages (ubuntu-drivers
    picks them for recent branches)."""
    check = "proprietary kernel module for these GPUs"
    cc = plan.settings.gpu_compute_capability
    opened = open_module_packages(f.driver_packages)
    if compute_capability(plan.settings) >= OPEN_MODULE_MIN_COMPUTE_CAPABILITY:
        return ok(check, f"compute capability {cc}: the open module is supported (module {f.loaded_flavour})")
    if f.loaded_flavour == "open" or opened:
        seen = ("the open kernel module is loaded (/proc/driver/nvidia/version: NVIDIA UNIX Open Kernel Module)"
                if f.loaded_flavour == "open" else "no open module loaded")
        return broken(check, f"{seen}; open-module packages installed: {opened or 'none'}; compute capability {cc} "
                             "needs the proprietary module (open modules need GSP, 7.5+): the GPUs do not show up",
                      "run repair.py with nvidia_driver_reboot: true (purges the -open packages, installs the "
                      "proprietary module; the running module changes at the reboot)")
    if f.loaded_flavour is None:
        return ok(check, "no open-module packages; no module loaded")
    return ok(check, "proprietary module loaded")


def secure_boot(f: DoctorFacts) -> Row:
    """With Secure Boot on, the DKMS-built module loads only when signed by an enrolled key (roles/nvidia_driver
    decide.secure_boot_refused)."""
    check = "Secure Boot lets the module load"
    sb = f.secure_boot
    if sb["state"] == "unknown":
        return Row(check, "skipped", "Secure Boot state unknown (no mokutil, no EFI variable readable)")
    if sb["state"] == "disabled":
        return ok(check, f"Secure Boot disabled ({sb['source']})")
    if sb["enrolled"]:
        return ok(check, f"Secure Boot enabled; DKMS signs with {sb['enrolled'][0]}, enrolled")
    if sb["pending"]:
        return broken(check, f"Secure Boot enabled; {sb['pending'][0]} is queued for enrollment, not enrolled yet",
                      "reboot and confirm the key in MokManager on the console")
    return broken(check, f"Secure Boot enabled ({sb['source']}); no DKMS signing key enrolled "
                         f"(keys present: {sb['keys'] or 'none'}): the unsigned nvidia module is refused",
                  "enroll the DKMS key (`dkms generate_mok; mokutil --import /var/lib/dkms/mok.pub`, confirm at the "
                  "next boot), turn Secure Boot off, or deploy with nvidia_driver_secure_boot: enroll")


def half_installed(audit: list[str]) -> Row:
    """`dpkg --audit` is clean."""
    if audit:
        return broken("no half-installed packages", "; ".join(audit)[:300], "run repair.py (dpkg --configure -a)")
    return ok("no half-installed packages", "dpkg --audit is clean")


def headers_per_kernel(kernels: dict[str, bool]) -> Row:
    """Every installed kernel has its headers (else DKMS cannot build for it)."""
    no_headers = sorted(k for k, h in kernels.items() if not h)
    if no_headers:
        return broken("headers for every installed kernel", f"no headers: {no_headers}", "run repair.py")
    return ok("headers for every installed kernel", f"{sorted(kernels)}")


def dkms_per_kernel(f: DoctorFacts, pin: DriverPin) -> Row:
    """DKMS built the pin's module for every installed kernel."""
    built = built_kernels(f.dkms, pin.dkms_module)
    unbuilt = sorted(k for k in f.kernels if k not in built)
    if unbuilt:
        return broken("nvidia module built for every installed kernel", f"not built: {unbuilt}",
                      "run repair.py (dkms autoinstall per kernel)")
    return ok("nvidia module built for every installed kernel", f"{sorted(built)}")


def headers_metapackage(f: DoctorFacts, driver: DriverPlan) -> Row:
    """The headers metapackage is installed, so headers follow kernel upgrades."""
    meta = driver.headers_package
    if f.headers_metapackage_installed:
        return ok("headers metapackage installed", meta)
    return broken("headers metapackage installed", f"{meta} is not installed",
                  "run repair.py (headers must follow kernel upgrades)")


def nouveau_not_loaded(f: DoctorFacts) -> Row:
    """nouveau is not loaded (it would own the GPU until a reboot)."""
    if f.traits["nouveau_loaded"]:
        return broken("nouveau not loaded", "nouveau owns the GPU", "run repair.py with nvidia_driver_reboot: true")
    return ok("nouveau not loaded", "not loaded")


def nouveau_blacklisted(f: DoctorFacts) -> Row:
    """Our blacklist file exists and modprobe's configuration has nouveau blacklisted."""
    if "blacklist nouveau" in f.modprobe_config and f.blacklist_file:
        return ok("nouveau blacklisted", "; ".join(f.modprobe_config))
    return broken("nouveau blacklisted", f"{BLACKLIST} missing or not in effect ({f.modprobe_config})",
                  "run repair.py")


def blacklist_in_initramfs(lacking: list[str]) -> Row:
    """Every kernel's initramfs contains the blacklist."""
    if lacking:
        return broken("blacklist inside every initramfs", f"missing in initramfs of {lacking}", "run repair.py")
    return ok("blacklist inside every initramfs", "present")


def driver_held(f: DoctorFacts, pin: DriverPin) -> Row:
    """Every package of the pinned driver is held, and apt would upgrade none of the driver's packages."""
    held = set(f.holds)
    ours = split_driver_packages(f.driver_packages, pin)[0]
    unheld = sorted(set(ours) - held)
    pending = {n: v for n, v in f.pending_upgrades.items() if n in f.driver_packages}
    if unheld or pending:
        return broken("driver packages held",
                      f"not held: {unheld}" + (f"; apt would upgrade {pending}" if pending else ""), "run repair.py")
    return ok("driver packages held", f"{len(held & set(pin.packages))} held")


def sources_of_managed_repositories(f: DoctorFacts, plan: HostPlan) -> Row:
    """No sources file besides the toolkit's own has an entry for a repository the toolkit manages (the
    distribution's, NVIDIA's): two entries with different Signed-By make every apt run fail with "Conflicting values
    set for option Signed-By" (NVIDIA cuda-repo-management issue 4)."""
    check = "no other source entry for a repository v100kit manages"
    to_disable, mixed = stray_sources(f.source_entries, managed_repositories(plan.settings, plan.platform),
                                      {our_source_file(plan.platform), NVIDIA_SOURCE_FILE})
    if to_disable or mixed:
        return broken(check, "; ".join(f"{p}: {', '.join(h)}" for p, h in {**to_disable, **mixed}.items()),
                      ("run deploy.py (disables " + ", ".join(to_disable) + ", kept as *.disabled)" if to_disable
                       else "") + ("; " if to_disable and mixed else "")
                      + (f"remove those lines from {', '.join(mixed)} by hand" if mixed else ""))
    return ok(check, "only v100kit's own source files")


def swapfile(f: DoctorFacts, plan: HostPlan) -> Row:
    """The swapfile of the settings is there at its size, NOCOW on btrfs (btrfs(5) SWAPFILE SUPPORT), and no
    swapfile of an earlier tuning_swap_file is still set up (tuning decide.retired_swapfiles)."""
    check, path = "swapfile as configured", plan.settings.tuning_swap_file
    size = swap_size_bytes(plan.settings)
    old = retired_swapfiles(f.swap["record"], path, size)
    if old:
        return broken(check, f"swapfiles of earlier settings still set up: {sorted(old)}",
                      "run deploy.py (swapoff, fstab line removed, deleted where v100kit created them)")
    if not size:
        return ok(check, "no swapfile configured")
    if f.swap["size"] != size:
        return broken(check, f"{path}: " + (f"{f.swap['size']} bytes, configured {size}" if f.swap["size"] else
                                            "missing or not a swapfile"), "run deploy.py")
    if f.swap["fs"] == "btrfs" and not f.swap["nocow"]:
        return broken(check, f"{path} is copy-on-write on btrfs: swapon fails ('swapfile must not be copy-on-write')",
                      "run deploy.py (makes it again NOCOW)")
    return ok(check, f"{path}: {size} bytes on {f.swap['fs'] or '?'}")


def unattended_upgrades(open_: list[str] | None) -> Row:
    """unattended-upgrades blacklists every driver package; skipped where it is not installed."""
    if open_ is None:
        return Row("unattended-upgrades cannot touch the driver", "skipped", "unattended-upgrades not installed")
    if open_:
        return broken("unattended-upgrades cannot touch the driver", f"not blacklisted: {open_}", "run repair.py")
    return ok("unattended-upgrades cannot touch the driver", "all driver packages blacklisted")


def runfile(markers: list[str], pin: DriverPin | None = None) -> Row:
    """No trace of a .run driver installation beside the packages; for a runfile pin (nvidia_driver_source: runfile)
    the other way round: the .run driver's uninstaller is there (the stand-in package and the module version are
    checked by driver_packages_pinned and module_matches_userland like a packaged driver's)."""
    if pin is not None and pin.runfile is not None:
        if markers:
            return ok("driver installed by NVIDIA's .run installer", f"found {markers}")
        return broken("driver installed by NVIDIA's .run installer", "no /usr/bin/nvidia-uninstall: the .run driver "
                      "is not installed", "run deploy.py")
    if markers:
        return broken("no runfile installation mixed with packages", f"found {markers}",
                      "run repair.py (runs nvidia-uninstall, then reinstalls the packages)")
    return ok("no runfile installation mixed with packages", "no runfile traces")


def persistenced(f: DoctorFacts) -> Row:
    """nvidia-persistenced is enabled, and running where a GPU is visible."""
    if not f.persistenced_enabled:
        return broken("nvidia-persistenced enabled", "disabled", "run repair.py")
    if f.gpus and not f.persistenced_active:
        return broken("nvidia-persistenced enabled", "enabled but not running", "run repair.py")
    return ok("nvidia-persistenced enabled", "enabled" + (", running" if f.persistenced_active else ""))


def persistence_mode(f: DoctorFacts) -> Row:
    """Persistence mode is on for every GPU; skipped without a visible GPU."""
    if not f.gpus:
        return Row("persistence mode on", "skipped", NO_GPU)
    off = [g["index"] for g in f.gpus if not g["persistence_mode"]]
    if off:
        return broken("persistence mode on", f"off on GPUs {off}", "run repair.py")
    return ok("persistence mode on", f"{len(f.gpus)} GPUs")


def gpu_memory_outside(f: DoctorFacts) -> list[Row]:
    """Per GPU, "GPU N memory used by processes outside v100kit": ok up to IDLE_USED_MIB (what an idle GPU shows),
    else broken naming the MiB and the PIDs (roles/engines.py outside_use: memory.used less what v100kit's own
    units' processes hold): the plan is made without that memory, so an instance restarted beside it may run out.
    No rows without a visible GPU (the persistence row says so)."""
    rows = []
    for g in f.gpus:
        check = f"GPU {g['index']} memory used by processes outside v100kit"
        mib, procs = outside_use(g)
        if mib <= IDLE_USED_MIB:
            unknown = g.get("memory_used_mib") is None or not g.get("processes")
            rows.append(ok(check, f"{mib} MiB" + (" (memory used or its processes not shown by nvidia-smi here: "
                                                  "unknown beyond the processes it lists)" if unknown and
                                                  g.get("memory_used_mib") != 0 else "")))
            continue
        pids = " ".join(str(p["pid"]) for p in procs)
        rows.append(broken(check, describe_outside(g), (f"stop them if they are not wanted (kill {pids}), " if pids
                                                         else "find them (another container?), ")
                           + "or give the instances other GPUs (gpus: [...]); allow_gpu_in_use: true plans an "
                             "instance as if they had stopped"))
    return rows


def serious_xids(f: DoctorFacts) -> Row:
    """No Xid of SERIOUS_XIDS in this boot's kernel log; skipped without a visible GPU."""
    if not f.gpus:
        return Row("no serious Xid errors this boot", "skipped", NO_GPU)
    xids = [e for e in f.xids if e["xid"] in SERIOUS_XIDS]
    if xids:
        return broken("no serious Xid errors this boot", f"{xids[:3]}",
                      "check cooling, power and seating of the GPU; Xid 79: reseat or replace, then reboot")
    return ok("no serious Xid errors this boot", "none")


def nvcc_per_toolkit(releases: dict[str, str | None], toolkits: list[Toolkit]) -> list[Row]:
    """Each planned toolkit's nvcc reports that toolkit's release (`releases`: {version: release or None})."""
    rows = []
    for tk in toolkits:
        release = releases.get(tk.version)
        rows.append(ok(f"CUDA {tk.version} nvcc", f"{tk.nvcc}: release {release}") if release == tk.version else
                    broken(f"CUDA {tk.version} nvcc", f"{tk.nvcc}: {release or 'missing'}", "run repair.py"))
    return rows


def engine_rows(f: DoctorFacts, plan: HostPlan) -> list[Row]:
    """Each registered engine's own rows (Engine.doctor: llama.cpp's build and servers on the GPU, vLLM's and
    LMDeploy's venv), from the evidence its Engine.evidence read (f.engines), in the registry's order; none for an
    engine without a plan here."""
    return [row for engine, p in plan.engine_plans() for row in engine.doctor(p, f.engines.get(engine.role, {}))]
