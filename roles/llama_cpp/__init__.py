"""llama_cpp: llama.cpp built for sm_70 against a configured CUDA toolkit, installed in a versioned prefix, and
one systemd llama-server@NAME per configured model.

The install prefix is named by source ref, architectures, CUDA version and a hash of the build configuration
(/opt/llama.cpp/<ref>-sm70-cuda12.4-<hash>); /opt/llama.cpp/current moves only after a new build passed its
smoke check, and the previous prefix stays for rollback (set the old ref back: no rebuild, the link moves back).
A checksum mismatch or a failing build stops before the link moves, so the running service is untouched.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, systemd

from roles import planner
from roles.cuda.versions import Toolkit
from roles.llama_cpp.versions import CUDA_ARCH_RANGE, DEFAULT_SOURCE, Source
from roles.ops import current_link, instance_config, remove_instances, restart_then_run, verified
from roles.secrets import read_api_key
from roles.settings import LlamaCppInstance, Settings, problem

TEMPLATES = Path(__file__).parent / "templates"
PREFIX_ROOT = "/opt/llama.cpp"
CURRENT = f"{PREFIX_ROOT}/current"
WORK = "/var/lib/v100kit/llama.cpp"  # archives and build trees (root only; the service user cannot write here)
CCACHE_DIR = "/var/cache/v100kit/ccache"
CONFIG_DIR = "/etc/llama-server"
STAMP = ".v100kit-build.json"


@dataclass(frozen=True)
class Instance:
    name: str
    settings: LlamaCppInstance
    model_path: str  # on the host
    model_source: str | None  # URL or control-machine path to place there
    api_key: str | None = field(repr=False)
    memory: planner.Plan | None = None  # None: the model file is not readable before the deploy (URL, host path)


@dataclass(frozen=True)
class LlamaCppPlan:
    """What the role does on one host: source, toolkit, architectures, prefix and instances."""

    source: Source
    source_is_local: bool
    toolkit: Toolkit
    architectures: tuple[str, ...]
    cmake_args: tuple[str, ...]
    prefix: str
    instances: tuple[Instance, ...]

    @property
    def archive(self) -> str:
        return f"{WORK}/src/{self.source.sha256}.tar.gz"


def _is_url(s: str) -> bool:
    return urlparse(s).scheme in ("http", "https")


def sha256_file(path: str) -> str:
    """Hex sha256 of a file on the control machine, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def memory_plan(inst_key: str, s: LlamaCppInstance, gguf_path: str, settings: Settings, gpus: list[dict]
                ) -> tuple[planner.Plan | None, list[str]]:
    """The planner's verdict for one instance whose GGUF file is readable here: (plan, problems). VRAM and GPU
    count come from nvidia-smi where it answers, else from gpu_memory_mib / gpu_count."""
    try:
        model = planner.read_gguf(gguf_path)
    except Exception as e:  # not a GGUF file, or one the gguf package cannot read
        return None, [problem(f"{inst_key}.model_source", gguf_path, f"cannot read its GGUF header ({e})",
                              "give a GGUF model file")]
    gpu_mib = min(g["memory_mib"] for g in gpus) if gpus else settings.gpu_memory_mib
    n_gpus = len(gpus) or settings.gpu_count
    mplan = planner.plan_llama_cpp(model, gpu_mib, n_gpus, max(1, s.context // s.parallel), s.cache_type_k,
                                   s.cache_type_v, s.parallel, settings.gpu_usable_fraction, s.n_gpu_layers)
    if mplan.outcome == "fits" or (mplan.outcome == "offload" and s.allow_offload):
        return mplan, []
    why = "; ".join(mplan.reasons)
    if mplan.outcome == "offload":
        return mplan, [problem(inst_key, Path(gguf_path).name, f"would offload {mplan.layers_offloaded} layers to the "
                               f"CPU (decode ceiling {mplan.decode_ceiling_tps:.1f} tokens/s): {why}",
                               "use a smaller quant type or a shorter context, or set allow_offload: true")]
    return mplan, [problem(inst_key, Path(gguf_path).name, f"does not fit in {n_gpus} x {gpu_mib} MiB: {why}",
                           "shorten context, quantize the KV cache (cache_type_k/v q8_0), or use a smaller quant")]


def plan(settings: Settings, toolkits: list[Toolkit], gpus: list[dict],
         host_has_file) -> tuple[LlamaCppPlan | None, list[str]]:
    """Resolve the build and the instances; None when no instance is configured.

    `gpus` is the NvidiaGpus fact ([] without a visible GPU). `host_has_file(path)` answers from the host's facts.
    Control-machine files (source archive, models, API key files) are read and checksummed here, and models read
    there are checked by the planner (VRAM, KV cache, offload), before any change. Returns (plan, problems).
    """
    gpu_caps = [g["compute_cap"] for g in gpus]
    if not settings.llama_cpp_instances:
        return None, []
    problems: list[str] = []
    if settings.llama_cpp_source:
        if not settings.llama_cpp_source_sha256:
            problems.append(problem("llama_cpp_source", settings.llama_cpp_source, "no checksum given",
                                    "set llama_cpp_source_sha256 to the archive's sha256"))
        if settings.llama_cpp_source_sha256 == DEFAULT_SOURCE.sha256:  # the default's bytes from elsewhere (offline)
            source = replace(DEFAULT_SOURCE, ref=settings.llama_cpp_ref, url=settings.llama_cpp_source)
        else:
            source = Source(settings.llama_cpp_ref, settings.llama_cpp_source, settings.llama_cpp_source_sha256 or "",
                            settings.llama_cpp_source_subdir)
    else:
        source = DEFAULT_SOURCE if settings.llama_cpp_ref == DEFAULT_SOURCE.ref else None
        if source is None:
            problems.append(problem("llama_cpp_ref", settings.llama_cpp_ref, "no source for this ref",
                                    "set llama_cpp_source (URL or path of the .tar.gz) and llama_cpp_source_sha256, "
                                    f"or llama_cpp_ref: {DEFAULT_SOURCE.ref}"))
            source = DEFAULT_SOURCE
    if settings.llama_cpp_flash_attn_style:
        source = replace(source, flash_attn_style=settings.llama_cpp_flash_attn_style)
    if settings.llama_cpp_source_subdir:
        source = replace(source, subdir=settings.llama_cpp_source_subdir)
    local = not _is_url(source.url)
    if local:
        source = replace(source, url=str(Path(source.url).expanduser()))
    if local and source.sha256:
        if not Path(source.url).is_file():
            problems.append(problem("llama_cpp_source", source.url, "no such file on the control machine",
                                    "give an existing .tar.gz path or a URL"))
        elif (actual := sha256_file(source.url)) != source.sha256:
            problems.append(problem("llama_cpp_source_sha256", source.sha256,
                                    f"the archive's sha256 is {actual}", "check the archive, then the checksum"))

    wanted_cuda = settings.llama_cpp_cuda_version or (toolkits[0].version if toolkits else None)
    toolkit = next((t for t in toolkits if t.version == wanted_cuda), None)
    if toolkit is None:
        problems.append(problem("llama_cpp_cuda_version", wanted_cuda, "not among the installed toolkits",
                                "choose one of cuda_versions: " + ", ".join(t.version for t in toolkits)))
    archs = tuple(settings.llama_cpp_cuda_architectures or
                  sorted({c.replace(".", "") for c in gpu_caps}) or ["70"])
    if toolkit is not None:
        lo, hi = CUDA_ARCH_RANGE.get(toolkit.version, (0, 999))
        for a in archs:
            if not lo <= int(a) <= hi:
                problems.append(problem(
                    "llama_cpp_cuda_architectures", list(archs),
                    f"CUDA {toolkit.version} builds sm_{lo}..sm_{hi}, not sm_{a} (CUDA release notes)",
                    f"use architectures in {lo}..{hi} (V100: 70) or another llama_cpp_cuda_version"))

    instances, ports = [], {}
    for name, inst in sorted(settings.llama_cpp_instances.items()):
        key = f"llama_cpp_instances.{name}"
        memory = None
        if inst.port in ports:
            problems.append(problem(f"{key}.port", inst.port, f"instance {ports[inst.port]!r} already uses it",
                                    "give every instance its own port"))
        ports[inst.port] = name
        model_source = None
        if bool(inst.model_path) == bool(inst.model_source):
            problems.append(problem(key, {k: v for k, v in inst.model_dump().items() if k.startswith("model")},
                                    "needs exactly one of model_path and model_source",
                                    "set model_path (a file on the host) or model_source with model_sha256"))
            model_path = inst.model_path or ""
        elif inst.model_path:
            model_path = inst.model_path
            if not host_has_file(model_path):
                problems.append(problem(f"{key}.model_path", model_path, "no such file on the host",
                                        "copy the model there, or use model_source with model_sha256"))
        else:
            model_source = inst.model_source
            model_path = f"{settings.base_service_home}/models/{Path(urlparse(model_source).path).name}"
            if not inst.model_sha256:
                problems.append(problem(f"{key}.model_sha256", None, "model_source needs a checksum",
                                        "set model_sha256 to the file's sha256"))
            elif not _is_url(model_source):
                model_source = str(Path(model_source).expanduser())
                if not Path(model_source).is_file():
                    problems.append(problem(f"{key}.model_source", model_source,
                                            "no such file on the control machine", "give an existing path or a URL"))
                elif (actual := sha256_file(model_source)) != inst.model_sha256:
                    problems.append(problem(f"{key}.model_sha256", inst.model_sha256,
                                            f"the file's sha256 is {actual}", "check the file, then the checksum"))
                else:
                    memory, more = memory_plan(key, inst, model_source, settings, gpus)
                    problems += more
        if not inst.api_key_file and not ipaddress.ip_address(inst.listen).is_loopback:
            problems.append(problem(f"{key}.listen", inst.listen, "reachable from the network without an API key",
                                    "set api_key_file, or listen on 127.0.0.1 behind your own proxy"))
        api_key, more = read_api_key(f"{key}.api_key_file", inst.api_key_file)
        problems += more
        instances.append(Instance(name, inst, model_path, model_source, api_key, memory))

    if toolkit is None:
        return None, problems
    cmake_args = (
        "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}",
        f"-DCMAKE_CUDA_COMPILER={toolkit.nvcc}", f"-DCMAKE_CUDA_HOST_COMPILER=/usr/bin/{toolkit.host_compiler}",
        # the whole build uses the compiler nvcc accepts (a bare gcc/g++ may not even be installed)
        f"-DCMAKE_C_COMPILER=/usr/bin/{toolkit.host_compiler.replace('g++', 'gcc')}",
        f"-DCMAKE_CXX_COMPILER=/usr/bin/{toolkit.host_compiler}",
        f"-DGGML_CUDA_FA_ALL_QUANTS={'ON' if settings.llama_cpp_fa_all_quants else 'OFF'}",
        "-DGGML_CCACHE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON",
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    )
    config_hash = hashlib.sha256(json.dumps([source.sha256, source.subdir, cmake_args]).encode()).hexdigest()[:8]
    # -fa quantized-V consistency: a quantized V cache needs flash attention
    for inst in instances:
        if inst.settings.flash_attn == "off" and inst.settings.cache_type_v not in ("f16", "f32", "bf16"):
            problems.append(problem(f"llama_cpp_instances.{inst.name}.flash_attn", "off",
                                    f"a quantized V cache ({inst.settings.cache_type_v}) needs flash attention",
                                    "set flash_attn to auto or on, or cache_type_v to f16"))
    prefix = f"{PREFIX_ROOT}/{source.ref}-sm{'-'.join(archs)}-cuda{toolkit.version}-{config_hash}"
    if problems:
        return None, problems
    return LlamaCppPlan(source, local, toolkit, archs, cmake_args, prefix, tuple(instances)), []


def server_args(inst: Instance, flash_attn_style: str) -> str:
    """The llama-server command line of one instance (without the API key, which comes from the environment).

    Builds that take a bare `-fa` have no `auto`: there auto means on when the V cache is quantized (which needs
    flash attention; Volta has it), off otherwise."""
    s = inst.settings
    args = ["-m", inst.model_path, "--host", s.listen, "--port", str(s.port), "-ngl", str(s.n_gpu_layers),
            "-c", str(s.context), "-ctk", s.cache_type_k, "-ctv", s.cache_type_v, "-np", str(s.parallel)]
    if flash_attn_style == "value":
        args += ["-fa", s.flash_attn]
    elif s.flash_attn == "on" or (s.flash_attn == "auto" and s.cache_type_v not in ("f16", "f32", "bf16")):
        args.append("-fa")
    if s.metrics:
        args.append("--metrics")
    return " ".join(shlex.quote(a) for a in args)


@operation()
def build(plan_: LlamaCppPlan, jobs: int):
    """Build llama-server into plan_.prefix unless a build with the same configuration is already there.

    The tree is built in WORK, installed to <prefix>.new, smoke-checked (`llama-server --version`), then renamed to
    the prefix and stamped. Any failure leaves existing prefixes and `current` as they were."""
    stamp = json.dumps({"source_sha256": plan_.source.sha256, "cmake": plan_.cmake_args}, sort_keys=True)
    existing = host.get_fact(File, path=f"{plan_.prefix}/{STAMP}")
    if existing:
        return
    name = Path(plan_.prefix).name
    b = f"{WORK}/build/{name}"
    find_src = (f"s={b}/src/{plan_.source.subdir}" if plan_.source.subdir else
                f"s=$(dirname $(grep -l 'project(\"llama.cpp\"' $(find {b}/src -maxdepth 4 -name CMakeLists.txt) "
                "| awk '{print length, $0}' | sort -n | head -1 | cut -d' ' -f2))")
    cmake = " ".join(shlex.quote(a) for a in plan_.cmake_args)
    yield (
        f"set -e; rm -rf {b} {plan_.prefix}.new; mkdir -p {b}/src {CCACHE_DIR}; "
        f"tar -xzf {plan_.archive} -C {b}/src; {find_src}; "
        # the tree always sits at <build>/llama.cpp, whatever the archive's layout: same relative paths, so
        # ccache (CCACHE_BASEDIR) hits across refs
        f"mv \"$s\" {b}/llama.cpp; s={b}/llama.cpp; "
        # each build tree has its own path: relative paths let ccache hit across refs and prefixes
        f"export CCACHE_DIR={CCACHE_DIR} CCACHE_BASEDIR={WORK}/build CCACHE_NOHASHDIR=true; "
        f"cmake -S $s -B {b}/build {cmake} > {b}/configure.log 2>&1 || {{ tail -40 {b}/configure.log >&2; exit 1; }}; "
        f"cmake --build {b}/build -j {jobs} --target llama-server > {b}/build.log 2>&1 "
        f"|| {{ tail -60 {b}/build.log >&2; exit 1; }}; "
        f"mkdir -p {plan_.prefix}.new/bin; cp -a {b}/build/bin/llama-server {b}/build/bin/*.so* {plan_.prefix}.new/bin/; "
        f"{plan_.prefix}.new/bin/llama-server --version; "
        f"printf '%s\\n' {shlex.quote(stamp)} > {plan_.prefix}.new/{STAMP}; "
        f"mv -T {plan_.prefix}.new {plan_.prefix}; rm -rf {WORK}/build"  # also trees of earlier failed builds
    )


@deploy("llama.cpp")
def llama_cpp(settings: Settings, p: LlamaCppPlan | None) -> None:
    """Converge the build and the llama-server@NAME instances of `p`; with p None (no instance configured) only
    stop and unconfigure instances a previous deploy set up (builds and models stay)."""
    if p is not None:
        _build_and_serve(settings, p)
    remove_instances("llama-server", CONFIG_DIR, {i.name for i in p.instances} if p else set())


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
                       mode="600")
    build(name=f"build {Path(p.prefix).name}", plan_=p, jobs=settings.llama_cpp_build_jobs)
    link = current_link(name=f"{CURRENT} -> {Path(p.prefix).name}", link=CURRENT, target=p.prefix)

    unit = files.template(
        name="llama-server@ unit", src=str(TEMPLATES / "llama-server@.service.j2"),
        dest="/etc/systemd/system/llama-server@.service", mode="644",
        service_user=user, current=CURRENT, home=home, nofile=settings.tuning_nofile_limit)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    files.directory(name="instance configuration", path=CONFIG_DIR, mode="755")
    files.directory(name="models", path=f"{home}/models", user=user, group=user, mode="750")
    for inst in p.instances:
        changed = [unit, link]
        if inst.model_source:
            sha = inst.settings.model_sha256
            if _is_url(inst.model_source):
                model = files.download(name=f"{inst.name}: model", src=inst.model_source, dest=inst.model_path,
                                       sha256sum=sha, user=user, group=user, mode="640")
            else:
                model = files.put(name=f"{inst.name}: model", src=inst.model_source, dest=inst.model_path,
                                  user=user, group=user, mode="640")
                verified(name=f"{inst.name}: model checksum", path=inst.model_path, sha256=sha)
            changed.append(model)
        changed += instance_config(inst.name, CONFIG_DIR,
                                   f"LLAMA_SERVER_ARGS={server_args(inst, p.source.flash_attn_style)}\n",
                                   "LLAMA_API_KEY", inst.api_key)
        restart_then_run(f"llama-server@{inst.name}", changed, "unit, settings, model or binary")
