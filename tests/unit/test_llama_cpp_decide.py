"""The llama_cpp role's refusal functions (roles/llama_cpp/decide.py), called directly. Expected values come from
the rules' sources: CUDA release notes (docs/volta.md §2), llama.cpp's flash-attention rules (docs/volta.md §5)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest

from roles.cuda.versions import Toolkit
from roles.llama_cpp.decide import (Instance, Tree, architecture_problems, architectures, flash_attn_problems,
                                    host_model_problems, plan, source, source_file_problems, source_model, toolkit)
from roles.llama_cpp.tree import read_tree
from roles.llama_cpp.versions import DEFAULT_SOURCE, Source
from roles.llama_cpp.settings import LlamaCppInstance
from roles.settings import Settings, load_settings

CUDA_124 = Toolkit("12.4", "distro", {}, "/usr/bin/nvcc", None, "g++-13")
CUDA_118 = Toolkit("11.8", "distro", {}, "/usr/bin/nvcc", None, "g++-11")


def test_a_source_needs_a_checksum_and_a_ref_needs_a_source():
    src, problems = source(Settings(llama_cpp_source="https://x.example/l.tar.gz"))
    assert src.sha256 == "" and len(problems) == 1 and "no checksum given" in problems[0]
    src, problems = source(Settings(llama_cpp_ref="b6000"))
    assert src == DEFAULT_SOURCE and "llama_cpp_ref = 'b6000': no source for this ref" in problems[0]
    assert source(Settings()) == (DEFAULT_SOURCE, [])


def test_a_control_machine_archive_must_exist_and_match_its_checksum(tmp_path):
    archive = tmp_path / "l.tar.gz"
    archive.write_bytes(b"archive")
    good = hashlib.sha256(b"archive").hexdigest()
    assert source_file_problems(Source("r", str(archive), good)) == []
    assert f"the archive's sha256 is {good}" in source_file_problems(Source("r", str(archive), "0" * 64))[0]
    assert "no such file on the control machine" in source_file_problems(Source("r", str(tmp_path / "no"), good))[0]
    assert source_file_problems(Source("r", "https://x.example/l.tar.gz", "0" * 64)) == []


def test_the_toolkit_must_be_installed():
    assert toolkit(Settings(), [CUDA_124]) == (CUDA_124, [])
    tk, problems = toolkit(Settings(llama_cpp_cuda_version="11.8"), [CUDA_124])
    assert tk is None and "llama_cpp_cuda_version = '11.8': not among the installed toolkits" in problems[0]
    assert toolkit(Settings(llama_cpp_cuda_version="11.8"), [CUDA_124, CUDA_118]) == (CUDA_118, [])


def test_architectures_follow_settings_then_gpus_then_volta():
    assert architectures(Settings(), []) == ("70",)
    assert architectures(Settings(), [{"compute_cap": "7.0"}, {"compute_cap": "8.0"}]) == ("70", "80")
    assert architectures(Settings(llama_cpp_cuda_architectures=["75"]), [{"compute_cap": "7.0"}]) == ("75",)


def test_architectures_outside_the_toolkit_are_refused():
    # CUDA 12.x compiles sm_50..sm_90 (12.0 removed Kepler; sm_100 came with 12.8); 11.8 still builds sm_35
    assert architecture_problems(("70",), CUDA_124) == []
    (why,) = architecture_problems(("70", "100"), CUDA_124)
    assert "CUDA 12.4 builds sm_50..sm_90, not sm_100" in why
    assert len(architecture_problems(("37", "100"), CUDA_124)) == 2
    assert architecture_problems(("37",), CUDA_118) == []
    assert architecture_problems(("100",), None) == []


def test_a_model_path_must_be_on_the_host():
    assert host_model_problems("k", "/m.gguf", lambda path: True) == []
    assert "k.model_path = '/m.gguf': no such file on the host" in host_model_problems("k", "/m.gguf", lambda p: False)[0]


def test_a_model_source_needs_its_checksum_and_must_match_it(tmp_path):
    s = Settings()
    t = Tree("pypi-0.3.16", None, None, False)
    url = "https://models.example/tiny.gguf"
    assert source_model("k", LlamaCppInstance(model_source=url, model_sha256="a" * 64), s, [], t) == \
        (url, None, None, [], None)
    placed, memory, _, problems, _ = source_model("k", LlamaCppInstance(model_source=url), s, [], t)
    assert memory is None and "k.model_sha256 = None: model_source needs a checksum" in problems[0]
    f = tmp_path / "m.gguf"
    f.write_bytes(b"not gguf")
    placed, _, _, problems, _ = source_model("k", LlamaCppInstance(model_source=str(f), model_sha256="a" * 64), s, [], t)
    assert placed == str(f) and f"the file's sha256 is {hashlib.sha256(b'not gguf').hexdigest()}" in problems[0]
    _, _, _, problems, _ = source_model("k", LlamaCppInstance(model_source=str(tmp_path / "no"), model_sha256="a" * 64),
                                        s, [], t)
    assert "no such file on the control machine" in problems[0]


def test_a_quantized_v_cache_needs_flash_attention():
    def inst(**kw) -> Instance:
        return Instance("m", LlamaCppInstance(model_path="/m.gguf", **kw), "/m.gguf", None, None)
    assert flash_attn_problems([inst(flash_attn="off", cache_type_v="f16"), inst(flash_attn="on", cache_type_v="q8_0"),
                                inst(flash_attn="auto", cache_type_v="q4_0")]) == []
    (why,) = flash_attn_problems([inst(flash_attn="off", cache_type_v="q8_0")])
    assert why.startswith("llama_cpp_instances.m.flash_attn = 'off': a quantized V cache (q8_0) needs flash attention")


def _tar_gz(path, members: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_truncated_archive_is_refused_by_its_checksum_not_a_traceback(tmp_path):
    # CI's lab run (stop 19): a half-written .tar.gz raised EOFError from the tree reader before any refusal
    good = _tar_gz(tmp_path / "good.tar.gz", {"l/src/llama-arch.cpp": os.urandom(200_000)})
    corrupt = tmp_path / "corrupt.tar.gz"
    corrupt.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"corrupt\.tar\.gz: not a readable \.tar\.gz"):
        read_tree(corrupt)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    settings = load_settings("box", {
        "llama_cpp_source": str(corrupt), "llama_cpp_source_sha256": hashlib.sha256(good.read_bytes()).hexdigest(),
        "llama_cpp_instances": {"m": {"model_source": str(model),
                                      "model_sha256": hashlib.sha256(b"GGUF").hexdigest()}}})
    p, problems = plan(settings, [CUDA_124], [], lambda path: True)
    assert p is None and any(x.startswith("llama_cpp_source_sha256 = ") for x in problems), problems
