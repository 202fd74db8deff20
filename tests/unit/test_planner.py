"""The VRAM / KV-cache planner (roles/planner): model metadata readers and the fit arithmetic.

Model shapes come from real files the tests write (GGUF through gguf.GGUFWriter, safetensors by hand); files of
several GB cannot be written, so the stated weight sizes are then put on the shape that was read back
(`with_layer_weights`, `dataclasses.replace`). Nothing here matches on a model name.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from roles.planner import (
    GB,
    MiB,
    Plan,
    V100_16GB_MIB,
    V100_32GB_MIB,
    GgufModel,
    HfModel,
    kv_bytes_per_token,
    plan_llama_cpp,
    plan_vllm,
    read_gguf,
    read_hf,
    safetensors_sizes,
)

# The planner counts the CUDA context and compute buffers itself; 1.0 leaves no further margin unused.
USABLE = 1.0


# -- Files --------------------------------------------------------------------------------------------------


def write_gguf(path: Path, *, n_layers: int, n_kv_heads: int, head_dim: int, context_length: int,
               n_head: int = 32, tied: bool = False, kv_per_layer: list[int] | None = None,
               with_key_length: bool = True, vocab_size: int | None = None) -> Path:
    """A real GGUF file with the given header shape and tiny f32 tensors: per layer 64 + 32 elements, token
    embedding 128 elements, output 256 + output_norm 16 elements (unless tied)."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(n_layers)
    w.add_head_count(n_head)
    w.add_head_count_kv(kv_per_layer if kv_per_layer is not None else n_kv_heads)
    if with_key_length:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_embedding_length(n_head * head_dim)
    w.add_context_length(context_length)
    if vocab_size is not None:
        w.add_vocab_size(vocab_size)
    f32 = np.float32
    w.add_tensor("token_embd.weight", np.zeros((8, 16), f32))
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((8, 8), f32))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros(32, f32))
    if not tied:
        w.add_tensor("output.weight", np.zeros((16, 16), f32))
    w.add_tensor("output_norm.weight", np.zeros(16, f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> Path:
    """A real .safetensors file: 8-byte little-endian header length, JSON header, data. tensors: name -> (dtype,
    shape, bytes per element)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, size) in tensors.items():
        n = int(np.prod(shape)) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return path


def write_hf(directory: Path, *, n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int,
             max_position_embeddings: int, torch_dtype: str = "bfloat16") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads, "num_key_value_heads": n_kv_heads, "hidden_size": n_heads * head_dim,
        "max_position_embeddings": max_position_embeddings, "torch_dtype": torch_dtype,
    }
    (directory / "config.json").write_text(json.dumps(config))
    write_safetensors(directory / "model-00001-of-00002.safetensors", {
        "model.embed_tokens.weight": ("BF16", [32, 16], 2),  # 1024 bytes
        "model.layers.0.self_attn.q_proj.weight": ("F32", [16, 16], 4),  # 1024 bytes, 512 at --dtype half
    })
    write_safetensors(directory / "model-00002-of-00002.safetensors", {
        "lm_head.weight": ("F16", [32, 16], 2),  # 1024 bytes
        "model.layers.0.g_idx": ("I32", [16], 4),  # 64 bytes, kept as stored
    })
    return directory


@pytest.fixture
def shape_27b(tmp_path: Path) -> GgufModel:
    """27B-class shape: 64 layers, 4 KV heads of 128, a 152064-token vocabulary (it sizes the logits in the compute
    buffer), read back from a real GGUF header."""
    return read_gguf(write_gguf(tmp_path / "27b.gguf", n_layers=64, n_kv_heads=4, head_dim=128,
                                context_length=131072, n_head=32, vocab_size=152064))


@pytest.fixture
def shape_7b(tmp_path: Path) -> GgufModel:
    """7B-class shape: 28 layers, 4 KV heads of 128, trained context 131072."""
    return read_gguf(write_gguf(tmp_path / "7b.gguf", n_layers=28, n_kv_heads=4, head_dim=128,
                                context_length=131072, n_head=28))


@pytest.fixture
def shape_14b(tmp_path: Path) -> HfModel:
    """14B-class shape: 40 layers, 40 KV heads of 128 (max_position_embeddings is not part of the case)."""
    return read_hf(write_hf(tmp_path / "14b", n_layers=40, n_heads=40, n_kv_heads=40, head_dim=128,
                            max_position_embeddings=32768))


# -- Readers ------------------------------------------------------------------------------------------------


def test_read_gguf_reads_shape_and_tensor_sizes(shape_27b: GgufModel):
    m = shape_27b
    assert (m.architecture, m.n_layers, m.n_head, m.n_kv_heads, m.head_dim, m.context_length) == \
        ("llama", 64, 32, 4, 128, 131072)
    assert m.layer_bytes == (96 * 4,) * 64  # 64 + 32 f32 elements per layer
    assert m.token_embd_bytes == 128 * 4
    assert m.output_bytes == (256 + 16) * 4 and not m.tied_output
    assert m.non_layer_bytes == (128 + 256 + 16) * 4
    assert m.weight_bytes == 64 * 96 * 4 + (128 + 256 + 16) * 4
    assert m.output_gpu_bytes == m.output_bytes


def test_read_gguf_tied_output_per_layer_kv_heads_and_derived_head_size(tmp_path: Path):
    m = read_gguf(write_gguf(tmp_path / "t.gguf", n_layers=4, n_kv_heads=0, head_dim=64, context_length=4096,
                             n_head=8, tied=True, kv_per_layer=[2, 8, 2, 8], with_key_length=False))
    assert m.tied_output and m.output_gpu_bytes == (16 + 128) * 4  # output_norm + the token_embd copy
    assert m.n_kv_heads == 8  # per-layer array: sized for the largest layer
    assert m.head_dim == 64  # embedding_length / head_count


def test_read_gguf_sums_the_parts_of_a_split_model(tmp_path: Path):
    w = gguf.GGUFWriter(tmp_path / "m.gguf", "llama", split_max_tensors=3)
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(64)
    w.add_context_length(4096)
    w.add_tensor("token_embd.weight", np.zeros(10, np.float32))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros(20, np.float32))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros(5, np.float32))
    w.add_tensor("output.weight", np.zeros(7, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    first = tmp_path / "m-00001-of-00002.gguf"
    m = read_gguf(first)
    assert m.layer_bytes == (100, 100) and m.token_embd_bytes == 40 and m.output_bytes == 28
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(FileNotFoundError, match="missing parts"):
        read_gguf(first)


def test_read_gguf_errors(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        read_gguf(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="junk.gguf"):
        read_gguf(junk)


def test_read_hf_reads_config_and_safetensors_headers(shape_14b: HfModel):
    m = shape_14b
    assert (m.architecture, m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.max_position_embeddings) == \
        ("LlamaForCausalLM", 40, 40, 40, 128, 32768)
    assert m.torch_dtype == "bfloat16" and m.quantization is None
    # bf16 1024 + f32 1024 halved under --dtype half + f16 1024 + int32 64 as stored
    assert m.weight_bytes == 1024 + 512 + 1024 + 64


def test_safetensors_sizes_and_bad_headers(tmp_path: Path):
    f = write_safetensors(tmp_path / "a.safetensors", {"w": ("F32", [4, 4], 4), "q": ("I32", [8], 4)})
    assert safetensors_sizes(f) == (64 + 32, 32 + 32)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ValueError, match="header length"):
        safetensors_sizes(bad)
    bad.write_bytes(struct.pack("<Q", 4) + b"{{{{")
    with pytest.raises(ValueError, match="not JSON"):
        safetensors_sizes(bad)


def test_read_hf_errors(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        read_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                                                      "hidden_size": 256}))
    with pytest.raises(FileNotFoundError, match="safetensors"):
        read_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    write_safetensors(tmp_path / "m.safetensors", {"w": ("F16", [2], 2)})
    with pytest.raises(ValueError, match="num_hidden_layers"):
        read_hf(tmp_path)


# -- KV cache arithmetic ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers, heads, dim, cache, expected", [
    (64, 4, 128, "q8_0", 2 * 64 * 4 * 128 * 34 // 32),  # 69632
    (64, 4, 128, "f16", 2 * 64 * 4 * 128 * 2),  # 131072
    (28, 4, 128, "f16", 2 * 28 * 4 * 128 * 2),  # 57344
    (28, 4, 128, "q4_0", 2 * 28 * 4 * 128 * 18 // 32),  # 16128
    (32, 8, 128, "f32", 2 * 32 * 8 * 128 * 4),
    (32, 8, 128, "bf16", 2 * 32 * 8 * 128 * 2),
    (32, 8, 128, "q4_1", 2 * 32 * 8 * 128 * 20 // 32),
    (32, 8, 128, "q5_0", 2 * 32 * 8 * 128 * 22 // 32),
    (32, 8, 128, "q5_1", 2 * 32 * 8 * 128 * 24 // 32),
    (32, 8, 128, "iq4_nl", 2 * 32 * 8 * 128 * 18 // 32),
    (40, 40, 128, "auto", 2 * 40 * 40 * 128 * 2),  # 819200: vLLM fp16
    (40, 40, 128, "fp8", 2 * 40 * 40 * 128),
    (40, 40, 128, "fp8_e5m2", 2 * 40 * 40 * 128),
    (40, 40, 128, "fp8_e4m3", 2 * 40 * 40 * 128),
])
def test_kv_bytes_per_token_matches_hand_arithmetic(layers, heads, dim, cache, expected):
    assert kv_bytes_per_token(layers, heads, dim, cache) == expected


def test_kv_bytes_per_token_refuses_unknown_types_and_partial_blocks():
    with pytest.raises(ValueError, match="unknown KV cache type"):
        kv_bytes_per_token(32, 8, 128, "q3_k")
    with pytest.raises(ValueError, match="divisible by 32"):
        kv_bytes_per_token(32, 1, 80, "q8_0")  # a row of 80 elements is not whole q8_0 blocks
    assert kv_bytes_per_token(32, 1, 80, "f16") == 2 * 32 * 80 * 2


# -- llama.cpp cases: stated quant sizes put on real shapes, on a 16 GB V100 (docs/volta.md §6) ------------


def _plan_27b(model: GgufModel, weight_bytes: float, context: int = 8192) -> Plan:
    return plan_llama_cpp(model.with_layer_weights(weight_bytes), V100_16GB_MIB, 1, context, "q8_0", "q8_0", 1,
                          USABLE)


# Issue 12 moved these boundaries: the CUDA context (~600 MiB measured outside llama-server's buffers) and the
# growth after the first request (64-128 MiB measured) leave a 16 GB V100 about 15.08 GB for the weights of this
# shape at 8192 tokens of q8_0 KV, so a 15.2 GB Q4_K_S no longer fits and the "fits" case is a 14.9 GB quant.
FITS_27B = 14.9 * GB


def test_27b_q4_k_s_fits_on_16gb(shape_27b: GgufModel):
    p = _plan_27b(shape_27b, FITS_27B)
    assert p.outcome == "fits" and p.fits and p.layers_offloaded == 0
    assert p.weight_bytes == int(FITS_27B)
    assert p.kv_bytes == 8192 * 69632  # 544 MiB of q8_0
    assert p.total_bytes == p.weight_bytes + p.kv_bytes + p.compute_buffer_bytes + p.cuda_context_bytes
    assert p.total_bytes <= p.budget_bytes == V100_16GB_MIB * MiB
    assert p.max_context_that_fits >= 8192
    assert 0 < p.decode_ceiling_tps < 900e9 / FITS_27B


def test_27b_q4_k_m_is_refused_naming_context_and_quant_size(shape_27b: GgufModel):
    p = _plan_27b(shape_27b, 16.3 * GB)
    assert p.outcome == "does_not_fit" and not p.fits
    assert p.total_bytes > p.budget_bytes
    text = "\n".join(p.reasons)
    # The weights alone fit, but not with the KV cache and buffers: no context at all is left.
    assert p.weight_bytes < p.budget_bytes and p.max_context_that_fits == 0
    assert "no context fits" in text
    # The largest quant that fits at 8192 lies between the two sizes, and is named in GB.
    assert FITS_27B <= p.max_weight_bytes < 16.3 * GB
    assert f"{p.max_weight_bytes / GB:.2f} GB" in text and "8192 tokens" in text
    # The figure is consistent with the planner itself: that size fits, a little more does not.
    assert _plan_27b(shape_27b, p.max_weight_bytes).fits
    assert not _plan_27b(shape_27b, p.max_weight_bytes + 64 * 64 * MiB).fits


def test_27b_q8_0_would_offload_naming_layers(shape_27b: GgufModel):
    p = _plan_27b(shape_27b, 27 * GB)
    assert p.outcome == "offload" and not p.fits
    assert p.weight_bytes > p.budget_bytes  # the weights alone do not fit
    assert 0 < p.layers_offloaded < 64
    on_gpu = 64 - p.layers_offloaded
    layer = 27 * GB / 64 + 8192 * 69632 / 64  # weights + KV of one layer
    room = p.budget_bytes - p.compute_buffer_bytes - p.cuda_context_bytes
    # with a layer left on the CPU the compute buffer also holds that layer's weights copied in (llama.cpp's
    # scheduler; roles/planner/llama_cpp.py), up to one layer more than the all-GPU plan's buffer
    assert on_gpu * layer <= room < (on_gpu + 2) * layer
    text = "\n".join(p.reasons)
    assert f"{p.layers_offloaded} of 64 layers would not fit" in text and f"-ngl {on_gpu}" in text
    assert p.decode_ceiling_tps < 10  # CPU layers at host memory bandwidth: single digits


def test_largest_context_is_consistent_with_the_plan(shape_27b: GgufModel):
    fits = _plan_27b(shape_27b, 15.2 * GB)
    best = fits.max_context_that_fits
    assert _plan_27b(shape_27b, 15.2 * GB, best).fits
    assert not _plan_27b(shape_27b, 15.2 * GB, best + 256).fits


def test_7b_q4_k_m_fits_and_reports_largest_context(shape_7b: GgufModel):
    model = shape_7b.with_layer_weights(4.68 * GB)
    for context in (8192, 131072):
        p = plan_llama_cpp(model, V100_16GB_MIB, 1, context, "f16", "f16", 1, USABLE)
        assert p.fits, p.reasons
        assert p.kv_bytes == context * 57344
        assert p.max_context_that_fits == 131072  # VRAM allows more; capped at the trained context
        assert any("largest context" in r and "131072" in r for r in p.reasons)


def test_parallel_slots_multiply_the_kv_cache(shape_7b: GgufModel):
    model = shape_7b.with_layer_weights(4.68 * GB)
    one = plan_llama_cpp(model, V100_16GB_MIB, 1, 8192, "f16", "f16", 1, USABLE)
    four = plan_llama_cpp(model, V100_16GB_MIB, 1, 8192, "f16", "f16", 4, USABLE)
    assert four.kv_bytes == 4 * one.kv_bytes
    assert four.max_context_that_fits < one.max_context_that_fits


def test_llama_cpp_refuses_bad_arguments(shape_7b: GgufModel):
    model = shape_7b.with_layer_weights(4.68 * GB)
    with pytest.raises(ValueError, match="usable_fraction"):
        plan_llama_cpp(model, V100_16GB_MIB, 1, 8192, "f16", "f16", 1, 1.5)
    with pytest.raises(ValueError, match="context"):
        plan_llama_cpp(model, V100_16GB_MIB, 1, 0, "f16", "f16", 1, USABLE)
    with pytest.raises(ValueError, match="unknown KV cache type"):
        plan_llama_cpp(model, V100_16GB_MIB, 1, 8192, "f8", "f16", 1, USABLE)


# -- vLLM cases: a 14B-class fp16 model on 32 GB V100s, sized as vLLM sizes its KV cache --------------------


def _14b(shape: HfModel) -> HfModel:
    return replace(shape, weight_bytes=int(28 * GB))  # 28 GB of fp16 weights


def test_14b_fp16_on_one_32gb_is_refused_suggesting_tp2_or_gptq(shape_14b: HfModel):
    p = plan_vllm(_14b(shape_14b), V100_32GB_MIB, 1, 1, 8192, 0.9, "auto", 256)
    assert p.outcome == "does_not_fit"
    assert p.kv_bytes == 8192 * 819200  # one 8192-token sequence: 6400 MiB
    text = "\n".join(p.reasons)
    # vLLM's arithmetic: 0.9 x 32510 MiB - 26703 MiB of weights - 2558 MiB of activation peak (8192 profiled tokens;
    # this config states no intermediate_size, so the MLP is planned 6 x hidden wide) and non-torch memory leaves
    # nothing: "No available memory for the cache blocks". A shorter max_model_len profiles fewer tokens and fits,
    # less the profile run's sampler (no release given: counted, 8 fp32 copies of 256 x 152064 logits = 1188 MiB).
    assert "No available memory for the cache blocks" in text
    assert p.max_context_that_fits == 576
    assert "tensor_parallel_size 2" in text and "GPTQ" in text


def test_14b_fp16_with_no_room_left_says_no_available_memory(shape_14b: HfModel):
    p = plan_vllm(_14b(shape_14b), V100_32GB_MIB, 1, 1, 8192, 0.85, "auto", 256)
    assert p.outcome == "does_not_fit" and p.max_context_that_fits == 0
    text = "\n".join(p.reasons)
    assert "No available memory for the cache blocks" in text
    assert "tensor_parallel_size 2" in text and "GPTQ" in text


def test_14b_fp16_fits_with_tensor_parallel_2(shape_14b: HfModel):
    p = plan_vllm(_14b(shape_14b), V100_32GB_MIB, 2, 2, 8192, 0.9, "auto", 256)
    assert p.fits, p.reasons
    assert p.weight_bytes == int(14 * GB) and p.kv_bytes == 8192 * 819200 // 2
    assert p.total_bytes <= p.budget_bytes == int(V100_32GB_MIB * MiB * 0.9)
    assert p.max_context_that_fits >= 8192


def test_vllm_structural_refusals(shape_14b: HfModel):
    model = _14b(shape_14b)
    p = plan_vllm(model, V100_32GB_MIB, 1, 2, 8192, 0.9)
    assert not p.fits and any("needs 2 GPUs" in r for r in p.reasons)
    p = plan_vllm(model, V100_32GB_MIB, 3, 3, 8192, 0.9)
    assert not p.fits and any("divisible by tensor parallel size (3)" in r for r in p.reasons)
    p = plan_vllm(model, V100_32GB_MIB, 2, 2, 65536, 0.9)
    assert not p.fits and any("max_position_embeddings" in r for r in p.reasons)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        plan_vllm(model, V100_32GB_MIB, 2, 2, 8192, 1.5)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        plan_vllm(model, V100_32GB_MIB, 2, 2, 8192, 0.9, "int8")


def test_a_config_with_zero_attention_heads_is_a_value_error_naming_the_key_not_a_zero_division():
    """The roles turn hf_model_from_config's ValueError into a problem line naming the model setting; a
    ZeroDivisionError was a traceback out of `v100kit plan` and the deploy."""
    import pytest
    from roles.planner.models import hf_model_from_config
    with pytest.raises(ValueError, match="num_attention_heads is 0"):
        hf_model_from_config({"num_hidden_layers": 2, "num_attention_heads": 0, "hidden_size": 64}, 1, "m/config.json")


def test_vllm_sampler_path_sets_the_logits_copies_and_an_unknown_path_is_refused(shape_14b: HfModel):
    """The profile peak's sampler term is max_num_seqs x vocab x 4 bytes per fp32 copy: 6 on the Triton top-k/top-p
    path (0.17.1, 0.19.1), 10 where a V1 release sorts (0.10.2), 8 for V0 or a release not read (V0's
    calibration); a path the planner does not know is an error."""
    from roles.planner.vllm import VLLM_FALLBACK_VOCAB, vllm_sampler_bytes

    copy = 64 * (shape_14b.vocab_size or VLLM_FALLBACK_VOCAB) * 4  # this shape states no vocabulary
    assert vllm_sampler_bytes(shape_14b, 2048, 64, True, "triton") == 6 * copy
    assert vllm_sampler_bytes(shape_14b, 2048, 64, True, "sort") == 10 * copy
    assert vllm_sampler_bytes(shape_14b, 2048, 64) == 8 * copy
    args = (shape_14b, V100_32GB_MIB, 1, 1, 4096, 0.9, "auto", 64)
    sort = plan_vllm(*args, engine="V1", vllm_version="0.10.2", v1_profile_tokens=2048, sampler_path="sort")
    triton = plan_vllm(*args, engine="V1", vllm_version="0.19.1", v1_profile_tokens=2048, sampler_path="triton")
    assert sort.compute_buffer_bytes - triton.compute_buffer_bytes == 4 * copy
    with pytest.raises(ValueError, match="unknown vLLM sampler_path 'sorted'; known: sort, triton"):
        plan_vllm(*args, engine="V1", sampler_path="sorted")


def test_vllm_profiled_tokens_follow_the_users_max_num_batched_tokens():
    """vLLM's profile run covers max_num_batched_tokens (V1: gpu_model_runner's max_num_tokens; V0: the
    scheduler's budget), so a user's --max-num-batched-tokens replaces the release's default: V1 8192 on a V100
    where the release would profile 2048; V0 with chunked prefill its value instead of 2048; V0 without chunked
    prefill at least max_model_len (vLLM requires it). --no-enable-chunked-prefill above 32k profiles the whole
    max_model_len, not the 2048 of vllm serve's default there."""
    from roles.planner.vllm import vllm_profiled_tokens

    assert vllm_profiled_tokens(4096, "V1", None, 2048) == 2048
    assert vllm_profiled_tokens(4096, "V1", None, 2048, 8192) == 8192
    assert vllm_profiled_tokens(65536, "V0", True, None, 4096) == 4096
    # V0's chunked default: 512 before 0.6.5, 2048 from it (vllm#10544; 0.8.5.post1 vllm/config.py 1967-1978,
    # tests/data/vllm_source), and 2048 where the version is not known
    assert vllm_profiled_tokens(65536, "V0") == 2048
    assert vllm_profiled_tokens(65536, "V0", vllm_version="0.6.4.post1") == 512
    assert vllm_profiled_tokens(65536, "V0", vllm_version="0.6.5") == 2048
    assert vllm_profiled_tokens(65536, "V0", vllm_version="0.8.5.post1") == 2048
    # 0.19.1 honours --no-enable-chunked-prefill: the default batch is max(max_model_len, 2048)
    assert vllm_profiled_tokens(65536, "V1", False, 2048) == 65536
    assert vllm_profiled_tokens(1024, "V1", False, 2048) == 2048
    assert vllm_profiled_tokens(65536, "V0", False) == 65536
    assert vllm_profiled_tokens(4096, "V0", False, None, 16384) == 16384
