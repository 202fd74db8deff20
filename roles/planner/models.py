"""Model-file readers of the planner: what a model's own metadata says about its shape and sizes.

A GGUF header for llama.cpp (`read_gguf`); config.json plus the safetensors headers for vLLM (`read_hf`,
`hf_model_from_config`). Nothing here loads weights. Sizes in bytes, contexts in tokens.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .units import MiB

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
    n_embd: int = 0  # embedding_length; 0: not known, taken as n_head x head_dim
    n_vocab: int = 0  # vocabulary size (rows of the output layer); 0: not known

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
    def embd(self) -> int:
        """Hidden size: embedding_length, else n_head x head_dim (llama-like models)."""
        return self.n_embd or self.n_head * self.head_dim

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
    hidden_size: int = 0  # 0: not given (planned as n_heads x head_dim)
    intermediate_size: int = 0  # MLP width; 0: not given (planned as 6 x hidden_size, conservative)
    vocab_size: int = 0  # 0: not given (planned as 152064, the largest common vocabulary)
    derived_max_len: int = 0  # vLLM's derived max model len (rope_scaling applied); 0: max_position_embeddings

    @property
    def max_model_len_limit(self) -> int:
        """The largest max_model_len vLLM accepts for this config (0: unknown, no limit)."""
        return self.derived_max_len or self.max_position_embeddings

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
    path = Path(path)
    reader = _open_gguf(path)
    shape = _gguf_shape(path, reader)
    layer_bytes, token_embd, output, names = _gguf_tensor_bytes(path, reader, shape["n_layers"])
    return GgufModel(
        **shape,
        layer_bytes=tuple(layer_bytes),
        token_embd_bytes=token_embd,
        output_bytes=output,
        tied_output="output.weight" not in names,
    )


def _open_gguf(path: Path) -> Any:
    """A gguf.GGUFReader on `path`. Raises FileNotFoundError if it is missing, ValueError if it is not GGUF."""
    import gguf  # imported here: only planning needs it, and it pulls in numpy

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # the gguf package raises ValueError/struct errors/IndexError for non-GGUF input
        raise ValueError(f"{path}: not a readable GGUF file ({e})") from e


def _gguf_shape(path: Path, reader: Any) -> dict[str, Any]:
    """The GgufModel fields a GGUF header states: architecture, n_layers, n_head, n_kv_heads, head_dim (K head
    size), head_dim_v (0 unless the V head size differs), context_length (tokens; 0 if absent), n_embd and n_vocab
    (vocab_size, else the tokenizer's token count; 0 if absent).
    Raises ValueError when the architecture, block count, head count or a way to the head size is missing."""
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
    n_embd = _gguf_value(reader, f"{arch}.embedding_length")
    n_vocab = _gguf_value(reader, f"{arch}.vocab_size")
    if n_vocab is None:
        tokens = reader.get_field("tokenizer.ggml.tokens")
        n_vocab = len(tokens.data) if tokens is not None else 0
    context_length = _gguf_value(reader, f"{arch}.context_length")
    return dict(
        architecture=str(arch),
        n_layers=n_layers,
        n_head=n_head,
        n_kv_heads=n_kv,
        head_dim=int(key_length),
        context_length=int(context_length or 0),
        head_dim_v=int(value_length) if value_length is not None and int(value_length) != int(key_length) else 0,
        n_embd=int(n_embd or 0),
        n_vocab=int(n_vocab or 0),
    )


def _gguf_tensor_bytes(path: Path, reader: Any, n_layers: int) -> tuple[list[int], int, int, set[str]]:
    """(bytes per layer blk.0..blk.{n_layers-1}, token_embd.* bytes, bytes of every other tensor, tensor names),
    summed over all parts of a split GGUF. Blocks past block_count (e.g. MTP blocks) are folded into the last layer
    so the layer count stays the model's: they are still weights on the GPU."""
    import gguf  # imported here: only planning needs it, and it pulls in numpy

    layer_bytes = [0] * n_layers
    token_embd = output = 0
    names: set[str] = set()
    parts = _gguf_parts(path, reader)
    n_tensors = 0
    for no, part in enumerate(parts):
        part_reader = reader if part == path else gguf.GGUFReader(part)
        # gguf-split's keys (llama.cpp tools/gguf-split, gguf-py constants Keys.Split): each part's split.no from 0,
        # and the first part's split.tensors.count of all parts together
        if len(parts) > 1 and int(_gguf_value(part_reader, "split.no") or 0) != no:
            raise ValueError(f"{part}: split.no is {_gguf_value(part_reader, 'split.no')}, not {no}: not part "
                             f"{no + 1} of this split GGUF")
        n_tensors += len(part_reader.tensors)
        for t in part_reader.tensors:
            names.add(t.name)
            m = re.match(r"blk\.(\d+)\.", t.name)
            if m:
                i = int(m.group(1))
                if i >= len(layer_bytes):
                    layer_bytes.extend([0] * (i + 1 - len(layer_bytes)))
                layer_bytes[i] += int(t.n_bytes)
            elif t.name.startswith("token_embd."):
                token_embd += int(t.n_bytes)
            else:
                output += int(t.n_bytes)
    stated = _gguf_value(reader, "split.tensors.count")
    if len(parts) > 1 and stated is not None and int(stated) != n_tensors:
        raise ValueError(f"{path}: split.tensors.count is {stated} but the {len(parts)} parts hold {n_tensors} tensors")
    if len(layer_bytes) > n_layers:
        layer_bytes[n_layers - 1] += sum(layer_bytes[n_layers:])
        del layer_bytes[n_layers:]
    return layer_bytes, token_embd, output, names


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


#: config.json keys vLLM reads for the model's own maximum length; it takes the smallest present
#: (vllm/config.py, _get_and_verify_max_len). (H)
VLLM_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                     "max_sequence_length", "max_seq_length", "seq_len")
#: rope types whose factor vLLM does not apply to the derived length (they already state the long length). (H)
VLLM_ROPE_TYPES_UNSCALED = ("su", "longrope", "llama3")


def vllm_derived_max_len(config: dict) -> int:
    """The max model len vLLM derives from a (text) config, as _get_and_verify_max_len does: the smallest of the
    length keys, then for a rope_scaling other than su/longrope/llama3 times its factor (default 1), starting from
    original_max_position_embeddings for yarn. 0 when the config states no length."""
    c = hf_text_config(config)
    lengths = [int(c[k]) for k in VLLM_MAX_LEN_KEYS if isinstance(c.get(k), (int, float)) and c.get(k)]
    derived: float = min(lengths) if lengths else 0
    rope = c.get("rope_scaling")
    if isinstance(rope, dict) and derived:
        rope_type = rope.get("rope_type", rope.get("type"))
        if rope_type not in VLLM_ROPE_TYPES_UNSCALED:
            factor = rope.get("factor")
            factor = 1.0 if factor is None else float(factor)
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = int(rope["original_max_position_embeddings"])
            derived *= factor
    return int(derived)


def hf_model_from_config(config: dict, weight_bytes: int, where: str = "config.json") -> HfModel:
    """An HfModel from a parsed config.json and the bytes the weights take on the GPU (`weight_bytes`).
    Raises ValueError naming `where` when the config is not a JSON object, a key the planner needs is missing or
    below 1, or quantization_config is not an object."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a JSON object")
    c = hf_text_config(config)

    def need(key: str) -> int:
        if c.get(key) is None:
            raise ValueError(f"{where}: no {key}")
        if int(c[key]) < 1:  # a count or a size: 0 would divide by zero below
            raise ValueError(f"{where}: {key} is {c[key]}, not a positive number")
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
        hidden_size=int(c.get("hidden_size") or 0),
        intermediate_size=int(c.get("intermediate_size") or 0),
        vocab_size=int(c.get("vocab_size") or 0),
        derived_max_len=vllm_derived_max_len(config),
    )
