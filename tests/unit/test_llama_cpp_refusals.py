"""Each refusal of a llama.cpp instance, whole: the dotted key of the setting, its value, why, and the fix (issue
14: the mutation run found that tests looked for a word of these lines, so a lost key or value, or another
instance's GPU count, passed). Expected lines are the brief's rule written out for each case: `key = value: why.
Fix: what to do`, with the figures of the case (2 GPUs: indices 0..1)."""

from __future__ import annotations

import pytest

from roles.cuda.versions import DISTRO_TOOLKITS
from roles.llama_cpp.decide import plan
from roles.settings import load_settings
from tests.unit.test_memory_plan_gpus import gpu

TOOLKITS = list(DISTRO_TOOLKITS.values())
TWO_GPUS = [gpu(i, "Tesla V100-SXM2-16GB", 16160, "7.0") for i in range(2)]  # nvidia-smi rows
ON_HOST = "/srv/models/ok.gguf"
K = "llama_cpp_instances.chat"


def problems(inst: dict, gpus: list | None = None, **top) -> list[str]:
    s = load_settings("h", {"llama_cpp_instances": {"chat": inst}, "cuda_versions": ["11.8"], **top})
    p, found = plan(s, TOOLKITS, gpus or [], lambda path: path == ON_HOST)
    assert (p is None) == bool(found)
    return found


@pytest.mark.parametrize("inst", [{}, {"model_path": ON_HOST, "model_source": "/m.gguf"}])
def test_exactly_one_model_setting(inst):
    shown = {"model_path": inst.get("model_path"), "model_source": inst.get("model_source"), "model_sha256": None,
             "model_parts_sha256": None}
    assert problems(inst) == [f"{K} = {shown!r}: needs exactly one of model_path and model_source. Fix: set "
                              "model_path (a file on the host) or model_source with model_sha256"]


def test_a_model_path_missing_on_the_host():
    assert problems({"model_path": "/srv/models/missing.gguf"}) == [
        f"{K}.model_path = '/srv/models/missing.gguf': no such file on the host. Fix: copy the model there, or use "
        "model_source with model_sha256"]


def test_a_network_listener_needs_an_api_key():
    assert problems({"model_path": ON_HOST, "listen": "10.0.0.5"}) == [
        f"{K}.listen = '10.0.0.5': reachable from the network without an API key. Fix: set api_key_file, or listen "
        "on 127.0.0.1 behind your own proxy"]
    assert problems({"model_path": ON_HOST, "listen": "::1"}) == []  # loopback, IPv6


def test_gpu_indices_beyond_the_visible_gpus():
    assert problems({"model_path": ON_HOST, "gpus": [2]}, TWO_GPUS) == [
        f"{K}.gpus = [2]: this host has GPUs 0..1. Fix: list existing GPU indices, or leave gpus unset"]
    assert problems({"model_path": ON_HOST, "gpus": [1]}, TWO_GPUS) == []


def test_gpu_indices_beyond_gpu_count_before_a_driver_answers():
    assert problems({"model_path": ON_HOST, "gpus": [1]}, gpu_count=1) == [
        f"{K}.gpus = [1]: this host has GPUs 0..0 (gpu_count; no driver answers yet). Fix: list existing GPU "
        "indices, or leave gpus unset"]
    assert problems({"model_path": ON_HOST, "gpus": [1]}, gpu_count=2) == []


def test_an_unreadable_api_key_file_is_named_and_its_content_never_quoted(tmp_path):
    assert problems({"model_path": ON_HOST, "api_key_file": "/nonexistent/key"}) == [
        f"{K}.api_key_file = '/nonexistent/key': cannot be read as text (FileNotFoundError). Fix: write the key "
        "alone into a file readable by you"]


def test_gpu_indices_are_those_nvidia_smi_lists_with_a_gap():
    """Issue 27: a box whose GPU 1 fell off the bus lists GPUs 0 and 2 (nvidia-smi keeps each index): gpus: [1] is
    refused naming the indices there are, and gpus: [2] is the third card, accepted (it was refused as beyond
    "0..1", and [1] was planned on gpu_memory_mib's figure)."""
    gap = [gpu(0, "Tesla V100-SXM2-16GB", 16160, "7.0"), gpu(2, "Tesla V100-SXM2-32GB", 32510, "7.0")]
    assert problems({"model_path": ON_HOST, "gpus": [1]}, gap) == [
        f"{K}.gpus = [1]: this host has GPUs 0, 2: nvidia-smi lists no GPU 1. Fix: list existing GPU indices, or "
        "leave gpus unset"]
    assert problems({"model_path": ON_HOST, "gpus": [2]}, gap) == []
