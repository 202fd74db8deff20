"""Plan-level tests (facts in, commands out) of the download sources a mirror can replace (#17): NVIDIA's CUDA
repository, the PyPI index of the vLLM venv and the uv wheel. A mirror never weakens a check: the repository key's
fingerprint, the lock's hashes and the uv wheel's sha256 apply to whatever the mirror serves."""

from __future__ import annotations

import shlex

import pytest

from lab.data import tiny_hf_model
from roles.settings import SettingsError
from tests.plan.harness import UBUNTU_2204, UBUNTU_2404, plan_uploads

MIRROR = "https://mirror.example.org/nvidia-cuda/"
INDEX = "https://mirror.example.org/pypi/simple"
UV_WHEEL = ("https://mirror.example.org/pypi/packages/uv-0.13.8-py3-none-manylinux_2_17_x86_64."
            "manylinux2014_x86_64.whl")
#: NVIDIA's repository signing key (roles/cuda/versions.py; its own notice)
FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"


def test_nvidia_repository_mirror_serves_sources_and_key_and_the_fingerprint_is_still_checked():
    cmds, uploads = plan_uploads(UBUNTU_2204, {"cuda_nvidia_repo_url": MIRROR})
    key = next(c for c in map(str, cmds) if "3bf863cc.pub" in c)
    assert f"{MIRROR}ubuntu2204/x86_64/3bf863cc.pub" in shlex.split(key.split(";")[2]) and FINGERPRINT in key
    assert not [c for c in map(str, cmds) if "developer.download.nvidia.com" in c]
    sources = uploads["/etc/apt/sources.list.d/v100kit-cuda.sources"]
    assert f"URIs: {MIRROR}ubuntu2204/x86_64/" in sources and "Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg" in sources


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return str(tiny_hf_model(tmp_path_factory.mktemp("cache")))


def vllm_plan(model: str, **settings) -> list[str]:
    data = {"vllm_instances": {"tiny": {"model_source": model}}, **settings}
    cmds, _ = plan_uploads(UBUNTU_2404, data, {"sys.version_info": ["3.12"]})
    return [str(c) for c in cmds]


def test_pypi_mirror_installs_the_same_hash_locked_venv(model):
    default, mirrored = vllm_plan(model), vllm_plan(model, vllm_index_url=INDEX)
    install = next(c for c in mirrored if "pip install --python" in c)
    words = shlex.split(install.split("pip install", 1)[1].split(">>", 1)[0])
    assert words[words.index("--index-url") + 1] == INDEX and "--require-hashes" in words and "--no-deps" in words
    assert "pypi.org" not in install
    # the same venv (same name): a mirror cannot change what is installed, so it installs nothing new
    venv = [w for w in shlex.split(next(c for c in default if "pip install --python" in c)) if w.startswith("/opt/vllm/0")]
    assert venv and venv[0] in install


def test_uv_wheel_from_a_mirror_is_checked_against_the_pinned_sha256(model):
    cmds = vllm_plan(model, vllm_uv_wheel_url=UV_WHEEL)
    download = next(c for c in cmds if UV_WHEEL in c)
    assert "e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984" in " ".join(
        c for c in cmds if "sha256sum" in c and "uv-0.13.8" in c)
    assert "files.pythonhosted.org" not in download


@pytest.mark.parametrize("key, value, expect", [
    ("cuda_nvidia_repo_url", "https://mirror.example.org/nvidia-cuda", r"cuda_nvidia_repo_url = 'https://mirror\.example\.org/nvidia-cuda': the URL must end in '/'\. Fix: set cuda_nvidia_repo_url to a valid value \(root of NVIDIA's CUDA repository"),
    ("vllm_index_url", "pypi.example.org/simple", r"vllm_index_url = 'pypi\.example\.org/simple': not an http:// or https:// URL \(those are the only ones the hosts fetch\)\. Fix: set vllm_index_url to a valid value"),
    ("vllm_uv_wheel_url", "https://mirror.example.org/uv.tar.gz", r"vllm_uv_wheel_url = 'https://mirror\.example\.org/uv\.tar\.gz'.*Fix: set vllm_uv_wheel_url"),
])
def test_bad_mirror_settings_are_refused_before_any_command(key, value, expect):
    with pytest.raises(SettingsError, match=expect):
        plan_uploads(UBUNTU_2204, {key: value})
