"""What the llama_cpp role does on one host, decided from settings and read-only facts before any change: the
source archive, the CUDA toolkit and architectures, the install prefix, and per instance the model, its memory
plan (roles/planner), the listen address and the API key. Pure: no pyinfra operation is imported here.

The install prefix is named by source ref, architectures, CUDA version and a hash of the build configuration
(/opt/llama.cpp/<ref>-sm70-cuda12.4-<hash>): any change of those builds a new prefix beside the old one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable
from urllib.parse import quote, unquote, urlparse

from roles import planner
from roles.cuda.versions import Toolkit
from roles.hub import is_header_copy
from roles.engines import (IDLE_USED_MIB, compute_capability, describe_outside, given_gpus, gpu_claims, gpu_count,
                           gpu_index_problems, gpu_memory_mib, host_gpus, is_url, network_listener, one_model,
                           outside_use, port_clashes, sha256_file, url_file_name, usable_mib)
from roles.llama_cpp import slots as serving
from roles.llama_cpp.choices import (KvChoice, architecture_problems as model_architecture_problems, choose_kv,
                                     context_problems, gpu_architecture_problems, kv_candidates)
from roles.llama_cpp.flags import extra_args_problems, typed_args, typed_problems
from roles.llama_cpp.tree import read_tree
from roles.llama_cpp.versions import (CUDA_ARCH_RANGE, CUDA_BAD_ON_VOLTA, CUDA_PREFERRED_ON_VOLTA, DEFAULT_SOURCE,
                                      SOURCES, Source, volta_known_bad, volta_refusal)
from roles.secrets import read_api_key
from roles.nvidia_driver.shapes import GpuInfo
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import Settings, problem

PREFIX_ROOT = "/opt/llama.cpp"
CURRENT = f"{PREFIX_ROOT}/current"
WORK = "/var/lib/v100kit/llama.cpp"  # archives and build trees (root only; the service user cannot write here)
CCACHE_DIR = "/var/cache/v100kit/ccache"
CONFIG_DIR = "/etc/llama-server"
STAMP = ".v100kit-build.json"

#: KV cache types that are not quantized: a V cache of any other type needs flash attention (docs/volta.md §5).
UNQUANTIZED_KV = ("f16", "f32", "bf16")


#: How llama.cpp names the parts of a split GGUF: NAME-00001-of-00003.gguf (src/llama.cpp, llama_split_path:
#: "%s-%05d-of-%05d.gguf" with split_no + 1; tools/gguf-split writes them so). Its loader is given the first part
#: and opens the others by that name in the same directory, as many as the first part's split.count
#: (src/llama-model-loader.cpp; it refuses a file whose split.no is not 0). (H)
SPLIT_GGUF_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class ModelPart:
    """A further part (2..N) of a split GGUF: where it comes from (URL or control-machine path, like
    model_source), where it goes on the host (beside the first part) and its sha256."""

    source: str
    dest: str
    sha256: str


def split_gguf(name: str) -> tuple[str, int, int] | None:
    """(prefix, part number from 1, part count) of a split GGUF's file name; None for a one-file model (count 1 is
    one file too)."""
    m = SPLIT_GGUF_NAME.match(name)
    if not m or int(m["count"]) <= 1:
        return None
    return m["prefix"], int(m["no"]), int(m["count"])


def split_part_name(prefix: str, no: int, count: int) -> str:
    """The file name of part `no` (from 1) of `count`, as llama.cpp's llama_split_path spells it."""
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"


def split_problems(key: str, inst: LlamaCppInstance, name: str) -> list[str]:
    """A split GGUF (by its file `name`) must be given by its first part, with model_parts_sha256 holding one
    sha256 per further part; model_parts_sha256 on anything else is refused. [] when all is in order."""
    split = split_gguf(name)
    parts = inst.model_parts_sha256
    merge = "or merge the parts into one file with llama.cpp's `llama-gguf-split --merge FIRST-PART OUT.gguf`"
    if split is None:
        return [] if not parts else [problem(f"{key}.model_parts_sha256", parts,
                                             f"{name} is not a split GGUF (NAME-00001-of-0000N.gguf)",
                                             "leave model_parts_sha256 unset")]
    prefix, no, count = split
    if no != 1:
        return [problem(f"{key}.model_source" if inst.model_source else f"{key}.model_path", name,
                        f"part {no} of {count} of a split GGUF: llama.cpp loads a split model from its first part",
                        f"give {split_part_name(prefix, 1, count)} ({merge})")]
    if inst.model_path:
        return [] if not parts else [problem(f"{key}.model_parts_sha256", parts, "the parts are already on the "
                                             "host (model_path): nothing is placed or checked",
                                             "leave model_parts_sha256 unset, or use model_source")]
    if len(parts or []) != count - 1:
        return [problem(f"{key}.model_parts_sha256", parts,
                        f"{name} is the first of {count} parts of a split GGUF, each placed on the host and "
                        f"checked: parts 2..{count} need {count - 1} sha256 values, {len(parts or [])} given",
                        f"list the sha256 of {split_part_name(prefix, 2, count)}"
                        + (f" .. {split_part_name(prefix, count, count)}" if count > 2 else "")
                        + f" in order, {merge}")]
    return []


def model_parts(inst: LlamaCppInstance, source: str, model_path: str,
                mirror: str | None = None) -> tuple[ModelPart, ...]:
    """Parts 2..N of a split GGUF model_source (() for one file): each from the URL or directory of `source` (the
    first part as placed; from `mirror` as MIRROR/<sha256>/<file name>, like the first), to model_path's
    directory, with its sha256 from model_parts_sha256. Call after split_problems found none."""
    split = split_gguf(Path(model_path).name)
    if split is None or not inst.model_parts_sha256:
        return ()
    prefix, _, count = split
    out = []
    for no, sha in zip(range(2, count + 1), inst.model_parts_sha256):
        name = split_part_name(prefix, no, count)  # as the URL spells it (percent-encoding kept), like the first
        if mirror:  # named as `v100kit offline fill` stores it
            src = f"{mirror.rstrip('/')}/{sha}/{quote(unquote(name))}"
        elif is_url(source):
            url = urlparse(source)
            src = url._replace(path=url.path[:url.path.rindex("/") + 1] + name).geturl()
        else:
            src = str(Path(source).with_name(name))
        out.append(ModelPart(src, str(Path(model_path).with_name(name)), sha))
    return tuple(out)


@dataclass(frozen=True)
class Instance:
    name: str
    settings: LlamaCppInstance
    model_path: str  # on the host
    model_source: str | None  # URL or control-machine path to place there
    api_key: str | None = field(repr=False)
    memory: planner.Plan | None = None  # None: the model file is not readable before the deploy (URL, host path)
    kv: KvChoice | None = None  # the KV cache types and flash attention it runs with (None: settings as given)
    gpu_layers: int | None = None  # layers the memory plan keeps on the GPU where it offloads (allow_offload)
    serving: serving.Serving | None = None  # slots, context per request and KV pool (None: settings as given)
    server_flags: frozenset[str] | None = None  # the tree's llama-server flags (roles/llama_cpp/flags.py spellings)
    parts: tuple[ModelPart, ...] = ()  # parts 2..N of a split GGUF model_source, placed beside model_path
    log_verbosity: int | None = None  # the tree's quiet -lv (tree.py log_verbosity); None: unknown, VERBOSITY

    @property
    def n_gpu_layers(self) -> int:
        """-ngl as it runs: the setting, or where the memory plan runs layers on the CPU (allow_offload) the layers
        it keeps on the GPU, so that llama-server does not try to load more than fits."""
        return self.settings.n_gpu_layers if self.gpu_layers is None else self.gpu_layers


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
    gpu_visible: bool = False  # a GPU answers nvidia-smi: after each (re)start the deploy checks it serves from it
    notes: tuple[str, ...] = ()  # choices the plan made that the operator should see (logged by roles/preflight.py)
    log_requests: bool = False  # llama_cpp_log_requests: each prompt to a file (--log-prompts-dir prompt_log_dir)

    @property
    def archive(self) -> str:
        return f"{WORK}/src/{self.source.sha256}.tar.gz"


def source(settings: Settings) -> tuple[Source, list[str]]:
    """The source archive to build: the pinned DEFAULT_SOURCE, or llama_cpp_source (URL or control-machine path,
    `~` expanded) with its sha256, subdir and -fa style overrides applied: (source, problems). Refuses a
    llama_cpp_source without a checksum and a llama_cpp_ref without a source (then DEFAULT_SOURCE stands in), and a
    llama_cpp_flash_attn_style against a pinned tree's own (the pin's bytes from a mirror too)."""
    problems: list[str] = []
    if settings.llama_cpp_source:
        if not settings.llama_cpp_source_sha256:
            problems.append(problem("llama_cpp_source", settings.llama_cpp_source, "no checksum given",
                                    "set llama_cpp_source_sha256 to the archive's sha256"))
        known = next((k for k in SOURCES.values() if k.sha256 == settings.llama_cpp_source_sha256), None)
        if known:  # a pinned source's bytes from elsewhere (a mirror, offline): its known facts apply
            src = replace(known, ref=settings.llama_cpp_ref, url=settings.llama_cpp_source)
        else:
            src = Source(settings.llama_cpp_ref, settings.llama_cpp_source, settings.llama_cpp_source_sha256 or "",
                         settings.llama_cpp_source_subdir)
    elif settings.llama_cpp_ref in SOURCES:  # the default, or an older pin: all stay selectable
        src = SOURCES[settings.llama_cpp_ref]
    else:
        problems.append(problem("llama_cpp_ref", settings.llama_cpp_ref, "no source for this ref",
                                "set llama_cpp_source (URL or path of the .tar.gz) and llama_cpp_source_sha256, "
                                f"or one of the pinned refs: {', '.join(SOURCES)}"))
        src = DEFAULT_SOURCE
    style = settings.llama_cpp_flash_attn_style
    if style and src.architectures is not None and style != src.flash_attn_style:
        # a pinned tree's style was read from its own common/arg.cpp (tools/llama_cpp_pin.py): a setting against it
        # would render a -fa that llama-server refuses at start-up
        problems.append(problem("llama_cpp_flash_attn_style", style,
                                f"the pinned tree {src.ref} takes {_fa_form(src.flash_attn_style)} (its common/arg.cpp)",
                                f"set it to {src.flash_attn_style}, or leave it unset"))
    elif style:
        src = replace(src, flash_attn_style=style)
    if settings.llama_cpp_source_subdir:
        src = replace(src, subdir=settings.llama_cpp_source_subdir)
    if not is_url(src.url):
        src = replace(src, url=str(Path(src.url).expanduser()))
    return src, problems


def tree_of(src: Source, settings: Settings, read_archive: bool = True) -> Tree:
    """What is known of the tree `src` builds: a pinned source's derived facts (files/llama_cpp/<ref>.json), else
    those read from a control-machine archive (roles/llama_cpp/tree.py) when `read_archive` (False once the
    archive failed its checksum), else unknown (a URL not fetched here). Never raises."""
    all_quants = settings.llama_cpp_fa_all_quants
    if src.fa_form is not None or src.architectures is not None:
        return Tree(src.ref, src.architectures, src.fa_form, all_quants, server_flags=src.server_flags,
                    llama_version=src.llama_version, log_verbosity=src.log_verbosity,
                    server_flag_values=src.server_flag_values, server_int_flags=src.server_int_flags)
    if read_archive and not is_url(src.url) and Path(src.url).is_file():
        try:
            facts = read_tree(Path(src.url), src.subdir)
            return Tree(src.ref, facts.architectures, facts.fa_form, all_quants,
                        server_flags=facts.server_flags or None, llama_version=facts.llama_version,
                        log_verbosity=facts.log_verbosity, flash_attn_style=facts.flash_attn_style,
                        server_flag_values=facts.server_flag_values or None,
                        server_int_flags=facts.server_int_flags if facts.server_flag_values else None)
        except (OSError, ValueError):  # not a llama.cpp tree we can read: unknown, and said so where it matters
            pass
    return Tree(src.ref, None, None, all_quants)


def read_flash_attn_style(src: Source, tree: Tree, settings: Settings) -> tuple[Source, list[str]]:
    """How the llama-server of an archive read here takes -fa (tree.flash_attn_style, from its common/arg.cpp)
    decides the source's style: a non-pinned tree from before about b6327 takes a bare -fa, and `-fa on` would stop
    it at start-up ("error: invalid argument: on"). (source, problems): a problem when llama_cpp_flash_attn_style
    says otherwise than the archive's own code; the source as it was where nothing was read (a pin, a URL)."""
    read = tree.flash_attn_style
    if read is None or read == src.flash_attn_style:
        return src, []
    if settings.llama_cpp_flash_attn_style:
        return src, [problem("llama_cpp_flash_attn_style", settings.llama_cpp_flash_attn_style,
                             f"the archive's common/arg.cpp takes {_fa_form(read)}",
                             f"set it to {read}, or leave it unset: it is read from the archive")]
    return replace(src, flash_attn_style=read), []


def _fa_form(style: str) -> str:
    return "a bare -fa" if style == "flag" else "-fa on|off|auto"


def source_file_problems(src: Source) -> list[str]:
    """A control-machine source archive must exist and have its sha256 (hex); [] for a URL (files.download
    checks it on the host) or when no checksum is given (refused by source())."""
    if is_url(src.url) or not src.sha256:
        return []
    if not Path(src.url).is_file():
        return [problem("llama_cpp_source", src.url, "no such file on the control machine",
                        "give an existing .tar.gz path or a URL")]
    if (actual := sha256_file(src.url)) != src.sha256:
        return [problem("llama_cpp_source_sha256", src.sha256, f"the archive's sha256 is {actual}",
                        "check the archive, then the checksum")]
    return []


def toolkit(settings: Settings, toolkits: list[Toolkit]) -> tuple[Toolkit | None, list[str]]:
    """The installed toolkit llama_cpp_cuda_version names (default: the first, the default toolkit):
    (toolkit, problems); None with a problem when it is not installed, None without one when no toolkit is planned
    at all (the cuda role has refused its settings: a second line naming an empty list would only mislead)."""
    if not toolkits and settings.llama_cpp_cuda_version is None:
        return None, []  # none planned: the cuda role's own refusal (cuda_versions, the driver) says why, once
    wanted = settings.llama_cpp_cuda_version or toolkits[0].version
    found = next((t for t in toolkits if t.version == wanted), None)
    if found is None:
        return None, [problem("llama_cpp_cuda_version", wanted, "not among the installed toolkits",
                              "choose one of cuda_versions: " + ", ".join(t.version for t in toolkits))]
    return found, []


#: CMAKE_CUDA_ARCHITECTURES entries that are Volta: compute capability 7.0 (V100) and 7.2 (Jetson AGX Xavier)
#: (NVIDIA's CUDA GPUs list; docs/volta.md)
VOLTA_ARCHS = frozenset({"70", "72"})


def builds_for_volta(archs: tuple[str, ...]) -> bool:
    """True when the build's architectures ("70", "75", ...) include a Volta one."""
    return bool(VOLTA_ARCHS & set(archs))


def volta_toolkit(settings: Settings, toolkits: list[Toolkit], tk: Toolkit | None, archs: tuple[str, ...]
                  ) -> tuple[Toolkit | None, list[str], list[str]]:
    """The toolkit a Volta build uses instead of one known bad on Volta (CUDA_BAD_ON_VOLTA: 12.9, whose llama.cpp
    builds fail to allocate their weights on a V100, ggml-org/llama.cpp#28416): (toolkit, problems, notes).

    Left to the default (llama_cpp_cuda_version unset), a 12.9 default gives way to an installed 12.8
    (CUDA_PREFERRED_ON_VOLTA), said in a note. Named explicitly, or without 12.8 installed, 12.9 is refused unless
    llama_cpp_allow_cuda_12_9 is set (then a note says what was accepted). A refusal, not a warning: the failure
    shows only at model load, after the whole build, on every start, and the issue has no fix to wait for."""
    if tk is None or not builds_for_volta(archs) or tk.version not in CUDA_BAD_ON_VOLTA:
        return tk, [], []
    source = CUDA_BAD_ON_VOLTA[tk.version]
    why = (f"llama.cpp built with CUDA {tk.version} fails to allocate its weights on an empty V100 ('cudaMalloc "
           f"failed: out of memory'), the same source built with {CUDA_PREFERRED_ON_VOLTA} works ({source})")
    preferred = next((t for t in toolkits if t.version == CUDA_PREFERRED_ON_VOLTA), None)
    if settings.llama_cpp_cuda_version is None and preferred:
        return preferred, [], [f"building llama.cpp with CUDA {preferred.version}, not the default {tk.version}: "
                               f"{why}"]
    if settings.llama_cpp_allow_cuda_12_9:
        return tk, [], [f"building llama.cpp with CUDA {tk.version} for Volta as llama_cpp_allow_cuda_12_9 allows; "
                        f"{why}"]
    fix = (f"set llama_cpp_cuda_version: {preferred.version}" if preferred else
           f"add {CUDA_PREFERRED_ON_VOLTA} to cuda_versions (NVIDIA's repository carries it for Debian 12 and Ubuntu "
           f"22.04/24.04: cuda_source: nvidia) and set llama_cpp_cuda_version: {CUDA_PREFERRED_ON_VOLTA}")
    return None, [problem("llama_cpp_cuda_version", tk.version, f"{why}",
                          f"{fix}, or set llama_cpp_allow_cuda_12_9: true to build with it anyway")], []


def version_of_ref(ref: str) -> tuple[int, int, int] | None:
    """A llama.cpp release tag as a ref ("v0.4.1", "0.4.1") -> (0, 4, 1); None for any other ref."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", ref)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def known_bad_tree_problems(settings: Settings, tree: Tree, archs: tuple[str, ...]) -> list[str]:
    """A Volta build of a llama.cpp tree in a range known bad on Volta (roles/llama_cpp/versions.py VOLTA_RANGES)
    is refused, naming the PR that broke it, the one that fixed it and what to pick instead. The version is the
    tree's own (its CMakeLists.txt, from the pin data or the archive read here), else that of a ref named like a
    release tag (v0.4.1); a tree known by neither (a URL not fetched here) is not checked."""
    if not builds_for_volta(archs):
        return []
    version = tree.llama_version or version_of_ref(tree.ref)
    key, value = (("llama_cpp_source", settings.llama_cpp_source) if settings.llama_cpp_source
                  else ("llama_cpp_ref", settings.llama_cpp_ref))
    return [problem(key, value, volta_refusal(r, version), "choose a llama.cpp source outside the range")
            for r in volta_known_bad(version)]


def architectures(settings: Settings, gpus: list[GpuInfo]) -> tuple[str, ...]:
    """CUDA architectures to build ("70"): llama_cpp_cuda_architectures, else those of the GPUs nvidia-smi lists,
    else 70 (never CMake's native detection, which fails without a visible GPU: docs/volta.md §5)."""
    return tuple(settings.llama_cpp_cuda_architectures or
                 sorted({g["compute_cap"].replace(".", "") for g in gpus}) or ["70"])


def architecture_problems(archs: tuple[str, ...], tk: Toolkit | None) -> list[str]:
    """One problem per architecture the toolkit cannot compile for (CUDA_ARCH_RANGE; CUDA release notes,
    docs/volta.md §2); [] without a toolkit (refused elsewhere) or for a toolkit missing from the table."""
    if tk is None:
        return []
    lo, hi = CUDA_ARCH_RANGE.get(tk.version, (0, 999))
    return [problem("llama_cpp_cuda_architectures", list(archs),
                    f"CUDA {tk.version} builds sm_{lo}..sm_{hi}, not sm_{a} (CUDA release notes)",
                    f"use architectures in {lo}..{hi} (V100: 70) or another llama_cpp_cuda_version")
            for a in archs if not lo <= int(a) <= hi]


@dataclass(frozen=True)
class GpuShare:
    """The share of its GPUs one llama-server instance plans within: `fraction` of each GPU's VRAM (0..1, the
    usable fraction already applied) and why, one line ("" when it has them to itself); `outside`: the memory in use
    by processes outside v100kit taken off, in words per GPU (describe_outside; () when none)."""

    fraction: float
    why: str = ""
    outside: tuple[str, ...] = ()


def sized_as_set(inst: LlamaCppInstance) -> bool:
    """The instance's memory is fixed by its settings (context and parallel both set: nothing left to choose but the
    KV type), so it is planned first, within what its GPUs have, and the others share what it leaves."""
    return inst.context is not None and inst.parallel is not None


def gpu_shares(settings: Settings, gpus: list[GpuInfo], set_claims: dict[str, int | None] | None = None
               ) -> dict[str, GpuShare]:
    """{instance name: GpuShare} of every llama-server instance, per GPU it is given (given_gpus): what the vLLM
    instances on that GPU claim (gpu_memory_utilization of the GPU plus its CUDA context and graphs outside it,
    roles/engines.py gpu_claims) and the memory in use by processes outside v100kit (outside_use; not where the
    instance sets allow_gpu_in_use) are taken off first. An instance sized as set (sized_as_set) plans within all the
    rest; the others also leave what those claim (`set_claims`: {name: planned bytes per GPU} once they are planned)
    and split the rest evenly where they see a common GPU, so that an automatically sized KV pool never fills memory
    another instance is planned in. The tightest of the instance's GPUs decides. Never raises."""
    from roles.vllm.decide import unread_graph_bytes  # the vLLM role's own count of an instance's graphs
    from roles.vllm.versions import VLLM_RELEASES

    listed = host_gpus(settings, gpus)
    memory = {g["index"]: usable_mib(g) for g in listed}
    release = VLLM_RELEASES.get(settings.vllm_version)
    vllm = gpu_claims([], [(f"vllm@{k}", v.gpus, v.tensor_parallel_size, v.gpu_memory_utilization,
                            planner.VLLM_CUDA_CONTEXT_BYTES + unread_graph_bytes(v, release))
                           for k, v in sorted(settings.vllm_instances.items())], memory)
    outside = {g["index"]: outside_use(g)[0] for g in listed}
    words = {g["index"]: describe_outside(g) for g in listed}
    insts = settings.llama_cpp_instances
    seen = {k: [g["index"] for g in given_gpus(settings, gpus, v.gpus)] for k, v in insts.items()}
    set_claims = set_claims or {}
    out = {}
    for name, mine in seen.items():
        inst = insts[name]
        fixed = sized_as_set(inst)
        others = [] if fixed else sorted(k for k, g in seen.items() if k != name and set(g) & set(mine)
                                         and not sized_as_set(insts[k]))
        before = [k for k, g in seen.items() if k != name and set(g) & set(mine) and k in set_claims and not fixed]
        left, why, named = [], [], []
        for g in mine:
            taken = sum(b or 0 for _, b in vllm.get(g, []))
            taken += sum(set_claims[k] or 0 for k in before if g in seen[k])
            if not inst.allow_gpu_in_use:
                taken += outside[g] * (1 << 20)
                if outside[g] > IDLE_USED_MIB:
                    named.append(words[g])
            left.append(max(0, memory[g] * (1 << 20) - taken))
        tightest = min(range(len(mine)), key=lambda i: left[i]) if mine else None
        if tightest is None:
            out[name] = GpuShare(settings.gpu_usable_fraction)
            continue
        smallest = min(memory[g] for g in mine) * (1 << 20)
        fraction = settings.gpu_usable_fraction * min(1.0, left[tightest] / smallest) / (1 + len(others))
        users = sorted({u for g in mine for u, _ in vllm.get(g, [])})
        if users:
            taken = max(sum(b or 0 for _, b in vllm.get(g, [])) for g in mine)
            why.append(f"{', '.join(users)} claim {taken / (1 << 20):.0f} MiB of a GPU it uses")
        if before:
            why.append(f"llama-server@{', llama-server@'.join(sorted(before))}, sized as set, "
                       f"claim{'s' if len(before) == 1 else ''} "
                       f"{sum(set_claims[k] or 0 for k in before) / (1 << 20):.0f} MiB of its GPUs")
        if named:
            why.append("; ".join(named))
        if others:
            why.append(f"it shares its GPUs with llama-server@{', llama-server@'.join(others)}: "
                       f"1/{1 + len(others)} of the rest each")
        out[name] = GpuShare(fraction, "; ".join(why), tuple(named))
    return out


def planner_for(s: LlamaCppInstance, model: planner.GgufModel, settings: Settings, gpus: list[GpuInfo],
                cuda_version: str | None = None, share: GpuShare | None = None
                ) -> Callable[[int, int, KvChoice], planner.Plan]:
    """plan(context per slot in tokens, slots, KV choice) -> the memory planner's Plan for this instance's model on
    the GPUs it is given (given_gpus: its `gpus`, else all): the smallest one's VRAM (MiB) and their count from
    nvidia-smi where it answers, else gpu_memory_mib / gpu_count; within `share` of each GPU (None:
    gpu_usable_fraction, the GPUs to itself). The CUDA context's row is the H200's only where every GPU it is given
    is one (the V100 rows are the larger)."""
    fraction = settings.gpu_usable_fraction if share is None else share.fraction
    mine = given_gpus(settings, gpus, s.gpus)
    gpu_mib = gpu_memory_mib(settings, mine)
    n_gpus = len(mine) or (len(s.gpus) if s.gpus else gpu_count(settings, gpus))
    gpu_name = "h200" if mine and all("H200" in g["name"] for g in mine) else "v100"  # the rows measured or bounded
    context_bytes = planner.llama_cpp_cuda_context_bytes(gpu_name, cuda_version) if cuda_version else None
    # llama.cpp's physical batch is at most the logical one (src/llama-context.cpp: cparams.n_ubatch =
    # min(n_batch, n_ubatch); common/common.h defaults 2048 and 512): the compute buffer is reserved for it
    n_ubatch = min(s.ubatch_size or planner.LLAMA_CPP_N_UBATCH, s.batch_size or 2048)

    def plan(context: int, slots: int, kv: KvChoice) -> planner.Plan:
        return planner.plan_llama_cpp(model, gpu_mib, n_gpus, context, kv.cache_type_k, kv.cache_type_v, slots,
                                      fraction, s.n_gpu_layers,
                                      flash_attn=kv.flash_attn is not False and kv.flash_attn is not None,
                                      cuda_context_bytes=context_bytes, n_ubatch=n_ubatch)
    return plan


def memory_plan(inst_key: str, s: LlamaCppInstance, model: planner.GgufModel, gguf_path: str,
                chosen: serving.Serving, settings: Settings, gpus: list[GpuInfo], cuda_version: str | None = None,
                share: GpuShare | None = None) -> tuple[planner.Plan | None, list[str]]:
    """The planner's verdict for one instance whose GGUF header was read here, with the slots, context and KV cache
    types it will really run with (`chosen`): (plan, problems). Refuses a model that does not fit, and one that
    would offload layers to the CPU without allow_offload."""
    mine = given_gpus(settings, gpus, s.gpus)
    gpu_mib = gpu_memory_mib(settings, mine)
    n_gpus = len(mine) or (len(s.gpus) if s.gpus else gpu_count(settings, gpus))
    kv = chosen.kv
    mplan = planner_for(s, model, settings, gpus, cuda_version, share)(chosen.context, chosen.slots, kv)
    mplan = replace(mplan, reasons=[f"KV cache {kv.cache_type_k}/{kv.cache_type_v}: {kv.why}",
                                    *([f"planned within {share.fraction:.0%} of each GPU: {share.why}"]
                                      if share and share.why else []),
                                    f"serving: {'; '.join(chosen.why)}",
                                    f"{chosen.slots} request(s) of up to {chosen.context} tokens fit at once",
                                    *mplan.reasons])
    if mplan.outcome == "fits" or (mplan.outcome == "offload" and s.allow_offload):
        return mplan, []
    why = "; ".join(mplan.reasons)
    # what others on its GPUs take is part of the fix, for a refusal to offload as for one that does not fit
    shared = (", or give the instances different GPUs (gpus: [...] on each), or lower the vLLM instance's "
              "gpu_memory_utilization" if share and share.why else "")
    if share and share.outside:  # the memory others use now: name it, and how to plan without it
        shared += (f", or stop what uses GPU memory outside v100kit ({'; '.join(share.outside)}), or set "
                   "allow_gpu_in_use: true where it will have stopped before the instance starts")
    if mplan.outcome == "offload":
        return mplan, [problem(inst_key, Path(gguf_path).name, f"would offload {mplan.layers_offloaded} layers to the "
                               f"CPU (decode ceiling {mplan.decode_ceiling_tps:.1f} tokens/s): {why}",
                               "use a smaller quant type or a shorter context, or set allow_offload: true" + shared)]
    return mplan, [problem(inst_key, Path(gguf_path).name, f"does not fit in {n_gpus} x {gpu_mib} MiB: {why}",
                           "shorten context, quantize the KV cache (cache_type_k/v q8_0), or use a smaller quant"
                           + shared)]


def host_model_problems(key: str, model_path: str, host_has_file: Callable[[str], bool]) -> list[str]:
    """model_path must be a file on the host (host_has_file answers from the File fact)."""
    if host_has_file(model_path):
        return []
    return [problem(f"{key}.model_path", model_path, "no such file on the host",
                    "copy the model there, or use model_source with model_sha256")]


@dataclass(frozen=True)
class Tree:
    """What the role knows of the llama.cpp tree it builds: its ref, the architectures it loads (None: unknown),
    its flash-attention form (roles/llama_cpp/attention.py RULES; None: unknown) and GGML_CUDA_FA_ALL_QUANTS."""

    ref: str
    architectures: frozenset[str] | None
    fa_form: str | None
    fa_all_quants: bool
    cuda_version: str | None = None  # the toolkit it is built with: the CUDA context's size depends on it
    server_flags: frozenset[str] | None = None  # llama-server's flags in this tree (common/arg.cpp); None: unknown
    llama_version: tuple[int, int, int] | None = None  # llama.cpp's own version (CMakeLists.txt); None: unknown
    log_verbosity: int | None = None  # -lv printing the load report and no debug line (tree.py); None: unknown
    flash_attn_style: str | None = None  # how an archive read here takes -fa (tree.py); None: the source's own
    #: {flag: the words llama-server takes after it} (tree.py server_flag_values); None: unknown
    server_flag_values: Mapping[str, int] | None = field(default=None, hash=False)
    #: the flags whose value llama-server reads with std::stoi (tree.py server_int_flags); None: unknown
    server_int_flags: frozenset[str] | None = None

    @property
    def can_unify(self) -> bool:
        """The tree has -kvu and --kv-unified-per-slot, so slots can share one pool, each capped at its share."""
        return self.server_flags is not None and {"--kv-unified", "--kv-unified-per-slot"} <= self.server_flags


def source_model(key: str, inst: LlamaCppInstance, settings: Settings, gpus: list[GpuInfo], tree: Tree,
                 share: GpuShare | None = None
                 ) -> tuple[str, planner.Plan | None, serving.Serving | None, list[str], int | None]:
    """model_source checked before the deploy: (model_source as placed, memory plan, serving choice (slots,
    context, KV cache), problems, layers on the GPU where the plan offloads the others, else None). It needs
    model_sha256; a control-machine file (`~` expanded) must exist, have that sha256, be a GGUF the pinned tree can
    load, within its trained context, with KV cache types that keep attention on the GPU, and pass memory_plan.
    A URL is checked on the host by files.download (its header is not read: the KV choice is then None); with
    llama_cpp_model_mirror it is fetched from MIRROR/<model_sha256>/<its file name> instead."""
    if not inst.model_sha256:
        return inst.model_source, None, None, [problem(f"{key}.model_sha256", None, "model_source needs a checksum",
                                                       "set model_sha256 to the file's sha256")], None
    if is_url(inst.model_source):
        if (name := url_file_name(inst.model_source)) in ("", ".", "..") or "/" in name:
            return inst.model_source, None, None, [problem(f"{key}.model_source", inst.model_source,
                                                           "the URL names no file (its path ends in '/')",
                                                           "give the URL of the .gguf file itself")], None
        if settings.llama_cpp_model_mirror:  # same file, same checksum, another server; named as fill stores it
            return (f"{settings.llama_cpp_model_mirror.rstrip('/')}/{inst.model_sha256}/{quote(name)}", None, None,
                    [], None)
        return inst.model_source, None, None, [], None
    path = str(Path(inst.model_source).expanduser())
    if not Path(path).is_file():
        return path, None, None, [problem(f"{key}.model_source", path, "no such file on the control machine",
                                          "give an existing path or a URL")], None
    # a hub file's header copy (plan before download) has no sha256 of its own: the download is checked instead
    if not is_header_copy(path) and (actual := sha256_file(path)) != inst.model_sha256:
        return path, None, None, [problem(f"{key}.model_sha256", inst.model_sha256, f"the file's sha256 is {actual}",
                                          "check the file, then the checksum")], None
    if parts_wrong := local_parts_problems(key, inst, path):
        return path, None, None, parts_wrong, None
    try:
        model = planner.read_gguf(path)
    except Exception as e:  # not a GGUF file, or one the gguf package cannot read
        return path, None, None, [problem(f"{key}.model_source", path, f"cannot read its GGUF header ({e})",
                                          "give a GGUF model file")], None
    newer = [ref for ref, src in SOURCES.items() if ref != tree.ref and model.architecture in (src.architectures or ())]
    problems = model_architecture_problems(key, model.architecture, tree.architectures, tree.ref, newer)
    # the trees with --kv-unified-per-slot cap each slot at the trained context (read in the 0.3.36 tree's
    # server-context.cpp n_ctx_slot)
    problems += context_problems(key, inst, model.context_length, caps_slots=tree.can_unify)
    if share is not None and share.fraction <= 0:  # what others claim on its GPUs leaves it nothing to plan in
        return path, None, None, problems + [problem(
            f"{key}.gpus", inst.gpus if inst.gpus is not None else "unset (every GPU)",
            f"nothing of its GPUs is left for it: {share.why}",
            "give it other GPUs with gpus: [...], or lower what the others there claim (their context, parallel or "
            "gpu_memory_utilization)")], None
    kvs, more = kv_candidates(key, inst, model.head_dim, model.v_head_dim, tree.fa_form,
                              compute_capability(settings, given_gpus(settings, gpus, inst.gpus)), tree.fa_all_quants)
    chosen = serving.choose(inst.parallel, inst.context, model.context_length, kvs,
                            planner_for(inst, model, settings, gpus, tree.cuda_version, share), bool(inst.kv_unified))
    memory, even_more = memory_plan(key, inst, model, path, chosen, settings, gpus, tree.cuda_version, share)
    gpu_layers = model.n_layers - memory.layers_offloaded if memory and memory.outcome == "offload" else None
    return path, memory, chosen, problems + more + even_more, gpu_layers


def local_parts_problems(key: str, inst: LlamaCppInstance, path: str) -> list[str]:
    """Each further part of a split GGUF on the control machine must exist beside `path` with its sha256 from
    model_parts_sha256; [] for one file (or when split_problems already refused the settings)."""
    problems = []
    for i, part in enumerate(model_parts(inst, path, path)):
        if not Path(part.source).is_file():
            problems.append(problem(f"{key}.model_source", path, f"part {part.source} of the split GGUF is missing "
                                    "on the control machine", "put every part beside the first"))
        elif (actual := sha256_file(part.source)) != part.sha256:
            problems.append(problem(f"{key}.model_parts_sha256[{i}]", part.sha256,
                                    f"{part.source}'s sha256 is {actual}", "check the file, then the checksum"))
    return problems


def kv_unified_problems(key: str, inst: LlamaCppInstance, tree: Tree) -> list[str]:
    """kv_unified: true needs a tree with -kvu and --kv-unified-per-slot (else one request could fill the pool and
    fail every other: tools/server/server-context.cpp "Context size has been exceeded")."""
    if inst.kv_unified and inst.parallel == 1:
        return [problem(f"{key}.kv_unified", True, "one slot has no pool to share",
                        "leave kv_unified unset, or set parallel above 1")]
    if not inst.kv_unified or tree.can_unify:
        return []
    return [problem(f"{key}.kv_unified", True, f"llama.cpp {tree.ref} has no --kv-unified-per-slot"
                    + (" (its flags are not known)" if tree.server_flags is None else ""),
                    "leave kv_unified unset (slots then split the pool), or pin a newer llama_cpp_ref")]


def instance(name: str, inst: LlamaCppInstance, settings: Settings, gpus: list[GpuInfo],
             host_has_file: Callable[[str], bool], tree: Tree, share: GpuShare | None = None
             ) -> tuple[Instance, list[str]]:
    """One llama-server@NAME: (Instance, problems) for its model, listen address and API key file. A model from
    model_source is placed as <base_service_home>/models/<file name>."""
    key = f"llama_cpp_instances.{name}"
    model_source, memory, chosen, gpu_layers, parts = None, None, None, None, ()
    problems = one_model(key, inst, "set model_path (a file on the host) or model_source with model_sha256",
                         shown={k: v for k, v in inst.model_dump().items() if k.startswith("model")})
    if problems:
        model_path = inst.model_path or ""
    elif inst.model_path:
        model_path = inst.model_path
        problems = split_problems(key, inst, Path(model_path).name)
        if (split := split_gguf(Path(model_path).name)) and not problems:  # llama.cpp opens every part
            prefix, _, count = split
            for no in range(1, count + 1):
                problems += host_model_problems(key, str(Path(model_path).with_name(split_part_name(
                    prefix, no, count))), host_has_file)
        else:
            problems += host_model_problems(key, model_path, host_has_file)
    else:
        # the name as the URL spells it (percent-encoding kept: no space reaches a unit file)
        model_path = f"{settings.base_service_home}/models/{Path(urlparse(inst.model_source).path).name}"
        problems = split_problems(key, inst, Path(model_path).name)
        if not problems:
            model_source, memory, chosen, problems, gpu_layers = source_model(key, inst, settings, gpus, tree, share)
            parts = model_parts(inst, inst.model_source, model_path,
                                settings.llama_cpp_model_mirror if is_url(inst.model_source) else None)
            if not is_url(inst.model_source):
                parts = tuple(replace(p, source=str(Path(p.source).expanduser())) for p in parts)
    problems += network_listener(key, inst.listen, bool(inst.api_key_file),
                                 "reachable from the network without an API key",
                                 "set api_key_file, or listen on 127.0.0.1 behind your own proxy")
    api_key, more = read_api_key(f"{key}.api_key_file", inst.api_key_file)
    more += gpu_index_problems(key, inst.gpus, [g["index"] for g in host_gpus(settings, gpus)], bool(gpus))
    if chosen is None:  # the header is read on no machine before the deploy: the settings as given, f16 where unset
        kv, even_more = choose_kv(key, inst, None, None, tree.fa_form,
                                  compute_capability(settings, given_gpus(settings, gpus, inst.gpus)),
                                  tree.fa_all_quants)
        more += even_more
        chosen = serving.unread(inst.parallel, inst.context, kv, bool(inst.kv_unified))
    more += kv_unified_problems(key, inst, tree)
    more += extra_args_problems(f"{key}.extra_args", inst.extra_args, tree.server_flags,
                                tree.server_flag_values, tree.server_int_flags) + typed_problems(
        key, inst, tree.server_flags, len(inst.gpus) if inst.gpus else gpu_count(settings, gpus))
    return (Instance(name, inst, model_path, model_source, api_key, memory, chosen.kv, gpu_layers, chosen,
                     tree.server_flags, parts, tree.log_verbosity), problems + more)


def flash_attn_problems(instances: list[Instance]) -> list[str]:
    """A quantized V cache needs flash attention: one problem per instance with flash_attn off and a V cache type
    other than f16/f32/bf16 (docs/volta.md §5); [] when none."""
    return [problem(f"llama_cpp_instances.{i.name}.flash_attn", "off",
                    f"a quantized V cache ({_type_v(i)}) needs flash attention",
                    "set flash_attn to auto or on, or cache_type_v to f16")
            for i in instances if i.settings.flash_attn == "off" and _type_v(i) not in UNQUANTIZED_KV]


def _type_v(i: Instance) -> str:
    """The V cache type the instance runs with (its KV choice, else the setting, else f16)."""
    return i.kv.cache_type_v if i.kv else (i.settings.cache_type_v or "f16")


def cmake_args(settings: Settings, tk: Toolkit, archs: tuple[str, ...]) -> tuple[str, ...]:
    """The CMake configuration: CUDA on for exactly `archs`, the toolkit's nvcc and the host compiler it accepts
    for the whole build, llama-server only, rpath $ORIGIN (the prefix is relocatable)."""
    return (
        "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}",
        f"-DCMAKE_CUDA_COMPILER={tk.nvcc}", f"-DCMAKE_CUDA_HOST_COMPILER=/usr/bin/{tk.host_compiler}",
        # the whole build uses the compiler nvcc accepts (a bare gcc/g++ may not even be installed)
        f"-DCMAKE_C_COMPILER=/usr/bin/{tk.host_compiler.replace('g++', 'gcc')}",
        f"-DCMAKE_CXX_COMPILER=/usr/bin/{tk.host_compiler}",
        f"-DGGML_CUDA_FA_ALL_QUANTS={'ON' if settings.llama_cpp_fa_all_quants else 'OFF'}",
        "-DGGML_CCACHE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON",
        # newer trees fetch the server's web UI from a Hugging Face bucket at build time: never (offline, same bytes)
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    )


def prefix(src: Source, tk: Toolkit, archs: tuple[str, ...], args: tuple[str, ...]) -> str:
    """/opt/llama.cpp/<ref>-sm<archs>-cuda<version>-<first 8 hex of sha256 of source sha256, subdir, CMake args>."""
    config_hash = hashlib.sha256(json.dumps([src.sha256, src.subdir, args]).encode()).hexdigest()[:8]
    return f"{PREFIX_ROOT}/{src.ref}-sm{'-'.join(archs)}-cuda{tk.version}-{config_hash}"


def plan(settings: Settings, toolkits: list[Toolkit], gpus: list[GpuInfo],
         host_has_file: Callable[[str], bool]) -> tuple[LlamaCppPlan | None, list[str]]:
    """Resolve the build and the instances; None when no instance is configured.

    `gpus` is the NvidiaGpus fact ([] without a visible GPU). `host_has_file(path)` answers from the host's facts.
    Control-machine files (source archive, models, API key files) are read and checksummed here, and models read
    there are checked by the planner (VRAM, KV cache, offload), before any change. Never raises for bad settings:
    returns (plan, problems), the plan None whenever there is a problem.
    """
    if not settings.llama_cpp_instances:  # nothing to build, but a ref without a source is still a mistake
        return None, source(settings)[1]
    src, problems = source(settings)
    problems += (file_problems := source_file_problems(src))
    tk, more = toolkit(settings, toolkits)
    archs = architectures(settings, gpus)
    tk, even_more, notes = volta_toolkit(settings, toolkits, tk, archs)
    problems += more + even_more + architecture_problems(archs, tk)
    problems += gpu_architecture_problems(settings.llama_cpp_cuda_architectures,
                                          [g["compute_cap"] for g in gpus] or [settings.gpu_compute_capability])
    # an archive that failed its checksum is not read: its facts would be another tree's
    tree = replace(tree_of(src, settings, read_archive=not file_problems), cuda_version=tk.version if tk else None)
    src, more = read_flash_attn_style(src, tree, settings)
    problems += more
    problems += known_bad_tree_problems(settings, tree, archs) + prompt_log_problems(settings, tree)
    items = sorted(settings.llama_cpp_instances.items())
    clashes = port_clashes("llama_cpp_instances", ((n, i.port) for n, i in items), lambda n: f"instance {n!r}")
    # instances sized as set first, within what their GPUs have; then the others within what those leave
    resolved_by: dict[str, Instance] = {}
    shares = gpu_shares(settings, gpus)
    for name, inst in items:
        if sized_as_set(inst):
            resolved_by[name], more = instance(name, inst, settings, gpus, host_has_file, tree, shares[name])
            problems += clashes[name] + more
    shares = gpu_shares(settings, gpus, {n: claim_bytes(i) for n, i in resolved_by.items()})
    for name, inst in items:
        if not sized_as_set(inst):
            resolved_by[name], more = instance(name, inst, settings, gpus, host_has_file, tree, shares[name])
            problems += clashes[name] + more
    instances = [resolved_by[name] for name, _ in items]
    problems += placement_clashes(instances)
    if tk is None:
        return None, problems
    problems += flash_attn_problems(instances)
    if problems:
        return None, problems
    args = cmake_args(settings, tk, archs)
    return LlamaCppPlan(src, not is_url(src.url), tk, archs, args, prefix(src, tk, archs, args), tuple(instances),
                        gpu_visible=bool(gpus), notes=tuple(notes), log_requests=settings.llama_cpp_log_requests), []


def claim_bytes(inst: Instance) -> int | None:
    """What a llama-server instance claims of each GPU it sees, in bytes: its plan's total, or where the plan runs
    layers on the CPU (allow_offload) the budget its placement fills at most; None where the model was not read."""
    m = inst.memory
    if m is None:
        return None
    return m.total_bytes if m.outcome == "fits" else min(m.total_bytes, m.budget_bytes)


def placement_clashes(instances: list[Instance]) -> list[str]:
    """One problem per instance whose model_source would be placed at the same host path as another instance's
    with a different sha256 (sources are placed as <home>/models/<file name>): the second copy would overwrite the
    first, and each deploy would swap them. The same file for two instances is fine."""
    first: dict[str, Instance] = {}
    problems = []
    for inst in instances:
        if not inst.model_source or not inst.model_path:
            continue
        other = first.setdefault(inst.model_path, inst)
        if other is not inst and other.settings.model_sha256 != inst.settings.model_sha256:
            problems.append(problem(f"llama_cpp_instances.{inst.name}.model_source", inst.settings.model_source,
                                    f"placed at {inst.model_path} like instance {other.name!r}'s model, which is "
                                    "another file (another sha256)", "rename one of the files (give it as a local "
                                    "path under another name), or serve one model"))
    return problems


def environment(inst: Instance, flash_attn_style: str, log_requests: bool = False) -> str:
    """The instance's EnvironmentFile: LLAMA_SERVER_ARGS (server_args), and CUDA_VISIBLE_DEVICES where `gpus` is
    set."""
    env = f"LLAMA_SERVER_ARGS={server_args(inst, flash_attn_style, log_requests)}\n"
    if inst.settings.gpus:
        # CUDA numbers GPUs fastest first unless told PCI_BUS_ID (CUDA Programming Guide, "CUDA Environment
        # Variables"); nvidia-smi's indices, which `gpus` names, are in PCI bus order
        env += f"CUDA_DEVICE_ORDER=PCI_BUS_ID\nCUDA_VISIBLE_DEVICES={','.join(str(g) for g in inst.settings.gpus)}\n"
    return env


#: llama-server's log verbosity (-lv) where the tree's is not known (an unpinned source): 4, the 0.3.36 tree's. Each
#: pin has its own (files/llama_cpp/<ref>.json log_verbosity, read from its common/log.h by tree.py log_verbosity):
#: the highest that prints llama.cpp's load report, which the GPU check reads, and no debug line, where request
#: text is (0.3.36: 4, its LOG_DBG is 5; 0.3.16: 0, its LOG_DBG is 1 and logs every request body).
#: tests/unit/test_prompt_logging.py reads every pinned tree for it.
VERBOSITY = 4
#: llama_cpp_log_requests: llama-server's own prompt log, one file per request (<ms>.txt, the prompt as sent; ms
#: of ggml_time_ms, CLOCK_MONOTONIC on Linux: since boot, not the epoch, so a request in the same millisecond as
#: another, or at the same ms after a later boot, overwrites that file) in the directory it names (common/arg.cpp
#: --log-prompts-dir, written in tools/server/server-context.cpp handle_completions_impl; the 0.3.36 tree; 0.3.16
#: has no such flag). The unit's LogsDirectory= makes the directory per instance, owned by the service user, mode
#: 0700. Nothing removes old files: they stay until the operator does.
PROMPT_LOG_FLAG, PROMPT_LOG_ROOT = "--log-prompts-dir", "/var/log/llama-server"


def verbosity(inst: Instance) -> int:
    """The -lv instance `inst` runs with: its tree's quiet verbosity, VERBOSITY where that is unknown."""
    return VERBOSITY if inst.log_verbosity is None else inst.log_verbosity


def prompt_log_dir(name: str) -> str:
    """Where llama_cpp_log_requests puts instance `name`'s prompts: PROMPT_LOG_ROOT/NAME (the unit's
    LogsDirectory=llama-server/%i)."""
    return f"{PROMPT_LOG_ROOT}/{name}"


def prompt_log_problems(settings: Settings, tree: Tree) -> list[str]:
    """llama_cpp_log_requests: true needs a tree whose llama-server has --log-prompts-dir: [] or one problem naming
    the setting, the pin and the fix. A tree whose flags are unknown (an unpinned source) is not refused here."""
    if not settings.llama_cpp_log_requests or tree.server_flags is None or PROMPT_LOG_FLAG in tree.server_flags:
        return []
    having = ", ".join(ref for ref, s in SOURCES.items() if s.server_flags and PROMPT_LOG_FLAG in s.server_flags)
    # llama_cpp_source wins over llama_cpp_ref (source()): its tree is the one without the flag, whatever the ref
    tree_is, fix = ((f"llama_cpp_source ({settings.llama_cpp_source})",
                     f"set llama_cpp_source to a tree that has it, or unset it and set llama_cpp_ref to a pin that "
                     f"has it ({having})") if settings.llama_cpp_source else
                    (f"the pinned llama.cpp ({tree.ref})", f"set llama_cpp_ref to a pin that has it ({having})"))
    return [problem("llama_cpp_log_requests", True,
                    f"{tree_is} has no {PROMPT_LOG_FLAG}, where llama-server writes each prompt (its debug log "
                    f"does not carry them)", f"{fix}, or llama_cpp_log_requests: false")]


def server_args(inst: Instance, flash_attn_style: str, log_requests: bool = False) -> str:
    """The llama-server command line of one instance, shell-quoted (without the API key, which comes from the
    environment). -lv: verbosity(inst), so the journal gets no request text. `log_requests`
    (llama_cpp_log_requests): --log-prompts-dir prompt_log_dir(NAME), one file per request holding its prompt.

    Builds that take a bare `-fa` have no `auto`: there auto means on when the V cache is quantized (which needs
    flash attention; Volta has it: docs/volta.md §5), off otherwise."""
    s = inst.settings
    kv = inst.kv or KvChoice(s.cache_type_k or "f16", s.cache_type_v or "f16", None, "")
    sv = inst.serving or serving.unread(s.parallel, s.context, kv, bool(s.kv_unified))
    args = ["-m", inst.model_path, "--host", s.listen, "--port", str(s.port), "-ngl", str(inst.n_gpu_layers),
            "-c", str(sv.pool), "-ctk", kv.cache_type_k, "-ctv", kv.cache_type_v, "-np", str(sv.slots)]
    if sv.unified:  # one pool, each slot capped at its share: a full pool cannot fail the other requests
        args += ["-kvu", "--kv-unified-per-slot", str(sv.context)]
    fa = kv.flash_attn
    if fa is None:  # not decided from the model: the setting; a bare -fa build has no auto (on for quantized V)
        fa = s.flash_attn if flash_attn_style == "value" else (
            s.flash_attn == "on" or (s.flash_attn == "auto" and kv.cache_type_v not in UNQUANTIZED_KV))
    if flash_attn_style == "value":
        args += ["-fa", fa if isinstance(fa, str) else ("on" if fa else "off")]
    elif fa is True:
        args.append("-fa")
    if s.rope_scaling:
        args += ["--rope-scaling", s.rope_scaling]
    if s.rope_scale:
        args += ["--rope-scale", f"{s.rope_scale:g}"]
    if s.yarn_orig_ctx:
        args += ["--yarn-orig-ctx", str(s.yarn_orig_ctx)]
    if s.metrics:
        args.append("--metrics")
    args += typed_args(s, inst.server_flags)
    # llama.cpp's own load report (CUDA devices, "offloaded N/M layers to GPU", KV and compute buffer sizes) is
    # library INFO, which the deploy's GPU check and the doctor read from the journal: the pin's -lv prints it and
    # no debug line (VERBOSITY's comment)
    args += ["-lv", str(verbosity(inst))]
    if log_requests:
        args += [PROMPT_LOG_FLAG, prompt_log_dir(inst.name)]
    # extra_args last: a flag there missing its value cannot take one of the toolkit's own (the check refuses it
    # where the tree's arities are known, flags.extra_args_problems)
    args += list(s.extra_args)
    return " ".join(shlex.quote(a) for a in args)
