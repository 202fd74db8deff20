"""TurboMind's KV arithmetic (roles/lmdeploy/planner.py) against LMDeploy's own code: the per-layer block size
against block::Layout::layer_size() compiled from the v0.15.0 tag (tests/data/lmdeploy/layer_size-0.15.0.txt,
tools/lmdeploy/layout_probe.cc), and the cache budget against turbomind.cc:291-301 (floor(free * ratio))."""

from __future__ import annotations

from pathlib import Path

import pytest

from roles.lmdeploy.planner import KvShape, layer_block_bytes, plan_kv

DATA = Path(__file__).resolve().parents[1] / "data" / "lmdeploy" / "layer_size-0.15.0.txt"


def _rows() -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in line.split()) for line in DATA.read_text().splitlines()
            if line and not line.startswith("#")]


def test_the_recorded_table_covers_every_kv_policy_and_mla():
    rows = _rows()
    assert len(rows) == 270
    assert {(t, q) for _, _, _, t, q, _ in rows} == {(0, 16), (16, 8), (16, 4)}
    assert any(d == 576 for d, *_ in rows)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: "-".join(map(str, r[:5])))
def test_layer_block_bytes_is_lmdeploys_layer_size(row):
    head_dim, heads, block_len, t_bits, q_bits, expected = row
    policy = 0 if q_bits == 16 else q_bits
    assert t_bits == (0 if policy == 0 else 16)  # the BlockConfig rule of unified_attention_layer.cc:147-155
    assert layer_block_bytes(head_dim, heads, block_len, policy) == expected


# Qwen2.5-7B-Instruct-AWQ's config.json (huggingface.co/Qwen/Qwen2.5-7B-Instruct-AWQ): 28 layers, 28 heads, 4 KV heads,
# hidden 3584 (head_dim 128), max_position_embeddings 32768.
QWEN25_7B = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
             "max_position_embeddings": 32768}


def _layer(head_dim, heads, block_len, t_bits, q_bits):
    return next(r[5] for r in _rows() if r[:5] == (head_dim, heads, block_len, t_bits, q_bits))


def test_a_7b_awq_model_on_a_32_gib_v100():
    shape = KvShape.from_config(QWEN25_7B)
    assert shape == KvShape(28, 4, 128)
    free = 27 * 2**30  # free after ~5.5 GB of weights on a 32 GB V100
    plan = plan_kv(free, shape, session_len=32768)
    assert plan.cache_bytes == int(free * 0.8)  # turbomind.cc:299, default ratio messages.py:321
    assert plan.block_bytes == 28 * _layer(128, 4, 64, 0, 16)
    assert plan.blocks == plan.cache_bytes // plan.block_bytes
    assert plan.tokens == plan.blocks * 64
    assert plan.session_blocks == 512 and plan.fits


def test_int8_kv_and_tensor_parallel_use_lmdeploys_sizes():
    shape = KvShape(32, 8, 128)
    plan = plan_kv(10 * 2**30, shape, session_len=4096, tp=2, quant_policy=8, cache_block_seq_len=128)
    assert plan.block_bytes == 32 * _layer(128, 4, 128, 16, 8)


def test_a_session_that_does_not_fit_is_refused_with_the_setting_and_a_fix():
    plan = plan_kv(256 * 2**20, KvShape(28, 4, 128), session_len=131072, key="lmdeploy_instances.qwen")
    assert not plan.fits
    line = plan.problems[0]
    assert line.startswith("lmdeploy_instances.qwen.session_len = 131072: ")
    assert f"at most {plan.tokens}" in line and "Fix:" in line


@pytest.mark.parametrize("kwargs", [{"cache_max_entry_count": 1.0}, {"cache_max_entry_count": 0},
                                    {"quant_policy": 16}, {"quant_policy": 42}, {"tp": 3}])
def test_values_turbomind_refuses_raise(kwargs):
    with pytest.raises(ValueError):
        plan_kv(2**30, KvShape(28, 4, 128), session_len=4096, **kwargs)


def test_vision_language_configs_read_their_text_config():
    cfg = {"text_config": {**QWEN25_7B, "head_dim": 64}}
    assert KvShape.from_config(cfg) == KvShape(28, 4, 64)


def test_a_config_with_zero_attention_heads_is_a_value_error_not_a_zero_division():
    """decide.instance turns KeyError/TypeError/ValueError of KvShape.from_config into a problem line."""
    import pytest
    from roles.lmdeploy.planner import KvShape
    with pytest.raises(ValueError, match="num_attention_heads"):
        KvShape.from_config({"num_hidden_layers": 2, "num_attention_heads": 0, "hidden_size": 64})
