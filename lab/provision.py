"""Provision the bundled lab hosts once and record what happened: used by the lab tests, `make lab` and the
benchmarks in tools/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lab.harness import HOSTS, Lab, HostSpec

ROOT = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
LOGS = ROOT / "build" / "lab-logs"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTING = re.compile(r"^--> Starting (?:[\w ]+ )?operation: (.*?)(?: \(.*\))?$")
_HOST_LINE = re.compile(r"^\s*\[([\w.@-]+)\] ")
#: the one line pyinfra prints for each host and operation, in operation order, when the host is done with it; the
#: host names are padded to one width ("[lab-trixie]   Success" beside "[lab-bookworm] Success")
_STATUS = re.compile(r"^\s*\[([\w.@-]+)\]\s+(?:Success|No changes|Skipped|Error)\b")
#: Lab deploys let each host run its operations without waiting for the others at every operation (pyinfra's
#: --no-wait): a host's DKMS build no longer holds the other host's CUDA unpack or venv download. The plan, and so
#: every refusal, is still made for all hosts before any operation runs. V100KIT_LAB_NO_WAIT=0 runs in lockstep;
#: DeployRun.host_ops times each host's operations in both modes.
NO_WAIT = os.environ.get("V100KIT_LAB_NO_WAIT", "1") != "0"


@dataclass
class DeployRun:
    """One `pyinfra --json` run: exit code, wall time in seconds, per-host changed/unchanged operation counts."""

    rc: int
    seconds: float
    changed: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    changed_ops: dict[str, list[str]] = field(default_factory=dict)  # host -> names of operations that changed
    stderr: str = ""
    #: seconds from the start until pyinfra began running operations: inventory, connecting, facts, preparing
    prepare_seconds: float = 0.0
    #: host -> seconds from the start until its last operation's result was printed
    host_seconds: dict[str, float] = field(default_factory=dict)
    #: host -> [(operation name, seconds it took on that host)], in run order, with --no-wait or in lockstep: each
    #: host prints one status line per operation, in the order of the run's operations (pyinfra's JSON results)
    host_ops: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def by_role(self, host: str) -> list[tuple[str, float]]:
        """[(deploy name, seconds)] of `host`, largest first: the operations' seconds summed by the @deploy that
        made them (the part of an operation name before ' | ': "NVIDIA driver", "llama.cpp", ...)."""
        sums: dict[str, float] = {}
        for name, sec in self.host_ops.get(host, []):
            role = name.split(" | ", 1)[0] if " | " in name else "(no deploy)"
            sums[role] = sums.get(role, 0.0) + sec
        return sorted(sums.items(), key=lambda x: -x[1])

    def host_slowest(self, host: str, n: int = 6) -> list[tuple[str, float]]:
        """The `n` operations that took longest on `host`, slowest first."""
        return sorted(self.host_ops.get(host, []), key=lambda x: -x[1])[:n]


def host_operation_seconds(lines: list[tuple[float, str]], names: list[str]) -> dict[str, list[tuple[str, float]]]:
    """{host: [(operation name, seconds)]} from a pyinfra run's stderr lines (seconds since the start, text without
    colours) and its operation names in run order (the JSON results): each host prints one status line per
    operation, in that order, from "--> Beginning operation run" on. {} when the run never began."""
    begin = next((t for t, line in lines if line.strip().startswith("--> Beginning operation run")), None)
    if begin is None:
        return {}
    done: dict[str, list[float]] = {}
    for t, line in lines:
        if t >= begin and (m := _STATUS.match(line)):
            done.setdefault(m.group(1), []).append(t)
    return {h: [(name, end - start) for name, start, end in zip(names, [begin] + times[:-1], times)]
            for h, times in done.items()}


def deploy(label: str, extra_args: list[str] | None = None, files: tuple[str, ...] = ("deploy.py",),
           inventory: str = "inventory/lab.py", no_wait: bool | None = None, logs: Path = LOGS) -> DeployRun:
    """Run deploy files (deploy.py by default) against the running lab hosts of `inventory` with
    `pyinfra -y --json`, with --no-wait unless `no_wait` is False (None: NO_WAIT); the output is kept under
    `logs`/<label>.log (build/lab-logs by default)."""
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    no_wait = NO_WAIT if no_wait is None else no_wait
    mode = ["--no-wait"] if no_wait else []
    proc = subprocess.Popen([PYINFRA, "-y", "--json", *mode, *(extra_args or []), inventory, *files],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamped: list[tuple[float, str]] = []  # stderr lines with the time they arrived: where the deploy's time goes
    log = logs / f"{label}.log"

    def read_stderr() -> None:
        with log.open("w") as live:  # followable while the deploy runs (`tail -f`); rewritten whole at the end
            for line in proc.stderr:
                stamped.append((time.monotonic() - t0, line))
                live.write(line)
                live.flush()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    stdout = proc.stdout.read()
    proc.wait()
    reader.join()
    stderr = "".join(line for _, line in stamped)
    run = DeployRun(proc.returncode, time.monotonic() - t0, stderr=stderr)
    plain = [(t, _ANSI.sub("", line)) for t, line in stamped]
    starts = [(t, m.group(1)) for t, line in plain if (m := _STARTING.match(line.strip()))]
    if starts:
        run.prepare_seconds = starts[0][0]
        results_at = next((t for t, line in plain if line.startswith("--> Results")), run.seconds)
        for t, line in plain:
            if starts[0][0] <= t <= results_at and (m := _HOST_LINE.match(line)):
                run.host_seconds[m.group(1)] = t
    log.write_text(stderr + "\n" + stdout)
    try:
        results = json.loads(stdout)["results"]["operations"]
    except (ValueError, KeyError, TypeError):
        return run
    run.host_ops = host_operation_seconds(plain, [op["name"] for op in results])
    for op in results:
        for key, bucket in (("success", run.changed), ("no_change", run.unchanged), ("error", run.errors)):
            for h in op.get(key, []):
                bucket[h] = bucket.get(h, 0) + 1
        for h in op.get("success", []):
            run.changed_ops.setdefault(h, []).append(op["name"])
    if run.rc == 0 and run.errors:  # pyinfra --no-wait exits 0 after a failed operation (pyinfra 3.10, measured)
        run.rc = 1
    return run


#: V100KIT_LAB_REUSE=1: the hosts were provisioned by an earlier run. Checks that need fresh hosts skip.
REUSED = os.environ.get("V100KIT_LAB_REUSE") == "1"
FRESH_ONLY = "V100KIT_LAB_REUSE=1: the hosts were provisioned by an earlier run, and this check needs fresh ones"


#: ccache's counters (`ccache --print-stats`) that say whether a compilation was served from the cache
CCACHE_HITS = ("direct_cache_hit", "preprocessed_cache_hit")
CCACHE_MISSES = ("cache_miss",)


def ccache_stats(text: str) -> dict[str, int]:
    """`ccache --print-stats` output (one `name<TAB>value` per line) as {name: value}; other lines are ignored."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            out[name.strip()] = int(value)
    return out


#: Each DKMS build's seconds, from DKMS's own log on the host: make.log's second line is the build's start date,
#: the file's modification time its end. Prints "MODULE/VERSION/KERNEL SECONDS" per build.
DKMS_SECONDS = ("for f in /var/lib/dkms/*/*/*/*/log/make.log; do [ -f \"$f\" ] || continue; "
                "s=$(date -d \"$(sed -n 2p \"$f\")\" +%s) && e=$(stat -c %Y \"$f\") && "
                "echo \"$(echo \"$f\" | cut -d/ -f5-7) $((e - s))\"; done")


def dkms_seconds(text: str) -> dict[str, int]:
    """DKMS_SECONDS' output as {"module/version/kernel": seconds}."""
    out = {}
    for line in text.splitlines():
        name, _, sec = line.rpartition(" ")
        if name and sec.lstrip("-").isdigit():
            out[name] = int(sec)
    return out


@dataclass
class Provision:
    lab: Lab
    up_seconds: float
    first: DeployRun
    second: DeployRun
    reboots: dict[str, tuple[str, str]]
    #: the lab's shared compiler cache during the first deploy (counters zeroed just before it): ccache's own
    #: counters (`ccache --print-stats`), for the llama.cpp CUDA build and the DKMS module builds together
    ccache: dict[str, int] = field(default_factory=dict)
    #: host -> {"module/version/kernel": seconds} of the DKMS builds of the first deploy (DKMS's own log)
    dkms: dict[str, dict[str, int]] = field(default_factory=dict)

    def ccache_hit_rate(self) -> float | None:
        """Hits / (hits + misses) of the first deploy's compilations, or None when nothing was compiled."""
        hits = sum(self.ccache.get(k, 0) for k in CCACHE_HITS)
        total = hits + sum(self.ccache.get(k, 0) for k in CCACHE_MISSES)
        return hits / total if total else None


def provision(hosts: tuple[HostSpec, ...] = HOSTS, reboot: bool = True) -> Provision:
    """Boot fresh lab hosts, deploy, deploy again (must change nothing), then reboot every host so that all later
    checks see what survives a reboot. V100KIT_LAB_REUSE=1 keeps existing hosts (faster, for development)."""
    lab = Lab()
    t0 = time.monotonic()
    lab.prepare()  # state and cache directories, client key: once, before the hosts start side by side
    if os.environ.get("V100KIT_LAB_REUSE") != "1":
        for s in hosts:
            lab.destroy(s)
    lab.check_disk(hosts)
    with ThreadPoolExecutor(len(hosts)) as pool:
        list(pool.map(lab.up, hosts))
    up_seconds = time.monotonic() - t0
    # the lab images carry ccache (lab/harness.py) and every host's /etc/ccache.conf names the one shared cache
    lab.run(hosts[0], "ccache --zero-stats")
    first = deploy("deploy-1")
    rc, out = lab.run(hosts[0], "ccache --print-stats")
    stats = ccache_stats(out) if rc == 0 else {}
    dkms = {s.name: dkms_seconds(lab.run(s, DKMS_SECONDS)[1]) for s in hosts}
    second = deploy("deploy-2") if first.rc == 0 else first
    reboots = {s.name: lab.reboot(s) for s in hosts} if reboot and first.rc == 0 else {}
    return Provision(lab, up_seconds, first, second, reboots, stats, dkms)
