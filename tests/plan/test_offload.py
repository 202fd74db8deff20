"""README: the deploy refuses an instance whose model would run layers on the CPU, before any change, unless the
instance sets `allow_offload: true`; then it is planned with those layers on the CPU (docs/promises.md).

The model is a llama-shaped GGUF written here with the gguf package: LAYERS repeating layers of f16 weights, about
1.1 GiB in all, on a box whose one GPU has 1024 MiB (gpu_memory_mib, no driver answers yet). Its weights alone are
more than the VRAM, so no setting of the context or the KV cache makes it fit."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import gguf
import numpy as np
import pytest

from lab.models import vocabulary
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, plan_uploads

LAYERS, N_EMBD, N_HEAD, N_FF = 12, 2048, 16, 5632
VRAM_MIB = 1024
PLACED = "/var/lib/llm/models/big.gguf"


def write_big(path: Path) -> Path:
    """A llama GGUF with zero f16 weights (llama.cpp's tensor names and shapes, gguf's writer; numpy shapes are
    ggml's ne reversed)."""
    tokens, scores, types = vocabulary()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("v100kit-offload-test")
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, np.zeros(shape, np.float16))

    t("token_embd.weight", len(tokens), N_EMBD)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, np.float32))
        for m in ("q", "k", "v", "output"):
            t(f"blk.{i}.attn_{m}.weight", N_EMBD, N_EMBD)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, np.float32))
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    t("output.weight", len(tokens), N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


#: f16 bytes of one repeating layer: four n_embd x n_embd attention matrices, three n_embd x n_ff FFN matrices
LAYER_BYTES = 2 * (4 * N_EMBD * N_EMBD + 3 * N_EMBD * N_FF)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> dict:
    path = write_big(tmp_path_factory.mktemp("offload") / "big.gguf")
    assert LAYERS * LAYER_BYTES > VRAM_MIB << 20  # the weights alone do not fit
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"model_source": str(path), "model_sha256": sha, "port": 8081, "context": 1024}


def settings(inst: dict) -> dict:
    return {"gpu_memory_mib": VRAM_MIB, "gpu_count": 1, "llama_cpp_instances": {"big": inst}}


def test_model_that_does_not_fit_is_refused_without_allow_offload(big):
    with pytest.raises(SettingsError) as e:
        plan_uploads(DEBIAN_13, settings(big))
    assert "llama_cpp_instances.big" in str(e.value) and "allow_offload" in str(e.value)


def test_allow_offload_plans_layers_on_the_cpu(big):
    """-ngl N (llama.cpp's --n-gpu-layers, tools/server/README.md) keeps the last N repeating layers on the GPU;
    N at or above the layer count puts them all there (and above it the output layer too). With allow_offload the
    rendered -ngl must leave layers on the CPU, and the layers it keeps on the GPU must fit in its VRAM."""
    cmds, files = plan_uploads(DEBIAN_13, settings({**big, "allow_offload": True}),
                               responses={f"sha256sum {PLACED} 2>": [f"{big['model_sha256']}  {PLACED}"]})
    assert any(c.startswith("systemctl start llama-server@big") for c in map(str, cmds))
    env = files["/etc/llama-server/big.env"]
    args = shlex.split(re.search(r"^LLAMA_SERVER_ARGS=(.*)$", env, re.M).group(1))
    ngl = int(args[args.index("-ngl") + 1])
    assert 0 < ngl < LAYERS, env
    assert ngl * LAYER_BYTES <= VRAM_MIB << 20, env
