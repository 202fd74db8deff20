"""vLLM arithmetic: the KV cache vLLM would size at start-up, its refusals, and what would fit instead.

Per GPU after tensor parallel: KV space = VRAM x gpu_memory_utilization - weights / TP - activation peak -
non-torch memory, in whole blocks of 16 tokens. The activation peak is that of the rank with the smallest KV cache,
the one that samples (V0's driver; every V1 rank): forward pass plus the sampler's logits. Bytes unless a name says
otherwise; lengths in tokens. Each constant is calibrated on tests/data/vllm_startup_corpus.json
(tools/vllm_corpus_table.py prints the per-case error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from . import messages
from .kv import VLLM_KV_CACHE_DTYPES, kv_bytes_per_token
from .models import HfModel
from .units import (
    GiB,
    MiB,
    VLLM_CUDA_CONTEXT_BYTES,
    Outcome,
    Plan,
    _check_positive,
    _decode_tps,
    _largest,
    _pad,
)

#: vLLM's paged KV cache block, in tokens (default --block-size on CUDA). (H)
VLLM_BLOCK_SIZE = 16
#: vLLM's "PyTorch activation peak memory" comes from a profile run over max_num_batched_tokens tokens. Per profiled
#: token it holds about (A x hidden + B x intermediate / TP) fp16 elements (residual stream, gate/up projections and
#: their product). Fitted to the logs in tests/data/vllm_startup_corpus.json (vllm#10517: 2.07 GiB at 20000 and
#: 2.99 GiB at 29000 tokens for Llama-3.1-8B; vllm#11251: 2.53 GiB at 40000 tokens at TP 2; vllm#6746: the 405B at
#: TP 8) and kept on the high side of every one, so the planner never predicts more KV cache than vLLM finds. (M)
VLLM_ACT_HIDDEN_ELEMS = 1.0
VLLM_ACT_MLP_ELEMS = 4.0
#: The sampler's share of that peak, in fp32 copies of the logits (max_num_seqs x vocab x 4 bytes, the full
#: vocabulary: not split by TP). From 0.7 vLLM's profile run samples every dummy sequence with top-k and top-p
#: (sorting, softmax, log-softmax, index tensors), so the peak holds several such copies on the rank that samples:
#: V0's driver (rank 0, which gathers the logits; the other ranks hold none) and every V1 rank. V0 sizes the KV cache
#: by the smallest block count over its ranks, the driver's, so the sampler counts in the per-GPU figure. Calibrated
#: on the logs (each needs at least): vllm#13882 (0.7, TP 1, Qwen2.5-7B, 4096 tokens) logs 1.42 GiB where the forward
#: term gives 0.61: 5.6 copies; vllm#13061 (0.7, TP 2) logged 0.19 GiB on the quoted non-driver worker and 5096
#: blocks in all, 1.2 GiB less KV than that worker's 8.69 GiB: 6.8 copies on the driver; vllm#15039 (0.8, TP 4)
#: logs 1.30 GiB on rank 0 against 0.73 on another rank, and its KV needs 7.4. Eight covers all three. vLLM before
#: 0.7 shows no such peak (vllm#10517, 0.6.4: 0.06 GiB at 512 profiled tokens, one fp16 logits tensor), so releases
#: older than VLLM_SAMPLER_PROFILED_SINCE count none. (M)
VLLM_SAMPLER_FP32_COPIES = 8
VLLM_SAMPLER_PROFILED_SINCE = (0, 7)
#: The same peak where the release's V1 sampler filters top-k/top-p with its Triton kernel (`vllm serve`'s profile
#: samples max_num_seqs >= 8 rows, so apply_top_k_top_p takes it: vllm/v1/sample/ops/topk_topp_sampler.py, read in
#: 0.17.1 and 0.19.1; 0.10.2 sorts instead). Counted in that code, alive at once in random_sample: the model-dtype
#: logits of _dummy_sampler_run (0.5), their float32 copy (Sampler.forward: 1; temperature and the Triton filter
#: work in place), the kernel's cached buffer (topk_topp_triton.py: min(next_power_of_2(min(SMs, rows)), SMs) rows,
#: up to 1.94 copies for 9-10, 17-21 or 33-42 rows on a V100's 80 SMs, 0.31 at 256), softmax's probs (1) and
#: random_sample's q (1): at most 5.44, kept at 6. vLLM 0.17.1's logs in the corpus (TheBuccaneer/
#: vllm-offload-profiles, Llama-3.1-8B and Qwen2.5-7B on an RTX 3090) left 0.55-0.65 GiB for the whole profile
#: peak and non-torch memory, within the planner's 1.37-1.57 GiB with it. (M)
VLLM_V1_TRITON_SAMPLER_FP32_COPIES = 6
#: Where a V1 release sorts (0.10.2's apply_top_k_top_p), counted in its code: the model-dtype logits (0.5), fp32
#: logits (1), logits_sort (1) and its int64 logits_idx (2), two bool masks (0.5), probs_sort (1) and the
#: scatter's new tensor (1): 7.0; while torch sorts, PyTorch's segmented sort adds int64 indices (2) and CUB's
#: pair sort a third key/value buffer (1 + 2), which 9.5 covers (read, not measured): kept at 10. No V1 log of a
#: sorting release is in the corpus. (M)
VLLM_V1_SORT_SAMPLER_FP32_COPIES = 10
#: Sampler paths the planner knows (the release's, VllmRelease.sampler_path): "sort" and "triton"; None (V0, or a
#: release not read) counts VLLM_SAMPLER_FP32_COPIES, calibrated on V0's logs.
VLLM_SAMPLER_PATHS = {"sort": VLLM_V1_SORT_SAMPLER_FP32_COPIES, "triton": VLLM_V1_TRITON_SAMPLER_FP32_COPIES}
#: A floor under the profile peak (cuBLAS workspaces, small-batch buffers): logs show >= 1.2 GiB at 8192 tokens
#: for 8B models and 0.06-1.3 GiB with chunked prefill. (M)
VLLM_ACTIVATION_FLOOR_BYTES = GiB // 4
#: Kept for callers: the old flat reference peak and its profiled tokens.
VLLM_ACTIVATION_PEAK_BYTES = 3 * GiB // 2
VLLM_ACTIVATION_REF_TOKENS = 8192
#: V0 turns chunked prefill on above a 32k max_model_len when served by `vllm serve` (usage context
#: OPENAI_API_SERVER; the LLM class does not) and then profiles max_num_batched_tokens = 512 before 0.6.5
#: (SchedulerConfig's V0 chunked default, "best balance between ITL and TTFT on A100"; vllm#10517 logs a 0.06 GiB
#: peak at 35k on 0.6.4), 2048 from it (VLLM_V0_CHUNKED_BATCHED_TOKENS_SINCE). V1 always
#: chunks, at 8192 batched tokens for `vllm serve` (not calibrated: no V1 log in the corpus). (M)
VLLM_CHUNKED_PREFILL_ABOVE = 32768
VLLM_MIN_BATCHED_TOKENS = 2048
VLLM_V0_CHUNKED_BATCHED_TOKENS = 512
#: From vLLM 0.6.5 (PR #10544, "Update default max_num_batch_tokens for chunked prefill to 2048", merged
#: 2024-11-21) chunked prefill batches 2048 tokens by default: vllm/config.py SchedulerConfig.__post_init__ of
#: 0.8.5.post1 sets `_DEFAULT_MAX_NUM_BATCHED_TOKENS` (2048, line 68) when chunked and unset (lines 1967-1978). (H)
VLLM_V0_CHUNKED_BATCHED_TOKENS_SINCE = ((0, 6, 5), 2048)
VLLM_V1_BATCHED_TOKENS = 8192
#: Fallback vocabulary when the config states none: Qwen2's 152064, the largest common one (conservative).
VLLM_FALLBACK_VOCAB = 152064
#: vLLM's "non_torch_memory" (memory outside torch's allocator that appears during loading and profiling: cuBLAS
#: workspaces, allocator slack): 0.03-0.35 GiB in single-GPU logs (vllm#10517, #13882, #15039). (M)
VLLM_NON_TORCH_BYTES = 2 * GiB // 5
#: Extra non-torch memory per GPU under tensor parallel (NCCL buffers, custom all-reduce): 0.39 GiB in all at TP 2
#: (vllm#11251), 0.25 at TP 2 (#13061), 0.28 at TP 4 (#15039); 0.59-0.73 in older reports. (M)
VLLM_TP_COMM_BYTES = GiB // 4
#: CUDA graphs are captured after the KV cache is sized, outside the gpu_memory_utilization share, in every release
#: the toolkit runs (read in the PyPI sdists): 0.8.5.post1 V0 sizes the KV cache as total x utilization - the
#: profiled peak (vllm/worker/worker.py:253-256) and captures afterwards (worker.py:358, model_runner.py:1592 logs
#: "Graph capturing finished in N secs, took X GiB"); 0.10.2 V1 likewise (vllm/v1/worker/gpu_worker.py:279 sizes,
#: :344 captures); 0.19.1 profiles the graphs but subtracts them only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1
#: (gpu_worker.py:381-398; off by default, vllm/envs.py:1654; on by default from 0.21, as its own log line says).
#: So the share left outside must hold the CUDA context and the graphs: per GPU, the layers it holds (after pipeline
#: parallel) x the graphs it captures x the bytes one layer adds to one graph. The graphs are the release's capture
#: list (vllm_cuda_graph_sizes, each rule read from that release's code), once per pipeline stage in V0.
#: - one GPU: vllm#11349 (V0, Llama-3.2-1B, 16 layers, the 35 sizes of max_num_seqs 256) logged "Graph capturing
#:   finished in 14 secs, took 0.21 GiB": 0.38 MiB a layer and graph. V1 piecewise graphs of Llama-3.1-8B (32
#:   layers, vllm#23184, one line per size): 6-8 MiB per size up to 272, 24-28 MiB from 280 (0.2-0.9 MiB a layer
#:   and graph; about 0.48 over 0.10.2's 67 sizes). Kept at 0.5 MiB. LMCache#3430 (0.21, Qwen3-8B, 36 layers,
#:   FULL_AND_PIECEWISE: 86 graphs at 256) logged an estimate of 0.52 GiB and then ran out of memory capturing:
#:   a floor only (0.17 MiB).
#: - tensor parallel (custom all-reduce buffers registered per graph): vllm#7553 (0.5.4, Yi-34B, 60 layers, TP 4,
#:   35 graphs, 24564 MiB at 0.90) ran at 23859 MiB on nvidia-smi, 1752 MiB above its 22107 MiB share: with the
#:   400 MiB context, 1352 MiB of graphs, 0.64 MiB a layer and graph. Kept at 0.75: vllm#11251 (Llama-3.1-8B, 32
#:   layers, TP 2, 16 GB, 35 graphs) ran out of memory capturing with 0.79 GiB outside (the estimate must exceed
#:   409 MiB of graphs: 840), and issue 27's field report (a 7B fp16 model, 32 layers, 2 x V100-16GB, TP 2, 0.92,
#:   CUDA graphs, a month at 14.8 GB per card; vLLM's default max_num_seqs 256: 35 graphs) ran with 1293 MiB
#:   outside (graphs at most 893 MiB: 840). Linear in the graphs at every TP: no log shows TP 2 with few graphs,
#:   so a TP plan at a small max_num_seqs is an extrapolation from these 35-graph ones.
#: enforce_eager captures none. (M)
VLLM_GRAPH_BYTES_PER_LAYER_GRAPH = MiB // 2
VLLM_GRAPH_TP_BYTES_PER_LAYER_GRAPH = 3 * MiB // 4
#: How a release's default capture list follows max_num_seqs and max_num_batched_tokens (VllmRelease.cuda_graphs;
#: vllm_cuda_graph_sizes says each rule's source): V0's, 0.10.2's PIECEWISE list, 0.19.1's FULL_DECODE_ONLY (the
#: toolkit's --compilation-config for it) and vLLM's own V1 default FULL_AND_PIECEWISE (0.19.1; the rule for a V1
#: release outside the table: the most graphs of the V1 rules)
VLLM_GRAPH_RULES = ("v0", "v1_piecewise", "v1_full_decode", "v1_full_and_piecewise")
#: Where the layers are unknown (another engine's view of a vLLM instance on a shared GPU, planned without the vLLM
#: model): the former flat estimate, or the graphs of VLLM_UNREAD_GRAPH_LAYERS layers where that is more
#: (vllm_unread_graph_bytes).
VLLM_CUDA_GRAPH_BYTES = 512 * MiB
VLLM_CUDA_GRAPH_TP_BYTES = 512 * MiB
#: The most layers a model served on V100s commonly has (Llama-2/3-70B, Qwen2.5-72B: 80; config.json), for the
#: graphs of an instance whose model was not read
VLLM_UNREAD_GRAPH_LAYERS = 80
#: Engines the planner knows: V0 (the only one on Volta up to 0.10.1) and V1.
VLLM_ENGINES = ("V0", "V1")
#: A GPTQ 4-bit build with group size 128 stores per weight 4 bits + a 16-bit scale and a 4-bit zero per group:
#: (4 + 16/128 + 4/128) / 16 of the fp16 bytes. Embeddings stay fp16, so a real build is somewhat larger. GPTQ
#: runs on Volta, AWQ does not (docs/volta.md §4). (H)
GPTQ_4BIT_FRACTION_OF_FP16 = (4 + 16 / 128 + 4 / 128) / 16
#: Tensor-parallel sizes the planner suggests, one GPU each.
VLLM_TP_CANDIDATES = (2, 4, 8)
#: Largest max_model_len searched when the config states no max_position_embeddings, in tokens.
_UNKNOWN_MAX_POSITION = 1 << 22


def pp_partition(n_layers: int, pp: int) -> list[int]:
    """Hidden layers per pipeline stage as vLLM splits them (vllm/distributed/utils.py get_pp_indices, 0.8-0.10,
    without VLLM_PP_LAYER_PARTITION): n_layers // pp each, and the remainder one each to the stages before the last,
    counted back from the second-to-last. [n_layers] for pp 1. Raises ValueError for pp < 1."""
    if pp < 1:
        raise ValueError(f"pipeline parallel size must be at least 1, got {pp}")
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts


def vllm_v0_chunked_tokens(vllm_version: str | None) -> int:
    """Tokens V0 batches per step with chunked prefill and no --max-num-batched-tokens: 512 before vLLM 0.6.5,
    2048 from it (VLLM_V0_CHUNKED_BATCHED_TOKENS_SINCE), and 2048 for a version that does not parse or None (the
    side that predicts less KV cache)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", vllm_version or "")
    since, tokens = VLLM_V0_CHUNKED_BATCHED_TOKENS_SINCE
    if found and (int(found[1]), int(found[2]), int(found[3] or 0)) < since:
        return VLLM_V0_CHUNKED_BATCHED_TOKENS
    return tokens


def vllm_profiled_tokens(max_model_len: int, engine: str = "V0", enable_chunked_prefill: bool | None = None,
                         v1_tokens: int | None = None, max_num_batched_tokens: int | None = None,
                         vllm_version: str | None = None) -> int:
    """max_num_batched_tokens of vLLM's profile run, in tokens: the user's --max-num-batched-tokens where given
    (without chunked prefill vLLM refuses fewer than max_model_len); else V1 chunks, at `v1_tokens` (the release's
    count read from its code, VllmRelease.profile_tokens_on; None: VLLM_V1_BATCHED_TOKENS), or with
    enable_chunked_prefill False (0.19.1 honours it) profiles max(max_model_len, that count); V0 chunks when
    asked, or with None above a 32k max_model_len (vllm serve; callers pass False for the models whose default
    stays off: roles/vllm/decide.py v0_unchunked_reason), at vllm_v0_chunked_tokens(vllm_version), and otherwise
    profiles max(max_model_len, 2048) tokens."""
    if engine == "V1":
        if enable_chunked_prefill is False:  # 0.19.1 arg_utils.py: unset, max(max_model_len, the default)
            return max_num_batched_tokens or max(max_model_len, v1_tokens or VLLM_V1_BATCHED_TOKENS)
        return max_num_batched_tokens or v1_tokens or VLLM_V1_BATCHED_TOKENS
    chunked = max_model_len > VLLM_CHUNKED_PREFILL_ABOVE if enable_chunked_prefill is None else enable_chunked_prefill
    if chunked:
        return max_num_batched_tokens or vllm_v0_chunked_tokens(vllm_version)
    return max(max_num_batched_tokens or 0, max_model_len, VLLM_MIN_BATCHED_TOKENS)


def vllm_samples_in_profile(vllm_version: str | None) -> bool:
    """Whether this vLLM release's profile run samples (top-k/top-p over max_num_seqs sequences), which puts the
    sampler's copies of the logits into the activation peak: from 0.7 on, and for an unknown release (None), the
    side that predicts less KV cache. A version that does not parse counts as sampling."""
    found = re.match(r"(\d+)\.(\d+)", vllm_version or "")
    return found is None or (int(found[1]), int(found[2])) >= VLLM_SAMPLER_PROFILED_SINCE


def vllm_sampler_bytes(model: HfModel, tokens: int, max_num_seqs: int, sampler_profiled: bool = True,
                       sampler_path: str | None = None) -> int:
    """The sampler's share of the profile peak on the rank that samples (bytes): the path's fp32 copies
    (VLLM_SAMPLER_PATHS: "triton" 6, "sort" 10; None: VLLM_SAMPLER_FP32_COPIES, 8) of one row of logits per
    profiled sequence (at most one sequence per profiled token); 0 for releases whose profile run does not sample. Raises KeyError for a path not
    in VLLM_SAMPLER_PATHS."""
    if not sampler_profiled:
        return 0
    vocab = model.vocab_size or VLLM_FALLBACK_VOCAB
    copies = VLLM_SAMPLER_FP32_COPIES if sampler_path is None else VLLM_SAMPLER_PATHS[sampler_path]
    return copies * min(max_num_seqs, tokens) * vocab * 4


def vllm_activation_bytes(model: HfModel, tp: int, tokens: int, max_num_seqs: int,
                          sampler_profiled: bool = True, sampler_path: str | None = None) -> int:
    """vLLM's profile-run activation peak on the GPU with the smallest KV cache (bytes), for `tokens` profiled
    tokens: the forward pass's per-token term split by TP, plus the sampler's logits (vllm_sampler_bytes), summed
    although the two peaks do not overlap in time (the sum is the side that predicts less KV cache)."""
    hidden = model.hidden_size or model.n_heads * model.head_dim
    inter = model.intermediate_size or 6 * hidden
    per_token = 2 * (VLLM_ACT_HIDDEN_ELEMS * hidden + VLLM_ACT_MLP_ELEMS * inter / tp)
    sampler = vllm_sampler_bytes(model, tokens, max_num_seqs, sampler_profiled, sampler_path)
    return int(max(VLLM_ACTIVATION_FLOOR_BYTES, tokens * per_token + sampler))


def vllm_cuda_graph_sizes(rule: str, max_num_seqs: int, max_num_batched_tokens: int, lora: bool = False) -> list[int]:
    """The batch sizes (sequences per decode step, tokens per piecewise step) a release captures a CUDA graph for
    under `rule` (VLLM_GRAPH_RULES), ascending, with a piecewise and a full graph of one size listed twice. From
    each release's code:
    - "v0" (0.8.5.post1 vllm/config.py 4001-4030, VllmConfig._set_cudagraph_sizes): 1, 2, 4, then multiples of 8
      up to the first of them >= max_num_seqs (35 sizes at 256); max_num_batched_tokens plays no part.
    - "v1_piecewise" (0.10.2 vllm/config/scheduler.py 239-244: cuda_graph_sizes [min(2 x max_num_seqs, 512)];
      vllm/config/__init__.py 3651-3672): 1, 2, 4, then multiples of 8 up to it, none above max_num_batched_tokens
      (67 at 256 where max_num_batched_tokens >= 512); PIECEWISE, one graph per size.
    - "v1_full_decode" (0.19.1 vllm/config/vllm.py 1389-1444: up to min(2 x max_num_seqs, 512,
      max_num_batched_tokens), steps of 8 below 256, of 16 from it; FULL_DECODE_ONLY, v1/cudagraph_dispatcher.py
      206-230: full graphs only for sizes <= max_num_seqs): 35 sizes at 256.
    - "v1_full_and_piecewise" (0.19.1's default cudagraph_mode, vllm.py 215, 234): that list as piecewise graphs
      plus the full decode ones (86 at 256 where max_num_batched_tokens >= 512).
    lora (--enable-lora): the 0.19.1 rules capture every graph twice, without and with an adapter
    (v1/cudagraph_dispatcher.py 110-129 _get_lora_cases: [0, max_loras + 1] under the default
    cudagraph_specialize_lora and no specialize_active_lora); V0 and 0.10.2 run LoRA inside the same graphs.
    Not counted: speculative decoding, capture sizes or modes set through extra_args, --performance-mode
    interactivity, --specialize-active-lora.
    Raises ValueError for a rule not in VLLM_GRAPH_RULES."""
    if rule == "v0":
        possible = [1, 2, 4] + [8 * i for i in range(1, 1025)]
        top = next((x for x in possible if x >= max_num_seqs), possible[-1])
        return [x for x in possible if x <= top]
    if rule == "v1_piecewise":
        top = min(max_num_seqs * 2, 512)
        return [x for x in [1, 2, 4, *range(8, top + 1, 8)] if x <= max_num_batched_tokens]
    if rule in ("v1_full_decode", "v1_full_and_piecewise"):
        top = min(max_num_seqs * 2, 512, max_num_batched_tokens)
        sizes = sorted({x for x in (1, 2, 4) if x <= top} | set(range(8, min(top + 1, 256), 8))
                       | set(range(256, top + 1, 16)))
        full = [x for x in sizes if x <= max_num_seqs]
        graphs = full if rule == "v1_full_decode" else sizes + full
        return sorted(graphs * (2 if lora else 1))
    raise ValueError(f"unknown vLLM CUDA graph rule {rule!r}; known: {', '.join(VLLM_GRAPH_RULES)}")


def vllm_graph_bytes(tp: int, enforce_eager: bool, n_layers: int | None = None, graphs: int | None = None) -> int:
    """CUDA graph memory per GPU (bytes), outside the gpu_memory_utilization share: n_layers (the layers one GPU
    holds, after pipeline parallel) x graphs (the graphs that GPU captures: len(vllm_cuda_graph_sizes), x the
    pipeline stages in V0) x VLLM_GRAPH_BYTES_PER_LAYER_GRAPH, or x VLLM_GRAPH_TP_BYTES_PER_LAYER_GRAPH under
    tensor parallel; with n_layers None the flat VLLM_CUDA_GRAPH_BYTES (+ VLLM_CUDA_GRAPH_TP_BYTES under TP). 0
    with enforce_eager. Raises ValueError for n_layers without graphs."""
    if enforce_eager:
        return 0
    if n_layers is None:
        return VLLM_CUDA_GRAPH_BYTES + (VLLM_CUDA_GRAPH_TP_BYTES if tp > 1 else 0)
    if graphs is None:
        raise ValueError("vllm_graph_bytes: n_layers needs graphs (len(vllm_cuda_graph_sizes(...)))")
    return n_layers * graphs * (VLLM_GRAPH_TP_BYTES_PER_LAYER_GRAPH if tp > 1 else VLLM_GRAPH_BYTES_PER_LAYER_GRAPH)


def vllm_graph_rule(cuda_graphs: str | None, engine: str) -> str:
    """The capture rule planned: the release's (VllmRelease.cuda_graphs), else V0's for the V0 engine and vLLM's own
    V1 default FULL_AND_PIECEWISE (the most graphs of the V1 rules) for V1."""
    return cuda_graphs or ("v0" if engine == "V0" else "v1_full_and_piecewise")


def vllm_unread_graph_bytes(tp: int, enforce_eager: bool, max_num_seqs: int, cuda_graphs: str | None, engine: str,
                            max_num_batched_tokens: int | None = None, lora: bool = False) -> int:
    """CUDA graph memory per GPU (bytes) of a vLLM instance whose model was not read (another engine's view of it on
    a shared GPU): the larger of the flat estimate and VLLM_UNREAD_GRAPH_LAYERS layers x the graphs its release's
    rule (vllm_graph_rule) captures at max_num_seqs and max_num_batched_tokens (None: 8192, which caps no list
    below 512) and lora (--enable-lora), so that what is left for the other engine is never more than the planned
    instance leaves. 0 with enforce_eager."""
    graphs = len(vllm_cuda_graph_sizes(vllm_graph_rule(cuda_graphs, engine), max_num_seqs,
                                       max_num_batched_tokens or 8192, lora))
    return max(vllm_graph_bytes(tp, enforce_eager), vllm_graph_bytes(tp, enforce_eager, VLLM_UNREAD_GRAPH_LAYERS,
                                                                     graphs))


@dataclass(frozen=True)
class _VllmCase:
    """One vLLM plan request and its per-GPU figures that do not depend on max_model_len (bytes)."""

    model: HfModel
    gpu_mib: int
    n_gpus: int
    tp: int
    max_model_len: int
    util: float  # gpu_memory_utilization
    kv_cache_dtype: str
    max_num_seqs: int
    budget: int  # VRAM x util, per GPU
    kv_tok_gpu: int  # KV bytes per token on one GPU
    weights: int  # per GPU
    non_torch: int  # per GPU
    engine: str = "V0"
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool = False
    vllm_version: str | None = None
    pipeline_parallel: int = 1
    v1_profile_tokens: int | None = None
    encoder_bytes: int = 0  # a vision encoder's memory per GPU, held outside the KV cache (the user's figure)
    sampler_path: str | None = None  # the release's top-k/top-p path (VLLM_SAMPLER_PATHS; None: V0's calibration)
    max_num_batched_tokens: int | None = None  # the user's --max-num-batched-tokens (None: vLLM's default)
    cuda_graphs: str | None = None  # the release's capture rule (VLLM_GRAPH_RULES; None: vllm_graph_rule's)
    lora: bool = False  # --enable-lora in extra_args (the graphs it adds: vllm_cuda_graph_sizes)

    @property
    def gpu_bytes(self) -> int:
        return self.gpu_mib * MiB

    def overhead(self, length: int) -> int:
        """Activation peak + non-torch memory (+ a vision encoder's stated memory) per GPU at this max_model_len."""
        tokens = vllm_profiled_tokens(length, self.engine, self.enable_chunked_prefill, self.v1_profile_tokens,
                                      self.max_num_batched_tokens, self.vllm_version)
        return (vllm_activation_bytes(self.model, self.tp, tokens, self.max_num_seqs,
                                      vllm_samples_in_profile(self.vllm_version), self.sampler_path) + self.non_torch
                + self.encoder_bytes)

    def kv_tokens(self, length: int) -> int:
        """Tokens the KV cache holds at this max_model_len, whole blocks."""
        space = self.budget - self.weights - self.overhead(length)
        return max(0, space // (self.kv_tok_gpu * VLLM_BLOCK_SIZE)) * VLLM_BLOCK_SIZE


def _check_vllm_args(gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float, kv_cache_dtype: str,
                     max_num_seqs: int, engine: str = "V0") -> None:
    """Raises ValueError for non-positive sizes, a utilization above 1 or an unknown kv_cache_dtype."""
    _check_positive(gpu_mib=gpu_mib, n_gpus=n_gpus, tensor_parallel=tp, max_model_len=max_model_len,
                    gpu_memory_utilization=util, max_num_seqs=max_num_seqs)
    if util > 1:
        raise ValueError(f"gpu_memory_utilization must be at most 1, got {util}")
    if kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
        raise ValueError(f"unknown vLLM kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(VLLM_KV_CACHE_DTYPES)}")
    if engine not in VLLM_ENGINES:
        raise ValueError(f"unknown vLLM engine {engine!r}; known: {', '.join(VLLM_ENGINES)}")


def _stage_weight_bytes(model: HfModel, pp: int) -> int:
    """Weight bytes of the heaviest pipeline stage before tensor parallel: the largest stage's share of the layer
    weights plus one embedding-sized matrix (vocab x hidden at 2 bytes: the first stage holds the input embedding,
    the last the output head). With pp 1 the whole model. Taking every byte beyond one embedding as layer weights
    over-counts a model with untied output weights a little: the side that predicts less KV cache."""
    if pp == 1:
        return model.weight_bytes
    embedding = (model.vocab_size or VLLM_FALLBACK_VOCAB) * (model.hidden_size or model.n_heads * model.head_dim) * 2
    embedding = min(embedding, model.weight_bytes)
    largest = max(pp_partition(model.n_layers, pp))
    return -(-(model.weight_bytes - embedding) * largest // model.n_layers) + embedding


def _vllm_case(model: HfModel, gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float,
               kv_cache_dtype: str, max_num_seqs: int, opts: dict) -> _VllmCase:
    # vLLM splits KV heads across TP ranks and replicates them when there are fewer heads than ranks.
    kv_heads_gpu = max(1, model.n_kv_heads // tp)
    pp = opts.get("pipeline_parallel", 1)
    # each stage's ranks hold the KV cache of the stage's layers only; vLLM sizes the cache by the smallest block
    # count over all ranks, that of the stage with the most layers
    layers = max(pp_partition(model.n_layers, pp)) if pp > 1 else model.n_layers
    return _VllmCase(
        model, gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs,
        budget=int(gpu_mib * MiB * util),
        kv_tok_gpu=kv_bytes_per_token(max(1, layers), kv_heads_gpu, model.head_dim, kv_cache_dtype),
        weights=-(-_stage_weight_bytes(model, pp) // tp),
        non_torch=VLLM_NON_TORCH_BYTES + (VLLM_TP_COMM_BYTES if tp > 1 else 0),
        **opts,
    )


def _structural_refusals(c: _VllmCase) -> list[str]:
    """Refusals that no memory changes: more TP ranks than GPUs, heads not divisible by TP, a max_model_len beyond
    the max model len vLLM derives from config.json (rope_scaling applied)."""
    model, refused = c.model, []
    if c.tp > c.n_gpus:
        refused.append(messages.vllm_tp_exceeds_gpus(c.tp, c.n_gpus))
    if model.n_heads % c.tp:
        refused.append(messages.vllm_heads_not_divisible(model.n_heads, c.tp))
    if c.pipeline_parallel > 1 and min(parts := pp_partition(model.n_layers, c.pipeline_parallel)) == 0:
        refused.append(messages.vllm_pp_stage_without_layers(model.n_layers, c.pipeline_parallel, parts))
    limit = model.max_model_len_limit
    if limit and c.max_model_len > limit:
        refused.append(messages.vllm_beyond_max_position(c.max_model_len, limit, model.max_position_embeddings))
    return refused


def _memory_refusal(kv_space: int, capacity: int, max_model_len: int, used: str) -> str | None:
    """vLLM's two start-up refusals: no memory left for cache blocks (kv_space <= 0 bytes), or a KV cache that holds
    fewer tokens (`capacity`) than one max_model_len sequence. None when neither applies."""
    if kv_space <= 0:
        return messages.vllm_no_cache_memory(used)
    if capacity < max_model_len:
        return messages.vllm_max_seq_len_too_large(max_model_len, capacity, used)
    return None


def _utilization_refusal(c: _VllmCase) -> str | None:
    """A gpu_memory_utilization that leaves less than the CUDA context plus the CUDA graphs (unless enforce_eager)
    outside vLLM's budget; None if it does not."""
    outside = c.gpu_bytes - c.budget
    graphs = _graphs(c)
    if outside < VLLM_CUDA_CONTEXT_BYTES + graphs:
        return messages.vllm_utilization_leaves_no_context(c.util, outside, VLLM_CUDA_CONTEXT_BYTES, graphs)
    return None


def _graphs(c: _VllmCase) -> int:
    """CUDA graph bytes per GPU for this case: the layers of the heaviest pipeline stage x the graphs it captures
    (V0 captures its list once per pipeline stage on every GPU: 0.8.5.post1 worker/model_runner.py 1503-1504) at
    the batch the profile run takes."""
    layers = max(pp_partition(c.model.n_layers, c.pipeline_parallel)) if c.pipeline_parallel > 1 else c.model.n_layers
    rule = vllm_graph_rule(c.cuda_graphs, c.engine)
    batched = vllm_profiled_tokens(c.max_model_len, c.engine, c.enable_chunked_prefill, c.v1_profile_tokens,
                                   c.max_num_batched_tokens, c.vllm_version)
    graphs = len(vllm_cuda_graph_sizes(rule, c.max_num_seqs, batched, c.lora)) * (
        c.pipeline_parallel if rule == "v0" else 1)
    return vllm_graph_bytes(c.tp, c.enforce_eager, layers, graphs)


def _opts(c: _VllmCase) -> dict:
    return {"engine": c.engine, "enable_chunked_prefill": c.enable_chunked_prefill, "enforce_eager": c.enforce_eager,
            "vllm_version": c.vllm_version, "pipeline_parallel": c.pipeline_parallel,
            "v1_profile_tokens": c.v1_profile_tokens, "encoder_bytes": c.encoder_bytes,  # per GPU at any TP
            "sampler_path": c.sampler_path, "max_num_batched_tokens": c.max_num_batched_tokens,
            "cuda_graphs": c.cuda_graphs, "lora": c.lora}


def _suggest_tp(c: _VllmCase) -> str | None:
    """The first larger tensor parallel size (one GPU each) that divides the heads and fits; None if none does."""
    for cand in VLLM_TP_CANDIDATES:
        if cand <= c.tp or c.model.n_heads % cand:
            continue
        alt = _plan_vllm(c.model, c.gpu_mib, cand, cand, c.max_model_len, c.util, c.kv_cache_dtype, c.max_num_seqs,
                         False, _opts(c))
        if alt.fits:
            return messages.vllm_fits_with_tp(cand, c.gpu_mib)
    return None


def _suggest_gptq(c: _VllmCase) -> str | None:
    """An unquantized model planned as a GPTQ 4-bit build at the same tensor parallel; None if it would not fit or
    the model is already quantized."""
    if c.model.quantization is not None:
        return None
    gptq = replace(c.model, weight_bytes=int(c.model.weight_bytes * GPTQ_4BIT_FRACTION_OF_FP16), quantization="gptq")
    alt = _plan_vllm(gptq, c.gpu_mib, c.n_gpus, c.tp, c.max_model_len, c.util, c.kv_cache_dtype, c.max_num_seqs,
                     False, _opts(c))
    return messages.vllm_fits_as_gptq(gptq.weight_bytes, c.tp) if alt.fits else None


def _suggestions(c: _VllmCase, max_ctx: int) -> list[str]:
    """What would fit after a memory refusal: more tensor parallel, a GPTQ build, the largest max_model_len."""
    lines = [line for line in (_suggest_tp(c), _suggest_gptq(c)) if line]
    if max_ctx:
        lines.append(messages.vllm_or_max_model_len(max_ctx))
    return lines


def plan_vllm(model: HfModel, gpu_mib: int, n_gpus: int, tensor_parallel: int, max_model_len: int,
              gpu_memory_utilization: float, kv_cache_dtype: str = "auto", max_num_seqs: int = 256, *,
              enforce_eager: bool = False, engine: str = "V0", enable_chunked_prefill: bool | None = None,
              vllm_version: str | None = None, pipeline_parallel: int = 1,
              v1_profile_tokens: int | None = None, encoder_bytes: int = 0, sampler_path: str | None = None,
              max_num_batched_tokens: int | None = None, cuda_graphs: str | None = None, lora: bool = False) -> Plan:
    """Plan a vLLM instance the way vLLM sizes its KV cache at start-up, per GPU after tensor parallel:
    KV space = VRAM x gpu_memory_utilization - weights / TP - activation peak - non-torch memory, in whole blocks of
    16 tokens. The activation peak is that of vLLM's profile run over max_num_batched_tokens (V0: max_model_len, or
    512 with chunked prefill, which `vllm serve` turns on above 32k; V1: 8192), plus from vLLM 0.7 the sampler's fp32
    copies of max_num_seqs x vocab logits on the rank that samples, whose KV cache is the smallest and sets vLLM's. vLLM refuses to start when the KV
    space is <= 0 ("No available memory for the cache blocks") or holds fewer tokens than one max_model_len sequence
    ("The model's max seq len ... is larger than the maximum number of tokens that can be stored in KV cache"); it
    runs out of memory capturing CUDA graphs when the share outside gpu_memory_utilization cannot hold the CUDA
    context and the graphs (none with enforce_eager). The planner refuses the same, and also a tensor_parallel
    larger than n_gpus or not dividing the attention heads, and a max_model_len above the max model len vLLM
    derives from config.json (max_position_embeddings, times a rope_scaling factor). A memory refusal suggests the
    next power-of-two tensor parallel that fits, a GPTQ 4-bit build, and the largest max_model_len.

    gpu_mib: VRAM per GPU in MiB (as torch reports the total); max_model_len, max_num_seqs in tokens/sequences.
    enforce_eager: no CUDA graphs; engine: "V0" or "V1"; enable_chunked_prefill: None for vLLM's default under
    `vllm serve`; vllm_version: the release ("0.8.5.post1"), which decides whether the profile run samples
    (vllm_samples_in_profile; None: it does). pipeline_parallel: stages (one per node of a Ray cluster), each GPU
    holding its stage's layers (pp_partition; the heaviest stage plus one embedding matrix) and their KV cache; a
    stage without a layer is refused. Not calibrated on a pipeline-parallel log (none in the corpus): the terms per
    GPU are those measured without it. v1_profile_tokens: V1's profile tokens for the release (read from its code:
    2048 for `vllm serve` on GPUs below 70 GiB in 0.10.2 and 0.19.1; None: 8192). encoder_bytes: a vision-language
    model's encoder memory per GPU (bytes), which no formula here gives (the caller states it; see
    roles/vllm/decide.py encoder_problems): counted beside the activation peak, so the KV cache is that much smaller.
    sampler_path: how the release's sampler filters top-k/top-p in the profile run ("triton" or "sort", read from
    its code: VllmRelease.sampler_path; None: V0's calibrated count), which sets the sampler's copies of the logits.
    max_num_batched_tokens: the user's --max-num-batched-tokens, which the profile run then uses
    (vllm_profiled_tokens). cuda_graphs: the release's CUDA graph capture rule (VLLM_GRAPH_RULES:
    VllmRelease.cuda_graphs; None: V0's for V0, FULL_AND_PIECEWISE for V1), which with max_num_seqs sets the graphs
    counted outside the share (vllm_cuda_graph_sizes, vllm_graph_bytes); lora: LoRA adapters enabled
    (--enable-lora), which 0.19.1 captures every graph again for. Outcome is "fits" or "does_not_fit".
    Raises ValueError for non-positive sizes, a negative encoder_bytes, a utilization outside (0, 1], an unknown
    kv_cache_dtype, engine, sampler_path or cuda_graphs.
    """
    return _plan_vllm(model, gpu_mib, n_gpus, tensor_parallel, max_model_len, gpu_memory_utilization,
                      kv_cache_dtype, max_num_seqs, True,
                      {"engine": engine, "enable_chunked_prefill": enable_chunked_prefill,
                       "enforce_eager": enforce_eager, "vllm_version": vllm_version,
                       "pipeline_parallel": pipeline_parallel, "v1_profile_tokens": v1_profile_tokens,
                       "encoder_bytes": encoder_bytes, "sampler_path": sampler_path,
                       "max_num_batched_tokens": max_num_batched_tokens, "cuda_graphs": cuda_graphs, "lora": lora})


def _plan_vllm(model: HfModel, gpu_mib: int, n_gpus: int, tp: int, max_model_len: int, util: float,
               kv_cache_dtype: str, max_num_seqs: int, suggest: bool, opts: dict | None = None) -> Plan:
    """plan_vllm; `suggest` False plans an alternative without suggesting further ones."""
    opts = opts or {}
    _check_vllm_args(gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs, opts.get("engine", "V0"))
    _check_positive(pipeline_parallel=opts.get("pipeline_parallel", 1))
    if opts.get("encoder_bytes", 0) < 0:
        raise ValueError(f"encoder_bytes must be at least 0, got {opts['encoder_bytes']}")
    if opts.get("sampler_path") not in (None, *VLLM_SAMPLER_PATHS):
        raise ValueError(f"unknown vLLM sampler_path {opts['sampler_path']!r}; known: {', '.join(VLLM_SAMPLER_PATHS)}")
    if opts.get("cuda_graphs") not in (None, *VLLM_GRAPH_RULES):
        raise ValueError(f"unknown vLLM cuda_graphs {opts['cuda_graphs']!r}; known: {', '.join(VLLM_GRAPH_RULES)}")
    c = _vllm_case(model, gpu_mib, n_gpus, tp, max_model_len, util, kv_cache_dtype, max_num_seqs, opts)
    compute = c.overhead(max_model_len)
    kv_space = c.budget - c.weights - compute
    capacity = c.kv_tokens(max_model_len)
    kv_one = c.kv_tok_gpu * _pad(max_model_len, VLLM_BLOCK_SIZE)
    max_ctx = max(0, _largest(lambda n: c.kv_tokens(n) >= n, 1, model.max_model_len_limit or _UNKNOWN_MAX_POSITION))
    tps = _decode_tps(c.weights + c.kv_tok_gpu * max_model_len, 0)

    used = messages.vllm_used(c.weights, compute, kv_space, c.budget, util, gpu_mib, max_model_len, kv_one,
                               c.encoder_bytes)
    # vLLM checks the config (length, heads) before it loads anything: a shape or length problem is refused as that,
    # never as memory.
    structural = _structural_refusals(c)
    memory = None if structural else _memory_refusal(kv_space, capacity, max_model_len, used)
    refused = structural or [r for r in (memory, _utilization_refusal(c)) if r]
    outcome: Outcome = "does_not_fit" if refused else "fits"
    reasons = ([messages.fits(used), messages.vllm_capacity(capacity, max_model_len, max_num_seqs)]
               if outcome == "fits" else refused)
    if suggest and memory:
        reasons.extend(_suggestions(c, max_ctx))
    reasons.append(messages.vllm_decode_ceiling(tps, max_model_len))

    return Plan(
        engine="vllm", outcome=outcome, n_gpus=tp, gpu_bytes=c.gpu_bytes, budget_bytes=c.budget, weight_bytes=c.weights,
        kv_bytes=kv_one, compute_buffer_bytes=compute, cuda_context_bytes=VLLM_CUDA_CONTEXT_BYTES,
        total_bytes=c.weights + kv_one + compute, context=max_model_len,
        kv_bytes_per_token=kv_bytes_per_token(model.n_layers, model.n_kv_heads, model.head_dim, kv_cache_dtype),
        layers_offloaded=0, max_context_that_fits=max_ctx, max_weight_bytes=max(0, (c.budget - compute - kv_one) * tp * c.pipeline_parallel),
        decode_ceiling_tps=tps, reasons=reasons, outside_bytes=VLLM_CUDA_CONTEXT_BYTES + _graphs(c),
    )
