"""A deploy file for the plan-level tests of roles/lmdeploy alone: the settings model, the engine's plan hook with
the host's facts (as preflight calls it), then the role's deploy hook, without the other roles' operations that
deploy.py adds (the engine is registered: deploy.py runs the same hook through Engine.converge)."""

from pyinfra import host

from roles.engines import PlanInputs
from roles.lmdeploy.deploy import deploy_engine
from roles.lmdeploy.engine import ENGINE
from roles.nvidia_driver.facts import NvidiaGpus
from roles.preflight import HostRefused
from roles.settings import _PYINFRA_PREFIXES
from tests.plan.lmdeploy_deploy_settings import ComposedSettings


data = {k: v for k, v in host.data.dict().items() if not k.startswith(_PYINFRA_PREFIXES)}
settings = ComposedSettings(**data)
plan, problems = ENGINE.plan(PlanInputs(settings, [], host.get_fact(NvidiaGpus), None, None, {}, host.get_fact))
if problems:
    raise HostRefused(host.name, problems)
deploy_engine(settings, plan)
