"""What a vLLM release does on a V100 (compute capability 7.0), read from that release's own Python sources.

The input is the release's files as {path inside the wheel: text} (tools/vllm_pin.py reads them from the PyPI
wheel); nothing is imported or run. Each fact comes with the file and function it was read from. The readers know
the shapes the code has had from 0.8 to 0.33 (checked on the wheels of 0.8.5.post1, 0.10.2, 0.19.1, 0.20.0 and
0.33.0); a shape they do not know raises SourceShapeError instead of guessing.

- engine: whether the V0 engine is in the tree (vllm/worker/model_runner.py) and which engine serves on 7.0: V1
  unless vllm/engine/arg_utils.py falls back to V0 on "Compute Capability < 8.0" (0.8.x).
- attention backend vLLM selects on 7.0 with nothing set: V0 CudaPlatform.get_attn_backend_cls's "not
  has_device_capability(80)" branch (XFORMERS); V1 up to 0.10.x the class path returned for GPUs below 8.0 in the
  same function; V1 from 0.11 on the first backend of _get_backend_priorities whose supports_compute_capability
  accepts 7.0 (vllm/platforms/cuda.py; class paths from vllm/v1/attention/backends/registry.py).
- head sizes of a backend: its supports_head_size ("head_size >= N") or get_supported_head_sizes (a list); the V0
  XFORMERS backend checks PagedAttention.get_supported_head_sizes (vllm/attention/ops/paged_attn.py).
- --kv-cache-dtype values: the CacheDType Literal (vllm/config/cache.py, or vllm/config.py up to 0.8).
- V1 profile tokens of `vllm serve` on a GPU below 70 GiB: EngineArgs' default max_num_batched_tokens for
  UsageContext.OPENAI_API_SERVER in the branch of `device_memory >= 70 * GiB_bytes` that a V100 (16/32 GB) takes;
  the V1 profile run uses scheduler_config.max_num_batched_tokens (vllm/v1/worker/gpu_model_runner.py); and the
  other branch, with its threshold, for GPUs of more memory (large_gpu_profile_tokens: an H100 or H200).
- environment variables the toolkit sets, where the release has them (vllm/envs.py): VLLM_ATTENTION_BACKEND,
  VLLM_ENGINE_READY_TIMEOUT_S (its default), VLLM_CACHE_ROOT.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Mapping

#: A V100's compute capability (docs/volta.md §1).
VOLTA = (7, 0)
#: A V100's memory, GiB: 32 GB is the larger model. vLLM's batch defaults switch at 70 GiB (arg_utils.py).
VOLTA_MAX_MEMORY_GIB = 32


class SourceShapeError(ValueError):
    """The release's code has a shape the readers do not know: the fact must be read by hand and the reader taught."""


@dataclass(frozen=True)
class HeadSizes:
    """Head sizes an attention backend accepts: an explicit list (`sizes`), or every size from `minimum` up; `source`
    names the file and function. Empty sizes and no minimum: every size."""

    sizes: tuple[int, ...] = ()
    minimum: int | None = None
    source: str = ""

    def supports(self, head_size: int) -> bool:
        """Whether a head of `head_size` elements is accepted."""
        if self.minimum is not None:
            return head_size >= self.minimum
        return not self.sizes or head_size in self.sizes

    def describe(self) -> str:
        """"32, 64, 128" or ">= 32" or "any"."""
        if self.minimum is not None:
            return f">= {self.minimum}"
        return ", ".join(map(str, self.sizes)) if self.sizes else "any"

    def as_dict(self) -> dict:
        return {"sizes": list(self.sizes), "minimum": self.minimum, "source": self.source}


@dataclass(frozen=True)
class VoltaFacts:
    """What tools/vllm_pin.py derives from one release's code. Every `*_source` names a file and function."""

    v0_present: bool
    engine: str  # "V0" or "V1": what serves on 7.0 with nothing set
    engine_source: str
    default_backend: str  # e.g. "XFORMERS", "FLEX_ATTENTION", "TRITON_ATTN"
    default_backend_source: str
    backend_chain: tuple[str, ...]  # V1 from 0.11: the backends that accept 7.0, in priority order
    head_sizes: dict[str, HeadSizes]  # per backend name on the chain (or the default)
    kv_cache_dtypes: tuple[str, ...]  # every value --kv-cache-dtype accepts
    kv_cache_dtypes_source: str
    volta_kv_cache_dtypes: dict[str, tuple[str, ...]]  # per backend: the values usable on 7.0
    volta_kv_cache_dtypes_source: str
    profile_tokens: int | None  # V1 `vllm serve` profile tokens on a V100; None for V0 (max_model_len rule)
    profile_tokens_source: str
    env: dict[str, str | None] = field(default_factory=dict)  # variable -> default where the release has it
    #: (threshold GiB, tokens, device-name substrings kept below it) of V1's profile run on GPUs of at least that
    #: memory (large_gpu_profile_tokens); None for V0
    profile_tokens_large: tuple[int, int, tuple[str, ...]] | None = None
    #: the V1 sampler's top-k/top-p path (sampler_path): "triton" from `sampler_triton_rows` rows on, or "sort";
    #: None for V0
    sampler_path: str | None = None
    sampler_triton_rows: int | None = None
    sampler_path_source: str = ""
    #: chunked prefill under `vllm serve` (chunked_prefill): "long_context" above `chunked_prefill_above` tokens
    #: (V0), "always" or "unless_off" (V1)
    chunked_prefill: str = ""
    chunked_prefill_above: int | None = None
    chunked_prefill_source: str = ""
    #: where SchedulerConfig refuses max_num_batched_tokens below max_model_len or max_num_seqs
    #: (batched_tokens_checks)
    batched_tokens_source: str = ""

    def as_dict(self) -> dict:
        return {
            "v0_present": self.v0_present, "engine": self.engine, "engine_source": self.engine_source,
            "default_backend": self.default_backend, "default_backend_source": self.default_backend_source,
            "backend_chain": list(self.backend_chain),
            "head_sizes": {k: v.as_dict() for k, v in self.head_sizes.items()},
            "kv_cache_dtypes": list(self.kv_cache_dtypes), "kv_cache_dtypes_source": self.kv_cache_dtypes_source,
            "volta_kv_cache_dtypes": {k: list(v) for k, v in self.volta_kv_cache_dtypes.items()},
            "volta_kv_cache_dtypes_source": self.volta_kv_cache_dtypes_source,
            "profile_tokens": self.profile_tokens, "profile_tokens_source": self.profile_tokens_source,
            "profile_tokens_large": ([*self.profile_tokens_large[:2], list(self.profile_tokens_large[2])]
                                     if self.profile_tokens_large else None),
            "sampler_path": self.sampler_path, "sampler_triton_rows": self.sampler_triton_rows,
            "sampler_path_source": self.sampler_path_source,
            "chunked_prefill": self.chunked_prefill, "chunked_prefill_above": self.chunked_prefill_above,
            "chunked_prefill_source": self.chunked_prefill_source, "batched_tokens_source": self.batched_tokens_source,
            "env": self.env,
        }


# --- small AST helpers -----------------------------------------------------------------------------------------

def _tree(files: Mapping[str, str], path: str) -> ast.Module:
    if path not in files:
        raise SourceShapeError(f"{path} is not in the release")
    return ast.parse(files[path], path)


def _function(node: ast.AST, name: str) -> ast.FunctionDef | None:
    for n in ast.walk(node):
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
    return None


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _returns(fn: ast.FunctionDef) -> list[ast.expr]:
    return [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]


def _int_list(node: ast.expr) -> tuple[int, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, int)
                                                       for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def _str_list(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                       for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def _is_call_of(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr


def _capability_arg(call: ast.Call) -> int | None:
    """80 in cls.has_device_capability(80)."""
    return call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None


def _module_path(dotted: str) -> tuple[str, str]:
    """("vllm/v1/attention/backends/triton_attn.py", "TritonAttentionBackend") for a class path."""
    module, _, cls = dotted.rpartition(".")
    return module.replace(".", "/") + ".py", cls


# --- engine ------------------------------------------------------------------------------------------------------

V0_MARKER = "vllm/worker/model_runner.py"


def volta_engine(files: Mapping[str, str]) -> tuple[bool, str, str]:
    """(V0 in the tree, engine that serves on 7.0, source). V0 serves when arg_utils.py's V1 oracle falls back on
    "Compute Capability < 8.0" (0.8.x); V1 otherwise (VLLM_USE_V1 defaults to 1 from 0.8; no V0 from 0.11)."""
    v0 = V0_MARKER in files
    args = files.get("vllm/engine/arg_utils.py", "")
    if v0 and "Compute Capability < 8.0" in args:
        return v0, "V0", ("vllm/engine/arg_utils.py EngineArgs._is_v1_supported_oracle: compute capability < 8.0 "
                          "falls back to V0")
    if v0:
        return v0, "V1", ("vllm/envs.py VLLM_USE_V1 (default 1) and no compute-capability fallback in "
                          "vllm/engine/arg_utils.py; V0 still in the tree (VLLM_USE_V1=0)")
    return v0, "V1", f"no V0 engine in the tree ({V0_MARKER} absent)"


# --- attention backend ---------------------------------------------------------------------------------------------

def _backend_name(files: Mapping[str, str], class_path: str) -> str:
    """The registry name of a backend class: what its get_name() returns ("TRITON_ATTN", "FLEX_ATTENTION")."""
    path, cls_name = _module_path(class_path)
    cls = _class(_tree(files, path), cls_name)
    fn = cls and _method(cls, "get_name")
    values = _returns(fn) if fn else []
    if len(values) != 1 or not isinstance(values[0], ast.Constant):
        raise SourceShapeError(f"{path} {cls_name}.get_name: no single string returned")
    name = values[0].value
    return name.removesuffix("_VLLM_V1")


def _v0_backend(files: Mapping[str, str]) -> tuple[str, str]:
    path = "vllm/platforms/cuda.py"
    fn = _function(_tree(files, path), "get_attn_backend_cls")
    if fn is None:
        raise SourceShapeError(f"{path}: no get_attn_backend_cls")
    for n in ast.walk(fn):
        # if not cls.has_device_capability(80): target_backend = _Backend.XFORMERS
        if (isinstance(n, ast.If) and isinstance(n.test, ast.UnaryOp) and isinstance(n.test.op, ast.Not)
                and _is_call_of(n.test.operand, "has_device_capability") and _capability_arg(n.test.operand) == 80):
            for s in n.body:
                if (isinstance(s, ast.Assign) and isinstance(s.value, ast.Attribute)
                        and any(isinstance(t, ast.Name) and t.id == "target_backend" for t in s.targets)):
                    return s.value.attr, (f"{path} CudaPlatform.get_attn_backend_cls (V0): not "
                                          f"has_device_capability(80) -> {s.value.attr}")
    raise SourceShapeError(f"{path} get_attn_backend_cls: no V0 branch for GPUs below 8.0")


def _v1_backend_0_10(files: Mapping[str, str]) -> tuple[str, str, str] | None:
    """0.9-0.10: inside `if use_v1:`, `if cls.has_device_capability(80): ... else: return NAME` (NAME a local
    string constant): (backend name, source, class path). None when the function has no such branch."""
    path = "vllm/platforms/cuda.py"
    fn = _function(_tree(files, path), "get_attn_backend_cls")
    if fn is None:
        return None
    consts = {t.id: s.value.value for s in ast.walk(fn) if isinstance(s, ast.Assign)
              and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str) for t in s.targets
              if isinstance(t, ast.Name)}
    for n in ast.walk(fn):
        if (isinstance(n, ast.If) and _is_call_of(n.test, "has_device_capability") and _capability_arg(n.test) == 80
                and n.orelse):
            for s in n.orelse:
                if isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and s.value.id in consts:
                    cls_path = consts[s.value.id]
                    name = _backend_name(files, cls_path)
                    return name, (f"{path} CudaPlatform.get_attn_backend_cls (V1): GPUs below 8.0 (not "
                                  f"has_device_capability(80)) -> {cls_path}"), cls_path
    return None


def _registry(files: Mapping[str, str]) -> dict[str, str]:
    """AttentionBackendEnum member -> class path (vllm/v1/attention/backends/registry.py)."""
    path = "vllm/v1/attention/backends/registry.py"
    cls = _class(_tree(files, path), "AttentionBackendEnum")
    if cls is None:
        raise SourceShapeError(f"{path}: no AttentionBackendEnum")
    out = {}
    for s in cls.body:
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = s.value.value
    return out


def _priorities(files: Mapping[str, str]) -> list[str]:
    """The non-MLA backend priorities for a GPU whose major is not 10 (_get_backend_priorities' last else)."""
    path = "vllm/platforms/cuda.py"
    fn = _function(_tree(files, path), "_get_backend_priorities")
    if fn is None:
        raise SourceShapeError(f"{path}: no _get_backend_priorities")
    top = next((s for s in fn.body if isinstance(s, ast.If)), None)  # if use_mla: ... else: ...
    if top is None or not top.orelse:
        raise SourceShapeError(f"{path} _get_backend_priorities: no use_mla branch")
    branch: list[ast.stmt] = top.orelse
    while branch and isinstance(branch[0], ast.If) and branch[0].orelse:  # if major == 10: ... else: ...
        branch = branch[0].orelse
    ret = next((s for s in branch if isinstance(s, ast.Return)), None)
    if ret is None or not isinstance(ret.value, ast.List):
        raise SourceShapeError(f"{path} _get_backend_priorities: no list for other GPUs")
    names = []
    for e in ret.value.elts:
        if isinstance(e, ast.Starred) and isinstance(e.value, ast.IfExp):
            # *([AttentionBackendEnum.X] if device_capability.major == 9 and ... else []) (0.33)
            m = re.search(r"device_capability\.major == (\d+)", ast.unparse(e.value.test))
            if not m:
                raise SourceShapeError(f"{path} _get_backend_priorities: unknown condition "
                                       f"{ast.unparse(e.value.test)!r}")
            e = e.value.body if int(m[1]) == VOLTA[0] else e.value.orelse
            if isinstance(e, ast.List) and not e.elts:
                continue
            raise SourceShapeError(f"{path} _get_backend_priorities: a conditional priority for major {m[1]}")
        if not isinstance(e, ast.Attribute):
            raise SourceShapeError(f"{path} _get_backend_priorities: a priority that is not AttentionBackendEnum.X")
        names.append(e.attr)
    return names


def _capability_value(node: ast.expr, cc: tuple[int, int]) -> bool | tuple[int, int]:
    """Evaluate the few expressions supports_compute_capability uses: True/False, `capability`,
    DeviceCapability(a, b), comparisons, and/or, not."""
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id == "capability":
        return cc
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "DeviceCapability"
            and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args)):
        return (node.args[0].value, node.args[1].value)
    if isinstance(node, ast.BoolOp):
        values = [_capability_value(v, cc) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _capability_value(node.operand, cc)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _capability_value(node.left, cc), _capability_value(node.comparators[0], cc)
        ops = {ast.GtE: lambda a, b: a >= b, ast.Gt: lambda a, b: a > b, ast.LtE: lambda a, b: a <= b,
               ast.Lt: lambda a, b: a < b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
        op = ops.get(type(node.ops[0]))
        if op and isinstance(left, tuple) and isinstance(right, tuple):
            return op(left, right)
    raise SourceShapeError(f"supports_compute_capability: cannot evaluate {ast.unparse(node)!r}")


def _class_and_bases(files: Mapping[str, str], class_path: str) -> list[tuple[str, ast.ClassDef]]:
    """The class and the bases defined in the same file, nearest first (a backend that subclasses another)."""
    path, name = _module_path(class_path)
    tree = _tree(files, path)
    out, seen = [], set()
    while name and name not in seen:
        seen.add(name)
        cls = _class(tree, name)
        if cls is None:
            break
        out.append((path, cls))
        name = next((b.id for b in cls.bases if isinstance(b, ast.Name)), "")
    if not out:
        raise SourceShapeError(f"{path}: no class {name}")
    return out


def supports_capability(files: Mapping[str, str], class_path: str, cc: tuple[int, int] = VOLTA) -> bool:
    """Whether a V1 backend class accepts compute capability `cc` (its supports_compute_capability, or True as the
    AttentionBackend base returns)."""
    for _, cls in _class_and_bases(files, class_path):
        fn = _method(cls, "supports_compute_capability")
        if fn is not None:
            rets = _returns(fn)
            if len(rets) != 1:
                raise SourceShapeError(f"{class_path}.supports_compute_capability: not one return")
            return bool(_capability_value(rets[0], cc))
    return True  # vllm/v1/attention/backend.py AttentionBackend.supports_compute_capability: return True


def _v1_backend_chain(files: Mapping[str, str]) -> tuple[list[str], str]:
    reg = _registry(files)
    chain = [b for b in _priorities(files) if supports_capability(files, reg[b])]
    if not chain:
        raise SourceShapeError("no backend of _get_backend_priorities accepts compute capability 7.0")
    return chain, ("vllm/platforms/cuda.py _get_backend_priorities (non-MLA, other GPUs) filtered by each "
                   "backend's supports_compute_capability at 7.0 (vllm/v1/attention/backends/*.py)")


# --- head sizes ----------------------------------------------------------------------------------------------------

def _head_sizes_of_class(files: Mapping[str, str], class_path: str) -> HeadSizes:
    for path, cls in _class_and_bases(files, class_path):
        fn = _method(cls, "supports_head_size")
        if fn is not None:
            rets = _returns(fn)
            # return head_size >= 32
            if (len(rets) == 1 and isinstance(rets[0], ast.Compare) and isinstance(rets[0].ops[0], ast.GtE)
                    and isinstance(rets[0].left, ast.Name) and rets[0].left.id == "head_size"
                    and isinstance(rets[0].comparators[0], ast.Constant)):
                return HeadSizes(minimum=rets[0].comparators[0].value,
                                 source=f"{path} {cls.name}.supports_head_size")
            if not (len(rets) == 1 and "get_supported_head_sizes" in ast.unparse(rets[0])):
                raise SourceShapeError(f"{path} {cls.name}.supports_head_size: unknown shape")
        fn = _method(cls, "get_supported_head_sizes")
        if fn is not None:
            rets = _returns(fn)
            sizes = _int_list(rets[0]) if len(rets) == 1 else None
            if sizes is None:
                raise SourceShapeError(f"{path} {cls.name}.get_supported_head_sizes: not a list of ints")
            return HeadSizes(sizes=sizes, source=f"{path} {cls.name}.get_supported_head_sizes")
        fn = _method(cls, "validate_head_size")
        if fn is not None and all(isinstance(s, (ast.Return, ast.Expr)) for s in fn.body) and not _returns(fn):
            return HeadSizes(source=f"{path} {cls.name}.validate_head_size (accepts any)")
    # AttentionBackend.get_supported_head_sizes returns [] (every size) in vllm/v1/attention/backend.py
    return HeadSizes(source=f"{class_path}: no head size rule (any)")


def _v0_head_sizes(files: Mapping[str, str], backend: str) -> HeadSizes:
    """V0 XFORMERS: XFormersImpl checks PagedAttention.get_supported_head_sizes (vllm/attention/ops/paged_attn.py)."""
    if backend != "XFORMERS":
        raise SourceShapeError(f"V0 backend {backend}: no head size reader")
    if "PagedAttention.get_supported_head_sizes()" not in files.get("vllm/attention/backends/xformers.py", ""):
        raise SourceShapeError("vllm/attention/backends/xformers.py: no PagedAttention head size check")
    path = "vllm/attention/ops/paged_attn.py"
    cls = _class(_tree(files, path), "PagedAttention")
    fn = cls and _method(cls, "get_supported_head_sizes")
    sizes = _int_list(_returns(fn)[0]) if fn else None
    if sizes is None:
        raise SourceShapeError(f"{path} PagedAttention.get_supported_head_sizes: not a list of ints")
    return HeadSizes(sizes=sizes, source=f"{path} PagedAttention.get_supported_head_sizes (checked by "
                                         "vllm/attention/backends/xformers.py XFormersImpl)")


# --- KV cache dtypes -----------------------------------------------------------------------------------------------

def kv_cache_dtypes(files: Mapping[str, str]) -> tuple[tuple[str, ...], str]:
    """Every value --kv-cache-dtype accepts: the CacheDType Literal."""
    for path in ("vllm/config/cache.py", "vllm/config.py"):
        if path not in files:
            continue
        for s in _tree(files, path).body:
            target = s.targets[0] if isinstance(s, ast.Assign) else getattr(s, "target", None)
            value = s.value if isinstance(s, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(target, ast.Name) and target.id == "CacheDType" and isinstance(value, ast.Subscript):
                values = _str_list(value.slice)
                if values:
                    return values, f"{path} CacheDType"
    raise SourceShapeError("no CacheDType Literal in vllm/config/cache.py or vllm/config.py")


def _views_fp8_as_platform_dtype(files: Mapping[str, str], class_path: str) -> bool:
    """Whether the backend's implementation reads every fp8 cache as current_platform.fp8_dtype() (e4m3 on CUDA):
    `self.fp8_dtype = current_platform.fp8_dtype()` and `.view(self.fp8_dtype)`."""
    path, _ = _module_path(class_path)
    text = files.get(path, "")
    return "current_platform.fp8_dtype()" in text and ".view(self.fp8_dtype)" in text


def _declared_kv(files: Mapping[str, str], class_path: str) -> tuple[str, ...] | None:
    """The class's supported_kv_cache_dtypes list (0.11+), None where it declares none (every value)."""
    for _, cls in _class_and_bases(files, class_path):
        for s in cls.body:
            target = s.targets[0] if isinstance(s, ast.Assign) else getattr(s, "target", None)
            if isinstance(target, ast.Name) and target.id == "supported_kv_cache_dtypes" and s.value is not None:
                return _str_list(s.value)
    return None


def _volta_kv(accepted: tuple[str, ...], declared: tuple[str, ...] | None, e4m3_only: bool) -> tuple[str, ...]:
    keep = set(VOLTA_KV_STORAGE) - ({"fp8_e5m2"} if e4m3_only else set())
    return tuple(d for d in accepted if d in keep and (declared is None or d in declared))


#: KV cache storage that needs no hardware newer than 7.0: the model's dtype (half on Volta), explicit float16, and
#: fp8_e5m2 where the kernels convert it in software. Everything else is left out: bfloat16 needs 8.0 (vllm#946),
#: "fp8"/"fp8_e4m3" need Triton's fp8e4nv (sm_89: 'type fp8e4nv not supported', issue 28), fp8_inc is Intel
#: Gaudi's, and the quantized caches of 0.20+ (turboquant_*, nvfp4*, *_per_token_head) have no Volta report.
VOLTA_KV_STORAGE = ("auto", "float16", "fp8_e5m2")

VOLTA_KV_RULE = ("CacheDType values in VOLTA_KV_STORAGE (auto, float16, fp8_e5m2: roles/vllm/release_source.py says "
                 "why the others are left out) that the backend's supported_kv_cache_dtypes lists (where it has "
                 "one); fp8_e5m2 left out where the backend reads every fp8 cache as current_platform.fp8_dtype() "
                 "(e4m3 on CUDA: `.view(self.fp8_dtype)` in its implementation); V0's PagedAttention CUDA kernels "
                 "store fp8_e5m2 without FP8 hardware (docs/volta.md §4, M)")


# --- profile tokens ------------------------------------------------------------------------------------------------

def _dict_value(d: ast.Dict, attr: str) -> int | None:
    for k, v in zip(d.keys, d.values):
        if isinstance(k, ast.Attribute) and k.attr == attr and isinstance(v, ast.Constant):
            return v.value
    return None


def _memory_branch(files: Mapping[str, str]):
    """(threshold GiB, the `if device_memory >= N * GiB_bytes` node, its function's name, the path, the device-name
    substrings that keep a GPU on the small branch whatever its memory: `and "a100" not in device_name`, vLLM's
    lower-cased device name) of arg_utils.py's device-memory default. Raises SourceShapeError where the code has
    another shape."""
    runner = files.get("vllm/v1/worker/gpu_model_runner.py", "")
    if "self.max_num_tokens = scheduler_config.max_num_batched_tokens" not in runner:
        raise SourceShapeError("vllm/v1/worker/gpu_model_runner.py: the profile run's token count is not "
                               "scheduler_config.max_num_batched_tokens")
    path = "vllm/engine/arg_utils.py"
    tree = _tree(files, path)
    for n in ast.walk(tree):
        if not (isinstance(n, ast.If) and "device_memory >=" in ast.unparse(n.test)):
            continue
        test = n.test.values[0] if isinstance(n.test, ast.BoolOp) else n.test
        if not (isinstance(test, ast.Compare) and isinstance(test.comparators[0], ast.BinOp)
                and isinstance(test.comparators[0].left, ast.Constant)):
            raise SourceShapeError(f"{path}: unknown device memory test {ast.unparse(n.test)!r}")
        fn = next((f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                   and any(x is n for x in ast.walk(f))), "?")
        excluded = []
        for more in (n.test.values[1:] if isinstance(n.test, ast.BoolOp) else []):
            if not (isinstance(n.test.op, ast.And) and isinstance(more, ast.Compare)
                    and isinstance(more.left, ast.Constant) and isinstance(more.left.value, str)
                    and isinstance(more.ops[0], ast.NotIn) and ast.unparse(more.comparators[0]) == "device_name"):
                raise SourceShapeError(f"{path}: unknown device memory test {ast.unparse(n.test)!r}")
            excluded.append(more.left.value)
        return test.comparators[0].left.value, n, fn, path, tuple(excluded)
    raise SourceShapeError(f"{path}: no device-memory default for max_num_batched_tokens")


def profile_tokens(files: Mapping[str, str], memory_gib: int = VOLTA_MAX_MEMORY_GIB) -> tuple[int, str]:
    """Tokens of V1's profile run under `vllm serve` on a GPU of `memory_gib`: the default max_num_batched_tokens of
    UsageContext.OPENAI_API_SERVER in the branch of `if device_memory >= N * GiB_bytes ...` that such a GPU takes,
    given that the V1 GPU model runner profiles scheduler_config.max_num_batched_tokens. Raises SourceShapeError
    where the code has another shape."""
    threshold, n, fn, path, _ = _memory_branch(files)
    branch = n.body if memory_gib >= threshold else n.orelse
    for s in branch:
        target = s.targets[0] if isinstance(s, ast.Assign) else getattr(s, "target", None)
        if (isinstance(target, ast.Name) and target.id == "default_max_num_batched_tokens"
                and isinstance(s.value, ast.Dict)):
            tokens = _dict_value(s.value, "OPENAI_API_SERVER")
            if tokens is not None:
                side = f">= {threshold}" if memory_gib >= threshold else f"< {threshold}"
                return tokens, (f"{path} EngineArgs.{fn}: default_max_num_batched_tokens[OPENAI_API_SERVER] for "
                                f"device memory {side} GiB; vllm/v1/worker/gpu_model_runner.py profiles "
                                "scheduler_config.max_num_batched_tokens")
    raise SourceShapeError(f"{path}: no device-memory default for max_num_batched_tokens")


def large_gpu_profile_tokens(files: Mapping[str, str]) -> tuple[int, int, tuple[str, ...]]:
    """(threshold GiB, tokens, device-name substrings excluded): from a GPU of that much memory on (vLLM compares
    the device's total memory, bytes, with threshold x GiB_bytes), unless its lower-cased name contains one of the
    substrings, `vllm serve`'s V1 profile run takes the other branch of profile_tokens, e.g. (70, 8192, ("a100",))
    in 0.19.1: an H100 or H200 gets 8192, an A100-80GB and a V100 2048. Raises SourceShapeError as profile_tokens
    does."""
    threshold, *_, excluded = _memory_branch(files)
    return threshold, profile_tokens(files, memory_gib=threshold)[0], excluded


def sampler_path(files: Mapping[str, str]) -> tuple[str, int | None, str]:
    """How the V1 sampler filters top-k/top-p, which the profile run does for every dummy request (gpu_model_runner
    _dummy_sampler_run sets both): ("triton", N, source) where apply_top_k_top_p hands a batch of at least N rows to
    apply_top_k_top_p_triton (a kernel working in place), ("sort", None, source) where it sorts a copy of the logits
    (torch sort: values and int64 indices). Read in vllm/v1/sample/ops/topk_topp_sampler.py. Raises
    SourceShapeError where the function has neither shape."""
    path = "vllm/v1/sample/ops/topk_topp_sampler.py"
    tree = _tree(files, path)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "apply_top_k_top_p"), None)
    if fn is None:
        raise SourceShapeError(f"{path}: no apply_top_k_top_p")
    for n in ast.walk(fn):
        if isinstance(n, ast.If) and "apply_top_k_top_p_triton" in ast.unparse(n):
            rows = [c.comparators[0].value for c in ast.walk(n.test) if isinstance(c, ast.Compare)
                    and "shape[0]" in ast.unparse(c.left) and isinstance(c.ops[0], ast.GtE)
                    and isinstance(c.comparators[0], ast.Constant)]
            if len(rows) != 1:
                raise SourceShapeError(f"{path}: unknown test before the Triton kernel {ast.unparse(n.test)!r}")
            return "triton", rows[0], (f"{path} apply_top_k_top_p: `{ast.unparse(n.test)}` -> "
                                       "apply_top_k_top_p_triton")
    if any(isinstance(n, ast.Attribute) and n.attr == "sort" for n in ast.walk(fn)):
        return "sort", None, f"{path} apply_top_k_top_p: logits.sort (a sorted copy and int64 indices)"
    raise SourceShapeError(f"{path}: apply_top_k_top_p neither sorts nor calls the Triton kernel")


# --- environment -----------------------------------------------------------------------------------------------

ENV_READ = ("VLLM_ATTENTION_BACKEND", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_CACHE_ROOT", "VLLM_USE_V1")


def environment(files: Mapping[str, str]) -> dict[str, str | None]:
    """The variables of ENV_READ that vllm/envs.py reads, each with its default where it is a literal
    (os.getenv/os.environ.get("NAME", "default")); absent variables are left out."""
    path = "vllm/envs.py"
    out: dict[str, str | None] = {}
    tree = _tree(files, path)
    for d in (n for n in ast.walk(tree) if isinstance(n, ast.Dict)):
        for k, v in zip(d.keys, d.values):
            if isinstance(k, ast.Constant) and k.value in ENV_READ:
                default = None
                for c in ast.walk(v):
                    if (_is_call_of(c, "getenv") or _is_call_of(c, "get")) and len(c.args) == 2 \
                            and isinstance(c.args[0], ast.Constant) and c.args[0].value == k.value \
                            and isinstance(c.args[1], ast.Constant) and c.args[1].value is not None:
                        default = str(c.args[1].value)
                out[k.value] = default
    return out


# --- chunked prefill and the scheduler's checks -----------------------------------------------------------------

ARG_UTILS = "vllm/engine/arg_utils.py"


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


def _assigns_chunked(stmts: list[ast.stmt], value: object = None) -> bool:
    """Whether `self.enable_chunked_prefill = <value>` (any value where None) is among these statements."""
    return any(isinstance(s, ast.Assign) and any(_is_self_attr(t, "enable_chunked_prefill") for t in s.targets)
               and (value is None or isinstance(s.value, ast.Constant) and s.value.value is value) for s in stmts)


def _is_none_test(node: ast.expr) -> bool:
    """`self.enable_chunked_prefill is None`."""
    return isinstance(node, ast.Compare) and _is_self_attr(node.left, "enable_chunked_prefill") \
        and isinstance(node.ops[0], ast.Is) and isinstance(node.comparators[0], ast.Constant) \
        and node.comparators[0].value is None


def chunked_prefill(files: Mapping[str, str], engine: str) -> tuple[str, int | None, str]:
    """(rule, threshold tokens, source) of chunked prefill under `vllm serve` for a decoder-only generative model
    on the engine that serves on Volta:
    - "long_context" (V0, EngineArgs._set_default_args_v0): on by default only above max_model_len `threshold`
      (`use_long_context = max_model_len > 32768` in 0.8.5.post1), the setting wins when given;
    - "always" (V1 in 0.10.2, EngineArgs._set_default_args_v1): `self.enable_chunked_prefill = True` for every
      non-pooling model, --no-enable-chunked-prefill included (it has no effect);
    - "unless_off" (V1 in 0.19.1, EngineArgs._set_default_chunked_prefill_and_prefix_caching_args): on by default
      (ModelConfig.is_chunked_prefill_supported), off when asked.
    Raises SourceShapeError where arg_utils.py has none of these shapes."""
    cls = _class(_tree(files, ARG_UTILS), "EngineArgs")
    if cls is None:
        raise SourceShapeError(f"{ARG_UTILS}: no class EngineArgs")
    if engine == "V0":
        fn = _method(cls, "_set_default_args_v0")
        for n in ast.walk(fn) if fn else ():
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) \
                    and n.targets[0].id == "use_long_context" and isinstance(n.value, ast.Compare) \
                    and isinstance(n.value.ops[0], ast.Gt) and isinstance(n.value.comparators[0], ast.Constant):
                above = n.value.comparators[0].value
                return "long_context", above, (f"{ARG_UTILS} EngineArgs._set_default_args_v0: on by default above "
                                               f"max_model_len {above} (use_long_context), the setting wins")
        raise SourceShapeError(f"{ARG_UTILS}: no `use_long_context = max_model_len > N` in _set_default_args_v0")
    fn = _method(cls, "_set_default_chunked_prefill_and_prefix_caching_args")
    if fn is not None and any(isinstance(n, ast.If) and _is_none_test(n.test) and _assigns_chunked(n.body)
                              for n in ast.walk(fn)):
        return "unless_off", None, (f"{ARG_UTILS} EngineArgs._set_default_chunked_prefill_and_prefix_caching_args: "
                                    "on by default (is_chunked_prefill_supported), off when asked")
    fn = _method(cls, "_set_default_args_v1")
    for n in ast.walk(fn) if fn else ():
        if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Attribute) \
                and n.test.left.attr == "runner_type" and isinstance(n.test.ops[0], ast.NotEq) \
                and _assigns_chunked(n.body, True):
            return "always", None, (f"{ARG_UTILS} EngineArgs._set_default_args_v1: `self.enable_chunked_prefill = "
                                    "True` for every non-pooling model, whatever was asked")
    raise SourceShapeError(f"{ARG_UTILS}: no chunked-prefill default of a known shape")


SCHEDULER_CONFIG = ("vllm/config/scheduler.py", "vllm/config.py")


def batched_tokens_checks(files: Mapping[str, str]) -> str:
    """Where SchedulerConfig refuses a max_num_batched_tokens below max_model_len without chunked prefill and one
    below max_num_seqs (`if self.max_num_batched_tokens < ...: raise ValueError`), as "FILE SchedulerConfig.METHOD"
    (vllm/config.py _verify_args in 0.8.5.post1, vllm/config/scheduler.py _verify_args in 0.10.2 and
    verify_max_model_len in 0.19.1). Raises
    SourceShapeError where either check is missing: the toolkit refuses both before any change."""
    for path in SCHEDULER_CONFIG:
        if path not in files:
            continue
        cls = _class(_tree(files, path), "SchedulerConfig")
        for fn in cls.body if cls else ():
            if not isinstance(fn, ast.FunctionDef):
                continue
            below = set()
            for n in ast.walk(fn):
                if isinstance(n, ast.If) and any(isinstance(b, ast.Raise) for b in n.body):
                    for c in ast.walk(n.test):
                        if isinstance(c, ast.Compare) and _is_self_attr(c.left, "max_num_batched_tokens") \
                                and isinstance(c.ops[0], ast.Lt):
                            other = c.comparators[0]
                            below.add(other.attr if isinstance(other, ast.Attribute) else getattr(other, "id", ""))
            if {"max_model_len", "max_num_seqs"} <= below:
                return f"{path} SchedulerConfig.{fn.name}"
    raise SourceShapeError("SchedulerConfig: no check of max_num_batched_tokens against max_model_len and "
                           "max_num_seqs")


# --- all together ----------------------------------------------------------------------------------------------

def derive(files: Mapping[str, str]) -> VoltaFacts:
    """Every fact above for one release's files. Raises SourceShapeError where the code has an unknown shape."""
    v0, engine, engine_source = volta_engine(files)
    accepted, accepted_source = kv_cache_dtypes(files)
    env = environment(files)
    if engine == "V0":
        backend, backend_source = _v0_backend(files)
        heads = {backend: _v0_head_sizes(files, backend)}
        return VoltaFacts(v0, engine, engine_source, backend, backend_source, (backend,), heads, accepted,
                          accepted_source, {backend: _volta_kv(accepted, None, False)}, VOLTA_KV_RULE, None,
                          "V0: max(max_model_len, 2048), or 512 with chunked prefill (roles/planner/vllm.py)", env,
                          **_scheduler(files, engine))
    old = _v1_backend_0_10(files)
    if old is not None:
        backend, backend_source, default_path = old
        paths = {backend: default_path}
        # the backend the toolkit pins instead of FlexAttention (VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1 makes
        # get_attn_backend_cls return this class path)
        triton = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"
        if backend != "TRITON_ATTN" and triton in files["vllm/platforms/cuda.py"]:
            paths["TRITON_ATTN"] = triton
        chain = list(paths)
    else:
        chain, backend_source = _v1_backend_chain(files)
        backend = chain[0]
        reg = _registry(files)
        paths = {name: reg[name] for name in chain}
    # the selected backend's head sizes must be read; a later backend's (the fallback for other head sizes) where
    # the reader knows its shape
    heads = {backend: _head_sizes_of_class(files, paths[backend])}
    for name in chain[1:]:
        try:
            heads[name] = _head_sizes_of_class(files, paths[name])
        except SourceShapeError:
            continue
    volta_kv = {name: _volta_kv(accepted, _declared_kv(files, paths[name]), _views_fp8_as_platform_dtype(files, paths[name]))
                for name in heads}
    tokens, tokens_source = profile_tokens(files)
    return VoltaFacts(v0, engine, engine_source, backend, backend_source, tuple(chain), heads, accepted,
                      accepted_source, volta_kv, VOLTA_KV_RULE, tokens, tokens_source, env,
                      large_gpu_profile_tokens(files), *sampler_path(files), **_scheduler(files, engine))


def _scheduler(files: Mapping[str, str], engine: str) -> dict:
    """VoltaFacts' chunked-prefill and scheduler-check fields."""
    rule, above, source = chunked_prefill(files, engine)
    return {"chunked_prefill": rule, "chunked_prefill_above": above, "chunked_prefill_source": source,
            "batched_tokens_source": batched_tokens_checks(files)}
