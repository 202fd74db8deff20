"""The lmdeploy role's operations: the pinned uv (vLLM's, shared), the hash-locked venv, /opt/lmdeploy/current, the
key launcher, and one systemd lmdeploy@NAME per instance of a plan decided beforehand (roles/lmdeploy/decide.py).

`converge(settings, plan)` is the role's one entry point (the engine's deploy hook): the venv, then the instances,
restarted only when their unit, arguments, key, model, launcher or venv changed."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files

from roles.engine_deploy import instance_unit, model_copies, pinned_uv, start, venv_and_link
from roles.lmdeploy.decide import (CHECK, CONFIG_DIR, CREDENTIAL, CURRENT, LAUNCHER, STAMP, UNIT, UV, VENV_ROOT, WORK,
                                   LmdeployPlan, environment, key_file_text)
from roles.ops import remove_instances, secret_file
from roles.vllm.versions import UV_WHEEL_URL

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"


@deploy("LMDeploy venv")
def lmdeploy_venv(settings, p: LmdeployPlan | None):
    """Converge the pinned uv, the hash-locked venv of `p`, the launcher and /opt/lmdeploy/current (nothing with p
    None). Returns the operations whose change restarts the instances ([] with p None)."""
    if p is None:
        return []
    files.directory(name="LMDeploy work area", path=WORK, mode="700")
    if not host.get_fact(File, path=UV):  # vLLM's role may have unpacked the same pinned uv already
        pinned_uv(WORK, getattr(settings, "vllm_uv_wheel_url", None) or UV_WHEEL_URL, settings.lmdeploy_python)
    (_, launcher), link = venv_and_link(
        p, "lmdeploy", settings.lmdeploy_python, settings.lmdeploy_index_url, venv_root=VENV_ROOT, current=CURRENT,
        work=WORK, check=CHECK, stamp=STAMP,
        scripts=[("venv check script", HERE / "check_venv.py", CHECK),
                 ("API key launcher", HERE / "launch.py", LAUNCHER)])
    return [launcher, link]


@deploy("LMDeploy")
def lmdeploy(settings, p: LmdeployPlan | None, changed_venv: list | None = None) -> None:
    """Converge the lmdeploy@NAME instances of `p` (restarted when their unit, arguments, key, model or
    `changed_venv`, lmdeploy_venv's operations, changed); with p None only stop and unconfigure instances a previous
    deploy set up (venvs and models stay)."""
    if p is not None:
        _serve(settings, p, changed_venv or [])
    remove_instances(UNIT, CONFIG_DIR, {i.name for i in p.instances} if p else set())


def _serve(settings, p: LmdeployPlan, changed_venv: list) -> None:
    unit = instance_unit(settings, UNIT, TEMPLATES, CURRENT, CONFIG_DIR, launcher=LAUNCHER, credential=CREDENTIAL)
    for inst in p.instances:
        changed = [unit, *changed_venv, *model_copies(inst, settings.base_service_user)]
        # the arguments hold no secret (0644, as vLLM's); the key file is 0600 root, read by systemd alone
        changed.append(files.put(name=f"{inst.name}: arguments", src=StringIO(environment(p, inst)),
                                 dest=f"{CONFIG_DIR}/{inst.name}.env", mode="644"))
        changed.append(secret_file(name=f"{inst.name}: API key (0600)" if inst.api_key else
                                   f"{inst.name}: no API key (empty 0600 credential)",
                                   dest=f"{CONFIG_DIR}/{inst.name}.key.env", content=key_file_text(inst)))
        start(f"{UNIT}@{inst.name}", changed, "unit, arguments, key, model, launcher or venv", p.gpu_visible)


def converge(settings, p: LmdeployPlan | None) -> None:
    """The role on one host (the engine's deploy hook): the venv, then the instances."""
    lmdeploy(settings, p, lmdeploy_venv(settings, p))


def deploy_engine(settings, p: LmdeployPlan | None, host_plan=None) -> None:
    """The engine's deploy hook (roles/engines.py Engine.deploy): `host_plan` is not needed, the plan holds all."""
    converge(settings, p)
