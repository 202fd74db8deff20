"""VRAM / KV-cache planner: does a model fit on the host's V100s, before anything touches the host.

Pure arithmetic over the model's own metadata (a GGUF header for llama.cpp; config.json plus safetensors headers
for vLLM) and the planned settings. Nothing here loads weights or talks to a GPU. Every number the planner adds
on top of the model (CUDA context, compute buffers, vLLM's activation peak) is a module constant below, with
where it comes from; confidence H/M as in shared/reference/volta.md. Where a constant is M, prefer a measurement
on the host.

Units: bytes unless a name says otherwise (`_mib` = MiB = 2**20 bytes; GB = 1e9 bytes, used only in messages
about model sizes, because that is how downloads are labelled); contexts in tokens; speeds in tokens/s.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Literal

MiB = 1 << 20
GiB = 1 << 30
GB = 10**9

# -- The GPU ------------------------------------------------------------------------------------------------
#: Memory a V100 reports (nvidia-smi "Total", torch.cuda.mem_get_info), ECC on. (issue 6; H)
V100_16GB_MIB = 16160
V100_32GB_MIB = 32510
#: HBM2 bandwidth of a V100: ~900 GB/s. Decode is bandwidth bound, so this caps tokens/s. (volta.md; H)
V100_BANDWIDTH_BYTES_S = 900e9
#: Effective host DRAM bandwidth for layers llama.cpp runs on the CPU. A 6-channel DDR4-2666 Xeon peaks at
#: ~128 GB/s per socket and CPU decode reaches well under half of that; 50 GB/s reproduces the 3.5-4 tok/s users
#: report for partly offloaded ~27 GB models (volta.md). An assumption (M): measure with llama-bench on the host.
HOST_BANDWIDTH_BYTES_S = 50e9

#: Per GPU per process, outside any buffer the engines report: the CUDA context with lazy module loading
#: (default since CUDA 12.2), cuBLAS handle and workspace. Typical nvidia-smi "used" of an idle CUDA process is
#: 250-400 MiB; vLLM users see ~400 MiB per GPU before the model loads (torch loads more kernels). (M)
CUDA_CONTEXT_BYTES = 300 * MiB
VLLM_CUDA_CONTEXT_BYTES = 400 * MiB

# -- llama.cpp ----------------------------------------------------------------------------------------------
#: Bytes per element of each llama.cpp KV cache type (`-ctk/-ctv`): ggml block size / elements per block,
#: e.g. q8_0 = 32 int8 + one f16 scale = 34 bytes per 32 elements. (ggml/src/ggml.c type_traits; H)
LLAMA_CPP_CACHE_TYPES: dict[str, Fraction] = {
    "f32": Fraction(4), "f16": Fraction(2), "bf16": Fraction(2),
    "q8_0": Fraction(34, 32), "q4_0": Fraction(18, 32), "q4_1": Fraction(20, 32),
    "q5_0": Fraction(22, 32), "q5_1": Fraction(24, 32), "iq4_nl": Fraction(18, 32),
}
#: KV types with CUDA flash-attention kernels in a default build (K and V the same type); others need
#: GGML_CUDA_FA_ALL_QUANTS. (volta.md; H)
LLAMA_CPP_FA_CACHE_TYPES = ("f16", "q8_0", "q4_0")
#: llama.cpp's default physical batch (`-ub`); the compute buffer is sized for it.
LLAMA_CPP_N_UBATCH = 512
#: llama.cpp rounds the KV cache (n_ctx) up to a multiple of 256. (llama-context.cpp, GGML_PAD(n_ctx, 256); H)
LLAMA_CPP_CTX_PAD = 256
#: The "CUDA0 compute buffer size" llama-server logs with flash attention at -ub 512 is dominated by the f32
#: logits, n_vocab x 512 x 4 bytes: ~258 MiB for a 128k vocabulary, ~520 MiB for 262k. 512 MiB covers
#: vocabularies up to ~256k; flash attention is assumed (Volta has it; a quantized V cache requires it). (M)
LLAMA_CPP_COMPUTE_BUFFER_BYTES = 512 * MiB
#: The compute buffer also holds the KQ mask, one row per context token: f32 [n_ctx, n_ubatch] plus its f16
#: copy for flash attention, i.e. 512 x (4 + 2) bytes per context token. (llama-graph.cpp self_kq_mask; M)
LLAMA_CPP_KQ_MASK_BYTES_PER_CTX_TOKEN = LLAMA_CPP_N_UBATCH * (4 + 2)

# -- vLLM ---------------------------------------------------------------------------------------------------
#: Bytes per element of vLLM's `--kv-cache-dtype`. auto = the model dtype, half on Volta (`--dtype half`, bf16 is
#: unsupported below cc 8.0); fp8 variants are storage-only and work on Volta. (vLLM docs, volta.md; H/M)
VLLM_KV_CACHE_DTYPES: dict[str, Fraction] = {
    "auto": Fraction(2), "fp8": Fraction(1), "fp8_e5m2": Fraction(1), "fp8_e4m3": Fraction(1),
    "auto_float32": Fraction(4),  # "auto" under --dtype float32: the KV cache follows the model dtype
}
#: vLLM's paged KV cache block, in tokens (default --block-size on CUDA). (H)
VLLM_BLOCK_SIZE = 16
#: vLLM's "PyTorch activation peak memory" from its profile run at the V0 defaults (max_num_batched_tokens 8192,
#: max_num_seqs 256): logs show 1.19-1.39 GiB for 1.5B-8B models (vllm#10511, #12529); rounded up to 1.5 GiB. The
#: profile's batch grows with max_model_len (V0: max(max_model_len, 2048) tokens), so the planner scales this
#: linearly above 8192 profiled tokens. Not split by tensor parallel: logs show the same peak at TP 1 and 2. (M)
VLLM_ACTIVATION_PEAK_BYTES = 3 * GiB // 2
VLLM_ACTIVATION_REF_TOKENS = 8192
#: V0 turns chunked prefill on above a 32k max_model_len and then profiles 2048-token batches. (vLLM
#: EngineArgs defaults; M)
VLLM_CHUNKED_PREFILL_ABOVE = 32768
VLLM_MIN_BATCHED_TOKENS = 2048
#: vLLM's "non_torch_memory" (memory outside torch's allocator that appears during loading and profiling: cuBLAS
#: workspaces, allocator slack): 0.04-0.20 GiB in single-GPU logs (vllm#12126, #12529, #14447). (M)
VLLM_NON_TORCH_BYTES = GiB // 5
#: Extra non-torch memory per GPU under tensor parallel (NCCL buffers, custom all-reduce): 0.59-0.73 GiB at TP 2
#: in logs, versus 0.2 GiB at TP 1. (M)
VLLM_TP_COMM_BYTES = GiB // 2
#: A GPTQ 4-bit build with group size 128 stores per weight 4 bits + a 16-bit scale and a 4-bit zero per group:
#: (4 + 16/128 + 4/128) / 16 of the fp16 bytes. Embeddings stay fp16, so a real build is somewhat larger. (H)
GPTQ_4BIT_FRACTION_OF_FP16 = (4 + 16 / 128 + 4 / 128) / 16
#: Tensor-parallel sizes the planner suggests, one GPU each.
VLLM_TP_CANDIDATES = (2, 4, 8)

Outcome = Literal["fits", "does_not_fit", "offload"]


# -- Model metadata -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GgufModel:
    """What the planner needs from a GGUF model. Sizes in bytes; context_length in tokens (0: not recorded).

    Build it from a file with `read_gguf`, or directly (tests, "what if" sizes) with `with_layer_weights`.
    """

    architecture: str
    n_layers: int
    n_head: int
    n_kv_heads: int
    head_dim: int  # K head size (key_length, else n_embd / n_head)
    context_length: int  # trained context, tokens
    layer_bytes: tuple[int, ...]  # tensor bytes of blk.0 .. blk.{n_layers-1}
    token_embd_bytes: int = 0  # token_embd.*: llama.cpp keeps the input layer in host memory
    output_bytes: int = 0  # output.weight, output_norm.* and any other tensor outside blk.N
    tied_output: bool = False  # no output.weight: llama.cpp copies token_embd to the GPU as the output layer
    head_dim_v: int = 0  # V head size when it differs from head_dim (value_length); 0: same as head_dim

    def __post_init__(self) -> None:
        if self.n_layers <= 0 or self.n_kv_heads <= 0 or self.head_dim <= 0:
            raise ValueError(f"{self.architecture}: n_layers, n_kv_heads and head_dim must be positive")
        if len(self.layer_bytes) != self.n_layers:
            raise ValueError(f"{self.architecture}: {len(self.layer_bytes)} layer sizes for {self.n_layers} layers")

    @property
    def weight_bytes(self) -> int:
        """Total tensor bytes (the model file minus its header)."""
        return sum(self.layer_bytes) + self.token_embd_bytes + self.output_bytes

    @property
    def non_layer_bytes(self) -> int:
        """Bytes of the tensors outside the repeating blocks (token_embd, output, output_norm, ...)."""
        return self.token_embd_bytes + self.output_bytes

    @property
    def output_gpu_bytes(self) -> int:
        """Bytes the output layer takes on the GPU when it is offloaded (-ngl > n_layers)."""
        return self.output_bytes + (self.token_embd_bytes if self.tied_output else 0)

    @property
    def v_head_dim(self) -> int:
        return self.head_dim_v or self.head_dim

    def with_layer_weights(self, weight_bytes: int | float) -> GgufModel:
        """The same shape with `weight_bytes` spread evenly over the layers and no separate embedding or output
        tensors: how a stated quant size ("15.2 GB") is planned without the file. All of it counts as GPU-resident,
        which is conservative (llama.cpp keeps the token embedding in host memory)."""
        total = int(weight_bytes)
        base, extra = divmod(total, self.n_layers)
        layers = tuple(base + (1 if i < extra else 0) for i in range(self.n_layers))
        return replace(self, layer_bytes=layers, token_embd_bytes=0, output_bytes=0, tied_output=False)


@dataclass(frozen=True)
class HfModel:
    """What the planner needs from a Hugging Face (safetensors) model for vLLM. Sizes in bytes.

    weight_bytes is what vLLM holds on the GPUs with `--dtype half`: float tensors at 2 bytes per element
    (f32 checkpoints are halved), quantized integer tensors as stored. Build it with `read_hf` or directly.
    """

    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_position_embeddings: int  # tokens
    weight_bytes: int
    torch_dtype: str = "float16"
    quantization: str | None = None  # quantization_config.quant_method, e.g. "gptq"; None: unquantized

    def __post_init__(self) -> None:
        if min(self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim) <= 0:
            raise ValueError(f"{self.architecture}: n_layers, n_heads, n_kv_heads and head_dim must be positive")


def _gguf_value(reader: Any, key: str) -> Any:
    f = reader.get_field(key)
    return None if f is None else f.contents()


def _as_count(value: Any) -> int:
    # Some architectures store per-layer head counts as an array; size the cache for the largest layer.
    if isinstance(value, list):
        return max(int(v) for v in value) if value else 0
    return int(value)


def _gguf_parts(path: Path, reader: Any) -> list[Path]:
    """All files of a split GGUF (model-00001-of-00003.gguf); metadata lives in the first."""
    count = _gguf_value(reader, "split.count")
    if not count or int(count) <= 1:
        return [path]
    m = re.fullmatch(r"(.*)-(\d{5})-of-(\d{5})\.gguf", path.name)
    if not m:
        raise ValueError(f"{path}: split GGUF ({count} parts) but the name is not NAME-00001-of-{int(count):05d}.gguf")
    parts = [path.with_name(f"{m.group(1)}-{i:05d}-of-{int(count):05d}.gguf") for i in range(1, int(count) + 1)]
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{path}: missing parts of a split GGUF: {', '.join(missing)}")
    return parts


def read_gguf(path: str | Path) -> GgufModel:
    """Read a GGUF model's shape and tensor sizes from its header (memory-mapped; the weights are not read).

    Returns a GgufModel with per-layer tensor bytes (tensors named blk.N.*), the token embedding and the other
    non-layer tensors (output, output_norm, ...). A split model (NAME-00001-of-0000N.gguf) is read across all its
    parts. Raises FileNotFoundError if the file (or a part) is missing, ValueError if it is not a GGUF file or lacks
    the architecture, block count or head counts.
    """
    import gguf  # imported here: only planning needs it, and it pulls in numpy

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # the gguf package raises ValueError/struct errors/IndexError for non-GGUF input
        raise ValueError(f"{path}: not a readable GGUF file ({e})") from e

    arch = _gguf_value(reader, "general.architecture")
    if not arch:
        raise ValueError(f"{path}: GGUF header has no general.architecture")

    def need(key: str) -> Any:
        value = _gguf_value(reader, f"{arch}.{key}")
        if value is None:
            raise ValueError(f"{path}: GGUF header has no {arch}.{key}")
        return value

    n_layers = int(need("block_count"))
    n_head = _as_count(need("attention.head_count"))
    kv = _gguf_value(reader, f"{arch}.attention.head_count_kv")
    n_kv = _as_count(kv) if kv is not None else n_head  # absent: no grouped-query attention
    key_length = _gguf_value(reader, f"{arch}.attention.key_length")
    if key_length is None:
        if not n_head:
            raise ValueError(f"{path}: no {arch}.attention.key_length and no head count to derive it")
        key_length = int(need("embedding_length")) // n_head
    value_length = _gguf_value(reader, f"{arch}.attention.value_length")
    context_length = _gguf_value(reader, f"{arch}.context_length")

    layer_bytes = [0] * n_layers
    token_embd = output = 0
    names: set[str] = set()
    for part in _gguf_parts(path, reader):
        part_reader = reader if part == path else gguf.GGUFReader(part)
        for t in part_reader.tensors:
            names.add(t.name)
            m = re.match(r"blk\.(\d+)\.", t.name)
            if m:
                i = int(m.group(1))
                if i >= len(layer_bytes):  # e.g. extra (MTP) blocks past block_count: still weights on the GPU
                    layer_bytes.extend([0] * (i + 1 - len(layer_bytes)))
                layer_bytes[i] += int(t.n_bytes)
            elif t.name.startswith("token_embd."):
                token_embd += int(t.n_bytes)
            else:
                output += int(t.n_bytes)
    # Blocks past block_count are folded into the last layer so the layer count stays the model's.
    if len(layer_bytes) > n_layers:
        layer_bytes[n_layers - 1] += sum(layer_bytes[n_layers:])
        del layer_bytes[n_layers:]

    return GgufModel(
        architecture=str(arch),
        n_layers=n_layers,
        n_head=n_head,
        n_kv_heads=n_kv,
        head_dim=int(key_length),
        context_length=int(context_length or 0),
        layer_bytes=tuple(layer_bytes),
        token_embd_bytes=token_embd,
        output_bytes=output,
        tied_output="output.weight" not in names,
        head_dim_v=int(value_length) if value_length is not None and int(value_length) != int(key_length) else 0,
    )


#: Element sizes of safetensors dtypes (safetensors format spec). Float tensors become 2 bytes under --dtype half.
_SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
_MAX_SAFETENSORS_HEADER = 100 * MiB  # the format's own limit for the JSON header


def safetensors_sizes(path: str | Path) -> tuple[int, int]:
    """(bytes in the file's data section, bytes vLLM holds with --dtype half) for one .safetensors file, read from
    its header only: an 8-byte little-endian header length, then a JSON map of tensor name -> dtype, shape and
    data_offsets [begin, end). Raises ValueError for a malformed header."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > min(_MAX_SAFETENSORS_HEADER, size - 8):
            raise ValueError(f"{path}: safetensors header length {n} does not fit the file ({size} bytes)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: safetensors header is not JSON ({e})") from e
    data = held = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in info["data_offsets"])
            dtype = str(info["dtype"])
            elements = math.prod(int(d) for d in info["shape"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: tensor {name!r} has no valid dtype/shape/data_offsets") from e
        if end < begin or end > size - 8 - n:
            raise ValueError(f"{path}: tensor {name!r} data_offsets [{begin}, {end}) outside the data section")
        if dtype in _SAFETENSORS_DTYPE_BYTES and end - begin != elements * _SAFETENSORS_DTYPE_BYTES[dtype]:
            raise ValueError(f"{path}: tensor {name!r} ({dtype} {info['shape']}) has {end - begin} bytes of data")
        data += end - begin
        held += elements * 2 if dtype in _FLOAT_DTYPES else end - begin
    return data, held


def _safetensors_files(path: Path) -> list[Path]:
    """The weight files vLLM loads: those named by model.safetensors.index.json, else every *.safetensors except
    Mistral-style consolidated*.safetensors duplicates shipped next to the sharded ones."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as e:
            raise ValueError(f"{index}: no weight_map ({e})") from e
        files = [path / n for n in names]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index}: names missing files: {', '.join(missing)}")
        return files
    files = sorted(path.glob("*.safetensors"))
    sharded = [f for f in files if not f.name.startswith("consolidated")]
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files (vLLM planning reads their headers)")
    return sharded or files


def read_hf(path: str | Path) -> HfModel:
    """Read a Hugging Face model directory: config.json for the shape, the *.safetensors headers for the sizes.

    Weights are never loaded. Multimodal configs with a `text_config` are planned from the language model's config.
    Raises FileNotFoundError if the directory, config.json or any *.safetensors file is missing, ValueError for a
    config without the needed keys or a malformed safetensors header.
    """
    path = Path(path)
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{path}: no config.json (a Hugging Face model directory is expected)")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{config_path}: not JSON ({e})") from e
    files = _safetensors_files(path)
    return hf_model_from_config(config, sum(safetensors_sizes(f)[1] for f in files), str(config_path))


def hf_text_config(config: dict) -> dict:
    """The language model's part of a config.json: the config itself, or merged with its `text_config`
    (multimodal models). A config that is not an object gives {}."""
    if not isinstance(config, dict):
        return {}
    text = config.get("text_config") if "num_hidden_layers" not in config else None
    return {**config, **text} if isinstance(text, dict) else config


def hf_model_from_config(config: dict, weight_bytes: int, where: str = "config.json") -> HfModel:
    """An HfModel from a parsed config.json and the bytes the weights take on the GPU (`weight_bytes`).
    Raises ValueError naming `where` when the config is not a JSON object, a key the planner needs is missing, or
    quantization_config is not an object."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a JSON object")
    c = hf_text_config(config)

    def need(key: str) -> int:
        if c.get(key) is None:
            raise ValueError(f"{where}: no {key}")
        return int(c[key])

    n_layers = need("num_hidden_layers")
    n_heads = need("num_attention_heads")
    n_kv = int(c.get("num_key_value_heads") or n_heads)
    head_dim = int(c.get("head_dim") or need("hidden_size") // n_heads)
    quant = config.get("quantization_config") or c.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise ValueError(f"{where}: quantization_config is not an object")
    return HfModel(
        architecture=str((config.get("architectures") or [config.get("model_type", "unknown")])[0]),
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        max_position_embeddings=int(c.get("max_position_embeddings") or 0),
        weight_bytes=int(weight_bytes),
        torch_dtype=str(c.get("torch_dtype") or config.get("torch_dtype") or "float16"),
        quantization=str(quant.get("quant_method")) if isinstance(quant, dict) and quant.get("quant_method") else None,
    )


# -- KV cache arithmetic ------------------------------------------------------------------------------------


def _bytes_per_element(cache_type: str) -> Fraction:
    if cache_type in LLAMA_CPP_CACHE_TYPES:
        return LLAMA_CPP_CACHE_TYPES[cache_type]
    if cache_type in VLLM_KV_CACHE_DTYPES:
        return VLLM_KV_CACHE_DTYPES[cache_type]
    known = sorted({*LLAMA_CPP_CACHE_TYPES, *VLLM_KV_CACHE_DTYPES})
    raise ValueError(f"unknown KV cache type {cache_type!r}; known: {', '.join(known)}")


def _row_bytes(n_elements: int, cache_type: str) -> int:
    """Bytes of one token's K (or V) row of one layer: quantized types store whole 32-element blocks."""
    per = _bytes_per_element(cache_type)
    if per.denominator != 1 and n_elements % 32:
        raise ValueError(f"cache type {cache_type} needs n_kv_heads x head_dim divisible by 32, got {n_elements}")
    return int(per * n_elements)


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, cache_type: str) -> int:
    """KV cache bytes per token of context for one sequence: 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes
    per element of `cache_type` (llama.cpp -ctk/-ctv names, or vLLM --kv-cache-dtype names).

    Example: 64 layers, 4 KV heads of 128, q8_0 -> 2 x 64 x 4 x 128 x 34/32 = 69632 bytes.
    Raises ValueError for an unknown cache type or a quantized type whose row is not whole 32-element blocks.
    """
    return 2 * n_layers * _row_bytes(n_kv_heads * head_dim, cache_type)


# -- The plan -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The memory plan of one model instance. Byte fields are per GPU unless they say otherwise.

    total_bytes = weight + kv + compute_buffer + cuda_context for llama.cpp. For vLLM it follows vLLM's own
    accounting, weight + kv + compute_buffer (activation peak + non-torch memory) against VRAM x
    gpu_memory_utilization; the CUDA context lives in the remaining (1 - utilization) and is reported only.
    """

    engine: Literal["llama.cpp", "vllm"]
    outcome: Outcome
    n_gpus: int  # GPUs the instance uses
    gpu_bytes: int  # VRAM of one GPU
    budget_bytes: int  # VRAM x usable fraction (llama.cpp) or x gpu_memory_utilization (vLLM)
    weight_bytes: int
    kv_bytes: int  # llama.cpp: context x parallel slots; vLLM: one max_model_len sequence (the minimum it needs)
    compute_buffer_bytes: int  # llama.cpp compute buffer; vLLM activation peak + non-torch memory
    cuda_context_bytes: int
    total_bytes: int
    context: int  # tokens per sequence as planned
    kv_bytes_per_token: int  # whole model, one sequence
    layers_offloaded: int  # llama.cpp: layers that would run on the CPU at the planned context; vLLM: 0
    max_context_that_fits: int  # tokens per sequence, capped at the trained context; 0 if none
    max_weight_bytes: int  # whole model: largest weights (same shape) that fit at the planned context; 0 if none
    decode_ceiling_tps: float  # tokens/s of one sequence at full context, from memory bandwidth
    reasons: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.outcome == "fits"


def _mib(n: float) -> str:
    return f"{n / MiB:,.0f} MiB"


def _gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


def _largest(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """Largest x in [lo, hi] with ok(x), for ok monotone (true then false); lo - 1 if none."""
    if hi < lo or not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _check_positive(**values: float) -> None:
    for name, v in values.items():
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class _LlamaUsage:
    weights: int  # per GPU
    kv: int  # per GPU
    compute: int
    context: int
    host_read: int  # weight bytes read from host memory per decoded token (CPU layers, output on the CPU)
    gpu_weights_total: int  # all GPUs
    gpu_kv_per_token: int  # whole model, one sequence: KV of the layers on the GPU
    host_kv_per_token: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.context


def _llama_usage(model: GgufModel, n_gpus: int, kv_layer_tok: int, layers_on_gpu: int, output_on_gpu: bool,
                 kv_tokens: int) -> _LlamaUsage:
    # llama.cpp offloads the *last* layers_on_gpu blocks; each layer's KV lives with its layer.
    split = model.n_layers - layers_on_gpu
    output = model.output_gpu_bytes  # with tied embeddings the output layer is a copy of token_embd
    gpu_w = sum(model.layer_bytes[split:]) + (output if output_on_gpu else 0)
    # The token embedding is a row lookup (one row per token); everything else on the host is read in full.
    host_read = sum(model.layer_bytes[:split]) + (0 if output_on_gpu else output)
    kv_total = kv_layer_tok * layers_on_gpu * kv_tokens
    return _LlamaUsage(
        weights=-(-gpu_w // n_gpus),
        kv=-(-kv_total // n_gpus),
        compute=LLAMA_CPP_COMPUTE_BUFFER_BYTES + LLAMA_CPP_KQ_MASK_BYTES_PER_CTX_TOKEN * kv_tokens,
        context=CUDA_CONTEXT_BYTES,
        host_read=host_read,
        gpu_weights_total=gpu_w,
        gpu_kv_per_token=kv_layer_tok * layers_on_gpu,
        host_kv_per_token=kv_layer_tok * (model.n_layers - layers_on_gpu),
    )


def _decode_tps(gpu_bytes: float, host_bytes: float) -> float:
    seconds = gpu_bytes / V100_BANDWIDTH_BYTES_S + host_bytes / HOST_BANDWIDTH_BYTES_S
    return 1 / seconds if seconds > 0 else math.inf


def plan_llama_cpp(model: GgufModel, gpu_mib: int, n_gpus: int, context: int, cache_type_k: str, cache_type_v: str,
                   parallel: int, usable_fraction: float, n_gpu_layers: int = 99) -> Plan:
    """Plan a llama-server instance: `context` tokens per slot, `parallel` slots (the server then needs
    `-c context*parallel -np parallel`), KV cache types `cache_type_k/_v` (-ctk/-ctv), `n_gpu_layers` (-ngl; more
    than the layer count also puts the output layer on the GPU), on `n_gpus` GPUs of `gpu_mib` MiB each with the
    default layer split. The budget per GPU is gpu_mib x usable_fraction; the CUDA context and compute buffer are
    counted explicitly on top of weights and KV, so usable_fraction is only the safety margin left unused.

    Outcome: "fits"; "does_not_fit" (the weights fit but not with the KV cache and buffers: reasons name the
    largest context and the largest weight size that fit); "offload" (the GPU-resident weights alone exceed the
    budget, or n_gpu_layers leaves layers on the CPU: layers_offloaded says how many run on the CPU, and
    decode_ceiling_tps counts them at host memory bandwidth). Raises ValueError for non-positive sizes, a
    usable_fraction outside (0, 1], or an unknown cache type.
    """
    _check_positive(gpu_mib=gpu_mib, n_gpus=n_gpus, context=context, parallel=parallel,
                    usable_fraction=usable_fraction)
    if usable_fraction > 1:
        raise ValueError(f"usable_fraction must be at most 1, got {usable_fraction}")
    if n_gpu_layers < 0:
        raise ValueError(f"n_gpu_layers must be >= 0, got {n_gpu_layers}")
    for name, t in (("cache_type_k", cache_type_k), ("cache_type_v", cache_type_v)):
        if t not in LLAMA_CPP_CACHE_TYPES:
            raise ValueError(f"{name}: unknown KV cache type {t!r} for llama.cpp; known: "
                             f"{', '.join(LLAMA_CPP_CACHE_TYPES)}")
    kv_layer_tok = (_row_bytes(model.n_kv_heads * model.head_dim, cache_type_k)
                    + _row_bytes(model.n_kv_heads * model.v_head_dim, cache_type_v))
    kv_tok = kv_layer_tok * model.n_layers
    gpu_bytes = gpu_mib * MiB
    budget = int(gpu_bytes * usable_fraction)
    n = model.n_layers
    layers_gpu = min(n_gpu_layers, n)
    output_gpu = n_gpu_layers > n
    kv_tokens = _pad(context * parallel, LLAMA_CPP_CTX_PAD)

    def usage(layers: int, output: bool, tokens: int) -> _LlamaUsage:
        return _llama_usage(model, n_gpus, kv_layer_tok, layers, output, tokens)

    planned = usage(layers_gpu, output_gpu, kv_tokens)
    reasons: list[str] = []

    # Largest context per slot at the planned layer placement, capped at the trained context.
    cap = model.context_length or 1 << 22
    def ctx_ok(c: int) -> bool:
        return usage(layers_gpu, output_gpu, _pad(c * parallel, LLAMA_CPP_CTX_PAD)).total <= budget
    max_ctx = max(0, _largest(ctx_ok, 1, cap))
    vram_ctx = max(0, _largest(ctx_ok, 1, 1 << 24)) if max_ctx == cap else max_ctx

    # Largest GPU-resident weights (everything on the GPU) at the planned context, scaled back to a model size.
    full = usage(n, True, kv_tokens)
    room = (budget - full.kv - full.compute - full.context) * n_gpus
    gpu_share = full.gpu_weights_total / model.weight_bytes if model.weight_bytes else 1
    max_weights = max(0, int(room / gpu_share)) if gpu_share else 0

    if planned.weights > budget:
        outcome: Outcome = "offload"
    elif planned.total <= budget:
        outcome = "offload" if layers_gpu < n else "fits"
    else:
        outcome = "does_not_fit"

    # Where layers have to go to the CPU, how many: fill the GPUs from the last layer down (output on the CPU).
    if outcome == "fits" or (outcome == "offload" and planned.total <= budget):
        on_gpu, running = layers_gpu, planned
    else:
        on_gpu = max(0, _largest(lambda k: usage(k, False, kv_tokens).total <= budget, 0, n))
        running = usage(on_gpu, False, kv_tokens)
    offloaded = n - on_gpu

    # Decode ceiling of one sequence at its full context: what runs (offload) or what was planned.
    tps_running = _decode_tps(running.gpu_weights_total + running.gpu_kv_per_token * context,
                              running.host_read + running.host_kv_per_token * context)
    tps_planned = _decode_tps(planned.gpu_weights_total + planned.gpu_kv_per_token * context,
                              planned.host_read + planned.host_kv_per_token * context)
    tps_all_gpu = _decode_tps(full.gpu_weights_total + kv_tok * context, 0)
    tps = tps_running if outcome == "offload" else tps_planned

    used = (f"per GPU: weights {_mib(planned.weights)} + KV {_mib(planned.kv)} ({kv_tokens} tokens of "
            f"{cache_type_k}/{cache_type_v}) + compute buffer {_mib(planned.compute)} + CUDA context "
            f"{_mib(planned.context)} = {_mib(planned.total)} against a budget of {_mib(budget)} "
            f"({usable_fraction:.0%} of {gpu_mib} MiB)")
    if outcome == "fits":
        reasons.append(f"fits: {used}")
        if vram_ctx > max_ctx:
            reasons.append(f"largest context per slot: {max_ctx} tokens (the trained context; VRAM would allow "
                           f"{vram_ctx})")
        else:
            reasons.append(f"largest context per slot that fits: {max_ctx} tokens")
    elif outcome == "does_not_fit":
        reasons.append(f"does not fit: {used}")
        reasons.append(f"largest context per slot that fits: {max_ctx} tokens" if max_ctx
                       else "no context fits: the weights and buffers leave no room for a KV cache")
        reasons.append(f"largest model of this shape that fits at {context} tokens x {parallel} slot(s): "
                       f"{_gb(max_weights)} of weights (this one has {_gb(model.weight_bytes)}): choose a smaller "
                       f"quant, a shorter context or fewer slots")
        if offloaded:
            reasons.append(f"or -ngl {on_gpu}, running {offloaded} of {n} layers on the CPU: about "
                           f"{tps_running:.1f} tok/s instead of {tps_all_gpu:.0f}")
        current = (_bytes_per_element(cache_type_k) + _bytes_per_element(cache_type_v)) / 2
        for smaller in ("q8_0", "q4_0"):  # the quantized pairs llama.cpp's CUDA flash attention has by default
            if _bytes_per_element(smaller) < current:
                alt = plan_llama_cpp(model, gpu_mib, n_gpus, context, smaller, smaller, parallel, usable_fraction,
                                     n_gpu_layers)
                if alt.fits:
                    reasons.append(f"or a {smaller} KV cache (-ctk {smaller} -ctv {smaller}), which fits")
                    break
    else:
        if layers_gpu < n and planned.total <= budget:
            reasons.append(f"n_gpu_layers {n_gpu_layers} leaves {offloaded} of {n} layers on the CPU: {used}")
        else:
            reasons.append(f"would offload: the weights alone ({_mib(planned.weights)} per GPU) exceed the budget "
                           f"of {_mib(budget)} ({usable_fraction:.0%} of {gpu_mib} MiB)")
            reasons.append(f"at {context} tokens x {parallel} slot(s), {offloaded} of {n} layers would not fit on "
                           f"the GPU and run on the CPU (-ngl {on_gpu})")
            reasons.append(f"largest model of this shape that fits entirely at {context} tokens: {_gb(max_weights)} "
                           f"of weights (this one has {_gb(model.weight_bytes)}): choose a smaller quant or add GPUs")
        reasons.append(f"decode ceiling with {offloaded} layers on the CPU: about {tps_running:.1f} tok/s (host "
                       f"memory ~{HOST_BANDWIDTH_BYTES_S / GB:.0f} GB/s) instead of {tps_all_gpu:.0f} tok/s on "
                       f"the GPU")
    if not (cache_type_k == cache_type_v and cache_type_k in LLAMA_CPP_FA_CACHE_TYPES):
        reasons.append(f"-ctk {cache_type_k} -ctv {cache_type_v}: llama.cpp's CUDA flash attention is built by default "
                       f"only for equal K/V types among {', '.join(LLAMA_CPP_FA_CACHE_TYPES)}; other pairs need "
                       f"GGML_CUDA_FA_ALL_QUANTS or attention runs on the CPU")
    if model.context_length and context > model.context_length:
        reasons.append(f"context {context} is beyond the trained context {model.context_length}: quality degrades")
    if outcome != "offload":
        reasons.append(f"decode ceiling: {tps:.1f} tok/s per sequence at {context} tokens "
                       f"({V100_BANDWIDTH_BYTES_S / GB:.0f} GB/s / bytes read per token)")

    return Plan(
        engine="llama.cpp", outcome=outcome, n_gpus=n_gpus, gpu_bytes=gpu_bytes, budget_bytes=budget,
        weight_bytes=planned.weights, kv_bytes=planned.kv, compute_buffer_bytes=planned.compute,
        cuda_context_bytes=planned.context, total_bytes=planned.total, context=context, kv_bytes_per_token=kv_tok,
        layers_offloaded=offloaded, max_context_that_fits=max_ctx, max_weight_bytes=max_weights,
        decode_ceiling_tps=tps, reasons=reasons,
    )


def _vllm_activation_bytes(max_model_len: int) -> int:
    """vLLM's profile-run activation peak: the reference peak, grown with the profiled batch above 8192 tokens."""
    tokens = (VLLM_MIN_BATCHED_TOKENS if max_model_len > VLLM_CHUNKED_PREFILL_ABOVE
              else max(max_model_len, VLLM_MIN_BATCHED_TOKENS))
    return int(VLLM_ACTIVATION_PEAK_BYTES * max(1.0, tokens / VLLM_ACTIVATION_REF_TOKENS))


def plan_vllm(model: HfModel, gpu_mib: int, n_gpus: int, tensor_parallel: int, max_model_len: int,
              gpu_memory_utilization: float, kv_cache_dtype: str = "auto", max_num_seqs: int = 256) -> Plan:
    """Plan a vLLM instance the way vLLM sizes its KV cache at start-up, per GPU after tensor parallel:
    KV space = VRAM x gpu_memory_utilization - weights / TP - activation peak - non-torch memory, in whole blocks of
    16 tokens. vLLM refuses to start when that is <= 0 ("No available memory for the cache blocks") or when it holds
    fewer tokens than one max_model_len sequence ("The model's max seq len ... is larger than the maximum number of
    tokens that can be stored in KV cache"); the planner refuses the same, and also a tensor_parallel larger than
    n_gpus or not dividing the attention heads, and a max_model_len beyond max_position_embeddings. A refusal
    suggests the next power-of-two tensor parallel that fits, a GPTQ 4-bit build, and the largest max_model_len.

    gpu_mib: VRAM per GPU in MiB; max_model_len, max_num_seqs in tokens/sequences. Outcome is "fits" or
    "does_not_fit" (vLLM has no layer offload here). Raises ValueError for non-positive sizes, a utilization outside
    (0, 1] or an unknown kv_cache_dtype.
    """
    return _plan_vllm(model, gpu_mib, n_gpus, tensor_parallel, max_model_len, gpu_memory_utilization,
                      kv_cache_dtype, max_num_seqs, suggest=True)


def _plan_vllm(model: HfModel, gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float,
               kv_cache_dtype: str, max_num_seqs: int, suggest: bool) -> Plan:
    _check_positive(gpu_mib=gpu_mib, n_gpus=n_gpus, tensor_parallel=tp, max_model_len=max_model_len,
                    gpu_memory_utilization=util, max_num_seqs=max_num_seqs)
    if util > 1:
        raise ValueError(f"gpu_memory_utilization must be at most 1, got {util}")
    if kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
        raise ValueError(f"unknown vLLM kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(VLLM_KV_CACHE_DTYPES)}")
    gpu_bytes = gpu_mib * MiB
    budget = int(gpu_bytes * util)
    # vLLM splits KV heads across TP ranks and replicates them when there are fewer heads than ranks.
    kv_heads_gpu = max(1, model.n_kv_heads // tp)
    kv_tok_gpu = kv_bytes_per_token(model.n_layers, kv_heads_gpu, model.head_dim, kv_cache_dtype)
    kv_tok = kv_bytes_per_token(model.n_layers, model.n_kv_heads, model.head_dim, kv_cache_dtype)
    weights = -(-model.weight_bytes // tp)
    non_torch = VLLM_NON_TORCH_BYTES + (VLLM_TP_COMM_BYTES if tp > 1 else 0)

    def overhead(length: int) -> int:
        return _vllm_activation_bytes(length) + non_torch

    def kv_tokens(length: int) -> int:  # tokens the KV cache holds at this max_model_len, whole blocks
        space = budget - weights - overhead(length)
        return max(0, space // (kv_tok_gpu * VLLM_BLOCK_SIZE)) * VLLM_BLOCK_SIZE

    compute = overhead(max_model_len)
    kv_space = budget - weights - compute
    capacity = kv_tokens(max_model_len)
    kv_one = kv_tok_gpu * _pad(max_model_len, VLLM_BLOCK_SIZE)
    total = weights + kv_one + compute
    cap = model.max_position_embeddings or 1 << 22
    max_ctx = max(0, _largest(lambda n: kv_tokens(n) >= n, 1, cap))
    max_weights = max(0, (budget - compute - kv_one) * tp)
    tps = _decode_tps(weights + kv_tok_gpu * max_model_len, 0)

    reasons: list[str] = []
    refused: list[str] = []
    if tp > n_gpus:
        refused.append(f"tensor_parallel_size {tp} needs {tp} GPUs; this host has {n_gpus}")
    if model.n_heads % tp:
        refused.append(f"Total number of attention heads ({model.n_heads}) must be divisible by tensor parallel "
                       f"size ({tp})")
    if model.max_position_embeddings and max_model_len > model.max_position_embeddings:
        refused.append(f"max_model_len {max_model_len} is greater than the model's max_position_embeddings "
                       f"({model.max_position_embeddings}); vLLM refuses it")
    used = (f"per GPU: weights {_mib(weights)} + activation peak and non-torch memory {_mib(compute)} leave "
            f"{_mib(kv_space)} for the KV cache out of {_mib(budget)} ({util:.0%} of {gpu_mib} MiB); one "
            f"{max_model_len}-token sequence needs {_mib(kv_one)}")
    memory_refusal = kv_space <= 0 or capacity < max_model_len
    if kv_space <= 0:
        refused.append(f"No available memory for the cache blocks: {used}")
    elif capacity < max_model_len:
        refused.append(f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that "
                       f"can be stored in KV cache ({capacity}): {used}")
    if gpu_bytes - budget < VLLM_CUDA_CONTEXT_BYTES:
        refused.append(f"gpu_memory_utilization {util:g} leaves {_mib(gpu_bytes - budget)} outside vLLM's budget, "
                       f"less than the CUDA context (~{_mib(VLLM_CUDA_CONTEXT_BYTES)}): it would run out of memory")
    outcome: Outcome = "does_not_fit" if refused else "fits"

    if outcome == "fits":
        reasons.append(f"fits: {used}")
        reasons.append(f"the KV cache holds {capacity} tokens: {capacity / max_model_len:.1f} concurrent "
                       f"{max_model_len}-token sequences (max_num_seqs {max_num_seqs})")
    else:
        reasons.extend(refused)
    if suggest and memory_refusal:
        for cand in VLLM_TP_CANDIDATES:
            if cand <= tp or model.n_heads % cand:
                continue
            alt = _plan_vllm(model, gpu_mib, cand, cand, max_model_len, util, kv_cache_dtype, max_num_seqs, False)
            if alt.fits:
                reasons.append(f"fits with tensor_parallel_size {cand} on {cand} GPUs of {gpu_mib} MiB")
                break
        if model.quantization is None:
            gptq = replace(model, weight_bytes=int(model.weight_bytes * GPTQ_4BIT_FRACTION_OF_FP16),
                           quantization="gptq")
            alt = _plan_vllm(gptq, gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs, False)
            if alt.fits:
                reasons.append(f"fits as a GPTQ 4-bit build (about {_gb(gptq.weight_bytes)} of weights) at "
                               f"tensor_parallel_size {tp} (GPTQ works on Volta; AWQ does not)")
        if max_ctx:
            reasons.append(f"or max_model_len {max_ctx}, the largest that fits as configured")
    reasons.append(f"decode ceiling: {tps:.1f} tok/s per sequence at {max_model_len} tokens "
                   f"({V100_BANDWIDTH_BYTES_S / GB:.0f} GB/s per GPU / bytes read per token per GPU)")

    return Plan(
        engine="vllm", outcome=outcome, n_gpus=tp, gpu_bytes=gpu_bytes, budget_bytes=budget, weight_bytes=weights,
        kv_bytes=kv_one, compute_buffer_bytes=compute, cuda_context_bytes=VLLM_CUDA_CONTEXT_BYTES, total_bytes=total,
        context=max_model_len, kv_bytes_per_token=kv_tok, layers_offloaded=0, max_context_that_fits=max_ctx,
        max_weight_bytes=max_weights, decode_ceiling_tps=tps, reasons=reasons,
    )
