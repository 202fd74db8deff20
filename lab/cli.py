"""v100kit lab {up,list,reboot,stop,destroy,ssh-config} [HOST ...]: the bundled lab hosts.

up builds (or reuses) each host's image and root filesystem and boots it; list prints their state as JSON;
reboot reboots from inside and checks the boot_id changed; stop powers off; destroy also deletes the root
filesystem (images and download caches stay); ssh-config prints the path of the client ssh_config.

Exit status: 0 done, 2 a lab host could not be built, booted or reached (the reason on stderr) or a bad argument,
130 interrupted, 143 terminated (SIGTERM) (v100kit/cli.py: the convention every command shares).
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from lab.harness import HOSTS, Lab, LabError, spec


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["up", "list", "reboot", "stop", "destroy", "ssh-config"])
    p.add_argument("hosts", nargs="*", help="lab host names (default: all bundled hosts)")


def run(args: argparse.Namespace) -> int:
    """Carry out args.action on args.hosts; 2 (with the reason on stderr) when the lab fails."""
    lab = Lab()
    try:
        specs = [spec(n) for n in args.hosts] or list(HOSTS)
        if args.action == "list":
            print(json.dumps(lab.status(), indent=2))
        elif args.action == "ssh-config":
            print(lab.ssh_config)
        elif args.action == "up":
            lab.prepare()  # state, caches and the client key once, before the hosts start side by side
            lab.check_disk(specs)
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
            if not args.hosts:  # and the hosts tests/lab/test_ray_cluster.py and test_offline.py start
                from lab.data import CLUSTER_HOSTS, OFFLINE_HOST, cluster_lab, offline_lab
                for other, hosts in ((cluster_lab(), CLUSTER_HOSTS), (offline_lab(), (OFFLINE_HOST,))):
                    for s in hosts:
                        if other.host_dir(s).exists():
                            other.destroy(s)
                            print(f"{s.name}: destroyed")
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 2  # v100kit/hosts.py NOT_CHECKED (the lab imports nothing of v100kit)
    return 0
