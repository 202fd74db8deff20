"""The vllm role's operations: the pinned uv, the hash-locked venv, /opt/vllm/current, and one systemd vllm@NAME per
instance of a plan decided beforehand (roles/vllm/decide.py)."""

from __future__ import annotations

from pathlib import Path

from pyinfra.api import deploy
from pyinfra.operations import apt, files

from roles.engine_deploy import instance_unit, model_copies, pinned_uv, start, venv_and_link
from roles.ops import instance_config, remove_instances
from roles.ray.decide import HEAD_TEMP_DIR as RAY_TEMP_DIR
from roles.ray.deploy import ray
from roles.settings import Settings
from roles.vllm.decide import CHECK, CONFIG_DIR, CURRENT, STAMP, VENV_ROOT, WORK, VllmPlan, environment
from roles.vllm.versions import UV_WHEEL_URL

TEMPLATES = Path(__file__).parent / "templates"


@deploy("vLLM venv")
def vllm_venv(settings: Settings, p: VllmPlan | None):
    """Converge the pinned uv, the hash-locked venv of `p` and /opt/vllm/current (nothing with p None). Returns the
    /opt/vllm/current operation (None with p None): the services restart when it changed."""
    if p is None:
        return None
    # Triton compiles a small C launcher at run time: it needs a C compiler and the venv Python's headers
    apt.packages(name="run-time build tools", no_recommends=True,
                 packages=["gcc", "libc6-dev", f"python{p.python}-dev"])
    files.directory(name="vLLM work area", path=WORK, mode="700")
    pinned_uv(WORK, settings.vllm_uv_wheel_url or UV_WHEEL_URL, settings.vllm_python)
    _, link = venv_and_link(p, "vllm", settings.vllm_python, settings.vllm_index_url, venv_root=VENV_ROOT,
                            current=CURRENT, work=WORK, check=CHECK, stamp=STAMP,
                            scripts=[("venv check script", Path(__file__).parent / "check_venv.py", CHECK)])
    return link


@deploy("vLLM")
def vllm(settings: Settings, p: VllmPlan | None, link=None) -> None:
    """Converge the vllm@NAME instances of `p` (restarted when their unit, settings, model or `link`, vllm_venv's
    operation, changed); with p None (no instance configured) only stop and unconfigure instances a previous
    deploy set up (venvs and models stay). A Ray cluster's worker gets the model files and no vllm@ unit (the
    head serves)."""
    if p is not None:
        _serve(settings, p, link)
    remove_instances("vllm", CONFIG_DIR, {i.name for i in p.instances} if p and p.serves else set())


def deploy_engine(settings: Settings, p: VllmPlan | None, host_plan) -> None:
    """The engine's deploy hook (roles/vllm/engine.py ENGINE.deploy; deploy.py calls it through the registry): the
    hash-locked venv, then the node's Ray unit of `host_plan.ray` (roles.preflight.HostPlan; Ray runs from that venv
    and restarts when it changed), then the vllm@NAME units, which a cluster head starts after ray-head."""
    venv = vllm_venv(settings, p)
    ray(settings, host_plan.ray, venv)
    vllm(settings, p, venv)


def _serve(settings: Settings, p: VllmPlan, link) -> None:
    unit = instance_unit(settings, "vllm", TEMPLATES, CURRENT, CONFIG_DIR,
                         ray_temp_dir=RAY_TEMP_DIR if p.cluster else None)
    for inst in p.instances:
        changed = [unit] + ([link] if link is not None else [])
        changed += model_copies(inst, settings.base_service_user)
        if not p.serves:  # a Ray worker: the head's vLLM loads this node's stage from the same path
            continue
        changed += instance_config(inst.name, CONFIG_DIR, environment(p, inst), "VLLM_API_KEY", inst.api_key)
        start(f"vllm@{inst.name}", changed, "unit, settings, model or venv", p.gpu_visible)
