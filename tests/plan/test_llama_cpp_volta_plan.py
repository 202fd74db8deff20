"""Plan-level tests (facts in, commands out, nothing executed): the CUDA toolkit a Volta llama.cpp build uses, and
llama.cpp sources in a range known bad on Volta, refused before any command. NVIDIA's repositories and a V100
cannot be reached from here, so these check what deploy.py would run.

Expected values from public sources: CUDA 12.9 builds of llama.cpp fail to allocate their weights on a V100, 12.8
builds of the same source work (ggml-org/llama.cpp#28416); NVIDIA's repositories carry cuda-toolkit-12-8 12.8.1
and cuda-toolkit-12-9 12.9.1 (NVIDIA's install lines: cuda-repo-ubuntu2204-12-8-local_12.8.1,
cuda-repo-ubuntu2204-12-9-local_12.9.1, cuda-repo-debian12-12-8-local_12.8.1); CUDA 13 cannot compile for sm_70
(CUDA 13.0 release notes); #28536 broke flash attention on Volta until #29224 (ggml-org/llama.cpp#29232).
"""

from __future__ import annotations

import hashlib
import logging

import pytest

from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_12, UBUNTU_2204, UBUNTU_2404, plan_commands
from tests.plan.test_llama_cpp_plan import MODEL, ON_GPU, build_command
from tests.plan.test_ubuntu_nvidia_plan import installs
from tests.unit.test_llama_cpp_volta_ranges import ROOT, write_tree

V100 = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05"],
        "systemctl show -p MainPID": ON_GPU}
T4 = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000001, Tesla T4, 7.5, 15360, 0, 15360, Enabled, 580.95.05"], "systemctl show -p MainPID": ON_GPU}
INSTANCES = {"llama_cpp_instances": {"tiny": MODEL}}


@pytest.mark.parametrize("os_release", [UBUNTU_2204, UBUNTU_2404])  # Debian 12's pinned driver is older than 12.9 needs
def test_cuda_12_9_refused_for_a_volta_llama_cpp_build(os_release):
    with pytest.raises(SettingsError) as e:
        plan_commands(os_release, {**INSTANCES, "cuda_source": "nvidia", "cuda_versions": ["12.9"]}, responses=V100)
    msg = str(e.value)
    assert "llama_cpp_cuda_version" in msg and "ggml-org/llama.cpp#28416" in msg
    assert "add 12.8 to cuda_versions" in msg and "llama_cpp_allow_cuda_12_9: true" in msg


def test_cuda_12_9_named_explicitly_is_refused_even_with_12_8_installed():
    with pytest.raises(SettingsError) as e:
        plan_commands(UBUNTU_2404, {**INSTANCES, "cuda_versions": ["12.9", "12.8"], "llama_cpp_cuda_version": "12.9"},
                      responses=V100)
    assert "set llama_cpp_cuda_version: 12.8" in str(e.value)


def test_a_default_12_9_gives_way_to_an_installed_12_8(caplog):
    cmds = plan_commands(UBUNTU_2404, {**INSTANCES, "cuda_versions": ["12.9", "12.8"]}, responses=V100)
    assert {"cuda-toolkit-12-9=12.9.1-1", "cuda-toolkit-12-8=12.8.1-1"} <= set(installs(cmds))
    build = build_command(cmds)
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.8/bin/nvcc" in build and "cuda-12.9" not in build
    assert "-sm70-cuda12.8-" in build  # the install prefix names the toolkit it was built with
    assert "building llama.cpp with CUDA 12.8, not the default 12.9" in caplog.text and "#28416" in caplog.text


def test_llama_cpp_allow_cuda_12_9_builds_with_it_and_says_so(caplog):
    cmds = plan_commands(UBUNTU_2204, {**INSTANCES, "cuda_versions": ["12.9"], "llama_cpp_allow_cuda_12_9": True},
                         responses=V100)
    assert "cuda-toolkit-12-9=12.9.1-1" in installs(cmds)
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.9/bin/nvcc" in build_command(cmds)
    assert "as llama_cpp_allow_cuda_12_9 allows" in caplog.text


def test_cuda_12_9_is_not_refused_for_a_build_without_volta():
    cmds = plan_commands(UBUNTU_2404, {**INSTANCES, "cuda_versions": ["12.9"]}, responses=T4)
    build = build_command(cmds)
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.9/bin/nvcc" in build and "-DCMAKE_CUDA_ARCHITECTURES=75" in build


def test_cuda_13_is_refused_for_sm70():
    with pytest.raises(SettingsError, match=r"cuda_versions.*13\.0.*CUDA 13 cannot compile for sm_70") as e:
        plan_commands(UBUNTU_2404, {**INSTANCES, "cuda_versions": ["13.0"]}, responses=V100)
    # one refusal: no second line "llama_cpp_cuda_version = None: ... choose one of cuda_versions: " (an empty list)
    assert "llama_cpp_cuda_version" not in str(e.value), str(e.value)


def test_a_release_tag_ref_in_the_broken_range_is_refused_before_any_command():
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_12, {**INSTANCES, "llama_cpp_ref": "v0.4.1",
                                  "llama_cpp_source": "https://github.com/ggml-org/llama.cpp/archive/v0.4.1.tar.gz",
                                  "llama_cpp_source_sha256": "b" * 64}, responses=V100)
    msg = str(e.value)
    assert "llama_cpp_source" in msg and "#28536" in msg and "#29224" in msg and "0.5.0 or later" in msg


@pytest.mark.parametrize("version, refused", [((0, 4, 1), True), ((0, 4, 0), True), ((0, 5, 0), False),
                                              ((0, 3, 2), False), (None, False)])
def test_a_local_archive_is_judged_by_the_version_its_tree_states(version, refused, tmp_path):
    archive = write_tree(tmp_path / "llama.cpp.tar.gz", version)
    data = {**INSTANCES, "llama_cpp_ref": "mine", "llama_cpp_source": str(archive), "llama_cpp_source_subdir": ROOT,
            "llama_cpp_source_sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}
    if refused:
        with pytest.raises(SettingsError, match=r"llama_cpp_source.*known bad on Volta.*#28536.*#29224"):
            plan_commands(DEBIAN_12, data, responses=V100)
    else:
        assert "cmake -S" in " ".join(plan_commands(DEBIAN_12, data, responses=V100))


def test_the_broken_range_is_not_refused_for_a_build_without_volta(tmp_path):
    archive = write_tree(tmp_path / "llama.cpp.tar.gz", (0, 4, 1))
    cmds = plan_commands(DEBIAN_12, {**INSTANCES, "llama_cpp_ref": "mine", "llama_cpp_source": str(archive),
                                     "llama_cpp_source_subdir": ROOT,
                                     "llama_cpp_source_sha256": hashlib.sha256(archive.read_bytes()).hexdigest()},
                         responses=T4)
    assert "-DCMAKE_CUDA_ARCHITECTURES=75" in build_command(cmds)


def test_the_default_pin_is_outside_the_range_and_builds_for_volta():
    """The default source (llama-cpp-python 0.3.36's tree) states llama.cpp 0.5.0 (its vendor/llama.cpp/
    CMakeLists.txt), after the fix."""
    assert "-DCMAKE_CUDA_ARCHITECTURES=70" in build_command(plan_commands(DEBIAN_12, INSTANCES, responses=V100))


@pytest.fixture(autouse=True)
def _warnings(caplog):
    caplog.set_level(logging.WARNING)
