"""pyinfra inventory of the lab's offline host (lab/data.py OFFLINE_HOST; tests/lab/test_offline.py starts it):
group offlinelab, one Debian 12 host in its own network namespace that reaches nothing but the lab bridge."""

from lab.data import OFFLINE_GROUP, offline_lab

offlinelab = offline_lab().pyinfra_hosts().get(OFFLINE_GROUP, [])
