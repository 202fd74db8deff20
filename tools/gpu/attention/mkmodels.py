"""Write 4-layer llama GGUF models with random F16 weights (approach of lab/models.py write_tiny_llama)."""
import sys
from pathlib import Path
import gguf
import numpy as np

SHAPES = {64: (2048, 32, 8), 128: (2560, 20, 4), 256: (4096, 16, 4)}
N_LAYER, N_CTX = 4, 8192


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    words = ["▁the", "▁a", "▁of", "▁and", "▁to", "▁is", "▁in", "▁it", "▁V", "100", "▁GPU", "▁token", "▁hello",
             "▁world", "s", "e", "t", "a", "o", "n", "▁"]
    tokens += words
    types += [1] * len(words)
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    return tokens, scores, types


def write(path, head):
    n_embd, n_head, n_head_kv = SHAPES[head]
    n_ff = 2 * n_embd
    rng = np.random.default_rng(head)
    tokens, scores, types = vocabulary()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"v100kit-fa-probe-h{head}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(n_embd)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16))

    t("token_embd.weight", len(tokens), n_embd)
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        t(f"blk.{i}.attn_q.weight", n_head * head, n_embd)
        t(f"blk.{i}.attn_k.weight", n_head_kv * head, n_embd)
        t(f"blk.{i}.attn_v.weight", n_head_kv * head, n_embd)
        t(f"blk.{i}.attn_output.weight", n_embd, n_head * head)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    t("output.weight", len(tokens), n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    out, head = Path(sys.argv[1]), int(sys.argv[2])
    tmp = out.with_suffix(".tmp")
    write(tmp, head)
    tmp.rename(out)
