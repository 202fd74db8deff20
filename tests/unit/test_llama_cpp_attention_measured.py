"""The attention rules (roles/llama_cpp/attention.py) against where llama.cpp really ran attention on a GPU:
tests/data/llama_cpp_fa_h200.json, measured on an NVIDIA H200 for both pinned trees (0.3.16, 0.3.36), head sizes
64/128/256, every K/V pair of f16, q8_0, q4_0 and bf16, flash attention on and off. The placement there is the
scheduler's own assignment of the FLASH_ATTN_EXT nodes (GGML_SCHED_DEBUG), the graph split count, and llama.cpp's
exit status and error line; the speeds show what each placement costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.llama_cpp.attention import placement
from roles.llama_cpp.versions import SOURCES

DATA = json.loads((Path(__file__).parents[1] / "data" / "llama_cpp_fa_h200.json").read_text())
H200 = (9, 0)


@pytest.mark.parametrize("cell", DATA["cells"], ids=lambda c: f"{c['tree']}-h{c['head_size']}-{c['type_k']}-"
                                                              f"{c['type_v']}-fa{int(c['flash_attn'])}")
def test_rules_predict_the_measured_placement(cell):
    form = SOURCES[f"pypi-{cell['tree']}"].fa_form
    h = cell["head_size"]
    assert placement(form, H200, h, h, cell["type_k"], cell["type_v"], cell["flash_attn"]) == cell["placement"]


def test_cpu_placement_is_the_slowdown_the_toolkit_refuses():
    # every measured CPU cell ran prompt processing at least 30x slower than f16/f16 with FA on, same tree and head
    for c in (c for c in DATA["cells"] if c["placement"] == "cpu"):
        ref = next(r for r in DATA["cells"] if (r["tree"], r["head_size"], r["type_k"], r["type_v"], r["flash_attn"])
                   == (c["tree"], c["head_size"], "f16", "f16", True))
        assert c["pp512_tps"] * 30 < ref["pp512_tps"], c
