"""vllm: a hash-locked vLLM virtualenv known to run on Volta, and one systemd vllm@NAME per configured model.

The venv lives at /opt/vllm/<version>-py<python>-<lock hash> and is installed by a pinned uv from the release's
lock file (files/vllm/, tools/lock_vllm.py): hashes required, wheels only, no dependency resolution on the host.
It is stamped only after it passed its checks (vLLM version, `uv pip check`, sm_70 in torch), and
/opt/vllm/current moves only then; a failed or tampered install removes its own half-made venv and leaves the
previous venv, the link and the running services untouched. Older venvs stay (roll back by setting the version
back: no reinstall).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shlex
from dataclasses import dataclass, replace
from io import StringIO
from pathlib import Path
from typing import Callable

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, systemd
from pyinfra.operations.util import any_changed

from roles import planner
from roles.ops import current_link
from roles.secrets import secret_file
from roles.settings import Settings, VllmInstance, problem
from roles.vllm.facts import CONFIG_DIR, InstalledVllmInstances
from roles.vllm.versions import (BF16_MIN_CAPABILITY, LOCK_DIR, QUANT_MIN_CAPABILITY, SOFTCAP_MIN_CAPABILITY,
                                 TORCH_SM70, UV_VERSION, UV_WHEEL_SHA256, UV_WHEEL_URL, VLLM_RELEASES, VllmRelease)
from roles.volta import CUDA_MIN_DRIVER, CUDA_MINOR_COMPAT_MIN_DRIVER, version_tuple

TEMPLATES = Path(__file__).parent / "templates"
VENV_ROOT = "/opt/vllm"
CURRENT = f"{VENV_ROOT}/current"
WORK = "/var/lib/v100kit/vllm"  # uv wheel and install logs (root only)
UV = f"/opt/v100kit/uv-{UV_VERSION}/uv"
UV_CACHE = "/var/cache/v100kit/uv"  # downloads only: UV_LINK_MODE=copy, so no venv depends on it
INDEX_URL = "https://pypi.org/simple"
#: How a lock is installed; part of the venv's name, so that a change here installs a new venv beside the old one.
INSTALL_FLAGS = ("--require-hashes", "--no-deps", "--only-binary", ":all:", "--compile-bytecode", "--index-url",
                 INDEX_URL)
STAMP = ".v100kit-venv.json"
CHECK = f"{VENV_ROOT}/check_venv.py"


@dataclass(frozen=True)
class Instance:
    name: str
    settings: VllmInstance
    model_path: str  # model directory on the host
    model_source: str | None  # control-machine directory to copy there
    dtype: str  # what --dtype gets: half below compute capability 8.0
    api_key: str | None
    memory: planner.Plan | None  # None: the model could not be read


@dataclass(frozen=True)
class VllmPlan:
    """What the role does on one host: release, host Python, lock file, venv and instances."""

    release: VllmRelease
    python: str  # "3.11"
    lock: Path  # on the control machine
    lock_sha256: str
    gpu_visible: bool  # a GPU answers nvidia-smi: start the services now (else they start at boot once one does)
    instances: tuple[Instance, ...]

    @property
    def venv(self) -> str:
        """/opt/vllm/<version>-py<python>-<hash of lock and INSTALL_FLAGS>."""
        recipe = hashlib.sha256(json.dumps([self.lock_sha256, INSTALL_FLAGS]).encode()).hexdigest()
        return f"{VENV_ROOT}/{self.release.version}-py{self.python}-{recipe[:8]}"


def _cc(value: str) -> tuple[int, int]:
    major, minor = value.split(".")
    return int(major), int(minor)


def model_problems(key: str, inst: VllmInstance, config: dict, cc: tuple[int, int]) -> list[str]:
    """Refusals decided by a model's config.json on GPUs of compute capability `cc` (major, minor): quantization
    methods whose kernels need a newer GPU (vLLM's "Minimum capability: 75. Current capability: 70"), bf16, and
    attention logit soft-capping (Gemma-2) below 8.0. Sources: QUANT_MIN_CAPABILITY, BF16_MIN_CAPABILITY,
    SOFTCAP_MIN_CAPABILITY (volta.md). Returns problem lines, [] when none."""
    problems = []
    cap = f"{cc[0]}{cc[1]}"
    c = planner.hf_text_config(config)
    quant = config.get("quantization_config") or c.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    if method and method in QUANT_MIN_CAPABILITY and QUANT_MIN_CAPABILITY[method] > cc:
        need = QUANT_MIN_CAPABILITY[method]
        problems.append(problem(f"{key}.model", f"quant_method {method}",
                                f"Minimum capability: {need[0]}{need[1]}. Current capability: {cap} (vLLM's "
                                f"{method} kernels need compute capability {need[0]}.{need[1]}; volta.md)",
                                "use a GPTQ build of the model (works on 6.0+) or an fp16 one, or llama.cpp with a "
                                "GGUF quant (Q4_K_M)"))
    elif method and method not in QUANT_MIN_CAPABILITY:
        problems.append(problem(f"{key}.model", f"quant_method {method}", "unknown to the toolkit's Volta table",
                                "use an fp16 or GPTQ build, or add the method to QUANT_MIN_CAPABILITY with a source"))
    if inst.dtype == "bfloat16" and cc < BF16_MIN_CAPABILITY:
        problems.append(problem(f"{key}.dtype", "bfloat16", f"bf16 needs compute capability 8.0; this GPU has "
                                f"{cc[0]}.{cc[1]} (vllm#946)", "set dtype: half (or auto, which is half here)"))
    if c.get("attn_logit_softcapping") and cc < SOFTCAP_MIN_CAPABILITY:
        problems.append(problem(f"{key}.model", f"attn_logit_softcapping {c['attn_logit_softcapping']}",
                                "attention logit soft-capping (Gemma-2 style) needs FlashAttention/FlashInfer, which "
                                f"vLLM has not on compute capability {cc[0]}.{cc[1]} (vllm#6173)",
                                "serve this model with llama.cpp (GGUF), or choose a model without soft-capping"))
    return problems


def plan(settings: Settings, host_python: str | None, gpus: list[dict], driver_version: str | None,
         host_model: Callable[[str], dict | None], taken_ports: dict[int, str]) -> tuple[VllmPlan | None, list[str]]:
    """Resolve release, lock and instances for one host; (None, []) when no vLLM instance is configured.

    host_python: "3.11" (PythonVersion fact of vllm_python) or None. gpus: the NvidiaGpus fact. driver_version:
    the pinned driver. host_model(path): the HfModelDir fact. taken_ports: port -> "llama-server@NAME" already
    used on the host. Checks, before any change: the release is in the table and installable from wheels, the host
    Python has a lock, torch has sm_70 kernels and runs on the driver, and per instance the model's quantization,
    dtype, soft-capping, tensor parallel size and memory (the planner) against the GPUs. Returns (plan, problems).
    """
    if not settings.vllm_instances:
        return None, []
    problems: list[str] = []
    release = VLLM_RELEASES.get(settings.vllm_version)
    supported = [v for v, r in VLLM_RELEASES.items() if not r.refused]
    if release is None:
        return None, [problem("vllm_version", settings.vllm_version, "not a release the toolkit has verified on Volta "
                              "(engine, torch build with sm_70 kernels, wheels: roles/vllm/versions.py)",
                              f"choose one of {', '.join(supported)}")]
    if release.refused:
        return None, [problem("vllm_version", release.version, release.refused, f"choose one of {', '.join(supported)}")]
    if host_python is None:
        return None, [problem("vllm_python", settings.vllm_python, "no such Python executable on the host",
                              "install python3, or point vllm_python at a Python 3.10-3.13")]
    if host_python not in release.pythons:
        fits = [v for v, r in VLLM_RELEASES.items() if host_python in r.pythons]
        problems.append(problem(
            "vllm_version", release.version, f"vLLM {release.version} cannot be installed from wheels on Python "
            f"{host_python} (the host's {settings.vllm_python}); it has wheels for Python {', '.join(release.pythons)}",
            (f"set vllm_version: {fits[-1]} ({VLLM_RELEASES[fits[-1]].engine} engine), " if fits else "")
            + f"or set vllm_python to a Python {release.pythons[0]}-{release.pythons[-1]} on the host"))
    if not TORCH_SM70.get((release.torch.rsplit(".", 1)[0], release.torch_cuda)):
        problems.append(problem("vllm_version", release.version, f"its torch {release.torch} (CUDA "
                                f"{release.torch_cuda}) has no sm_70 kernels", f"choose one of {', '.join(supported)}"))
    if driver_version:
        floor = CUDA_MINOR_COMPAT_MIN_DRIVER.get(int(release.torch_cuda.split(".")[0]))
        if floor and version_tuple(driver_version) < version_tuple(floor):
            problems.append(problem("vllm_version", release.version, f"torch {release.torch} is built with CUDA "
                                    f"{release.torch_cuda}, which needs driver {CUDA_MIN_DRIVER.get(release.torch_cuda, floor)} "
                                    f"(at least {floor} with minor-version compatibility); the pin is {driver_version}",
                                    "pin a newer driver (nvidia_driver_version) or choose an older vLLM"))
    lock_dir = Path(settings.vllm_lock_dir).expanduser() if settings.vllm_lock_dir else LOCK_DIR
    lock = lock_dir / release.lock_file(host_python if host_python in release.pythons else release.pythons[0]).name
    lock_sha = ""
    if not lock.is_file():
        problems.append(problem("vllm_lock_dir", str(lock_dir), f"no lock file {lock.name}",
                                "run tools/lock_vllm.py, or leave vllm_lock_dir unset"))
    else:
        lock_sha = hashlib.sha256(lock.read_bytes()).hexdigest()

    cc = _cc(gpus[0]["compute_cap"]) if gpus else _cc(settings.gpu_compute_capability)
    n_gpus = len(gpus) or settings.gpu_count
    gpu_mib = min(g["memory_mib"] for g in gpus) if gpus else settings.gpu_memory_mib
    instances, ports = [], dict(taken_ports)
    for name, inst in sorted(settings.vllm_instances.items()):
        key = f"vllm_instances.{name}"
        if inst.port in ports:
            problems.append(problem(f"{key}.port", inst.port, f"{ports[inst.port]} already uses it",
                                    "give every instance its own port"))
        ports[inst.port] = f"vllm@{name}"
        visible = len(inst.gpus) if inst.gpus else n_gpus
        if inst.gpus and gpus and max(inst.gpus) >= len(gpus):
            problems.append(problem(f"{key}.gpus", inst.gpus, f"this host has GPUs 0..{len(gpus) - 1}",
                                    "list existing GPU indices, or leave gpus unset"))
        if inst.tensor_parallel_size > visible:
            problems.append(problem(f"{key}.tensor_parallel_size", inst.tensor_parallel_size,
                                    f"tensor parallel needs one GPU per rank; the instance sees {visible}",
                                    f"set tensor_parallel_size to at most {visible}, or add GPUs"))
        config, weight_bytes, model_source = None, 0, None
        if bool(inst.model_path) == bool(inst.model_source):
            problems.append(problem(key, {"model_path": inst.model_path, "model_source": inst.model_source},
                                    "needs exactly one of model_path and model_source",
                                    "set model_path (a directory on the host) or model_source (one here)"))
            model_path = inst.model_path or ""
        elif inst.model_source:
            model_source = str(Path(inst.model_source).expanduser())
            model_path = f"{settings.base_service_home}/models/{Path(model_source).name}"
            try:
                hf = planner.read_hf(model_source)
                config = json.loads((Path(model_source) / "config.json").read_text())
            except (OSError, ValueError) as e:
                problems.append(problem(f"{key}.model_source", inst.model_source, f"not a readable Hugging Face "
                                        f"model directory ({e})", "give a directory with config.json and "
                                        "*.safetensors files"))
        else:
            model_path = inst.model_path
            found = host_model(model_path)
            if not found or found["config"] is None:
                problems.append(problem(f"{key}.model_path", model_path, "no readable config.json there on the host",
                                        "copy the model directory there, or use model_source"))
            else:
                config, weight_bytes = found["config"], found["safetensors_bytes"]
                try:
                    hf = planner.hf_model_from_config(config, weight_bytes, f"{model_path}/config.json")
                    if hf.torch_dtype == "float32":  # served as half: 2 of 4 bytes per element
                        hf = replace(hf, weight_bytes=weight_bytes // 2)
                except ValueError as e:
                    problems.append(problem(f"{key}.model_path", model_path, str(e), "fix the model's config.json"))
                    config = None
        memory = None
        if config is not None:
            more = model_problems(key, inst, config, cc)
            problems += more
            if not more and inst.tensor_parallel_size <= visible:
                memory = planner.plan_vllm(hf, gpu_mib, visible, inst.tensor_parallel_size, inst.max_model_len,
                                           inst.gpu_memory_utilization, inst.kv_cache_dtype, inst.max_num_seqs)
                if not memory.fits:
                    problems.append(problem(key, Path(model_path).name, f"does not fit: {'; '.join(memory.reasons)}",
                                            "raise tensor_parallel_size, use a GPTQ build, or lower max_model_len"))
        dtype = inst.dtype if inst.dtype != "auto" or cc >= BF16_MIN_CAPABILITY else "half"
        api_key = None
        if not inst.api_key_file and not ipaddress.ip_address(inst.listen).is_loopback:
            problems.append(problem(f"{key}.listen", inst.listen, "reachable from the network without an API key",
                                    "set api_key_file, or listen on 127.0.0.1 behind your own proxy"))
        if inst.api_key_file:
            p = Path(inst.api_key_file).expanduser()
            api_key = p.read_text().strip() if p.is_file() else ""
            if not api_key or "\n" in api_key:
                problems.append(problem(f"{key}.api_key_file", inst.api_key_file, "must be a file on the control "
                                        "machine holding one non-empty line", "write the key alone into the file"))
        instances.append(Instance(name, inst, model_path, model_source, dtype, api_key, memory))
    if problems:
        return None, problems
    return VllmPlan(release, host_python, lock, lock_sha, bool(gpus), tuple(instances)), []


def server_args(inst: Instance) -> str:
    """The vLLM command line of one instance (the API key comes from VLLM_API_KEY in the environment)."""
    s = inst.settings
    args = ["--model", inst.model_path, "--served-model-name", s.served_model_name or inst.name,
            "--host", s.listen, "--port", str(s.port), "--dtype", inst.dtype,
            "--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}", "--max-model-len", str(s.max_model_len),
            "--max-num-seqs", str(s.max_num_seqs), "--tensor-parallel-size", str(s.tensor_parallel_size),
            "--kv-cache-dtype", s.kv_cache_dtype]
    if s.enforce_eager:
        args.append("--enforce-eager")
    return " ".join(shlex.quote(a) for a in args)


def environment(p: VllmPlan, inst: Instance) -> str:
    """The instance's EnvironmentFile: VLLM_ARGS, the engine environment of the release, CUDA_VISIBLE_DEVICES."""
    env = {"VLLM_ARGS": server_args(inst), **p.release.environment}
    if inst.settings.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in inst.settings.gpus)
    return "".join(f"{k}={v}\n" for k, v in env.items())


@operation()
def uv_binary(wheel: str):
    """Unpack the uv binary from its (checksum-verified) wheel to UV, unless it is there."""
    if host.get_fact(File, path=UV):
        return
    member = f"uv-{UV_VERSION}.data/scripts/uv"
    yield (f"python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' "
           f"{wheel} {member} {WORK}/uv-unpack && install -D -m 755 {WORK}/uv-unpack/{member} {UV}.new && "
           f"mv -f {UV}.new {UV} && rm -rf {WORK}/uv-unpack")


@operation()
def venv(p: VllmPlan, python: str, lock: str):
    """Install p.venv from `lock` (on the host) unless it is there and stamped.

    uv creates the venv on `python` and installs exactly the locked wheels (--require-hashes, --no-deps,
    --only-binary :all:), compiled to bytecode (the service user cannot write __pycache__ under /opt); then `uv pip check` and check_venv.py (vLLM version, sm_70 in torch) must pass before
    the stamp is written. Any failure removes this half-made venv only."""
    if host.get_fact(File, path=f"{p.venv}/{STAMP}"):
        return
    log = f"{WORK}/install-{Path(p.venv).name}.log"
    stamp = json.dumps({"vllm": p.release.version, "python": p.python, "lock_sha256": p.lock_sha256})
    fail = f"{{ tail -30 {log} >&2; rm -rf {p.venv}; exit 1; }}"
    yield (
        f"set -e; rm -rf {p.venv}; mkdir -p {UV_CACHE}; "
        f"export UV_CACHE_DIR={UV_CACHE} UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1 "
        "UV_SYSTEM_CERTS=1; "  # the host's CA store: a TLS-inspecting proxy's CA (base_ca_certificates) works
        f"{UV} venv --quiet --python {python} {p.venv} > {log} 2>&1 || {fail}; "
        f"{UV} pip install --python {p.venv}/bin/python {' '.join(shlex.quote(a) for a in INSTALL_FLAGS)} "
        f"-r {lock} >> {log} 2>&1 || {fail}; "
        f"{UV} pip check --python {p.venv}/bin/python >> {log} 2>&1 || {fail}; "
        f"{p.venv}/bin/python {CHECK} {p.release.version} >> {log} 2>&1 || {fail}; "
        f"printf '%s\\n' {shlex.quote(stamp)} > {p.venv}/{STAMP}"
    )


@deploy("vLLM")
def vllm(settings: Settings, p: VllmPlan) -> None:
    user, home = settings.base_service_user, settings.base_service_home
    # Triton compiles a small C launcher at run time: it needs a C compiler and Python.h
    apt.packages(name="run-time build tools", no_recommends=True, packages=["gcc", "libc6-dev", "python3-dev"])
    files.directory(name="vLLM work area", path=WORK, mode="700")
    wheel = f"{WORK}/uv-{UV_VERSION}.whl"
    files.download(name=f"uv {UV_VERSION} wheel", src=UV_WHEEL_URL, dest=wheel, sha256sum=UV_WHEEL_SHA256, mode="600")
    uv_binary(name=f"uv {UV_VERSION}", wheel=wheel)
    files.directory(name="venv root", path=f"{VENV_ROOT}/locks", mode="755")
    files.put(name="venv check script", src=str(Path(__file__).parent / "check_venv.py"), dest=CHECK, mode="644")
    lock = f"{VENV_ROOT}/locks/{Path(p.venv).name}.txt"
    files.put(name=f"lock {p.lock.name}", src=str(p.lock), dest=lock, mode="644")
    venv(name=f"venv {Path(p.venv).name}", p=p, python=settings.vllm_python, lock=lock)
    link = current_link(name=f"{CURRENT} -> {Path(p.venv).name}", link=CURRENT, target=p.venv)

    unit = files.template(
        name="vllm@ unit", src=str(TEMPLATES / "vllm@.service.j2"), dest="/etc/systemd/system/vllm@.service",
        mode="644", service_user=user, current=CURRENT, home=home, nofile=settings.tuning_nofile_limit)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    files.directory(name="instance configuration", path=CONFIG_DIR, mode="755")
    files.directory(name="models", path=f"{home}/models", user=user, group=user, mode="750")
    for inst in p.instances:
        changed = [unit, link]
        if inst.model_source:
            changed.append(files.sync(name=f"{inst.name}: model", src=inst.model_source, dest=inst.model_path,
                                      user=user, group=user, mode="640", dir_mode="750"))
        changed.append(files.put(name=f"{inst.name}: arguments", src=StringIO(environment(p, inst)),
                                 dest=f"{CONFIG_DIR}/{inst.name}.env", mode="644"))
        key_file = f"{CONFIG_DIR}/{inst.name}.key.env"
        if inst.api_key:
            changed.append(secret_file(name=f"{inst.name}: API key (0600)", dest=key_file,
                                       content=f"VLLM_API_KEY={inst.api_key}\n"))
        else:
            changed.append(files.file(name=f"{inst.name}: no API key", path=key_file, present=False))
        service = f"vllm@{inst.name}"
        if p.gpu_visible:
            systemd.service(name=f"{service} enabled and running", service=service, enabled=True, running=True)
            systemd.service(name=f"{service} restarted (unit, settings, model or venv changed)", service=service,
                            restarted=True, _if=any_changed(*changed))
        else:  # no GPU: started at boot, where ConditionPathExistsGlob skips it until the driver sees a GPU
            systemd.service(name=f"{service} enabled (no GPU visible: not started)", service=service, running=None,
                            enabled=True)
    for name in sorted(set(host.get_fact(InstalledVllmInstances)) - {i.name for i in p.instances}):
        systemd.service(name=f"vllm@{name} removed", service=f"vllm@{name}", running=False, enabled=False)
        for path in (f"{CONFIG_DIR}/{name}.env", f"{CONFIG_DIR}/{name}.key.env"):
            files.file(name=f"{path} removed", path=path, present=False)
