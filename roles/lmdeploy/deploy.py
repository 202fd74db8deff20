"""The lmdeploy role's operations: the pinned uv (vLLM's, shared), the hash-locked venv, /opt/lmdeploy/current, the
key launcher, and one systemd lmdeploy@NAME per instance of a plan decided beforehand (roles/lmdeploy/decide.py).

`converge(settings, plan)` is the role's one entry point (the engine's deploy hook): the venv, then the instances,
restarted only when their unit, arguments, key, model, launcher or venv changed."""

from __future__ import annotations

import json
import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import files, systemd

from roles.engines import unit_jinja
from roles.lmdeploy.decide import (CHECK, CONFIG_DIR, CREDENTIAL, CURRENT, LAUNCHER, STAMP, UNIT, UV, UV_CACHE,
                                   VENV_ROOT, WORK, LmdeployPlan, environment, install_flags, key_file_text)
from roles.ops import CURL_RETRY, current_link, remove_instances, restart_then_run, secret_file
from roles.progress import UV_STEPS, Streamed, watched
from roles.vllm.deploy import uv_binary
from roles.vllm.versions import UV_VERSION, UV_WHEEL_SHA256, UV_WHEEL_URL

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"


@operation()
def venv(p: LmdeployPlan, python: str, lock: str, index_url: str):
    """Install p.venv from `lock` (on the host) unless it is there and stamped: the vLLM role's recipe
    (roles/vllm/deploy.py venv): uv creates the venv on `python` and installs exactly the locked wheels
    (--require-hashes, --no-deps, --only-binary :all:, bytecode compiled), then `uv pip check` and check_venv.py
    (lmdeploy version, sm_70 in torch) must pass before the stamp is written; any failure removes this half-made
    venv only. uv's output goes to WORK/install-<venv name>.log (its last 30 lines in the deploy log on failure)."""
    if host.get_fact(File, path=f"{p.venv}/{STAMP}"):
        return
    log = f"{WORK}/install-{Path(p.venv).name}.log"
    stamp = json.dumps({"lmdeploy": p.release.version, "python": p.python, "lock_sha256": p.lock_sha256})
    fail = f"{{ tail -30 {log} >&2; rm -rf {p.venv}; exit 1; }}"
    yield Streamed(
        f"set -e; rm -rf {p.venv}; mkdir -p {UV_CACHE}; "
        f"export UV_CACHE_DIR={UV_CACHE} UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1 "
        "UV_SYSTEM_CERTS=1; "
        f"{UV} venv --quiet --python {shlex.quote(python)} {p.venv} > {log} 2>&1 || {fail}; "
        + watched(f"{UV} pip install --python {p.venv}/bin/python "
                  f"{' '.join(shlex.quote(a) for a in install_flags(index_url))} -r {lock}",
                  log, f"venv {Path(p.venv).name}", UV_STEPS, fail) + "; "
        f"{UV} pip check --python {p.venv}/bin/python >> {log} 2>&1 || {fail}; "
        f"{p.venv}/bin/python {CHECK} {p.release.version} >> {log} 2>&1 || {fail}; "
        f"printf '%s\\n' {shlex.quote(stamp)} > {p.venv}/{STAMP}"
    )


@deploy("LMDeploy venv")
def lmdeploy_venv(settings, p: LmdeployPlan | None):
    """Converge the pinned uv, the hash-locked venv of `p`, the launcher and /opt/lmdeploy/current (nothing with p
    None). Returns the operations whose change restarts the instances ([] with p None)."""
    if p is None:
        return []
    files.directory(name="LMDeploy work area", path=WORK, mode="700")
    if not host.get_fact(File, path=UV):  # vLLM's role may have unpacked the same pinned uv already
        wheel = f"{WORK}/uv-{UV_VERSION}.whl"
        files.download(name=f"uv {UV_VERSION} wheel", src=getattr(settings, "vllm_uv_wheel_url", None) or UV_WHEEL_URL,
                       dest=wheel, sha256sum=UV_WHEEL_SHA256, mode="600", extra_curl_args=CURL_RETRY)
        uv_binary(name=f"uv {UV_VERSION}", wheel=wheel, python=settings.lmdeploy_python)
    files.directory(name="venv root", path=f"{VENV_ROOT}/locks", mode="755")
    files.put(name="venv check script", src=str(HERE / "check_venv.py"), dest=CHECK, mode="644")
    launcher = files.put(name="API key launcher", src=str(HERE / "launch.py"), dest=LAUNCHER, mode="644")
    lock = f"{VENV_ROOT}/locks/{Path(p.venv).name}.txt"
    files.put(name=f"lock {p.lock.name}", src=str(p.lock), dest=lock, mode="644")
    venv(name=f"venv {Path(p.venv).name}", p=p, python=settings.lmdeploy_python, lock=lock,
         index_url=settings.lmdeploy_index_url)
    return [launcher, current_link(name=f"{CURRENT} -> {Path(p.venv).name}", link=CURRENT, target=p.venv)]


@deploy("LMDeploy")
def lmdeploy(settings, p: LmdeployPlan | None, changed_venv: list | None = None) -> None:
    """Converge the lmdeploy@NAME instances of `p` (restarted when their unit, arguments, key, model or
    `changed_venv`, lmdeploy_venv's operations, changed); with p None only stop and unconfigure instances a previous
    deploy set up (venvs and models stay)."""
    if p is not None:
        _serve(settings, p, changed_venv or [])
    remove_instances(UNIT, CONFIG_DIR, {i.name for i in p.instances} if p else set())


def _serve(settings, p: LmdeployPlan, changed_venv: list) -> None:
    user, home = settings.base_service_user, settings.base_service_home
    unit = files.template(
        name=f"{UNIT}@ unit", src=str(TEMPLATES / f"{UNIT}@.service.j2"), dest=f"/etc/systemd/system/{UNIT}@.service",
        jinja_env_kwargs=unit_jinja(TEMPLATES), mode="644", service_user=user, current=CURRENT, launcher=LAUNCHER,
        credential=CREDENTIAL, home=home, nofile=settings.tuning_nofile_limit)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    files.directory(name="instance configuration", path=CONFIG_DIR, mode="755")
    files.directory(name="models", path=f"{home}/models", user=user, group=user, mode="750")
    for inst in p.instances:
        changed = [unit, *changed_venv]
        if inst.model_files:
            files.directory(name=f"{inst.name}: model directory", path=inst.model_path, user=user, group=user,
                            mode="750")
            for src, rel in inst.model_files:
                if "/" in rel:
                    files.directory(name=f"{inst.name}: model {Path(rel).parent}",
                                    path=f"{inst.model_path}/{Path(rel).parent}", user=user, group=user, mode="750")
                changed.append(files.put(name=f"{inst.name}: model {rel}", src=src, dest=f"{inst.model_path}/{rel}",
                                         user=user, group=user, mode="640"))
        # the arguments hold no secret (0644, as vLLM's); the key file is 0600 root, read by systemd alone
        changed.append(files.put(name=f"{inst.name}: arguments", src=StringIO(environment(p, inst)),
                                 dest=f"{CONFIG_DIR}/{inst.name}.env", mode="644"))
        changed.append(secret_file(name=f"{inst.name}: API key (0600)" if inst.api_key else
                                   f"{inst.name}: no API key (empty 0600 credential)",
                                   dest=f"{CONFIG_DIR}/{inst.name}.key.env", content=key_file_text(inst)))
        service = f"{UNIT}@{inst.name}"
        if p.gpu_visible:
            restart_then_run(service, changed, "unit, arguments, key, model, launcher or venv")
        else:  # no GPU: started at boot, where ConditionPathExistsGlob skips it until the driver sees a GPU
            systemd.service(name=f"{service} enabled (no GPU visible: not started)", service=service, running=None,
                            enabled=True)


def converge(settings, p: LmdeployPlan | None) -> None:
    """The role on one host (the engine's deploy hook): the venv, then the instances."""
    lmdeploy(settings, p, lmdeploy_venv(settings, p))


def deploy_engine(settings, p: LmdeployPlan | None, host_plan=None) -> None:
    """The engine's deploy hook (roles/engines.py Engine.deploy): `host_plan` is not needed, the plan holds all."""
    converge(settings, p)
