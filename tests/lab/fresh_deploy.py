"""The deploy that tests/lab/test_fresh_lab.py runs on a lab started from empty directories: the preflight and
the base and tuning roles (apt sources, packages, service user, kernel settings), which need no GPU packages."""

from pyinfra import host

from roles.base.deploy import base
from roles.tuning.deploy import tuning
from roles.preflight import preflight

plan = preflight(host)
base(plan.settings, plan.platform)
tuning(plan.settings)
