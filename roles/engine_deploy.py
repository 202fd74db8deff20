"""Deploy steps the engines' roles share (roles/vllm/deploy.py, roles/lmdeploy/deploy.py): the pinned uv, a
hash-locked venv with its stamp and the `current` link, an engine's instance unit with its directories, a model
directory copied from the control machine, and the start of an instance (or only its enabling where no GPU is
visible). Each role passes its own paths and names, so the operations' names and commands are each role's own."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.files import File
from pyinfra.operations import files, systemd

from roles.engines import unit_jinja
from roles.ops import CURL_RETRY, current_link, restart_then_run
from roles.progress import UV_STEPS, Streamed, watched
from roles.vllm.decide import UV, UV_CACHE, install_flags
from roles.vllm.decide import WORK as VLLM_WORK
from roles.vllm.versions import UV_VERSION, UV_WHEEL_SHA256


@operation()
def uv_binary(wheel: str, python: str):
    """Unpack the uv binary from its (checksum-verified) wheel to UV with the host's `python`, unless it is there
    (unpacked first in vLLM's work area, roles/vllm/decide.py WORK, whichever engine's role asks)."""
    if host.get_fact(File, path=UV):
        return
    member = f"uv-{UV_VERSION}.data/scripts/uv"
    yield (f"{shlex.quote(python)} -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' "
           f"{wheel} {member} {VLLM_WORK}/uv-unpack && install -D -m 755 {VLLM_WORK}/uv-unpack/{member} {UV}.new && "
           f"mv -f {UV}.new {UV} && rm -rf {VLLM_WORK}/uv-unpack")


def pinned_uv(work: str, wheel_url: str, python: str) -> None:
    """The pinned uv at UV: its wheel downloaded to `work` from `wheel_url` (PyPI's or a mirror's file, checked
    against the same pinned sha256), then unpacked with the host's `python`."""
    wheel = f"{work}/uv-{UV_VERSION}.whl"
    files.download(name=f"uv {UV_VERSION} wheel", src=wheel_url, dest=wheel, sha256sum=UV_WHEEL_SHA256, mode="600",
                   extra_curl_args=CURL_RETRY)
    uv_binary(name=f"uv {UV_VERSION}", wheel=wheel, python=python)


@operation()
def locked_venv(p, engine: str, python: str, lock: str, index_url: str, work: str, check: str, stamp: str):
    """Install p.venv from `lock` (on the host) unless it is there and stamped (p: the engine's plan, with venv,
    python, lock_sha256 and release.version).

    uv creates the venv on `python` and installs exactly the locked wheels (--require-hashes, --no-deps,
    --only-binary :all:), compiled to bytecode (the service user cannot write __pycache__ under /opt); then
    `uv pip check` and the engine's `check` script (its version, sm_70 in torch) must pass before the `stamp` file
    ({engine: version, python, lock_sha256}) is written. Any failure removes this half-made venv only.
    `index_url`: PyPI's simple index or a mirror (install_flags). uv's output goes to `work`/install-<venv
    name>.log; the deploy log shows the downloads' progress while they run and the log's last 30 lines if a step
    fails."""
    if host.get_fact(File, path=f"{p.venv}/{stamp}"):
        return
    log = f"{work}/install-{Path(p.venv).name}.log"
    stamped = json.dumps({engine: p.release.version, "python": p.python, "lock_sha256": p.lock_sha256})
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
        f"{p.venv}/bin/python {check} {p.release.version} >> {log} 2>&1 || {fail}; "
        f"printf '%s\\n' {shlex.quote(stamped)} > {p.venv}/{stamp}"
    )


def venv_and_link(p, engine: str, python: str, index_url: str, *, venv_root: str, current: str, work: str,
                  check: str, stamp: str, scripts: list[tuple[str, Path, str]]):
    """The venv root and its locks directory, the `scripts` ((name, control-machine file, host path): the check
    script first) put there 0644, p's lock, the venv (locked_venv) and `current` pointed at it. Returns (the
    scripts' operations, the link's operation): the instances restart when one changed."""
    files.directory(name="venv root", path=f"{venv_root}/locks", mode="755")
    puts = [files.put(name=name, src=str(src), dest=dest, mode="644") for name, src, dest in scripts]
    lock = f"{venv_root}/locks/{Path(p.venv).name}.txt"
    files.put(name=f"lock {p.lock.name}", src=str(p.lock), dest=lock, mode="644")
    locked_venv(name=f"venv {Path(p.venv).name}", p=p, engine=engine, python=python, lock=lock, index_url=index_url,
                work=work, check=check, stamp=stamp)
    return puts, current_link(name=f"{current} -> {Path(p.venv).name}", link=current, target=p.venv)


def instance_unit(settings, unit: str, templates: Path, current: str, config_dir: str, **context):
    """The `unit`@ template unit rendered from templates/`unit`@.service.j2 (with the shared hardening include and
    `context`), systemd reloaded when it changed, the instances' configuration directory and the service home's
    models directory. Returns the unit's operation (the instances restart when it changed)."""
    user, home = settings.base_service_user, settings.base_service_home
    op = files.template(
        name=f"{unit}@ unit", src=str(templates / f"{unit}@.service.j2"), dest=f"/etc/systemd/system/{unit}@.service",
        jinja_env_kwargs=unit_jinja(templates), mode="644", service_user=user, current=current, home=home,
        nofile=settings.tuning_nofile_limit, **context)
    systemd.daemon_reload(name="systemd reload", _if=op.did_change)
    files.directory(name="instance configuration", path=config_dir, mode="755")
    files.directory(name="models", path=f"{home}/models", user=user, group=user, mode="750")
    return op


def model_copies(inst, user: str) -> list:
    """An instance's model directory copied from the control machine (inst.model_files: (file, relative path) to
    inst.model_path, owned by the service `user`, 0640 in 0750 directories); [] where it has none. Returns the
    files' operations (the instance restarts when one changed)."""
    if not inst.model_files:
        return []
    files.directory(name=f"{inst.name}: model directory", path=inst.model_path, user=user, group=user, mode="750")
    changed = []
    for src, rel in inst.model_files:
        if "/" in rel:
            files.directory(name=f"{inst.name}: model {Path(rel).parent}", path=f"{inst.model_path}/{Path(rel).parent}",
                            user=user, group=user, mode="750")
        changed.append(files.put(name=f"{inst.name}: model {rel}", src=src, dest=f"{inst.model_path}/{rel}",
                                 user=user, group=user, mode="640"))
    return changed


def start(service: str, changed: list, what: str, gpu_visible: bool) -> None:
    """Start `service` (restarted when one of `changed` changed: restart_then_run, naming `what`) where a GPU is
    visible; else only enable it: started at boot, where the unit's ConditionPathExistsGlob skips it until the
    driver sees a GPU."""
    if gpu_visible:
        restart_then_run(service, changed, what)
    else:
        systemd.service(name=f"{service} enabled (no GPU visible: not started)", service=service, running=None,
                        enabled=True)
