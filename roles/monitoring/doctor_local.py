#!/usr/bin/python3
"""The doctor's host-local checks, run on the box itself by v100kit-doctor.timer; writes Prometheus text for the node
exporter's textfile collector:

    v100kit_check_ok{check="nvidia-persistenced enabled"} 1     # 1 ok, 0 broken; skipped checks have no sample
    v100kit_check_skipped{check="persistence mode on"} 1         # skipped here (no GPU visible, ...)
    v100kit_doctor_last_run_timestamp_seconds 1.7e9             # when this run finished (Unix time)
    v100kit_doctor_checks{state="broken"} 0                      # rows per state

    python3 doctor_local.py --expect /etc/v100kit/doctor-local.json --output DIR/v100kit_doctor.prom

Why a checker of its own and not `v100kit doctor` on the box: the doctor is the control machine's pyinfra run; its
preflight reads files that live there only (each model_source's GGUF header and checksum, api_key_file, the Hugging
Face cache, the vLLM lock files), so it cannot run from the box's own data. Installing the toolkit's wheel there would
also bring pyinfra, pydantic and gevent into a venv on every box, which an offline host (v100kit/offline*.py) cannot
get: `offline fill` mirrors the apt packages the deploy installs and the vLLM lock's wheels, nothing else. This
script needs only the distribution's python3 (an apt package the mirror carries) and its standard library. What the
control machine decided (the pinned driver, each engine's planned build or venv
and its units, each llama-server's -ngl: every registered engine's Engine.watch) is
written at deploy time into the expectations file (roles/monitoring/decide.py expectations); the judgement of
llama-server's residency is the doctor's own code, roles/llama_cpp/residency.py, installed beside this file. The
check names are the doctor's row names (roles/doctor/checks.py) where a check is the same; the control machine's
`v100kit doctor` stays the full diagnosis (kernels, DKMS, initramfs, apt sources, ...).

Read-only: it only reads (nvidia-smi, /proc, dpkg, apt-mark, systemctl, journalctl) and writes its output file
(atomically: a temporary file in the same directory, renamed). Runs as the service user with the systemd-journal
group (the kernel log and the services' logs)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

NO_GPU = "no GPU visible (nvidia-smi)"


def run(command: list[str], timeout: float = 60) -> tuple[int, str]:
    """(exit status, stdout) of `command`; 127 when it is not installed, 124 on timeout."""
    try:
        p = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout
    except FileNotFoundError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""


def read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def upstream(version: str) -> str:
    """The upstream part of a Debian version: '1:550.163.01-2' -> '550.163.01' (roles/nvidia_driver/decide.py)."""
    return version.split(":")[-1].rsplit("-", 1)[0]


def gather(expect: dict, run=run, read=read) -> dict:
    """What the checks need, read from this host now. `run` and `read` are injectable for tests."""
    facts: dict = {}
    proc = read("/proc/driver/nvidia/version") or ""
    m = re.search(r"Kernel Module(?: for x86_64)?\s+(\d+\.\d+(?:\.\d+)?)", proc)
    facts["loaded_module"] = m.group(1) if m else None
    rc, out = run(["nvidia-smi", "--query-gpu=index,persistence_mode", "--format=csv,noheader"])
    facts["nvidia_smi_rc"], facts["nvidia_smi"] = rc, out
    facts["gpus"] = [line.split(",")[0].strip() for line in out.splitlines() if rc == 0 and line.strip()]
    facts["persistence_off"] = [line.split(",")[0].strip() for line in out.splitlines()
                                if rc == 0 and line.strip().lower().endswith("disabled")]
    names = sorted(expect.get("driver_packages", []))
    rc, out = run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n", *names]) if names \
        else (0, "")
    facts["installed"] = {p[0]: p[1] for p in (line.split() for line in out.splitlines())
                          if len(p) >= 3 and p[2].startswith("ii")}
    rc, out = run(["apt-mark", "showhold"])
    facts["holds"] = set(out.split())
    units = ["nvidia-persistenced.service"] + [f"{u['unit']}.service" for u in expect["units"]]
    facts["enabled"], facts["active"] = {}, {}
    for unit in units:
        facts["enabled"][unit] = run(["systemctl", "is-enabled", unit])[1].strip()
        facts["active"][unit] = run(["systemctl", "is-active", unit])[1].strip()
    facts["modules"] = read("/proc/modules") or ""
    facts["xid_lines"] = []
    if facts["gpus"]:
        rc, out = run(["journalctl", "-k", "-b", "--no-pager", "-o", "cat", "--grep", "NVRM: Xid"])
        facts["xid_lines"] = out.splitlines()
    facts["links"] = {link["link"]: (os.readlink(link["link"]) if os.path.islink(link["link"]) else None)
                      for link in expect["links"]}
    facts["stamped"] = {link["stamp"]: os.path.isfile(link["stamp"]) for link in expect["links"] if link["stamp"]}
    facts["servers"] = {}
    if facts["gpus"]:
        rc, apps = run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
        for u in expect["units"]:
            if "n_gpu_layers" not in u:  # residency is judged only where the expectations give the -ngl
                continue
            unit = u["unit"]
            pid_text = run(["systemctl", "show", "-p", "MainPID", "--value", unit])[1].strip()
            pid = int(pid_text) if pid_text.isdigit() else 0
            log = run(["journalctl", "-b", "-u", unit, f"_PID={pid}", "-o", "cat", "--no-pager"])[1].splitlines() \
                if pid else []
            facts["servers"][unit] = {"main_pid": pid, "log": log[-2000:],
                                              "compute_apps": apps.splitlines() if rc == 0 else []}
    return facts


def judge(facts: dict, expect: dict) -> list[tuple[str, str, str]]:
    """(check, state 'ok'|'broken'|'skipped', evidence) per check, in a fixed order."""
    rows = []
    gpus = facts["gpus"]

    def row(check: str, good: bool | None, evidence: str) -> None:
        rows.append((check, "skipped" if good is None else "ok" if good else "broken", evidence))

    pin = expect["driver_version"]
    loaded = facts["loaded_module"]
    userland = sorted({upstream(v) for n, v in facts["installed"].items() if n in expect["driver_packages"]})
    if loaded is None:
        row("loaded module matches the userland", None, "no nvidia module loaded")
    else:
        mismatch = "mismatch" in facts["nvidia_smi"].lower()
        row("loaded module matches the userland", loaded == pin and userland in ([], [loaded]) and not mismatch,
            f"module {loaded}, userland {userland}, pinned {pin}")
    held = set(facts["installed"]) & set(expect["driver_packages"])
    unheld = sorted(held - facts["holds"])
    row("driver packages held", not unheld and bool(held),
        f"not held: {unheld}" if unheld else f"{len(held)} held" if held else "no pinned driver package installed")
    unit = "nvidia-persistenced.service"
    enabled, active = facts["enabled"].get(unit) == "enabled", facts["active"].get(unit) == "active"
    row("nvidia-persistenced enabled", enabled and (active or not gpus),
        f"{facts['enabled'].get(unit) or 'unknown'}, {facts['active'].get(unit) or 'unknown'}")
    loaded_nouveau = any(line.split(" ", 1)[0] == "nouveau" for line in facts["modules"].splitlines())
    row("nouveau not loaded", not loaded_nouveau, "nouveau owns the GPU" if loaded_nouveau else "not loaded")
    if not gpus:
        row("nvidia-smi answers", None if loaded is None else False,
            NO_GPU if loaded is None else f"nvidia-smi exit {facts['nvidia_smi_rc']} with module {loaded} loaded")
        row("persistence mode on", None, NO_GPU)
        row("no serious Xid errors this boot", None, NO_GPU)
    else:
        row("nvidia-smi answers", True, f"{len(gpus)} GPUs")
        row("persistence mode on", not facts["persistence_off"],
            f"off on GPUs {facts['persistence_off']}" if facts["persistence_off"] else f"{len(gpus)} GPUs")
        serious = set(expect["serious_xids"])
        xids = [int(m.group(1)) for line in facts["xid_lines"]
                if (m := re.search(r"NVRM: Xid \([^)]*\): (\d+)", line)) and int(m.group(1)) in serious]
        row("no serious Xid errors this boot", not xids, f"Xid {sorted(set(xids))}" if xids else "none")
    for link in expect["links"]:  # each engine's build or venv (Engine.watch; the doctor's row names)
        target, want = facts["links"].get(link["link"]), link["target"]
        stamped = link["stamp"] is None or facts["stamped"].get(link["stamp"], False)
        row(link["check"], target == want and stamped, f"current -> {target}, settings say {want}"
            + ("" if stamped else " (not installed and checked)"))
    residency = _residency()
    for u in expect["units"]:
        unit, state = u["unit"], facts["active"].get(f"{u['unit']}.service")
        if u["needs_gpu"] and not gpus:
            # without a GPU bound to the driver the unit is skipped by its ConditionPathExistsGlob
            row(f"{unit} running", None, f"{NO_GPU}: not started")
            continue
        row(f"{unit} running", state == "active", state or "unknown")
        if "n_gpu_layers" not in u:
            continue
        if not gpus:
            row(f"{unit} serves from the GPU", None, f"{NO_GPU}: the server can only run on the CPU here")
            continue
        ev = facts["servers"].get(unit) or {"log": [], "main_pid": 0, "compute_apps": []}
        verdict = residency.judge(ev["log"], ev["main_pid"], residency.parse_compute_apps(ev["compute_apps"]),
                                  u["n_gpu_layers"])
        row(f"{unit} serves from the GPU", verdict.on_gpu, verdict.evidence)
    return rows


def _residency():
    """roles/llama_cpp/residency.py: beside this file on the box, in the repository when run from a checkout."""
    here = Path(__file__).resolve().parent
    for place in (here, here.parent / "llama_cpp"):
        if (place / "residency.py").is_file():
            sys.path.insert(0, str(place))
            break
    import residency  # noqa: PLC0415  (found above)
    return residency


def _label(value: str) -> str:
    """A Prometheus label value, escaped (exposition format: backslash, double quote, line feed)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(rows: list[tuple[str, str, str]], now: float) -> str:
    """The rows as Prometheus text exposition format (the metric names: roles/monitoring/METRICS.md)."""
    out = ["# HELP v100kit_check_ok The doctor's host-local check passed (1) or is broken (0); skipped: no sample.",
           "# TYPE v100kit_check_ok gauge"]
    out += [f'v100kit_check_ok{{check="{_label(c)}"}} {1 if s == "ok" else 0}' for c, s, _ in rows if s != "skipped"]
    out += ["# HELP v100kit_check_skipped The check cannot run on this host now (no GPU visible, ...).",
            "# TYPE v100kit_check_skipped gauge"]
    out += [f'v100kit_check_skipped{{check="{_label(c)}"}} 1' for c, s, _ in rows if s == "skipped"]
    out += ["# HELP v100kit_doctor_checks Checks per state in the last run.", "# TYPE v100kit_doctor_checks gauge"]
    out += [f'v100kit_doctor_checks{{state="{st}"}} {sum(1 for _, s, _ in rows if s == st)}'
            for st in ("ok", "broken", "skipped")]
    out += ["# HELP v100kit_doctor_last_run_timestamp_seconds When the doctor's host-local checks last ran.",
            "# TYPE v100kit_doctor_last_run_timestamp_seconds gauge",
            f"v100kit_doctor_last_run_timestamp_seconds {now:.3f}"]
    return "\n".join(out) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory (the collector never reads half)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect", required=True, help="expectations JSON written by the deploy")
    parser.add_argument("--output", required=True, help="the .prom file in the textfile collector directory")
    parser.add_argument("--print", action="store_true", help="also print the rows")
    args = parser.parse_args(argv)
    expect = json.loads(Path(args.expect).read_text())
    rows = judge(gather(expect), expect)
    write_atomically(Path(args.output), render(rows, time.time()))
    if args.print:
        for check, state, evidence in rows:
            print(f"{state.upper():8} {check}  {evidence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
