"""The deploy that tests/lab/test_fresh_lab.py runs on a lab started from empty directories: the preflight and
the base and tuning roles (apt sources, packages, service user, kernel settings), which need no GPU packages."""

from pyinfra import host

from roles.base import deploy as base
from roles.tuning import deploy as tuning
from roles.preflight import preflight

plan = preflight(host)
base.base(plan.settings, plan.platform)
tuning.tuning(plan.settings)
