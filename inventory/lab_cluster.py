"""pyinfra inventory of the lab's Ray cluster (lab/data.py CLUSTER_HOSTS; tests/lab/test_ray_cluster.py starts it):
group raylab, two Debian 12 hosts in their own network namespaces, lab-ray1 the head."""

from lab.data import CLUSTER_GROUP, cluster_lab

raylab = cluster_lab().pyinfra_hosts().get(CLUSTER_GROUP, [])
