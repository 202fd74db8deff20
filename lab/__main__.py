"""Command line for the lab: python -m lab {up,list,reboot,stop,destroy,ssh-config} [HOST ...]."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from lab.harness import HOSTS, Lab, LabError, spec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    p.add_argument("action", choices=["up", "list", "reboot", "stop", "destroy", "ssh-config"])
    p.add_argument("hosts", nargs="*", help="lab host names (default: all bundled hosts)")
    args = p.parse_args(argv)
    lab = Lab()
    try:
        specs = [spec(n) for n in args.hosts] or list(HOSTS)
        if args.action == "list":
            print(json.dumps(lab.status(), indent=2))
        elif args.action == "ssh-config":
            print(lab.ssh_config)
        elif args.action == "up":
            # images and hosts of different suites are independent: build and boot them side by side
            with ThreadPoolExecutor(len(specs)) as pool:
                for s, boot_id in zip(specs, pool.map(lab.up, specs)):
                    print(f"{s.name}: up, ssh -F {lab.ssh_config} {s.name}, boot_id {boot_id}")
        elif args.action == "reboot":
            for s in specs:
                old, new = lab.reboot(s)
                print(f"{s.name}: rebooted, boot_id {old} -> {new}")
        elif args.action == "stop":
            for s in specs:
                lab.stop(s)
                print(f"{s.name}: stopped")
        elif args.action == "destroy":
            for s in specs:
                lab.destroy(s)
                print(f"{s.name}: destroyed")
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
