"""roles/llama_cpp/attention.py: the flash-attention placement rules per form of llama.cpp's code.

Expected values come from outside the rules: docs/volta.md §5 and the measurements of project issue 18 (an H200,
`llama-bench -fa 1 -d 4096`: head 64 with q8_0 K/V gave pp512 61 t/s against 31107 with f16, head 256 with q8_0 did
not finish in 120 s, head 128 was normal; the 0.3.36 tree kept q8_0 KV on the GPU at 64 and 256), and the
messages llama.cpp prints for its refusals and aborts (quoted in each test)."""

from __future__ import annotations

import pytest

from roles.llama_cpp.attention import (CACHE_TYPES, FORM_BEST_KERNEL, FORM_INLINE, RULES, auto_placement, cell,
                                       explain, matrix, placement)

V100 = (7, 0)
OLD, NEW = FORM_INLINE, FORM_BEST_KERNEL


@pytest.mark.parametrize("head", [64, 128, 256])
def test_f16_kv_with_flash_attention_is_on_the_gpu_in_both_trees(head):
    # issue 18: f16 KV with -fa 1 ran at full speed at every head size in both trees
    for form in (OLD, NEW):
        for cc in ((7, 0), (9, 0)):
            assert placement(form, cc, head, head, "f16", "f16", True) == "gpu"


def test_old_tree_puts_q8_0_flash_attention_on_the_cpu_except_at_head_128():
    # issue 18 / docs/volta.md §5: head 64 q8_0 -> 61 t/s (CPU), head 256 q8_0 -> never finished, 128 normal
    assert placement(OLD, V100, 64, 64, "q8_0", "q8_0", True) == "cpu"
    assert placement(OLD, V100, 256, 256, "q8_0", "q8_0", True) == "cpu"
    assert placement(OLD, V100, 128, 128, "q8_0", "q8_0", True) == "gpu"
    # "the rule is in the source, not the GPU: Volta is no exception" (docs/volta.md §5): same on an H200
    assert placement(OLD, (9, 0), 64, 64, "q8_0", "q8_0", True) == "cpu"


def test_old_tree_cpu_verdicts_name_supports_op():
    where, source = explain(OLD, V100, 64, 64, "q8_0", "q8_0", True)
    assert where == "cpu" and "ggml-cuda.cu" in source and "supports_op" in source


def test_new_tree_keeps_quantized_kv_on_the_gpu_at_64_and_256():
    # issue 18: "quantized KV stays on the GPU at head sizes 64 and 256" (0.3.36, measured 41663 / 20730 pp512)
    for head in (64, 128, 256):
        for kv in ("q8_0", "q4_0"):
            assert placement(NEW, V100, head, head, kv, kv, True) == "gpu"


def test_a_quantized_v_cache_without_flash_attention_is_refused():
    # llama.cpp: "V cache quantization requires flash_attn" (0.3.16) / "quantized V cache requires flash_attn to be
    # enabled" (0.3.36); a quantized K alone is fine without it (docs/volta.md §5, roles/settings.py cache_type_v)
    for form in (OLD, NEW):
        assert placement(form, V100, 128, 128, "q8_0", "q8_0", False) == "refused"
        assert placement(form, V100, 128, 128, "q8_0", "f16", False) == "gpu"
        assert placement(form, V100, 128, 128, "f16", "f16", False) == "gpu"


def test_old_tree_aborts_on_a_pair_without_a_vector_kernel():
    # fattn-common.cuh on_no_fattn_vec_case: "Supported combinations: K == q4_0, V == q4_0 / q8_0, q8_0 / f16, f16;
    # Compile with GGML_CUDA_FA_ALL_QUANTS for all combinations"
    assert placement(OLD, V100, 128, 128, "q8_0", "f16", True) == "abort"
    assert placement(OLD, V100, 128, 128, "q8_0", "f16", True, fa_all_quants=True) == "gpu"
    assert placement(OLD, V100, 128, 128, "q4_0", "q4_0", True) == "gpu"


def test_auto_is_a_value_only_in_the_new_form():
    with pytest.raises(ValueError, match="no -fa auto"):
        auto_placement(OLD, V100, 128, 128, "f16", "f16")
    assert auto_placement(NEW, V100, 128, 128, "q8_0", "q8_0") == ("gpu", True)
    # iq4_nl has no CUDA FA kernel in 0.3.36 (ggml_cuda_fattn_kv_type_supported): auto turns FA off, K stays on GPU
    assert auto_placement(NEW, V100, 128, 128, "iq4_nl", "f16") == ("gpu", False)


def test_unknown_form_or_type_raises():
    with pytest.raises(ValueError, match="unknown llama.cpp flash-attention form"):
        placement("cuda-fa-future", V100, 128, 128, "f16", "f16", True)
    with pytest.raises(ValueError, match="unknown KV cache type"):
        placement(OLD, V100, 128, 128, "q2_k", "f16", True)


def test_matrix_holds_every_cell_and_reads_back_like_placement():
    m = matrix(OLD, ccs=(V100,), heads=((64, 64), (128, 128)))
    assert m["form"] == OLD and len(m["cells"]["7.0"]["64/64"]["on"]) == len(CACHE_TYPES) ** 2
    for tk in CACHE_TYPES:
        for tv in CACHE_TYPES:
            for fa in (True, False):
                assert cell(m, V100, 64, 64, tk, tv, fa) == explain(OLD, V100, 64, 64, tk, tv, fa)
    assert set(RULES) == {OLD, NEW}
