"""The llama_cpp role's operations: build llama-server into its prefix, move /opt/llama.cpp/current, and converge
one systemd llama-server@NAME per instance of a plan decided beforehand (roles/llama_cpp/decide.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.api.command import FunctionCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, systemd
from pyinfra.operations.util import any_changed

from roles.engines import is_url, unit_jinja
from roles.llama_cpp.decide import CCACHE_DIR, CONFIG_DIR, CURRENT, STAMP, WORK, LlamaCppPlan, environment
from roles.llama_cpp.facts import ServerEvidence
from roles.llama_cpp.jobs import host_build_jobs
from roles.llama_cpp.residency import judge, parse_compute_apps
from roles.ops import CURL_RETRY, current_link, instance_config, remove_instances, restart_then_run, verified
from roles.progress import BUILD_STEPS, Streamed, watched
from roles.settings import Settings

TEMPLATES = Path(__file__).parent / "templates"


@operation()
def build(plan_: LlamaCppPlan, jobs: int):
    """Build llama-server into plan_.prefix unless a build with the same configuration is already there.

    The tree is built in WORK, installed to <prefix>.new, smoke-checked (`llama-server --version`), then renamed to
    the prefix and stamped. Any failure leaves existing prefixes and `current` as they were. The compiler's output
    goes to WORK/build-<prefix name>.log (kept); the deploy log shows the build's progress while it runs and the
    log's last 60 lines if it fails."""
    stamp = json.dumps({"source_sha256": plan_.source.sha256, "cmake": plan_.cmake_args}, sort_keys=True)
    existing = host.get_fact(File, path=f"{plan_.prefix}/{STAMP}")
    if existing:
        return
    # one build tree path for every ref and prefix: CMake's generated unity sources (CMakeFiles/llama.dir/Unity/
    # unity_N_cxx.cxx) #include the sources by absolute path, which CCACHE_BASEDIR does not rewrite inside a file,
    # so a per-prefix path missed those 10 compilations on every ref change (measured on lab-trixie: 326 of 336
    # hits with a new path, 336 of 336 with the same one). Builds on a host run one at a time (one deploy).
    b = f"{WORK}/build/tree"
    find_src = (f"s={b}/src/{plan_.source.subdir}" if plan_.source.subdir else
                f"s=$(dirname $(grep -l 'project(\"llama.cpp\"' $(find {b}/src -maxdepth 4 -name CMakeLists.txt) "
                "| awk '{print length, $0}' | sort -n | head -1 | cut -d' ' -f2))")
    cmake = " ".join(shlex.quote(a) for a in plan_.cmake_args)
    name = Path(plan_.prefix).name
    log = f"{WORK}/build-{name}.log"
    yield Streamed(
        f"set -e; rm -rf {b} {plan_.prefix}.new; mkdir -p {b}/src {CCACHE_DIR}; "
        f"tar -xzf {plan_.archive} -C {b}/src; {find_src}; "
        # the tree always sits at <build>/llama.cpp, whatever the archive's layout: same relative paths, so
        # ccache (CCACHE_BASEDIR) hits across refs
        f"mv \"$s\" {b}/llama.cpp; s={b}/llama.cpp; "
        # relative paths in the command lines (CCACHE_BASEDIR) and the same tree path let ccache hit across refs
        f"export CCACHE_DIR={CCACHE_DIR} CCACHE_BASEDIR={WORK}/build CCACHE_NOHASHDIR=true; "
        f"cmake -S $s -B {b}/build {cmake} > {b}/configure.log 2>&1 || {{ tail -40 {b}/configure.log >&2; exit 1; }}; "
        # the compiler's output goes to a log kept beside the build area; the deploy log gets a line per 10 % of
        # the build or per minute (roles/progress.py), printed as it comes (Streamed)
        f"rm -f {log}; "
        + watched(f"cmake --build {b}/build -j {jobs} --target llama-server", log, f"build {name}", BUILD_STEPS,
                  f"{{ tail -60 {log} >&2; exit 1; }}") + "; "
        f"mkdir -p {plan_.prefix}.new/bin; cp -a {b}/build/bin/llama-server {b}/build/bin/*.so* {plan_.prefix}.new/bin/; "
        f"{plan_.prefix}.new/bin/llama-server --version 2>&1; "
        f"printf '%s\\n' {shlex.quote(stamp)} > {plan_.prefix}.new/{STAMP}; "
        f"mv -T {plan_.prefix}.new {plan_.prefix}; rm -rf {WORK}/build"  # also trees of earlier failed builds
    )


def _residency(state, host, unit: str, n_gpu_layers: int) -> bool:
    """Raise OperationError unless `unit` serves from the GPU (roles/llama_cpp/residency.py judges the evidence)."""
    ev = host.get_fact(ServerEvidence, unit=unit)
    verdict = judge(ev["log"], ev["main_pid"], parse_compute_apps(ev["compute_apps"]), n_gpu_layers)
    if not verdict.on_gpu:
        raise OperationError(f"{unit} does not serve from the GPU: {verdict.evidence}. Fix: check the driver with "
                             f"`v100kit doctor`, the build's CUDA architectures, and -ngl (n_gpu_layers)")
    logger.info(f"[{host.name}] {unit} serves from the GPU: {verdict.evidence}")
    return True


@operation(is_idempotent=False)
def serves_from_gpu(unit: str, health_url: str, n_gpu_layers: int, timeout_s: int):
    """After a (re)start: wait until `health_url` answers 200 (the model is loaded), then fail the deploy unless
    the server's own log and nvidia-smi show it on the GPU. Only added on hosts where a GPU answers nvidia-smi."""
    yield (f"for i in $(seq {timeout_s}); do [ \"$(curl -s -o /dev/null -w '%{{http_code}}' {shlex.quote(health_url)})\" "
           f"= 200 ] && exit 0; sleep 1; done; echo '{unit}: {health_url} not healthy after {timeout_s} s' >&2; exit 1")
    yield FunctionCommand(_residency, (unit, n_gpu_layers), {})


def health_url(listen: str, port: int) -> str:
    """The URL of llama-server's /health for a listen address: a wildcard listens on loopback too."""
    address = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(listen, listen)
    return f"http://[{address}]:{port}/health" if ":" in address else f"http://{address}:{port}/health"


@deploy("llama.cpp")
def llama_cpp(settings: Settings, p: LlamaCppPlan | None) -> None:
    """Converge the build and the llama-server@NAME instances of `p`; with p None (no instance configured) only
    stop and unconfigure instances a previous deploy set up (builds and models stay)."""
    if p is not None:
        _build_and_serve(settings, p)
    remove_instances("llama-server", CONFIG_DIR, {i.name for i in p.instances} if p else set())


def deploy_engine(settings: Settings, p: LlamaCppPlan | None, host_plan) -> None:
    """The engine's deploy hook (roles/llama_cpp/engine.py ENGINE.deploy; deploy.py calls it through the registry):
    the llama_cpp role for `p`. `host_plan` (roles.preflight.HostPlan) is not needed here."""
    llama_cpp(settings, p)


def _build_and_serve(settings: Settings, p: LlamaCppPlan) -> None:
    user, home = settings.base_service_user, settings.base_service_home
    apt.packages(name="build tools", no_recommends=True,
                 packages=["cmake", "make", "ccache", p.toolkit.host_compiler, "libc6-dev"])
    files.directory(name="source and build area", path=f"{WORK}/src", mode="700")
    if p.source_is_local:
        files.put(name=f"source {p.source.ref}", src=p.source.url, dest=p.archive, mode="600")
        verified(name="source checksum", path=p.archive, sha256=p.source.sha256)
    else:  # files.download checks the sha256 itself and keeps an existing verified file
        files.download(name=f"source {p.source.ref}", src=p.source.url, dest=p.archive, sha256sum=p.source.sha256,
                       mode="600", extra_curl_args=CURL_RETRY)
    jobs, why = host_build_jobs(host, settings.llama_cpp_build_jobs)
    logger.info(f"[{host.name}] llama.cpp build {why}")
    build(name=f"build {Path(p.prefix).name}", plan_=p, jobs=jobs)
    link = current_link(name=f"{CURRENT} -> {Path(p.prefix).name}", link=CURRENT, target=p.prefix)

    unit = files.template(
        name="llama-server@ unit", src=str(TEMPLATES / "llama-server@.service.j2"),
        dest="/etc/systemd/system/llama-server@.service", mode="644", jinja_env_kwargs=unit_jinja(TEMPLATES),
        service_user=user, current=CURRENT, home=home, nofile=settings.tuning_nofile_limit)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    files.directory(name="instance configuration", path=CONFIG_DIR, mode="755")
    files.directory(name="models", path=f"{home}/models", user=user, group=user, mode="750")
    for inst in p.instances:
        changed = [unit, link]
        if inst.model_source:
            # a split GGUF: every part, each against its own sha256 (llama.cpp opens them all from the first)
            for what, src, dest, sha in [("model", inst.model_source, inst.model_path, inst.settings.model_sha256)] + [
                    (f"model part {Path(p.dest).name}", p.source, p.dest, p.sha256) for p in inst.parts]:
                if is_url(src):
                    model = files.download(name=f"{inst.name}: {what}", src=src, dest=dest, sha256sum=sha,
                                           user=user, group=user, mode="640", extra_curl_args=CURL_RETRY)
                else:
                    model = files.put(name=f"{inst.name}: {what}", src=src, dest=dest, user=user, group=user,
                                      mode="640")
                    verified(name=f"{inst.name}: {what} checksum", path=dest, sha256=sha)
                changed.append(model)
        changed += instance_config(inst.name, CONFIG_DIR,
                                   environment(inst, p.source.flash_attn_style, p.log_requests),
                                   "LLAMA_API_KEY", inst.api_key)
        unit_name = f"llama-server@{inst.name}"
        started = restart_then_run(unit_name, changed, "unit, settings, model or binary")
        if p.gpu_visible:  # GPU-less hosts serve from the CPU by necessity: nothing to check there
            serves_from_gpu(name=f"{unit_name} serves from the GPU", unit=unit_name,
                            health_url=health_url(inst.settings.listen, inst.settings.port),
                            n_gpu_layers=inst.n_gpu_layers, timeout_s=settings.llama_cpp_start_timeout_s,
                            _if=any_changed(*started))
        else:
            logger.info(f"[{host.name}] {unit_name}: no GPU answers nvidia-smi, so the check that it serves from "
                        "the GPU is skipped")
