"""A tiny llama-architecture GGUF model with random weights, for serving tests (no hub download is possible).

2 layers, n_embd 64, 4 heads (2 KV heads of size 16), a SentencePiece-style vocabulary with the 256 `<0xNN>` byte
tokens so any text tokenizes. llama-server loads it and generates (meaningless) tokens.
"""

from __future__ import annotations

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
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("v100kit-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def t(name: str, *shape: int) -> None:  # numpy shape is ggml's ne reversed
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    t("token_embd.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, np.float32))
        t(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, np.float32))
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    t("output.weight", n_vocab, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
