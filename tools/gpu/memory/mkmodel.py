"""Write an 8B- or 1B-shaped llama (F16) or a 1.5B-shaped qwen2 with tied embeddings (F16) GGUF, streamed tensor by tensor.
usage: mkmodel.py 8b|1b|1.5b OUT.gguf"""
import sys, time
from pathlib import Path
import numpy as np
import gguf

SHAPES = {
    "8b": dict(arch="llama", n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_kv=8, vocab=128256, ctx=131072,
               tied=False, bias=False, rope_base=500000.0),
    # Llama-3.2-1B's shape: head size 64 (2048 / 32), tied embeddings (issue 26's model of head size 64)
    "1b": dict(arch="llama", n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_kv=8, vocab=128256, ctx=131072,
               tied=True, bias=False, rope_base=500000.0),
    "1.5b": dict(arch="qwen2", n_layer=28, n_embd=1536, n_ff=8960, n_head=12, n_kv=2, vocab=151936, ctx=32768,
                 tied=True, bias=True, rope_base=1000000.0),
}
rng = np.random.default_rng(0)
POOL = (rng.standard_normal(1 << 25, dtype=np.float32) * 0.02).astype(np.float16)  # 64 MiB of f16


def rand(shape):
    n = int(np.prod(shape))
    off = int(rng.integers(0, POOL.size))
    reps = -(-(n + off) // POOL.size)
    a = np.tile(POOL, reps)[off:off + n] if reps > 1 else POOL[off:off + n]
    return np.ascontiguousarray(a).reshape(shape)


def vocab(n):
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    k = n - len(toks)
    toks += [f"\u2581w{i}" for i in range(k)]
    types += [1] * k
    scores = [0.0] * 259 + [-float(i) for i in range(k)]
    return toks, scores, types


def main(kind, out):
    s = SHAPES[kind]
    e, hd = s["n_embd"], s["n_embd"] // s["n_head"]
    w = gguf.GGUFWriter(str(out), s["arch"])
    w.add_name(f"v100kit-mem-{kind}")
    w.add_context_length(s["ctx"]); w.add_embedding_length(e); w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"]); w.add_head_count(s["n_head"]); w.add_head_count_kv(s["n_kv"])
    w.add_rope_dimension_count(hd); w.add_rope_freq_base(s["rope_base"]); w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    toks, scores, types = vocab(s["vocab"])
    w.add_tokenizer_model("llama"); w.add_token_list(toks); w.add_token_scores(scores); w.add_token_types(types)
    w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
    plan = []  # (name, shape, dtype)
    f16, f32 = np.float16, np.float32
    plan.append(("token_embd.weight", (s["vocab"], e), f16))
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        plan += [(p + "attn_norm.weight", (e,), f32), (p + "attn_q.weight", (e, e), f16),
                 (p + "attn_k.weight", (s["n_kv"] * hd, e), f16), (p + "attn_v.weight", (s["n_kv"] * hd, e), f16)]
        if s["bias"]:
            plan += [(p + "attn_q.bias", (e,), f32), (p + "attn_k.bias", (s["n_kv"] * hd,), f32),
                     (p + "attn_v.bias", (s["n_kv"] * hd,), f32)]
        plan += [(p + "attn_output.weight", (e, e), f16), (p + "ffn_norm.weight", (e,), f32),
                 (p + "ffn_gate.weight", (s["n_ff"], e), f16), (p + "ffn_up.weight", (s["n_ff"], e), f16),
                 (p + "ffn_down.weight", (e, s["n_ff"]), f16)]
    plan.append(("output_norm.weight", (e,), f32))
    if not s["tied"]:
        plan.append(("output.weight", (s["vocab"], e), f16))
    for name, shape, dt in plan:
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file()
    for name, shape, dt in plan:
        if dt is f32:
            t = np.ones(shape, f32) if "norm" in name else np.zeros(shape, f32)
        else:
            t = rand(shape)
        w.write_tensor_data(t)
    w.close()


if __name__ == "__main__":
    t0 = time.time()
    kind, out = sys.argv[1], Path(sys.argv[2])
    tmp = out.with_suffix(".tmp")
    main(kind, tmp)
    tmp.rename(out)
    print(f"{kind}: {out.stat().st_size} bytes in {time.time() - t0:.1f}s")
