"""A tiny llama-architecture GGUF model with random weights, for serving tests (no hub download is possible).

2 layers, n_embd 64, 4 heads (2 KV heads of size 16), a SentencePiece-style vocabulary with the 256 `<0xNN>` byte
tokens so any text tokenizes. llama-server loads it and generates (meaningless) tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

N_EMBD, N_HEAD, N_HEAD_KV, N_LAYER, N_FF, N_CTX = 64, 4, 2, 2, 128, 8192
HEAD_DIM = N_EMBD // N_HEAD


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types (1 normal, 2 unknown, 3 control, 6 byte)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    words = ["▁the", "▁a", "▁of", "▁and", "▁to", "▁is", "▁in", "▁it", "▁V", "100", "▁GPU", "▁token", "▁hello",
             "▁world", "s", "e", "t", "a", "o", "n", "▁"]
    tokens += words
    types += [1] * len(words)
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    return tokens, scores, types


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    """Write the tiny model to `path` (bytes: about 0.2 MB) and return it. Deterministic for a given seed."""
    return write_llama(path, seed=seed)


def write_llama(path: Path, seed: int = 0, n_embd: int = N_EMBD, n_head: int = N_HEAD, n_head_kv: int = N_HEAD_KV,
                n_layer: int = N_LAYER, n_ff: int = N_FF, n_ctx: int = N_CTX, architecture: str = "llama",
                zero_weights: bool = False, header_only: bool = False, split_max_tensors: int = 0) -> Path:
    """A llama-shaped GGUF with random F32 weights: head size n_embd / n_head, `n_ctx` trained context tokens,
    `architecture` as general.architecture (tests give names a llama.cpp tree may not know). `zero_weights`: zeros
    instead (fast for large shapes that only the planner reads). `header_only`: F16 tensors whose data is a hole of
    a sparse file (the real size, no disk: a many-GB model for the planner and for range reads). `split_max_tensors`:
    written as a split GGUF by gguf-py's own writer, at most that many tensors a part, as PREFIX-0000K-of-0000N.gguf
    beside `path` (with gguf-split's split.* keys); `path` itself is then not written. Returns `path`."""
    N_EMBD, N_HEAD, N_HEAD_KV, N_LAYER, N_FF, N_CTX = n_embd, n_head, n_head_kv, n_layer, n_ff, n_ctx  # noqa: N806
    HEAD_DIM = N_EMBD // N_HEAD  # noqa: N806
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), architecture, split_max_tensors=split_max_tensors)
    w.add_name("v100kit-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if header_only else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def t(name: str, *shape: int) -> None:  # numpy shape is ggml's ne reversed
        if header_only:
            w.add_tensor_info(name, shape, np.dtype(np.float16), int(np.prod(shape)) * 2)
            sizes.append(int(np.prod(shape)) * 2)
            return
        w.add_tensor(name, np.zeros(shape, np.float32) if zero_weights
                     else (rng.standard_normal(shape) * 0.02).astype(np.float32))

    sizes: list[int] = []

    def norm(name: str) -> None:
        if header_only:
            w.add_tensor_info(name, (N_EMBD,), np.dtype(np.float32), N_EMBD * 4)
            sizes.append(N_EMBD * 4)
            return
        w.add_tensor(name, np.ones(N_EMBD, np.float32))

    t("token_embd.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        norm(f"blk.{i}.attn_norm.weight")
        t(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD)
        norm(f"blk.{i}.ffn_norm.weight")
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    norm("output_norm.weight")
    t("output.weight", n_vocab, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    if not header_only:
        w.write_tensors_to_file()
        w.close()
        return path
    w.write_ti_data_to_file()
    w.close()
    align = 32  # GGUF's default general.alignment
    up = lambda n: -(-n // align) * align  # noqa: E731
    with open(path, "r+b") as f:
        f.truncate(up(path.stat().st_size) + sum(up(n) for n in sizes))
    return path


#: The tiny Hugging Face (safetensors) llama the vLLM lab instance serves: the GGUF one's width, layers and KV bytes
#: per token, but 2 heads of 32 (1 KV head): vLLM's attention backends on Volta take no head size below 32
#: (PagedAttention.get_supported_head_sizes, TritonAttentionBackend; roles/vllm/versions.py head_sizes).
HF_HEAD_DIM = 32
HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": N_EMBD, "intermediate_size": N_FF,
    "num_hidden_layers": N_LAYER, "num_attention_heads": N_EMBD // HF_HEAD_DIM,
    "num_key_value_heads": N_HEAD_KV * HEAD_DIM // HF_HEAD_DIM, "head_dim": HF_HEAD_DIM, "max_position_embeddings": N_CTX, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "vocab_size": 280, "tie_word_embeddings": False, "torch_dtype": "float16", "bos_token_id": 1,
    "eos_token_id": 2,
}

#: What the tiny llama above changes to be served by LMDeploy's TurboMind: one head of 64, TurboMind's smallest
#: attention kernel on compute capability 7.0 (roles/lmdeploy/decide.py TURBOMIND_SM70_HEAD_DIMS); it has none of 32.
TURBOMIND_CONFIG = {"num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64}


def write_tiny_hf(directory: Path, seed: int = 0, config: dict | None = None) -> Path:
    """Write config.json and model.safetensors (random float16 weights, llama tensor names) into `directory`.
    `config` overrides keys of HF_CONFIG (tests add quantization_config, attn_logit_softcapping, ...)."""
    from safetensors.numpy import save_file

    c = {**HF_CONFIG, **(config or {})}
    rng = np.random.default_rng(seed)
    e, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * c.get("head_dim", e // c["num_attention_heads"])

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    tensors = {"model.embed_tokens.weight": w(v, e), "model.norm.weight": np.ones(e, np.float16),
               "lm_head.weight": w(v, e)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": w(e, e), p + "self_attn.k_proj.weight": w(kv, e),
            p + "self_attn.v_proj.weight": w(kv, e), p + "self_attn.o_proj.weight": w(e, e),
            p + "mlp.gate_proj.weight": w(f, e), p + "mlp.up_proj.weight": w(f, e), p + "mlp.down_proj.weight": w(e, f),
            p + "input_layernorm.weight": np.ones(e, np.float16),
            p + "post_attention_layernorm.weight": np.ones(e, np.float16)})
    directory.mkdir(parents=True, exist_ok=True)
    # a word-level tokenizer over the GGUF model's vocabulary (tokenizers' JSON format), so that transformers and
    # vLLM can load the directory as a whole
    tokens, _, _ = vocabulary()
    vocab = {t.replace("▁", ""): i for i, t in enumerate(tokens) if t.replace("▁", "")}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None,
                 "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                                   "normalized": False, "special": True} for i, t in enumerate(tokens[:3])],
                 "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                 "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
         "unk_token": "<unk>", "model_max_length": c["max_position_embeddings"]}))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    return directory
