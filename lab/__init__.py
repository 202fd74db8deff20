"""The lab: real Debian hosts booted with systemd (systemd-nspawn) on this machine, reached over SSH.

`lab.harness.Lab` builds root filesystems with mmdebstrap (cached), boots hosts, reboots them (boot_id
changes), stops them by the PID it started, and destroys them. `inventory/lab.py` exposes the running
hosts to pyinfra; `v100kit lab` (lab/cli.py) is the command line.
"""
