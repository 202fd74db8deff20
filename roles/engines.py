"""Rules both engine roles (roles/llama_cpp, roles/vllm) share: one port per instance on a host, a network listener
only when protected, exactly one model setting, the GPUs to plan for, and control-machine file checksums.

Pure: settings and facts in, values or problem lines (roles.settings.problem) out; no pyinfra operation is
imported here. Each role passes its own wording where the two word a rule differently, so users see the same
texts as before this module existed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse, urlsplit

from roles.nvidia_driver.facts import GpuInfo
from roles.settings import LlamaCppInstance, Settings, VllmInstance, problem

MIB = 1 << 20


def is_url(s: str) -> bool:
    """True for an http(s) URL; anything else is a path on the control machine."""
    return urlparse(s).scheme in ("http", "https")


def url_file_name(url: str) -> str:
    """The file name a URL names: the last segment of its path, percent-decoded ('' for a URL that ends in '/').
    `v100kit offline fill` stores a download under it, and the roles place a model under it."""
    return unquote(PurePosixPath(urlsplit(url).path).name)


def sha256_file(path: str) -> str:
    """Hex sha256 (64 characters) of a file on the control machine, read in 1 MiB chunks. Raises OSError when
    the file cannot be read."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def port_clashes(section: str, ports: Iterable[tuple[str, int]], holder: Callable[[str], str],
                 taken: Mapping[int, str] | None = None) -> dict[str, list[str]]:
    """Per instance name, the problem when its port is already used on the host ([] when not).

    `ports`: (instance name, TCP port) in the order the role walks its instances (sorted by name). `holder(name)`
    is how the role names an instance in the message ("instance 'a'", "vllm@a"); `taken`: port -> holder text of
    ports other roles already use on the host. A port used twice is reported at every later use, naming the
    instance seen last before it."""
    seen = dict(taken or {})
    out: dict[str, list[str]] = {}
    for name, port in ports:
        out[name] = [problem(f"{section}.{name}.port", port, f"{seen[port]} already uses it",
                             "give every instance its own port")] if port in seen else []
        seen[port] = holder(name)
    return out


def network_listener(key: str, listen: str, protected: bool, why: str, fix: str) -> list[str]:
    """[] when `listen` (an IP address, validated by the settings) is a loopback address or the role calls the
    listener `protected`; else one problem naming `key`.listen with the role's own `why` and `fix`."""
    if protected or ipaddress.ip_address(listen).is_loopback:
        return []
    return [problem(f"{key}.listen", listen, why, fix)]


def one_model(key: str, inst: LlamaCppInstance | VllmInstance, fix: str, shown: dict | None = None) -> list[str]:
    """[] when exactly one of inst.model_path and inst.model_source is set; else one problem naming `key`, whose
    value is `shown` (default: the two settings) and whose fix is the role's `fix`."""
    if bool(inst.model_path) != bool(inst.model_source):
        return []
    if shown is None:
        shown = {"model_path": inst.model_path, "model_source": inst.model_source}
    return [problem(key, shown, "needs exactly one of model_path and model_source", fix)]


def compute_capability(settings: Settings, gpus: list[GpuInfo]) -> tuple[int, int]:
    """(major, minor) of the first GPU nvidia-smi lists (the NvidiaGpus fact), else of gpu_compute_capability.
    Raises ValueError for a capability not written "M.m"."""
    major, minor = (gpus[0]["compute_cap"] if gpus else settings.gpu_compute_capability).split(".")
    return int(major), int(minor)


def gpu_count(settings: Settings, gpus: list[GpuInfo]) -> int:
    """How many GPUs the NvidiaGpus fact lists, else gpu_count (a host whose driver does not answer yet)."""
    return len(gpus) or settings.gpu_count


def gpu_memory_mib(settings: Settings, gpus: list[GpuInfo]) -> int:
    """VRAM of the smallest listed GPU in MiB, else gpu_memory_mib."""
    return min(g["memory_mib"] for g in gpus) if gpus else settings.gpu_memory_mib


def gpu_claims(llama_instances: list[tuple[str, list[int] | None, int | None]],
               vllm_instances: list[tuple[str, list[int] | None, int, float, int]], n_gpus: int, gpu_mib: int
               ) -> dict[int, list[tuple[str, int | None]]]:
    """Who claims how much of each GPU, across both engines: {GPU index: [(unit, bytes or None), ...]}.

    llama_instances: (llama-server@NAME, gpus setting or None, the planner's total bytes per GPU, None when the
    model is not readable before the deploy); llama-server spreads its layers over every GPU it sees (gpus, else
    all n_gpus), so it claims each of them.
    vllm_instances: (vllm@NAME, gpus setting or None, tensor_parallel_size, gpu_memory_utilization, bytes outside
    the share); vLLM takes its share of the whole GPU on the first tensor_parallel_size GPUs it sees, and its CUDA
    context and CUDA graphs come on top of that share (roles/planner/vllm.py: vllm#11251 ran out of memory capturing
    graphs with too little left outside it). gpu_mib: VRAM per GPU in MiB.
    """
    claims: dict[int, list[tuple[str, int | None]]] = {}
    for unit, gpus, per_gpu in llama_instances:
        for g in gpus or range(n_gpus):
            claims.setdefault(g, []).append((unit, per_gpu))
    for unit, gpus, tp, share, outside in vllm_instances:
        for g in (gpus or list(range(n_gpus)))[:tp]:
            claims.setdefault(g, []).append((unit, int(share * gpu_mib * MIB) + outside))
    return claims


def shared_gpu_problems(claims: dict[int, list[tuple[str, int | None]]], gpu_mib: int) -> list[str]:
    """One problem per GPU that instances of both engines share and together overfill (bytes they claim above
    gpu_mib MiB); instances of one engine alone are checked by that engine's role. Unknown sizes count 0."""
    problems = []
    for g, users in sorted(claims.items()):
        engines = {unit.split("@")[0] for unit, _ in users}
        total = sum(b or 0 for _, b in users)
        if len(engines) < 2 or total <= gpu_mib * MIB:
            continue
        shown = {unit: f"{(b or 0) / MIB:.0f} MiB" for unit, b in users}
        problems.append(problem("gpus", shown, f"llama-server and vLLM instances share GPU {g} and claim "
                                f"{total / MIB:.0f} MiB of its {gpu_mib} MiB together (llama-server's planned "
                                "total plus vLLM's gpu_memory_utilization share and its CUDA context and graphs "
                                "outside it): the second to start runs out of "
                                "memory", "give the instances different GPUs (gpus: [...] on each), lower the vLLM "
                                "instance's gpu_memory_utilization, or shorten the llama-server context"))
    return problems


#: A word of extra_args that is a value, not a flag: it does not start with '-', or is a negative number.
ARG_VALUE = re.compile(r"^(?:[^-].*|-\d.*|-)$")


def flag_of(word: str) -> str:
    """The flag a word names: `--flag=value` counts as `--flag`, and both engines read `_` in a `--` flag as `-`
    (llama.cpp's common/arg.cpp parse_cli_args, vLLM's FlexibleArgumentParser)."""
    flag = word.split("=", 1)[0]
    return flag.replace("_", "-") if flag.startswith("--") else flag


def extra_args_problems(key: str, args: list[str], owned: Mapping[str, str], known: frozenset[str] | None,
                        unknown: tuple[str, str], refused: Mapping[str, tuple[str, str]] | None = None,
                        also: Callable[[str, str], list[str]] = lambda word, flag: []) -> list[str]:
    """One problem per flag word of an instance's extra_args (`key`): a flag the toolkit owns (`owned`: flag ->
    the setting to use), one refused with its own (why, fix) (`refused`), one the engine does not have (`known`;
    None: not checked; `unknown`: the (why, fix) to say), else whatever `also(word, flag)` finds. Values pass."""
    problems = []
    for word in args:
        if ARG_VALUE.match(word):
            continue
        flag = flag_of(word)
        if flag in owned:
            problems.append(problem(key, word, "set by the toolkit", f"use the setting {owned[flag]}"))
        elif refused and flag in refused:
            problems.append(problem(key, word, *refused[flag]))
        elif known is not None and flag not in known:
            problems.append(problem(key, word, *unknown))
        else:
            problems += also(word, flag)
    return problems

