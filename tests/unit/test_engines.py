"""The rules both engine roles share (roles/engines.py), called directly."""

from __future__ import annotations

import hashlib

from roles.engines import (compute_capability, gpu_count, gpu_memory_mib, is_url, network_listener, one_model,
                           port_clashes, sha256_file)
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import Settings
from roles.vllm.settings import VllmInstance

V100_16 = {"index": 0, "compute_cap": "7.0", "memory_mib": 16160}
V100_32 = {"index": 1, "compute_cap": "7.0", "memory_mib": 32510}


def test_a_port_used_twice_is_reported_at_the_later_use_naming_the_holder():
    clashes = port_clashes("llama_cpp_instances", [("a", 8080), ("b", 8080), ("c", 8081)], lambda n: f"instance {n!r}")
    assert clashes["a"] == [] and clashes["c"] == []
    assert clashes["b"] == ["llama_cpp_instances.b.port = 8080: instance 'a' already uses it. "
                            "Fix: give every instance its own port"]


def test_a_port_another_role_uses_is_a_clash():
    clashes = port_clashes("vllm_instances", [("m", 8081)], lambda n: f"vllm@{n}", {8081: "llama-server@tiny"})
    assert clashes["m"] == ["vllm_instances.m.port = 8081: llama-server@tiny already uses it. "
                            "Fix: give every instance its own port"]


def test_only_an_unprotected_non_loopback_listener_is_refused():
    assert network_listener("k", "127.0.0.1", False, "why", "fix") == []
    assert network_listener("k", "::1", False, "why", "fix") == []
    assert network_listener("k", "0.0.0.0", True, "why", "fix") == []
    assert network_listener("k", "0.0.0.0", False, "why", "fix") == ["k.listen = '0.0.0.0': why. Fix: fix"]


def test_exactly_one_of_model_path_and_model_source():
    assert one_model("k", VllmInstance(model_path="/m"), "fix") == []
    assert one_model("k", VllmInstance(model_source="/here"), "fix") == []
    assert one_model("k", VllmInstance(), "fix") == [
        "k = {'model_path': None, 'model_source': None}: needs exactly one of model_path and model_source. Fix: fix"]
    both = LlamaCppInstance(model_path="/m.gguf", model_source="/here.gguf")
    assert one_model("k", both, "fix", shown={"x": 1}) == [
        "k = {'x': 1}: needs exactly one of model_path and model_source. Fix: fix"]


def test_gpus_come_from_nvidia_smi_else_from_the_settings():
    s = Settings(gpu_compute_capability="8.0", gpu_count=4, gpu_memory_mib=40960)
    assert (compute_capability(s, []), gpu_count(s, []), gpu_memory_mib(s, [])) == ((8, 0), 4, 40960)
    two = [V100_16, V100_32]
    assert (compute_capability(s, two), gpu_count(s, two), gpu_memory_mib(s, two)) == ((7, 0), 2, 16160)


def test_sha256_file_and_urls(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x" * (3 << 20))
    assert sha256_file(str(f)) == hashlib.sha256(b"x" * (3 << 20)).hexdigest()
    assert is_url("https://a.example/x.gguf") and is_url("http://a.example/x")
    assert not is_url("/srv/x.gguf") and not is_url("~/x.gguf") and not is_url("file:///x")
