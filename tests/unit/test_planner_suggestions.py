"""The planner's refusal names the smaller KV cache that fits (mutation survivors, docs/mutation.md).

The measured 8B shape (tests/data/llama_cpp_memory_measured.json) on a 16 GB V100 (16160 MiB, 95 % usable):
about 15350 MiB of budget less 4403.5 MiB of weights, 728 MiB of CUDA context and growth and a compute buffer
under 1 GiB leaves roughly 9.5-10 GiB for the KV cache. By ggml's block layouts the KV cache per token is
2 x 32 layers x 1024 elements x 2 bytes (f16) = 128 KiB, x 34/32 bytes (q8_0) = 68 KiB, x 18/32 (q4_0) = 36 KiB:
100k tokens need 12.2 GiB in f16 but 6.5 GiB in q8_0; 200k need 13.0 GiB in q8_0 but 6.9 GiB in q4_0; 400k need
13.7 GiB even in q4_0."""

from __future__ import annotations

import pytest

from roles.planner import LLAMA_CPP_CACHE_TYPES, V100_16GB_MIB, plan_llama_cpp
from tests.unit.test_llama_cpp_memory_measured import _model


@pytest.mark.parametrize("context, smaller", [(100_000, "q8_0"), (200_000, "q4_0"), (400_000, None)])
def test_a_refusal_names_the_first_smaller_kv_cache_that_fits(context, smaller):
    p = plan_llama_cpp(_model("8b"), V100_16GB_MIB, 1, context, "f16", "f16", 1, 0.95, 99)
    assert p.outcome == "does_not_fit"
    lines = [r for r in p.reasons if "KV cache (-ctk" in r]
    if smaller is None:
        assert lines == []
    else:
        assert lines == [f"or a {smaller} KV cache (-ctk {smaller} -ctv {smaller}), which fits"]
        assert plan_llama_cpp(_model("8b"), V100_16GB_MIB, 1, context, smaller, smaller, 1, 0.95, 99).fits


def test_no_smaller_kv_cache_is_suggested_when_the_cache_is_already_the_smallest():
    p = plan_llama_cpp(_model("8b"), V100_16GB_MIB, 1, 400_000, "q4_0", "q4_0", 1, 0.95, 99)
    assert p.outcome == "does_not_fit"
    assert not [r for r in p.reasons if "KV cache (-ctk" in r]


def test_cache_types_mapping_lists_its_names():
    assert repr(LLAMA_CPP_CACHE_TYPES) == (
        "LLAMA_CPP_CACHE_TYPES(f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)")
