"""The vllm role's operations: the pinned uv, the hash-locked venv, /opt/vllm/current, and one systemd vllm@NAME per
instance of a plan decided beforehand (roles/vllm/decide.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, systemd

from roles.engines import unit_jinja
from roles.ops import CURL_RETRY, current_link, instance_config, remove_instances, restart_then_run
from roles.progress import UV_STEPS, Streamed, watched
from roles.ray.decide import HEAD_TEMP_DIR as RAY_TEMP_DIR
from roles.ray.deploy import ray
from roles.settings import Settings
from roles.vllm.decide import (CHECK, CONFIG_DIR, CURRENT, INDEX_URL, STAMP, UV, UV_CACHE, VENV_ROOT, WORK, VllmPlan,
                               environment, install_flags)
from roles.vllm.versions import UV_VERSION, UV_WHEEL_SHA256, UV_WHEEL_URL

TEMPLATES = Path(__file__).parent / "templates"


@operation()
def uv_binary(wheel: str, python: str):
    """Unpack the uv binary from its (checksum-verified) wheel to UV with the host's `python`, unless it is there."""
    if host.get_fact(File, path=UV):
        return
    member = f"uv-{UV_VERSION}.data/scripts/uv"
    yield (f"{shlex.quote(python)} -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' "
           f"{wheel} {member} {WORK}/uv-unpack && install -D -m 755 {WORK}/uv-unpack/{member} {UV}.new && "
           f"mv -f {UV}.new {UV} && rm -rf {WORK}/uv-unpack")


@operation()
def venv(p: VllmPlan, python: str, lock: str, index_url: str = INDEX_URL):
    """Install p.venv from `lock` (on the host) unless it is there and stamped.

    uv creates the venv on `python` and installs exactly the locked wheels (--require-hashes, --no-deps,
    --only-binary :all:), compiled to bytecode (the service user cannot write __pycache__ under /opt); then
    `uv pip check` and check_venv.py (vLLM version, sm_70 in torch) must pass before the stamp is written. Any
    failure removes this half-made venv only. `index_url`: PyPI's simple index or a mirror (install_flags). uv's
    output goes to WORK/install-<venv name>.log; the deploy log shows the downloads' progress while they run and
    the log's last 30 lines if a step fails."""
    if host.get_fact(File, path=f"{p.venv}/{STAMP}"):
        return
    log = f"{WORK}/install-{Path(p.venv).name}.log"
    stamp = json.dumps({"vllm": p.release.version, "python": p.python, "lock_sha256": p.lock_sha256})
    fail = f"{{ tail -30 {log} >&2; rm -rf {p.venv}; exit 1; }}"
    yield Streamed(
        f"set -e; rm -rf {p.venv}; mkdir -p {UV_CACHE}; "
        f"export UV_CACHE_DIR={UV_CACHE} UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1 "
        "UV_SYSTEM_CERTS=1; "  # the host's CA store: a TLS-inspecting proxy's CA (base_ca_certificates) works
        f"{UV} venv --quiet --python {shlex.quote(python)} {p.venv} > {log} 2>&1 || {fail}; "
        # the longest step (GBs of wheels): uv's lines go to the log, the deploy log gets a line per 10 % of the
        # large downloads or per minute (roles/progress.py), printed as it comes (Streamed)
        + watched(f"{UV} pip install --python {p.venv}/bin/python "
                  f"{' '.join(shlex.quote(a) for a in install_flags(index_url))} -r {lock}",
                  log, f"venv {Path(p.venv).name}", UV_STEPS, fail) + "; "
        f"{UV} pip check --python {p.venv}/bin/python >> {log} 2>&1 || {fail}; "
        f"{p.venv}/bin/python {CHECK} {p.release.version} >> {log} 2>&1 || {fail}; "
        f"printf '%s\\n' {shlex.quote(stamp)} > {p.venv}/{STAMP}"
    )


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
    wheel = f"{WORK}/uv-{UV_VERSION}.whl"
    files.download(name=f"uv {UV_VERSION} wheel", src=settings.vllm_uv_wheel_url or UV_WHEEL_URL, dest=wheel,
                   sha256sum=UV_WHEEL_SHA256, mode="600", extra_curl_args=CURL_RETRY)  # a mirror's file is checked against the same pin
    uv_binary(name=f"uv {UV_VERSION}", wheel=wheel, python=settings.vllm_python)
    files.directory(name="venv root", path=f"{VENV_ROOT}/locks", mode="755")
    files.put(name="venv check script", src=str(Path(__file__).parent / "check_venv.py"), dest=CHECK, mode="644")
    lock = f"{VENV_ROOT}/locks/{Path(p.venv).name}.txt"
    files.put(name=f"lock {p.lock.name}", src=str(p.lock), dest=lock, mode="644")
    venv(name=f"venv {Path(p.venv).name}", p=p, python=settings.vllm_python, lock=lock,
         index_url=settings.vllm_index_url)
    return current_link(name=f"{CURRENT} -> {Path(p.venv).name}", link=CURRENT, target=p.venv)


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
    user, home = settings.base_service_user, settings.base_service_home
    unit = files.template(
        name="vllm@ unit", src=str(TEMPLATES / "vllm@.service.j2"), dest="/etc/systemd/system/vllm@.service",
        jinja_env_kwargs=unit_jinja(TEMPLATES), mode="644", service_user=user, current=CURRENT, home=home, nofile=settings.tuning_nofile_limit,
        ray_temp_dir=RAY_TEMP_DIR if p.cluster else None)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    files.directory(name="instance configuration", path=CONFIG_DIR, mode="755")
    files.directory(name="models", path=f"{home}/models", user=user, group=user, mode="750")
    for inst in p.instances:
        changed = [unit] + ([link] if link is not None else [])
        if inst.model_files:
            files.directory(name=f"{inst.name}: model directory", path=inst.model_path, user=user, group=user,
                            mode="750")
            for src, rel in inst.model_files:
                if "/" in rel:
                    files.directory(name=f"{inst.name}: model {Path(rel).parent}",
                                    path=f"{inst.model_path}/{Path(rel).parent}", user=user, group=user, mode="750")
                changed.append(files.put(name=f"{inst.name}: model {rel}", src=src, dest=f"{inst.model_path}/{rel}",
                                         user=user, group=user, mode="640"))
        if not p.serves:  # a Ray worker: the head's vLLM loads this node's stage from the same path
            continue
        changed += instance_config(inst.name, CONFIG_DIR, environment(p, inst), "VLLM_API_KEY", inst.api_key)
        service = f"vllm@{inst.name}"
        if p.gpu_visible:
            restart_then_run(service, changed, "unit, settings, model or venv")
        else:  # no GPU: started at boot, where ConditionPathExistsGlob skips it until the driver sees a GPU
            systemd.service(name=f"{service} enabled (no GPU visible: not started)", service=service, running=None,
                            enabled=True)
