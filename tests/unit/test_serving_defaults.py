"""Issue 26's serving defaults, decided from GGUF headers built here (lab/models.py write_llama, header only: the
real sizes in a sparse file): the slots, the context one request may use, the KV cache pool and its type for
models of several sizes on 16 GB and 32 GB V100s, and the llama-server arguments they render to.

Independent expectations: llama.cpp's own KV cache formula (per layer and token, K and V rows of n_kv_heads x head
size elements; f16 = 2 bytes, q8_0 = 34 bytes per 32 elements: ggml's block_q8_0; src/llama-kv-cache.cpp) and
the GGUF sizes of F16 weights (2 bytes per element), summed here by hand. The shapes are picked so that each
choice holds whatever the planner's compute buffer and CUDA context come to between OUTSIDE_MEASURED (the least
llama-server was measured to use outside its logged buffers) and ALLOWANCE; only the llama-server flags come from
the pinned tree's common/arg.cpp (-kvu, --kv-unified-per-slot).

The models are placed among the hub's header copies (V100KIT_HUB_HEADERS, roles/hub.py): the planner's stand-ins
for weights not downloaded yet, whose checksum is checked on the host instead, so that no test reads 30 GB of holes
to hash them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lab.models import vocabulary, write_llama
from roles.cuda.versions import Toolkit
from roles.llama_cpp.decide import plan, server_args
from roles.settings import load_settings
from tests.unit.test_server_args import parsed as args_of  # {flag: value}

CUDA_124 = Toolkit("12.4", "distro", {}, "/usr/bin/nvcc", None, "g++-13")
MiB, GiB = 1 << 20, 1 << 30
V100_16, V100_32 = 16160, 32510  # MiB nvidia-smi reports (docs/volta.md §7)
#: What the compute buffer and CUDA context may add at most, for the bounds below (the planner's are ~0.8-1.1 GiB).
ALLOWANCE = 3 * GiB // 2
#: The least memory llama-server used outside the buffers it logs, MiB: 592.5 on an H200 (tests/data/
#: llama_cpp_memory_remeasured.json unlogged_mib): a choice refused with it is refused with any planner.
OUTSIDE_MEASURED = 592 * MiB
#: Bytes of the KQ mask per KV cell in the compute buffer with flash attention (f32 + f16 copy, 512-token batch).
MASK_PER_CELL = 512 * 6


def kv_per_token(n_layer: int, n_kv: int, head: int, kind: str) -> int:
    """llama.cpp's KV bytes per token for the whole model: K and V rows of n_kv x head elements per layer."""
    row = n_kv * head * 2 if kind == "f16" else n_kv * head // 32 * 34
    return 2 * row * n_layer


def f16_weights(n_layer: int, n_embd: int, n_kv: int, head: int, n_ff: int) -> int:
    """GGUF bytes of write_llama's F16 tensors (norms F32): embeddings and output of the small vocabulary, and per
    layer q, k, v, o, gate, up, down."""
    vocab = len(vocabulary()[0])
    layer = 2 * (2 * n_embd * n_embd + 2 * n_kv * head * n_embd + 3 * n_ff * n_embd) + 4 * 2 * n_embd
    return n_layer * layer + 2 * 2 * vocab * n_embd + 4 * n_embd


def model(tmp_path: Path, name: str, n_layer: int, n_embd: int, n_head: int, n_kv: int, n_ff: int, n_ctx: int):
    path = write_llama(tmp_path / f"{name}.gguf", n_embd=n_embd, n_head=n_head, n_head_kv=n_kv, n_layer=n_layer,
                       n_ff=n_ff, n_ctx=n_ctx, header_only=True)
    sha = hashlib.sha256(name.encode()).hexdigest()  # a header copy's own bytes are not hashed (see above)
    head = n_embd // n_head
    return {"path": str(path), "sha": sha, "weights": f16_weights(n_layer, n_embd, n_kv, head, n_ff),
            "f16": kv_per_token(n_layer, n_kv, head, "f16"), "q8_0": kv_per_token(n_layer, n_kv, head, "q8_0")}


def decide(m: dict, gpu_mib: int, **inst):
    settings = load_settings("box", {"gpu_memory_mib": gpu_mib, "llama_cpp_instances": {
        "m": {"model_source": m["path"], "model_sha256": m["sha"], **inst}}})
    p, problems = plan(settings, [CUDA_124], [], lambda _: True)
    assert not problems, problems
    i = p.instances[0]
    return i, args_of(server_args(i, p.source.flash_attn_style))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    d = tmp_path_factory.mktemp("hub-headers")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("V100KIT_HUB_HEADERS", str(d))
        yield _shapes(d)


def _shapes(d: Path) -> dict:
    return {
        # 8B-class width, 32 layers, n_ff 8192: 8.5 GiB of F16 weights, trained 8192 tokens
        "mid": model(d, "mid", 32, 4096, 32, 8, 8192, 8192),
        # the same with n_ff 12425: 11.6 GiB
        "large": model(d, "large", 32, 4096, 32, 8, 12425, 8192),
        # the mid shape trained for 131072 tokens
        "mid-long": model(d, "mid-long", 32, 4096, 32, 8, 8192, 131072),
        # a 1B-class model of head size 64: 16 layers of 2048, 1.8 GiB, trained 32768
        "small": model(d, "small", 16, 2048, 32, 8, 8192, 32768),
    }


def test_the_shapes_are_what_the_choices_below_assume(shapes):
    """The hand arithmetic each case rests on, checked once: budget = VRAM in bytes."""
    mid, large, small = shapes["mid"], shapes["large"], shapes["small"]
    assert mid["f16"] == 131072 and mid["q8_0"] == 69632 and small["f16"] == 32768
    # mid on 16 GB: f16 for 8 x 8192 tokens does not fit with the least measured overhead; q8_0 leaves the allowance
    assert mid["weights"] + 8 * 8192 * mid["f16"] + OUTSIDE_MEASURED > V100_16 * MiB
    assert mid["weights"] + 8 * 8192 * mid["q8_0"] + ALLOWANCE < V100_16 * MiB
    # large on 16 GB: neither type holds 8 slots, nor f16 4; q8_0 holds 4 with the allowance
    assert large["weights"] + 8 * 8192 * large["q8_0"] + OUTSIDE_MEASURED > V100_16 * MiB
    assert large["weights"] + 4 * 8192 * large["f16"] + OUTSIDE_MEASURED > V100_16 * MiB
    assert large["weights"] + 4 * 8192 * large["q8_0"] + ALLOWANCE < V100_16 * MiB
    # small on 16 GB: f16 for 8 full trained-length requests with the allowance
    assert small["weights"] + 8 * 32768 * small["f16"] + ALLOWANCE < V100_16 * MiB


def test_a_small_model_gets_8_slots_of_its_whole_trained_context_with_f16(shapes):
    i, a = decide(shapes["small"], V100_16)
    assert (i.serving.slots, i.serving.context, i.kv.cache_type_k, i.kv.cache_type_v) == (8, 32768, "f16", "f16")
    assert (a["-np"], a["-c"], a["-ctk"], a["-ctv"]) == ("8", str(8 * 32768), "f16", "f16")
    assert "-kvu" not in a and "--kv-unified-per-slot" not in a  # a KV stream per slot: -c / -np each
    assert i.memory.kv_bytes == 8 * 32768 * shapes["small"]["f16"]  # llama.cpp's formula for the whole pool


def test_where_f16_does_not_fit_8_requests_of_8192_q8_0_is_chosen_and_its_cost_said(shapes):
    i, a = decide(shapes["mid"], V100_16)
    assert (i.serving.slots, i.serving.context, i.kv.cache_type_k) == (8, 8192, "q8_0")
    assert (a["-np"], a["-c"], a["-ctk"], a["-ctv"]) == ("8", "65536", "q8_0", "q8_0") and "-kvu" not in a
    why = " ".join(i.serving.why)
    assert "f16 does not fit" in why and "0.86 at depth 0" in why  # the measured decode ratio q8_0/f16
    assert "8 request(s) of up to 8192 tokens fit at once" in i.memory.reasons


def test_the_same_model_on_a_32_gb_v100_keeps_f16(shapes):
    i, a = decide(shapes["mid"], V100_32)
    assert (i.serving.slots, i.serving.context, i.kv.cache_type_k, a["-c"]) == (8, 8192, "f16", "65536")
    assert "f16 fits" in " ".join(i.serving.why)


def test_a_long_trained_context_grows_to_what_the_gpu_holds_for_every_slot(shapes):
    m = shapes["mid-long"]
    i, a = decide(m, V100_32)
    free = V100_32 * MiB - m["weights"]
    margin = V100_32 * MiB // 50  # an automatically grown pool leaves 2 % of the GPU free (the planner's error)
    hi = (free - margin) // (8 * m["f16"])  # nothing but weights, KV and the margin
    lo = (free - ALLOWANCE - margin) // (8 * (m["f16"] + MASK_PER_CELL))
    assert i.kv.cache_type_k == "f16" and i.serving.slots == 8
    assert lo <= i.serving.context <= hi and i.serving.context % 256 == 0, (lo, i.serving.context, hi)
    assert a["-c"] == str(8 * i.serving.context) and "--kv-unified-per-slot" not in a
    assert i.memory.fits and i.memory.kv_bytes == 8 * i.serving.context * m["f16"]
    assert i.memory.budget_bytes - i.memory.total_bytes >= margin


def test_a_large_model_keeps_the_context_with_fewer_slots(shapes):
    i, a = decide(shapes["large"], V100_16)
    assert (i.serving.slots, i.serving.context, i.kv.cache_type_k) == (4, 8192, "q8_0")
    assert (a["-np"], a["-c"]) == ("4", "32768")


def test_an_explicit_context_is_per_request_and_slots_shrink_to_hold_it(shapes):
    # mid-long on 16 GB, 16384 tokens per request: 8 slots need 8 or 4.25 GiB x 2 of KV; 4 slots of q8_0 fit
    m = shapes["mid-long"]
    assert m["weights"] + 8 * 16384 * m["q8_0"] + OUTSIDE_MEASURED > V100_16 * MiB
    assert m["weights"] + 4 * 16384 * m["f16"] + OUTSIDE_MEASURED > V100_16 * MiB
    assert m["weights"] + 4 * 16384 * m["q8_0"] + ALLOWANCE < V100_16 * MiB
    i, a = decide(m, V100_16, context=16384)
    assert (i.serving.slots, i.serving.context, i.kv.cache_type_k, a["-c"]) == (4, 16384, "q8_0", "65536")


def test_an_explicit_single_slot_still_works_without_a_unified_cache(shapes):
    i, a = decide(shapes["small"], V100_16, parallel=1, context=4096)
    assert (a["-np"], a["-c"]) == ("1", "4096")
    assert "-kvu" not in a and "--kv-unified-per-slot" not in a
    assert i.memory.kv_bytes == 4096 * shapes["small"]["f16"]


def test_kv_unified_off_splits_the_pool_per_slot(shapes):
    i, a = decide(shapes["small"], V100_16, parallel=4, context=8192, kv_unified=False)
    assert (a["-np"], a["-c"]) == ("4", "32768") and "-kvu" not in a


def test_explicit_types_are_kept_when_they_fit(shapes):
    i, a = decide(shapes["small"], V100_16, cache_type_k="q8_0", cache_type_v="q8_0")
    assert (a["-ctk"], a["-ctv"], i.serving.slots, i.serving.context) == ("q8_0", "q8_0", 8, 32768)


@pytest.mark.parametrize("unified", [None, True], ids=["default", "kv_unified"])
def test_plan_level_the_default_instance_renders_8_slots_into_its_environment_file(unified, tmp_path):
    """Facts in, commands out (tests/plan/harness.py): the lab's tiny model (trained 8192 tokens, head size 16: f16
    only) with slots and context unset; the EnvironmentFile the deploy uploads carries the pool and the slots as
    llama-server's own flags (common/arg.cpp: -c, -np): by default a KV stream per slot (no -kvu), with kv_unified:
    true the unified pool with each slot capped at its share (-kvu, --kv-unified-per-slot)."""
    import re

    from lab.models import write_tiny_llama
    from tests.plan.harness import DEBIAN_13, plan_uploads

    path = write_tiny_llama(tmp_path / "tiny.gguf")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    placed = "/var/lib/llm/models/tiny.gguf"
    tiny = {"model_source": str(path), "model_sha256": sha, "port": 8081}
    tiny.update({"kv_unified": True} if unified else {})
    _, files = plan_uploads(DEBIAN_13, {"llama_cpp_instances": {"tiny": tiny}},
                            responses={f"sha256sum {placed} 2>": [f"{sha}  {placed}"]})
    env = files["/etc/llama-server/tiny.env"]
    a = args_of(re.search(r"^LLAMA_SERVER_ARGS=(.*)$", env, re.M).group(1))
    assert (a["-c"], a["-np"], a["-ctk"]) == ("65536", "8", "f16"), env
    if unified:
        assert "-kvu" in a and a["--kv-unified-per-slot"] == "8192", env
    else:
        assert "-kvu" not in a and "--kv-unified" not in a and "--kv-unified-per-slot" not in a, env


def test_two_instances_on_one_gpu_each_size_their_pool_within_half_of_it(shapes):
    """Two llama-server instances of the small model on one 16 GB GPU: each alone would take 8 x 32768 tokens
    (8 GiB of KV), which twice does not fit; planned within half each, their weights and pools together fit."""
    m = shapes["small"]
    assert 2 * (m["weights"] + 8 * 32768 * m["f16"]) > V100_16 * MiB
    inst = {"model_source": m["path"], "model_sha256": m["sha"]}
    settings = load_settings("box", {"gpu_memory_mib": V100_16, "llama_cpp_instances": {
        "a": {**inst, "port": 8081}, "b": {**inst, "port": 8082}}})
    p, problems = plan(settings, [CUDA_124], [], lambda _: True)
    assert not problems, problems
    a, b = p.instances
    assert a.serving.context == b.serving.context < 32768 and a.serving.slots == 8
    used = sum(m["weights"] + i.serving.pool * m["f16"] for i in (a, b))
    assert used + 2 * OUTSIDE_MEASURED <= V100_16 * MiB, used
    assert any("shares its GPUs with llama-server@b" in r for r in a.memory.reasons), a.memory.reasons


def test_a_context_the_server_would_cap_at_the_trained_one_is_refused(shapes):
    """The pinned tree caps each slot at the trained context (server-context.cpp n_ctx_slot) unless YaRN with a
    custom scale raises it (llama-context.cpp: n_ctx_train = yarn_orig_ctx / rope_freq_scale): a longer context would
    be a pool paid for and never served."""
    m = shapes["small"]  # trained 32768
    settings = load_settings("box", {"gpu_memory_mib": V100_32, "llama_cpp_instances": {"m": {
        "model_source": m["path"], "model_sha256": m["sha"], "context": 65536, "allow_context_beyond_training": True}}})
    _, problems = plan(settings, [CUDA_124], [], lambda _: True)
    assert any("llama_cpp_instances.m.context = 65536" in p and "at most 32768 tokens per request" in p
               and "rope_scale 2" in p for p in problems), problems
    i, a = decide(m, V100_32, context=65536, rope_scaling="yarn", rope_scale=2.0, yarn_orig_ctx=32768)
    assert a["-c"] == str(i.serving.slots * 65536) and a["--rope-scale"] == "2"


def test_a_larger_physical_batch_is_planned_with_its_compute_buffer(shapes):
    """-ub 2048 (with -b 2048) reserves the compute buffer for 2048 tokens: its KQ mask alone grows by
    (2048 - 512) tokens x the pool's cells x 6 bytes (f32 mask and its f16 copy, llama-graph.cpp)."""
    m = shapes["small"]
    base, _ = decide(m, V100_16, parallel=8, context=8192)
    big, a = decide(m, V100_16, parallel=8, context=8192, ubatch_size=2048, batch_size=2048)
    assert a["-ub"] == "2048" and a["-b"] == "2048"
    grow = big.memory.compute_buffer_bytes - base.memory.compute_buffer_bytes
    assert grow >= (2048 - 512) * 8 * 8192 * 6, grow
    # the same pool either way (8 x the trained 32768 fit): the plan's total carries the larger buffer
    auto_base, _ = decide(m, V100_16)
    auto_big, _ = decide(m, V100_16, ubatch_size=2048, batch_size=2048)
    assert auto_big.serving.pool == auto_base.serving.pool
    assert auto_big.memory.total_bytes - auto_base.memory.total_bytes == \
        auto_big.memory.compute_buffer_bytes - auto_base.memory.compute_buffer_bytes >= (2048 - 512) * 8 * 32768 * 6


def test_kv_unified_with_one_slot_is_refused_naming_the_fix(shapes):
    m = shapes["small"]
    settings = load_settings("box", {"llama_cpp_instances": {"m": {
        "model_source": m["path"], "model_sha256": m["sha"], "parallel": 1, "kv_unified": True}}})
    _, problems = plan(settings, [CUDA_124], [], lambda _: True)
    assert any(p.startswith("llama_cpp_instances.m.kv_unified = True") and "parallel above 1" in p
               for p in problems), problems


#: Issue 26's H200 and H100 sweeps of the toolkit's default against the unified pool (`v100kit bench --json --sweep`,
#: tools/gpu/README.md has the commands): an 8B-shaped and a Llama-3.2-1B-shaped (head size 64) Q4_K_M model, 16k-
#: and 38-token prompts. The figures are the engine's, measured through the server's API; none comes from the planner.
MEASURED_SWEEPS = ["bench_sweep_h200_8b_d0.json", "bench_sweep_h200_8b_d16384.json",
                   "bench_sweep_h200_1b_d0_d16384_split.json", "bench_sweep_h100_8b_d0_d16384.json",
                   "bench_sweep_h100_1b_d0_d16384_full.json"]
#: Where the default missed issue 26's 0.95 of the best single-stream decode: the 1B model at 16k tokens, 433.8
#: against the unified pool's 458.4 tok/s (0.946). One stream has one sequence either way; the closing note says so.
#: And the 8B model at 16k on the H100 (2026-12-07): the sweep's default 174.4 against -np 8 -kvu's 191.2 (0.91),
#: where the same call's own bench level, the same default flags, measured 194.1: run-to-run spread, not the layout.
#: And the 1B model's full sweep at 16k on the H100 (2026-12-07): 505.6 against -np 4's 543.6 (0.93), where flag
#: sets that give one stream the same work (-np 1, 4, 8, split or unified) spread 528.5-543.6 and the call's own
#: bench level, the default's flags, measured 551.7.
C1_MISSES = {("bench_sweep_h200_1b_d0_d16384_split.json", 16384): 0.94,
             ("bench_sweep_h100_8b_d0_d16384.json", 16384): 0.90,
             ("bench_sweep_h100_1b_d0_d16384_full.json", 16384): 0.92}


#: Sweeps of every flag set (sweep.alternatives with nothing left out), read by the test below against issue 26's
#: goals, with their single-stream misses: the 1B model at 16k (above, 0.93) and the 8B model at 16k on the H100
#: (2026-12-07): 173.2 against -np 8 -kvu's 187.8 (0.92), where the flag sets that give one stream the same work
#: measured 170.4-187.8 in the same call.
FULL_SWEEPS = {"bench_sweep_h100_1b_d0_d16384_full.json": {16384: 0.92},
               "bench_sweep_h100_8b_d16384_full.json": {16384: 0.92}}


@pytest.mark.parametrize("name", sorted(FULL_SWEEPS))
def test_full_sweeps_meet_the_issue_goals_at_8_clients(name):
    """Each full sweep measured every flag set (or recorded why one could not start: the 8B model's -fa off at the
    default 577,536-token pool failed to create its context on the H100), and the default meets issue 26's goals at
    8 clients: at least 0.95 of the best end-to-end tokens/s and a TTFT p50 no worse than 1.1x the best, and among
    the slot layouts (-np 1, 4, 8, with or without -kvu) it is the best on both; single-stream decode at least 0.95
    of the best but where recorded above."""
    import json
    import shlex

    from roles.bench import sweep

    doc = json.loads((Path(__file__).resolve().parents[1] / "data" / name).read_text())
    runs = doc["hosts"]["@local"][0]["sweep"]
    default = next(r for r in runs if r["label"] == "default")
    assert "-np 8" in default["flags"] and "-kvu" not in default["flags"].split()  # the planner's default layout
    # every flag set the sweep has for the default (the 0.3.36 tree's `-fa on|off` form), each with its own flags
    assert [(r["label"], r["flags"]) for r in runs] == [(a, shlex.join(f)) for a, f in
                                                         sweep.alternatives(default["flags"], "value")]
    assert all(r["figures"] or r["error"] for r in runs)
    rows = sweep.ratios(runs)
    for r in sweep.ratios([r for r in runs if r["label"] == "default" or r["label"].startswith("-np ")]):
        if r["concurrency"] == 8 and r["figure"] in ("aggregate_e2e_tps", "ttft_p50_ms"):
            assert r["best_label"] == "default", r  # the slot layout
    for r in rows:
        if r["concurrency"] == 8 and r["figure"] == "aggregate_e2e_tps":
            assert r["ratio"] >= 0.95, r
        if r["concurrency"] == 8 and r["figure"] == "ttft_p50_ms":
            assert r["default"] <= 1.1 * r["best"], r
        if r["concurrency"] == 1 and r["figure"] == "decode_tps":
            assert r["ratio"] >= FULL_SWEEPS[name].get(r["depth"], 0.95), r
    assert {r["concurrency"] for r in rows} >= {1, 8}


#: The single-stream misses above measured again in rounds (`v100kit bench --sweep --sweep-rounds N`, each flag set
#: started N times in rotating order, medians compared; tools/gpu/README.md "Noise between starts"), 2026-12-07 on
#: H100s (each call's own machine): {file: (rounds, the default's ratio to the best median, as the goal reads it)}.
#: With 5 rounds both models meet 0.95; with 3 the 1B model read 0.94 and the 8B 0.95 (0.950).
ROUNDS_SWEEPS = {"bench_sweep_h100_1b_d16384_c1_rounds3.json": (3, 0.94),
                 "bench_sweep_h100_1b_d16384_c1_rounds5.json": (5, 0.95),
                 "bench_sweep_h100_8b_d16384_c1_rounds3.json": (3, 0.95),
                 "bench_sweep_h100_8b_d16384_c1_rounds5.json": (5, 0.95)}


@pytest.mark.parametrize("name", sorted(ROUNDS_SWEEPS))
def test_the_single_stream_misses_are_the_spread_between_starts(name):
    """Each flag set's single-stream decode at 16k tokens, started several times: the median of its rounds is the
    figure compared (recomputed here from the rounds' own values with a sort, not with the sweep's code), in the
    5-round calls the default's spread between its own starts is wider than the 5 % the goal allows (172.4-187.6
    and 470.7-522.0 tok/s: one start against the best of many is partly luck), and the default reaches ROUNDS_SWEEPS' ratio of the best median: 0.95 with 5 rounds."""
    import json

    from roles.bench import sweep

    rounds, goal = ROUNDS_SWEEPS[name]
    doc = json.loads((Path(__file__).resolve().parents[1] / "data" / name).read_text())
    runs = doc["hosts"]["@local"][0]["sweep"]
    assert runs[0]["label"] == "default" and "-np 8" in runs[0]["flags"] and "-kvu" not in runs[0]["flags"].split()
    medians = {}
    for r in runs:
        per_round = [next(f["value"] for f in x["figures"] if f["figure"] == "decode_tps") for x in r["rounds"]]
        assert len(per_round) == rounds and not any(x["error"] for x in r["rounds"])
        medians[r["label"]] = sorted(per_round)[rounds // 2]  # an odd number of rounds: the middle one
        assert next(f["value"] for f in r["figures"] if f["figure"] == "decode_tps") == medians[r["label"]]
        if r["label"] == "default" and rounds == 5:
            assert max(per_round) / min(per_round) > 1 / 0.95, per_round
    ratio = medians["default"] / max(medians.values())
    assert round(ratio, 2) >= goal, medians
    r = next(x for x in sweep.ratios(runs) if x["figure"] == "decode_tps")
    assert r["ratio"] == pytest.approx(ratio)


@pytest.mark.parametrize("name", MEASURED_SWEEPS)
def test_the_default_slot_layout_is_the_one_that_served_8_clients_best(name, shapes):
    """In every recorded sweep the default's flags (a KV stream per slot: -np 8 without -kvu) gave the best
    end-to-end tokens/s and TTFT p50 at 8 clients, and at least 0.95 of the best single-stream decode; and the
    planner still renders that layout (no -kvu) for an instance with slots left unset. Flip the default back to the
    unified pool and this fails: the measurement says it served 8 clients slower."""
    import json

    from roles.bench import sweep

    doc = json.loads((Path(__file__).resolve().parents[1] / "data" / name).read_text())
    runs = doc["hosts"]["@local"][0]["sweep"]
    default = next(r for r in runs if r["label"] == "default")
    assert "-kvu" not in default["flags"].split() and "-np 8" in default["flags"], default["flags"]
    rows = sweep.ratios(runs)
    for r in rows:
        if r["concurrency"] == 8 and r["figure"] in ("aggregate_e2e_tps", "ttft_p50_ms"):
            assert r["best_label"] == "default", r
        if r["concurrency"] == 1 and r["figure"] == "decode_tps":
            assert r["ratio"] >= C1_MISSES.get((name, r["depth"]), 0.95), r
    assert any(r["concurrency"] == 8 and r["figure"] == "aggregate_e2e_tps" for r in rows), rows
    _, a = decide(shapes["small"], V100_16)
    assert a["-np"] == "8" and "-kvu" not in a and "--kv-unified" not in a


def test_the_h200_sweep_at_16_clients_every_flag_set_and_its_misses():
    """Issue 26's full sweep with 16 clients (2026-12-07 on the lent H200, one round; tools/gpu/README.md has the
    command): every flag set measured at c=1, 8 and 16 at depths 0 and 16384. The default misses 0.95 at 8 clients
    in this call, and the data say how far that is from its flags:
    - at depth 0 the prompts (39 tokens) fit one physical batch of 256 or more, so the default (-ub 512), -ub 256
      and -ub 1024 do the same work; in this call they measured more than 5 % apart, and the best of the three
      reached 0.95 of the sweep's best at 8 clients (the default ran first and measured lowest);
    - at 16384 -ub 1024 served 8 clients best (end to end and first token), where prompts split into batches:
      a lead that the 1B model's H100 sweep did not show (the default led there) and the 8B one did (4.6 %)."""
    import json

    from roles.bench import sweep

    doc = json.loads((Path(__file__).resolve().parents[1] / "data"
                      / "bench_sweep_h200_1b_d0_d16384_c16_full.json").read_text())
    inst = doc["hosts"]["@local"][0]
    runs = inst["sweep"]
    assert len(runs) == 9 and not any(r["error"] for r in runs)
    for r in runs:
        got = {(f["figure"], f["depth"], f["concurrency"]) for f in r["figures"] if f["value"] is not None}
        for depth in (0, 16384):
            assert {("aggregate_e2e_tps", depth, c) for c in (8, 16)} <= got, r["label"]
            assert {("ttft_p50_ms", depth, c) for c in (1, 8, 16)} <= got, r["label"]
    assert max(lv["prompt_tokens"] for lv in inst["levels"] if lv["depth"] == 0) < 256

    def value(label, figure, depth, c):
        run = next(r for r in runs if r["label"] == label)
        return next(f["value"] for f in run["figures"] if (f["figure"], f["depth"], f["concurrency"]) ==
                    (figure, depth, c))

    rows = {(r["figure"], r["depth"], r["concurrency"]): r for r in sweep.ratios(runs)}
    same_work = ("default", "-ub 256", "-ub 1024")
    for figure in ("aggregate_e2e_tps", "aggregate_decode_tps"):
        best = max(value(x["label"], figure, 0, 8) for x in runs)
        own = [value(label, figure, 0, 8) for label in same_work]
        assert rows[(figure, 0, 8)]["ratio"] < 0.95 and min(own) == value("default", figure, 0, 8)
        assert max(own) / min(own) > 1 / 0.95 and max(own) >= 0.95 * best, own
    for figure in ("aggregate_e2e_tps", "ttft_p50_ms"):
        assert rows[(figure, 16384, 8)]["best_label"] == "-ub 1024"
    assert rows[("aggregate_e2e_tps", 16384, 8)]["ratio"] == pytest.approx(
        value("default", "aggregate_e2e_tps", 16384, 8) / value("-ub 1024", "aggregate_e2e_tps", 16384, 8))
