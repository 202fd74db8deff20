"""Deploy time against the number of hosts (issue 16's fleet measurement; run as root, not part of the tests).

For each count N (default 1, 4, 8) the lab boots N Debian 12 hosts of its own (names fleet-1..N, sshd ports 2301..,
a temporary state directory; the lab's image and apt caches are shared), deploys the base and tuning roles on all
of them at once (tests/lab/fresh_deploy.py: apt sources, packages, service user, kernel settings), then deploys
again (no change), then destroys them. Each N is timed twice: in pyinfra's default lockstep (every operation waits
for every host) and with --no-wait. Prints a Markdown table; N x the one-host time is what a serial deploy costs.

    .venv/bin/python tools/fleet_bench.py [N ...] [--modes lockstep,no-wait] [--shared-apt]

Each host has its own apt archive directory (Lab's private_apt: hard links to the suite's cached .debs), as each
box of a real fleet has: one shared directory would make the hosts queue on its lock.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.harness import LAB_CACHE, LAB_DATA, HostSpec, Lab  # noqa: E402
from lab import provision  # noqa: E402

INVENTORY = """
from pathlib import Path
from lab.harness import HostSpec, Lab
lab = Lab(Path({state!r}), Path({cache!r}), hosts=tuple(HostSpec(*h) for h in {hosts!r}))
debian12 = lab.pyinfra_hosts()["debian12"]
"""


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in USER_HZ ticks (/proc/stat's first line)."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return busy, busy + v[3] + v[4]


def deploy(inventory: Path, no_wait: bool, label: str) -> tuple[float, int, int, float, float]:
    """(seconds, exit status, changed operations, pyinfra's own CPU seconds, the machine's busy share 0..1) of one
    pyinfra run of base + tuning (lab.provision.deploy; its log in build/lab-logs/LABEL.log). pyinfra's CPU is its
    process's user + system time (it drives every host from one process); the busy share is that of all cores over
    the run (the hosts' commands included)."""
    before, b0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_jiffies()
    run = provision.deploy(label, files=("tests/lab/fresh_deploy.py",), inventory=str(inventory), no_wait=no_wait)
    after, b1 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_jiffies()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    busy = (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
    if run.rc:
        print(run.stderr[-3000:], file=sys.stderr)
    return run.seconds, run.rc, sum(run.changed.values()), cpu, busy


def measure(n: int, no_wait: bool, private_apt: bool = True) -> dict:
    top = Path(tempfile.mkdtemp(prefix="v100kit-fleet-", dir="/var/tmp"))
    hosts = tuple(HostSpec(f"fleet-{i}", "bookworm", 2300 + i, "debian12", dict(LAB_DATA)) for i in range(1, n + 1))
    lab = Lab(top / "state", LAB_CACHE, hosts=hosts, private_apt=private_apt)
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lab.up, hosts))
        up = time.monotonic() - t0
        inventory = top / "inventory.py"
        inventory.write_text(INVENTORY.format(state=str(lab.state), cache=str(LAB_CACHE),
                                              hosts=[(h.name, h.suite, h.ssh_port, h.group, h.data) for h in hosts]))
        mode = "no-wait" if no_wait else "lockstep"
        first = deploy(inventory, no_wait, f"fleet-{mode}-{n}-first")
        again = deploy(inventory, no_wait, f"fleet-{mode}-{n}-again")
        return {"hosts": n, "mode": mode, "up": up, "first": first, "again": again}
    finally:
        for h in hosts:
            lab.destroy(h)
        shutil.rmtree(top, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("counts", nargs="*", type=int, default=[1, 4, 8])
    ap.add_argument("--modes", default="lockstep,no-wait")
    ap.add_argument("--shared-apt", action="store_true",
                    help="one apt archive directory for all hosts (as before; its lock serializes their apt runs)")
    args = ap.parse_args(argv)
    rows = []
    for mode in args.modes.split(","):
        for n in args.counts:
            r = measure(n, mode == "no-wait", not args.shared_apt)
            rows.append(r)
            print(f"{mode} {n} hosts: first {r['first'][0]:.1f} s rc {r['first'][1]} changed {r['first'][2]} "
                  f"pyinfra CPU {r['first'][3]:.1f} s busy {r['first'][4]:.0%}; "
                  f"again {r['again'][0]:.1f} s changed {r['again'][2]} pyinfra CPU {r['again'][3]:.1f} s "
                  f"busy {r['again'][4]:.0%}", flush=True)
    print("\n| mode | hosts | boot (s) | first deploy (s) | x one host | pyinfra CPU (s) | machine busy | "
          "no-op deploy (s) | x one host | pyinfra CPU (s) | machine busy | changed on no-op | rc |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    noop = {r["mode"]: r["again"][0] for r in rows if r["hosts"] == min(args.counts)}
    base = {r["mode"]: r["first"][0] for r in rows if r["hosts"] == min(args.counts)}
    for r in rows:
        print(f"| {r['mode']} | {r['hosts']} | {r['up']:.1f} | {r['first'][0]:.1f} | {r['first'][0] / base[r['mode']]:.2f} "
              f"| {r['first'][3]:.1f} | {r['first'][4]:.0%} | {r['again'][0]:.1f} | {r['again'][0] / noop[r['mode']]:.2f} "
              f"| {r['again'][3]:.1f} | {r['again'][4]:.0%} | {r['again'][2]} | {r['first'][1]}/{r['again'][1]} |")
    return 0 if all(r["first"][1] == 0 and r["again"][1] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
