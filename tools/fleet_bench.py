"""Deploy time against the number of hosts (issue 16's fleet measurement; run as root, not part of the tests).

For each count N (default 1, 4, 8) the lab boots N Debian 12 hosts of its own (names fleet-1..N, sshd ports 2301..,
a temporary state directory; the lab's image and apt caches are shared), deploys the base and tuning roles on all
of them at once (tests/lab/fresh_deploy.py: apt sources, packages, service user, kernel settings), then deploys
again (no change), then destroys them. Each N is timed twice: in pyinfra's default lockstep (every operation waits
for every host) and with --no-wait. Prints a Markdown table; N x the one-host time is what a serial deploy costs.

    .venv/bin/python tools/fleet_bench.py [N ...] [--modes lockstep,no-wait]

Each host has its own apt archive directory (Lab's private_apt: hard links to the suite's cached .debs), as each
box of a real fleet has: one shared directory would make the hosts queue on its lock.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.harness import LAB_CACHE, LAB_DATA, HostSpec, Lab  # noqa: E402
from lab.provision import PYINFRA  # noqa: E402

INVENTORY = """
from pathlib import Path
from lab.harness import HostSpec, Lab
lab = Lab(Path({state!r}), Path({cache!r}), hosts=tuple(HostSpec(*h) for h in {hosts!r}))
debian12 = lab.pyinfra_hosts()["debian12"]
"""


def deploy(inventory: Path, no_wait: bool) -> tuple[float, int, int]:
    """(seconds, exit status, changed operations) of one pyinfra run of base + tuning."""
    t0 = time.monotonic()
    res = subprocess.run([PYINFRA, "-y", "--json", *(["--no-wait"] if no_wait else []), str(inventory),
                          "tests/lab/fresh_deploy.py"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    try:
        ops = json.loads(res.stdout)["results"]["operations"]
        changed = sum(len(op.get("success", [])) for op in ops)
        errors = sum(len(op.get("error", [])) for op in ops)
    except (ValueError, KeyError):
        changed, errors = -1, 1
    rc = res.returncode or (1 if errors else 0)
    if rc:
        print(res.stderr[-3000:], file=sys.stderr)
    return seconds, rc, changed


def measure(n: int, no_wait: bool) -> dict:
    top = Path(tempfile.mkdtemp(prefix="v100kit-fleet-", dir="/var/tmp"))
    hosts = tuple(HostSpec(f"fleet-{i}", "bookworm", 2300 + i, "debian12", dict(LAB_DATA)) for i in range(1, n + 1))
    lab = Lab(top / "state", LAB_CACHE, hosts=hosts, private_apt=True)
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lab.up, hosts))
        up = time.monotonic() - t0
        inventory = top / "inventory.py"
        inventory.write_text(INVENTORY.format(state=str(lab.state), cache=str(LAB_CACHE),
                                              hosts=[(h.name, h.suite, h.ssh_port, h.group, h.data) for h in hosts]))
        first = deploy(inventory, no_wait)
        again = deploy(inventory, no_wait)
        return {"hosts": n, "mode": "no-wait" if no_wait else "lockstep", "up": up, "first": first, "again": again}
    finally:
        for h in hosts:
            lab.destroy(h)
        shutil.rmtree(top, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("counts", nargs="*", type=int, default=[1, 4, 8])
    ap.add_argument("--modes", default="lockstep,no-wait")
    args = ap.parse_args(argv)
    rows = []
    for mode in args.modes.split(","):
        for n in args.counts:
            r = measure(n, mode == "no-wait")
            rows.append(r)
            print(f"{mode} {n} hosts: first {r['first'][0]:.1f} s rc {r['first'][1]} changed {r['first'][2]}; "
                  f"again {r['again'][0]:.1f} s changed {r['again'][2]}", flush=True)
    print("\n| mode | hosts | boot (s) | first deploy (s) | x one host | no-op deploy (s) | changed on no-op | rc |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    base = {r["mode"]: r["first"][0] for r in rows if r["hosts"] == min(args.counts)}
    for r in rows:
        print(f"| {r['mode']} | {r['hosts']} | {r['up']:.1f} | {r['first'][0]:.1f} | {r['first'][0] / base[r['mode']]:.2f} "
              f"| {r['again'][0]:.1f} | {r['again'][2]} | {r['first'][1]}/{r['again'][1]} |")
    return 0 if all(r["first"][1] == 0 and r["again"][1] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
