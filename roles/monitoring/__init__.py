"""monitoring role: Prometheus-ready hosts. decide.py: what the role does on one host and the scrape configuration
for an inventory (pure); deploy.py: the operations; doctor_local.py: the doctor's host-local checks, run on the box;
METRICS.md: every metric name the toolkit writes or its alerts read."""
