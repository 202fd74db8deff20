"""What the lmdeploy role does on one host, decided from settings and read-only facts before any change: the
release, the lock for the host's Python, the venv, and per instance the model, its TurboMind format
(roles/lmdeploy/quant.py), its GPUs, its KV cache plan (roles/lmdeploy/planner.py), the listen address and the API
key. Pure: no pyinfra import (the contract roles.*.decide).

The venv is /opt/lmdeploy/<version>-py<python>-<hash of the locked requirements and the install flags>, installed
by the same pinned uv, with the same flags and the same download cache as vLLM's (roles/vllm/decide.py), so that a
host that has vLLM's torch 2.10.0 cu128 does not download it again.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from roles import planner
from roles.engines import (compute_capability, given_gpus, gpu_count, gpu_index_problems, hf_instance_model, host_gpus,
                           network_listener, outside_use, port_clashes, usable_mib)
from roles.lmdeploy.flags import (AT_LEAST_ONE_VALUE_OPTIONS, CHOICES, INT_OPTIONS, MANY_VALUE_OPTIONS,
                                  NO_VALUE_OPTIONS, ServeArgs, is_value_word, resolve_option, serve_argv, value_ok)
from roles.lmdeploy.planner import KvPlan, KvShape, plan_kv
from roles.lmdeploy.quant import TurbomindFormat, architecture_problems, turbomind_format
from roles.lmdeploy.versions import LMDEPLOY_RELEASES, LOCK_DIR, LmdeployRelease
from roles.nvidia_driver.shapes import GpuInfo
from roles.secrets import read_api_key
from roles.settings import problem
from roles.volta import CUDA_MIN_DRIVER, CUDA_MINOR_COMPAT_MIN_DRIVER, version_tuple
from roles.vllm.decide import INSTALL_FLAGS, UV, UV_CACHE, install_flags, lock_digest  # noqa: F401
from roles.vllm.versions import TORCH_SM70

UNIT = "lmdeploy"
VENV_ROOT = "/opt/lmdeploy"
CURRENT = f"{VENV_ROOT}/current"
WORK = "/var/lib/v100kit/lmdeploy"  # uv's install logs (root only)
STAMP = ".v100kit-venv.json"
CHECK = f"{VENV_ROOT}/check_venv.py"
#: the key-file launcher (roles/lmdeploy/launch.py), run by the venv's python
LAUNCHER = f"{VENV_ROOT}/launch.py"
CONFIG_DIR = "/etc/lmdeploy"
#: the systemd credential the unit loads from CONFIG_DIR/NAME.key.env (LoadCredential=); the launcher reads it
#: under $CREDENTIALS_DIRECTORY
CREDENTIAL = "api-key"
#: TurboMind runs from compute capability 7.0 (CMakeLists.txt:239-241 at v0.15.0: 70-real; docs/en/quantization/
#: w4a16.md: V100 sm70); nothing below is built
MIN_CAPABILITY = (7, 0)
#: session_len when unset: the model's max_position_embeddings, at most this (vLLM's max_model_len default)
DEFAULT_SESSION_CAP = 8192
#: A process that has loaded torch and TurboMind holds about this much outside the weights and the KV region
#: before the first request (the CUDA context with torch's kernels: vLLM's figure, roles/planner/units.py). (M)
CUDA_CONTEXT_BYTES = planner.VLLM_CUDA_CONTEXT_BYTES
MIB = 1 << 20

#: the flags a setting owns: flag -> the setting to use (flags.py serve_argv renders them)
OWNED_FLAGS = {"--backend": "(always turbomind)", "--model-format": "(from config.json quantization_config)",
               "--model-name": "served_model_name", "--server-name": "listen", "--server-port": "port",
               "--tp": "tp", "--session-len": "session_len", "--cache-max-entry-count": "cache_max_entry_count",
               "--cache-block-seq-len": "cache_block_seq_len", "--quant-policy": "quant_policy",
               "--dtype": "(always float16 on Volta)", "--max-batch-size": "max_batch_size"}
#: api_server options that would make the instance something else than what was planned: other GPUs or hosts than its
#: tp group (data, context and expert parallel, multi-node), another device, or /metrics gone while the monitoring
#: role scrapes it
PLAN_CHANGING_FLAGS = {"--dp": "data parallel runs more engines than the plan's tp GPUs",
                       "--cp": "context parallel changes the GPUs and memory the plan gave the instance",
                       "--ep": "expert parallel changes the GPUs and memory the plan gave the instance",
                       "--nnodes": "the plan is for one host", "--node-rank": "the plan is for one host",
                       "--dist-init-addr": "the plan is for one host",
                       "--device": "the plan is for CUDA GPUs",
                       "--disable-metrics": "the monitoring role scrapes its /metrics",
                       "--hf-overrides": "it rewrites fields of the model's config.json that the memory plan read "
                                         "(layers, heads, context: turbomind/converter.py _apply_hf_overrides, "
                                         "v0.15.0)",
                       "--ssl": "it serves HTTPS, and the deploy's, verify's and the bench's checks speak HTTP to "
                                "its /health and API",
                       "--help": "api_server prints its help and exits 0, and the unit's Restart=on-failure does "
                                 "not restart a clean exit: the instance stays down"}
#: --log-level values at which LMDeploy logs each request's prompt: RequestLogger.log_prompt and log_inputs write
#: `prompt=...` at REQUEST_LOG_LEVEL 15 (lmdeploy/logger.py, lmdeploy/utils.py, v0.15.0), below INFO (20) and above
#: DEBUG (10); NOTSET leaves the level to Python's logging hierarchy, not checked. The parser's default is WARNING.
PROMPT_LOG_LEVELS = frozenset({"DEBUG", "REQUEST", "NOTSET"})
#: TurboMind's attention and decoding kernels on compute capability 7.0 and 7.5, by head dimension
#: (src/turbomind/kernels/attention/kernel/{attention,decoding}_sm70_{64,128,256,576}.cu, v0.15.0; sm80 adds 192).
#: Registry::Find finds none for another head_dim and TM_CHECK stops the engine at its first forward
#: (kernels/attention/attention.cu, registry.cu).
TURBOMIND_SM70_HEAD_DIMS = (64, 128, 256, 576)


@dataclass(frozen=True)
class Memory:
    """The plan of one instance on each of its tp GPUs (bytes unless said). gpu_mib: usable MiB of the smallest GPU
    of its group; outside_mib: MiB of it in use by processes outside v100kit (0 with allow_gpu_in_use);
    weight_bytes: one rank's share of the weights; cuda_context_bytes: the process outside weights and KV;
    free_bytes: what cudaMemGetInfo returns at engine creation (turbomind.cc:291-301: the smallest over the group);
    kv: TurboMind's KV region and blocks (roles/lmdeploy/planner.py plan_kv)."""

    gpus: int
    gpu_mib: int
    outside_mib: int
    weight_bytes: int
    cuda_context_bytes: int
    free_bytes: int
    kv: KvPlan
    block_len: int

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes one token of context takes on one rank (one block's bytes / its tokens)."""
        return self.kv.block_bytes / self.block_len

    @property
    def claim_bytes(self) -> int:
        """What the instance holds on each GPU of its group: weights, CUDA context and the KV region. TurboMind's
        runtime buffers come out of the (1 - cache_max_entry_count) share that is left (not modelled)."""
        return self.weight_bytes + self.cuda_context_bytes + self.kv.cache_bytes


@dataclass(frozen=True)
class Instance:
    """One lmdeploy@NAME: its settings, the model directory on the host and the files to copy there (() for
    model_path), the TurboMind format, the session length rendered, the API key (None: none) and the memory plan
    (None: the model could not be read)."""

    name: str
    settings: Any  # LmdeployInstance
    model_path: str
    model_files: tuple[tuple[str, str], ...]
    fmt: TurbomindFormat
    session_len: int
    api_key: str | None = field(repr=False)
    memory: Memory | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class LmdeployPlan:
    """What the role does on one host: release, host Python, lock, venv and instances."""

    release: LmdeployRelease
    python: str
    lock: Path
    lock_sha256: str
    gpu_visible: bool
    instances: tuple[Instance, ...]

    @property
    def venv(self) -> str:
        """/opt/lmdeploy/<version>-py<python>-<hash of the locked requirements and INSTALL_FLAGS>."""
        recipe = hashlib.sha256(json.dumps([self.lock_sha256, INSTALL_FLAGS]).encode()).hexdigest()
        return f"{VENV_ROOT}/{self.release.version}-py{self.python}-{recipe[:8]}"


def release(settings) -> tuple[LmdeployRelease | None, list[str]]:
    """lmdeploy_version's entry of LMDEPLOY_RELEASES: (release, []) or (None, one problem)."""
    found = LMDEPLOY_RELEASES.get(settings.lmdeploy_version)
    if found is None:
        return None, [problem("lmdeploy_version", settings.lmdeploy_version, "not a release the toolkit has locked and "
                              "checked for sm_70 (roles/lmdeploy/versions.py)",
                              f"choose one of {', '.join(LMDEPLOY_RELEASES)}")]
    return found, []


def host_problems(settings, rel: LmdeployRelease, host_python: str | None,
                  driver_version: str | None) -> list[str]:
    """The host Python must exist and have a lock; the release's torch must have sm_70 kernels (TORCH_SM70) and run
    on the pinned driver (CUDA_MINOR_COMPAT_MIN_DRIVER; None: no driver plan, not checked)."""
    if host_python is None:
        return [problem("lmdeploy_python", settings.lmdeploy_python, "no such Python executable on the host",
                        f"install python3, or point lmdeploy_python at a Python {' or '.join(rel.pythons)}")]
    problems = []
    if host_python not in rel.pythons:
        problems.append(problem("lmdeploy_python", settings.lmdeploy_python, f"Python {host_python} has no lock for "
                                f"LMDeploy {rel.version} (files/lmdeploy: Python {', '.join(rel.pythons)})",
                                f"point lmdeploy_python at a Python {' or '.join(rel.pythons)}"))
    if not TORCH_SM70.get((rel.torch.rsplit(".", 1)[0], rel.torch_cuda)):
        problems.append(problem("lmdeploy_version", rel.version, f"its torch {rel.torch} (CUDA {rel.torch_cuda}) has "
                                "no sm_70 kernels", f"choose one of {', '.join(LMDEPLOY_RELEASES)}"))
    floor = CUDA_MINOR_COMPAT_MIN_DRIVER.get(int(rel.torch_cuda.split(".")[0]))
    if driver_version and floor and version_tuple(driver_version) < version_tuple(floor):
        problems.append(problem("lmdeploy_version", rel.version, f"torch {rel.torch} is built with CUDA "
                                f"{rel.torch_cuda}, which needs driver {CUDA_MIN_DRIVER.get(rel.torch_cuda, floor)} "
                                f"(at least {floor} with minor-version compatibility); the pin is {driver_version}",
                                "pin a newer driver (nvidia_driver_version)"))
    return problems


def lock(rel: LmdeployRelease, host_python: str) -> tuple[Path, str, list[str]]:
    """The lock file for the host's Python (files/lmdeploy/) and its lock_digest: (path, digest, problems)."""
    path = rel.lock_file(host_python if host_python in rel.pythons else rel.pythons[0])
    try:
        return path, lock_digest(path.read_text()), []
    except (OSError, UnicodeDecodeError):
        return path, "", [problem("lmdeploy_version", rel.version, f"no readable lock file {path.name} in {LOCK_DIR}",
                                  "run tools/lock_lmdeploy.py")]


def model(key: str, inst, name: str, home: str, host_model: Callable[[str], dict | None]):
    """(model_path on the host, files to copy, config.json dict or None, HfModel or None, problems) of one instance
    (roles.engines.hf_instance_model): a model_source directory is copied to HOME/models/lmdeploy-NAME (its own
    directory: a vLLM instance of the same name has HOME/models/NAME); a model_path is read on the host."""
    return hf_instance_model(key, inst, f"{home}/models/{UNIT}-{name}", host_model)


def memory(key: str, inst, hf: planner.HfModel, shape: KvShape, session_len: int,
           group: list[GpuInfo], fallback_mib: int) -> tuple[Memory, list[str]]:
    """TurboMind's KV plan for one instance on its tensor-parallel group `group` (its first tp GPUs; [] before a
    driver answers: GPUs of `fallback_mib`): each rank loads its share of the weights, then the group's smallest
    free memory (cudaMemGetInfo; turbomind.cc:291-301) times cache_max_entry_count is the KV region. Memory in use by
    processes outside v100kit is not free (unless allow_gpu_in_use). Returns (Memory, problems)."""
    tp = inst.tp
    weights = -(-hf.weight_bytes // tp)
    frees = []
    for g in group or [None]:
        total = fallback_mib if g is None else usable_mib(g)
        outside = 0 if g is None or inst.allow_gpu_in_use else outside_use(g)[0]
        frees.append((total, outside))
    gpu_mib, outside_mib = min(frees, key=lambda f: f[0] - f[1])
    free = (gpu_mib - outside_mib) * MIB - weights - CUDA_CONTEXT_BYTES
    kv = plan_kv(free, shape, session_len=session_len, tp=tp, cache_max_entry_count=inst.cache_max_entry_count,
                 cache_block_seq_len=inst.cache_block_seq_len, quant_policy=inst.quant_policy, key=key)
    mem = Memory(tp, gpu_mib, outside_mib, weights, CUDA_CONTEXT_BYTES, free, kv, inst.cache_block_seq_len)
    if free <= 0:
        return mem, [problem(f"{key}.tp", tp, f"one rank's weights ({weights / MIB:.0f} MiB) and the CUDA context "
                             f"(~{CUDA_CONTEXT_BYTES / MIB:.0f} MiB) do not fit in {gpu_mib - outside_mib} MiB "
                             "free on the smallest GPU of the group", "spread the model over more GPUs (tp), or use "
                             "a 4-bit AWQ/GPTQ build of it")]
    return mem, list(kv.problems)


def extra_args_problems(key: str, args: list[str]) -> list[str]:
    """One problem per word of extra_args that LMDeploy 0.15.0's parser would refuse, or take for a flag a setting
    owns, --api-keys (the key goes through the launcher, never argv), a flag that changes what was planned or stops
    the instance (PLAN_CHANGING_FLAGS), or a --log-level that logs prompts (PROMPT_LOG_LEVELS). Read as that parser
    reads them: `--flag=value` counts as --flag, its FlexibleArgumentParser turns `_` into `-` in a `--` flag's name
    (lmdeploy/cli/utils.py:829-850), argparse takes a unique prefix of a long option for it (flags.resolve_option:
    --server-p is --server-port, --ap is --api-keys), and a word not starting with `-` (or a negative number) is a
    value of the option before it (none for NO_VALUE_OPTIONS, one, or any number for MANY_VALUE_OPTIONS); a value
    with no option to take it is a second positional argument, which api_server refuses (its only one, the model
    path, the toolkit sets). api_server has no short option but -h. An option that takes a value with none after it
    (argparse: "expected one argument", or "at least one" for flags.AT_LEAST_ONE_VALUE_OPTIONS) and a value outside
    an option's choices (flags.CHOICES: "invalid choice") are refused too: api_server would exit 2 at start."""
    problems = []
    takes = 0  # values the option before may still take: 0, 1, or -1 (any number)
    option = None
    needs = None  # the option before while it lacks the value argparse requires (one, or at least one for '+')

    def missing(opt: str) -> str:
        want = "at least one argument" if opt in AT_LEAST_ONE_VALUE_OPTIONS else "one argument"
        return problem(f"{key}.extra_args", opt, "it takes a value and none follows it, so LMDeploy 0.15.0's "
                       f"api_server refuses the command line (argparse: expected {want}) and the instance does not "
                       "start", "give its value as the next word, or remove it")

    for word in args:
        if word == "--" or is_value_word(word):
            if word == "--":
                problems.append(problem(f"{key}.extra_args", word, "argparse reads every word after it as a "
                                        "positional argument, and api_server takes one, the model path the toolkit "
                                        "sets", "remove it"))
            elif takes == 0:
                problems.append(problem(f"{key}.extra_args", word, "no option before it takes a value, so LMDeploy "
                                        "0.15.0's api_server reads it as a second positional argument after the "
                                        "model path and refuses it (unrecognized arguments)",
                                        "remove it, or put it right after the option it is the value of"))
            elif option is not None and not dotted and not value_ok(option, word):
                problems.append(invalid_value(key, option, word))
            elif option == "--log-level" and word in PROMPT_LOG_LEVELS:
                problems.append(problem(f"{key}.extra_args", f"--log-level {word}", "LMDeploy writes every "
                                        "request's prompt to the journal at this level (lmdeploy/logger.py "
                                        "RequestLogger: level REQUEST, 15)", "use INFO or above, or remove it"))
            needs = None
            takes = max(takes - 1, -1) if takes > 0 else takes
            continue
        if needs:
            problems.append(missing(needs))
        needs = None
        if not word.startswith("--"):
            why = ("it prints the help and exits 0, and the unit's Restart=on-failure does not restart a clean "
                   "exit" if word == "-h" else "api_server has no short options but -h (unrecognized arguments)")
            problems.append(problem(f"{key}.extra_args", word, f"LMDeploy 0.15.0: {why}",
                                    "remove it" if word == "-h" else "spell the long option out (--tp, not -tp)"))
            takes, option = -1, None  # what follows is judged as values: one wrong word, one problem
            continue
        flag = "--" + word.split("=", 1)[0][2:].replace("_", "-")
        # FlexibleArgumentParser turns `--opt.key VALUE` (or `--opt.key=VALUE`) into `--opt '{"key": VALUE}'`
        # (lmdeploy/cli/utils.py:892-912 at v0.15.0): the option is the part before the first '.'
        dotted = "." in flag
        flag = flag.split(".", 1)[0]
        option, candidates = resolve_option(flag)
        inline = "=" in word
        takes = (0 if inline else 1 if dotted else 0 if option in NO_VALUE_OPTIONS
                 else -1 if option in MANY_VALUE_OPTIONS or option is None else 1)
        if option is not None and not inline and (takes == 1 or option in AT_LEAST_ONE_VALUE_OPTIONS):
            needs = option
        if inline and option in NO_VALUE_OPTIONS and not dotted:
            problems.append(problem(f"{key}.extra_args", word, f"{option} takes no value, so LMDeploy 0.15.0's "
                                    "api_server refuses the command line (argparse: ignored explicit argument)",
                                    f"write {option} alone"))
        elif inline and option is not None and not dotted and not value_ok(option, word.split("=", 1)[1]):
            problems.append(invalid_value(key, option, word.split("=", 1)[1]))
        elif inline and option == "--log-level" and word.split("=", 1)[1] in PROMPT_LOG_LEVELS:
            problems.append(problem(f"{key}.extra_args", word, "LMDeploy writes every request's prompt to the "
                                    "journal at this level (lmdeploy/logger.py RequestLogger: level REQUEST, 15)",
                                    "use INFO or above, or remove it"))
        # the flag alone in a refusal where the word could carry a key (`--api-keys=KEY`, `--ap=KEY`)
        shown = flag if option == "--api-keys" or "--api-keys" in candidates else word
        if option is None:
            problems.append(problem(f"{key}.extra_args", shown, "LMDeploy 0.15.0's api_server would refuse it: "
                                    + (f"it is short for each of {', '.join(candidates)}" if candidates else
                                       "it has no such option"),
                                    "spell the option out" if candidates else "remove it (`lmdeploy serve api_server "
                                    "--help` in the venv lists the options)"))
        elif option in OWNED_FLAGS:
            owner = OWNED_FLAGS[option]
            problems.append(problem(f"{key}.extra_args", shown, f"set by the toolkit ({option})",
                                    f"remove it {owner}" if owner.startswith("(") else f"use the setting {owner}"))
        elif option == "--api-keys":
            problems.append(problem(f"{key}.extra_args", shown, "LMDeploy reads it as --api-keys, and a key on the "
                                    "command line is readable by every local user (/proc/PID/cmdline)",
                                    "set api_key_file"))
        elif option in PLAN_CHANGING_FLAGS:
            problems.append(problem(f"{key}.extra_args", shown, f"{option}: {PLAN_CHANGING_FLAGS[option]}",
                                    "remove it"))
    if needs:
        problems.append(missing(needs))
    return problems


def invalid_value(key: str, option: str, value: str) -> str:
    """The refusal of a value argparse would refuse for `option`: not of its type (flags.INT_OPTIONS,
    FLOAT_OPTIONS: "invalid int value") or outside its choices (flags.CHOICES: "invalid choice")."""
    if option in CHOICES:
        return problem(f"{key}.extra_args", f"{option} {value}", "LMDeploy 0.15.0's api_server refuses it (argparse: "
                       "invalid choice) and the instance does not start", f"use one of {', '.join(CHOICES[option])}")
    kind = "int" if option in INT_OPTIONS else "float"
    return problem(f"{key}.extra_args", f"{option} {value}", f"LMDeploy 0.15.0's api_server refuses it (argparse: "
                   f"invalid {kind} value) and the instance does not start", f"give {option} a number ({kind})")


def model_problems(config: dict, cc: tuple[int, int], chosen: str = "lmdeploy_instances.model", shown: str = "",
                   config_key: str = "lmdeploy_instances.model",
                   config_path: str = "") -> tuple[TurbomindFormat | None, KvShape | None, list[str]]:
    """What TurboMind makes of a model's parsed config.json on compute capability `cc` (major, minor): (its format or
    None, its KV shape or None, refusals). Refusals name `chosen` (the setting that chose the model, `shown` its
    value): a format TurboMind cannot run (quant.turbomind_format), an architecture it does not run
    (quant.architecture_problems), a head dimension without an sm70 attention kernel below 8.0
    (TURBOMIND_SM70_HEAD_DIMS); a config.json without the KV shape's keys names `config_key` = `config_path`. The
    checks of an instance's model, and what vLLM's AWQ refusal asks before it offers LMDeploy (engine._quant_fix)."""
    found, problems = turbomind_format(config, chosen)
    problems += architecture_problems(config, chosen)
    try:
        shape = KvShape.from_config(config)
    except (KeyError, TypeError, ValueError) as e:
        return found, None, problems + [problem(config_key, config_path, f"config.json lacks {e}",
                                                "fix the config.json")]
    if cc < (8, 0) and shape.head_dim not in TURBOMIND_SM70_HEAD_DIMS:
        problems.append(problem(chosen, shown, f"its head dimension {shape.head_dim} has no TurboMind attention "
                                f"kernel on compute capability {cc[0]}.{cc[1]} (LMDeploy 0.15.0 has "
                                f"{', '.join(map(str, TURBOMIND_SM70_HEAD_DIMS))}): the engine would stop at its "
                                "first request", "serve a GGUF of the model with llama.cpp (llama_cpp_instances), "
                                "or choose a model of one of those head dimensions"))
    return found, shape, problems


def instance(name: str, inst, settings, gpus: list[GpuInfo],
             host_model: Callable[[str], dict | None]) -> tuple[Instance, list[str]]:
    """One lmdeploy@NAME: (Instance, problems) for its GPUs, listen address, API key, extra_args and model (the
    TurboMind format from config.json, then the KV plan on its tp GPUs)."""
    key = f"lmdeploy_instances.{name}"
    n_gpus = gpu_count(settings, gpus)
    visible = len(inst.gpus or range(n_gpus))
    group = given_gpus(settings, gpus, inst.gpus)[:inst.tp]
    cc = compute_capability(settings, group)
    problems = []
    problems += gpu_index_problems(key, inst.gpus, [g["index"] for g in host_gpus(settings, gpus)], bool(gpus))
    if inst.tp > visible:
        problems.append(problem(f"{key}.tp", inst.tp, f"tensor parallel needs one GPU per rank; the instance sees "
                                f"{visible}", f"set tp to at most {visible}, or add GPUs"))
    if cc < MIN_CAPABILITY:
        problems.append(problem(f"{key}.gpus", inst.gpus, f"TurboMind is built for compute capability 7.0 and up; "
                                f"this GPU has {cc[0]}.{cc[1]}", "serve the model with llama.cpp (GGUF)"))
    # LMDeploy's AuthenticationMiddleware guards its API routes; /health and the docs answer anyone
    # (serve/openai/api_server.py, v0.15.0)
    problems += network_listener(key, inst.listen, bool(inst.expose_to_network and inst.api_key_file),
                                 "LMDeploy without an API key answers anyone on the network",
                                 "listen on 127.0.0.1 behind a proxy that authenticates, or set api_key_file and "
                                 "expose_to_network: true")
    api_key, more = read_api_key(f"{key}.api_key_file", inst.api_key_file)
    problems += more + extra_args_problems(key, inst.extra_args)
    model_path, files_, config, hf, more = model(key, inst, name, settings.base_service_home, host_model)
    problems += more
    fmt, mem, session_len = TurbomindFormat(None), None, inst.session_len or DEFAULT_SESSION_CAP
    warnings: list[str] = []
    if config is not None and hf is not None:
        chosen = f"{key}.model_{'source' if inst.model_source else 'path'}"  # the setting that named the model
        found, shape, more = model_problems(config, cc, chosen, inst.model_source or inst.model_path,
                                            f"{key}.model", model_path)
        problems += more
        fmt = found or fmt
        session_len = inst.session_len or min(hf.max_position_embeddings or DEFAULT_SESSION_CAP, DEFAULT_SESSION_CAP)
        trained = hf.derived_max_len or hf.max_position_embeddings
        if trained and session_len > trained:
            # LMDeploy accepts it; vLLM refuses the same (its derived max model len, roles/planner/messages.py)
            warnings.append(f"{UNIT}@{name}: session_len {session_len} is beyond the {trained} positions the model "
                            "was trained for (config.json max_position_embeddings, with its rope_scaling): replies "
                            "past them degrade; lower session_len, or use a model with rope_scaling for it")
        if shape is not None and shape.kv_heads % inst.tp:
            problems.append(problem(f"{key}.tp", inst.tp, f"the model's {shape.kv_heads} KV heads do not split "
                                    "evenly over the ranks", "choose a tp that divides the KV heads"))
        elif shape is not None and found is not None and inst.tp <= visible:
            mem, more = memory(key, inst, hf, shape, session_len, group, settings.gpu_memory_mib)
            problems += more
    return Instance(name, inst, model_path, files_, fmt, session_len, api_key, mem, tuple(warnings)), problems


def plan(settings, host_python: str | None, gpus: list[GpuInfo], driver_version: str | None,
         host_model: Callable[[str], dict | None], taken_ports: dict[int, str]) -> tuple[LmdeployPlan | None,
                                                                                          list[str]]:
    """Resolve release, lock and instances for one host; (None, []) without an lmdeploy instance.

    host_python: "3.13" (the PythonVersion fact of lmdeploy_python) or None; gpus: the NvidiaGpus fact; driver_version:
    the pinned driver (None: not planned); host_model(path): the HfModelDir fact; taken_ports: {port: unit} of the
    engines planned before. Never raises for bad input: (plan, problems), the plan None whenever there is one."""
    if not settings.lmdeploy_instances:
        return None, release(settings)[1]
    rel, problems = release(settings)
    if rel is None:
        return None, problems
    problems = host_problems(settings, rel, host_python, driver_version)
    if host_python is None:
        return None, problems
    lock_path, lock_sha, more = lock(rel, host_python)
    problems += more
    items = sorted(settings.lmdeploy_instances.items())
    clashes = port_clashes("lmdeploy_instances", ((n, i.port) for n, i in items), lambda n: f"{UNIT}@{n}",
                           taken_ports)
    instances = []
    for name, inst in items:
        resolved, more = instance(name, inst, settings, gpus, host_model)
        problems += clashes[name] + more
        instances.append(resolved)
    if problems:
        return None, problems
    return LmdeployPlan(rel, host_python, lock_path, lock_sha, bool(gpus), tuple(instances)), []


def serve_args(inst: Instance) -> list[str]:
    """The words after `lmdeploy` for one instance (flags.py serve_argv, then extra_args); no key among them."""
    s = inst.settings
    return serve_argv(ServeArgs(inst.model_path, s.served_model_name or inst.name, s.listen, s.port, inst.session_len,
                                inst.fmt, s.tp, s.cache_max_entry_count, s.cache_block_seq_len, s.quant_policy,
                                s.max_batch_size)) + list(s.extra_args)


def environment(p: LmdeployPlan, inst: Instance) -> str:
    """The instance's EnvironmentFile text: LMDEPLOY_ARGS (the words of serve_args, shell-quoted; systemd splits
    $LMDEPLOY_ARGS on whitespace), LMDEPLOY_KEY (the credential the launcher reads, or '-': no key) and, with a
    gpus setting, the GPUs in nvidia-smi's order."""
    env = {"LMDEPLOY_ARGS": " ".join(shlex.quote(a) for a in serve_args(inst)),
           "LMDEPLOY_KEY": CREDENTIAL if inst.api_key else "-"}
    if inst.settings.gpus:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in inst.settings.gpus)
    return "".join(f"{k}={v}\n" for k, v in env.items())


def key_file_text(inst: Instance) -> str:
    """What CONFIG_DIR/NAME.key.env holds (0600 root; LoadCredential hands it to the service): the key alone on one
    line, or nothing for an instance without a key (LoadCredential needs the file; the launcher is told '-')."""
    return f"{inst.api_key}\n" if inst.api_key else ""
