"""pyinfra inventory of the running bundled lab hosts (start them with `v100kit lab up`).

Groups are named by OS so that group_data/debian12.py and group_data/debian13.py apply.
"""

from lab.harness import Lab

_groups = Lab().pyinfra_hosts()
debian12 = _groups.get("debian12", [])
debian13 = _groups.get("debian13", [])
