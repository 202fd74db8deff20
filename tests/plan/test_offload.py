"""README: the deploy refuses an instance whose model would run layers on the CPU, before any change, unless the
instance sets `allow_offload: true`; then it is planned with those layers on the CPU (docs/promises.md).

The model is a llama-shaped GGUF written with the gguf package (lab/models.py write_llama): LAYERS repeating layers
of zero F32 weights, about 1.1 GiB in all, on a box whose one GPU has 1024 MiB (gpu_memory_mib, no driver answers
yet). Its weights alone are more than the VRAM, so no setting of the context or the KV cache makes it fit."""

from __future__ import annotations

import hashlib
import re
import shlex

import pytest

from lab.models import write_llama
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, plan_uploads

LAYERS, N_EMBD, N_HEAD, N_FF = 22, 1024, 8, 2816
VRAM_MIB = 1024
PLACED = "/var/lib/llm/models/big.gguf"


#: F32 bytes of one repeating layer's matrices (GGUF spec: F32 = 4 bytes per element): four n_embd x n_embd
#: attention matrices (as many KV heads as heads), three n_embd x n_ff FFN matrices
LAYER_BYTES = 4 * (4 * N_EMBD * N_EMBD + 3 * N_EMBD * N_FF)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> dict:
    path = write_llama(tmp_path_factory.mktemp("offload") / "big.gguf", n_embd=N_EMBD, n_head=N_HEAD,
                       n_head_kv=N_HEAD, n_layer=LAYERS, n_ff=N_FF, zero_weights=True)
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
