"""Plan-level tests (facts in, commands out): the default llama.cpp source fetched from its URL with its sha256,
and the CMake configuration chosen from the toolkit and the GPUs, never from CMake's native detection."""

from __future__ import annotations

import logging
import re
import shlex

import pytest

from roles.llama_cpp.versions import DEFAULT_SOURCE
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, plan_commands

MODEL = {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64, "port": 8081}


def build_command(cmds: list[str]) -> str:
    return next(c for c in cmds if "cmake -S" in c)


def test_plan_default_source_downloaded_with_checksum_and_built_for_sm70():
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}})
    download = [c for c in cmds if DEFAULT_SOURCE.url in c]
    assert download and DEFAULT_SOURCE.sha256 in " ".join(cmds)
    build = build_command(cmds)
    for arg in ("-DCMAKE_CUDA_ARCHITECTURES=70", "-DCMAKE_CUDA_COMPILER=/usr/bin/nvcc",
                "-DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-13", "-DGGML_CUDA=ON"):
        assert arg in build
    assert "native" not in build
    # the link moves and the service restarts only after the build, in that order
    build_at = next(i for i, c in enumerate(cmds) if "cmake -S" in c)
    link_at = next(i for i, c in enumerate(cmds) if "/opt/llama.cpp/current.new" in c)
    start_at = next(i for i, c in enumerate(cmds) if c.startswith("systemctl start llama-server@tiny"))
    assert build_at < link_at < start_at


TWO_V100 = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 550.163.01",
                                       "1, GPU-00000000-0000-0000-0000-000000000001, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 550.163.01"]}
#: What a llama-server that loaded its model onto the GPU shows: its MainPID, that PID in nvidia-smi's process
#: list, and llama.cpp's own load_tensors line (src/llama-model.cpp: "offloaded %d/%d layers to GPU").
ON_GPU = ["#pid 4242", "#apps", "4242, 5802", "#log", "load_tensors: offloaded 33/33 layers to GPU"]


def test_plan_architectures_follow_the_visible_gpus():
    """A box whose nvidia-smi lists a V100 (compute capability 7.0) and a T4 (7.5; NVIDIA's CUDA GPUs list) gets
    both architectures, in CMake's CMAKE_CUDA_ARCHITECTURES form (the capability without its dot). The GPUs must
    differ from the no-GPU default (70): with V100s alone a plan that never looked at the GPUs passes too."""
    mixed = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 550.163.01",
                                        "1, GPU-00000000-0000-0000-0000-000000000001, Tesla T4, 7.5, 15360, 0, 15360, Enabled, 550.163.01"]}
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}},
                         responses={**mixed, "systemctl show -p MainPID": ON_GPU})
    build = build_command(cmds)
    assert re.search(r"-DCMAKE_CUDA_ARCHITECTURES=['\"]?70;75['\"]?(\s|$)", build), build


def test_plan_gpu_host_waits_for_health_after_the_start_then_checks_the_gpu():
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}},
                                          responses={**TWO_V100, "systemctl show -p MainPID": ON_GPU})]
    start = next(i for i, c in enumerate(cmds) if c.startswith("systemctl start llama-server@tiny"))
    health = next(i for i, c in enumerate(cmds) if "http://127.0.0.1:8081/health" in c)
    assert start < health


def test_plan_gpu_host_fails_the_deploy_when_the_server_fell_back_to_the_cpu(caplog):
    # ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_init logs this when CUDA cannot start; the server then runs on the CPU
    on_cpu = ["#pid 4242", "#apps", "#log",
              "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected",
              "load_tensors: offloaded 0/33 layers to GPU"]
    plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}},
                  responses={**TWO_V100, "systemctl show -p MainPID": on_cpu}, stops_early=True)
    assert "llama-server@tiny does not serve from the GPU" in caplog.text
    assert "failed to initialize CUDA" in caplog.text


def test_plan_gpu_less_host_has_no_gpu_check_and_says_so(caplog):
    caplog.set_level(logging.INFO, logger="pyinfra")
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}})]
    assert not [c for c in cmds if "/health" in c]
    assert "the check that it serves from the GPU is skipped" in caplog.text


@pytest.mark.parametrize("data, key", [
    ({"llama_cpp_cuda_architectures": ["100"]}, "llama_cpp_cuda_architectures"),
    ({"llama_cpp_ref": "b6000"}, "llama_cpp_ref"),
    ({"llama_cpp_source": "https://x.example/llama.tar.gz"}, "llama_cpp_source"),
    ({"llama_cpp_cuda_version": "11.8"}, "llama_cpp_cuda_version"),
])
def test_plan_llama_cpp_refusals(data, key):
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}, **data})
    assert key in str(e.value)


def test_plan_api_key_never_in_a_command_or_the_diff(tmp_path, caplog):
    """Neither a command nor pyinfra's log holds the key. The log is captured from DEBUG on (pyinfra logs each
    operation and its diff there): a capture at pytest's default level holds no pyinfra record at all, and the
    check then passes having looked at nothing, so the capture must show the key file's operation."""
    caplog.set_level(logging.DEBUG, logger="pyinfra")
    key_file = tmp_path / "key"
    key_file.write_text("sekrit-KEY-123\n")
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**MODEL, "api_key_file": str(key_file)}}})
    assert not [c for c in cmds if "sekrit-KEY-123" in c]
    assert "tiny: API key (0600)" in caplog.text  # the capture holds the deploy's log of the key's operation
    assert "sekrit-KEY-123" not in caplog.text
    # staged in a 0700 tmpfs directory of the SSH login user (SFTP uploads as that user, also under sudo)
    assert 'install -d -m 700 -o "${SUDO_USER:-root}" /run/v100kit-secrets' in " ".join(cmds)
    assert any(c.startswith("chown root:root /run/v100kit-secrets/") and "chmod 600" in c for c in cmds)


def test_plan_removed_instance_is_stopped_and_unconfigured():
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": MODEL}}, responses={
        "ls /etc/llama-server/*.env": ["/etc/llama-server/tiny.env", "/etc/llama-server/old.env"],
        "llama-server@old.service": ["Id=llama-server@old.service", "SubState=running", "UnitFileState=enabled"]})
    assert "systemctl stop llama-server@old.service" in cmds
    assert "systemctl disable llama-server@old.service" in cmds
    assert not [c for c in cmds if "llama-server@tiny" in c and ("stop" in c or "disable" in c)]


def test_plan_model_that_does_not_fit_is_refused_before_any_command(tmp_path):
    """The planner reads the GGUF header of a control-machine model: too long a context for the VRAM is refused."""
    from lab.models import write_tiny_llama
    from lab.sources import sha256_of

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    inst = {"model_source": str(model), "model_sha256": sha256_of(model), "port": 8081}
    placed = "/var/lib/llm/models/tiny.gguf"
    cmds = plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**inst, "context": 4096}}},  # fits
                         responses={re.compile(f"sha256sum {placed}"): [f"{sha256_of(model)}  {placed}"]})
    assert any(c.startswith("systemctl start llama-server@tiny") for c in cmds)
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"gpu_memory_mib": 1024,
                                  "llama_cpp_instances": {"tiny": {**inst, "context": 2_000_000}}})
    assert "llama_cpp_instances.tiny" in str(e.value) and "does not fit in 1 x 1024 MiB" in str(e.value)
    assert "shorten context" in str(e.value)


def test_plan_model_url_comes_from_the_model_mirror_by_its_sha256_still_checked():
    """llama_cpp_model_mirror (what `v100kit offline fill` serves): the host fetches MIRROR/<sha256>/<file name>
    instead of the model's own URL, into the same place, against the same model_sha256."""
    mirror = "http://10.0.0.1:8765/models"
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {"llama_cpp_model_mirror": mirror + "/",
                                                      "llama_cpp_instances": {"tiny": MODEL}})]
    fetch = [c for c in cmds if c.startswith("curl ")]
    assert f"{mirror}/{'a' * 64}/tiny.gguf -o" in fetch[-1], fetch
    placed = cmds.index(next(c for c in cmds if c.startswith("mv ") and c.endswith(" /var/lib/llm/models/tiny.gguf")))
    assert any(c.startswith("((") and "sha256sum /var/lib/llm/models/tiny.gguf" in c and "grep " + "a" * 64 in c
               for c in cmds[placed:placed + 4])
    assert not [c for c in cmds if "models.example" in c]


def test_model_mirror_that_is_not_a_url_is_refused_naming_the_setting():
    with pytest.raises(SettingsError, match=r"llama_cpp_model_mirror.*/srv/models"):
        plan_commands(DEBIAN_13, {"llama_cpp_model_mirror": "/srv/models", "llama_cpp_instances": {"tiny": MODEL}})


@pytest.mark.parametrize("name", ["My%20Model-Q4_K_M.gguf", "tiny.gguf;v=1", "tiny.gguf?download=true"])
def test_plan_model_from_the_mirror_is_the_file_offline_fill_stored(tmp_path, name):
    """Odd model URLs (percent-encoding, ;params, a query): `v100kit offline fill`'s own download stores the file,
    the offline server serves the directory, and real curl with the URL the plan fetches gets those bytes."""
    import hashlib
    import subprocess

    from v100kit.offline import serve
    from v100kit.offline_pypi import fill_file

    origin = tmp_path / "origin"
    origin.mkdir()
    body = b"GGUF" + bytes(range(256))
    stored_as = {"My%20Model-Q4_K_M.gguf": "My Model-Q4_K_M.gguf"}.get(name, name.split("?")[0])
    (origin / stored_as).write_bytes(body)
    sha = hashlib.sha256(body).hexdigest()
    with serve(origin, "127.0.0.1") as there:
        fill_file(f"{there}/{name}", sha, tmp_path / "fill" / "models" / sha)
    with serve(tmp_path / "fill", "127.0.0.1") as base:
        cmds = [str(c) for c in plan_commands(DEBIAN_13, {"llama_cpp_model_mirror": f"{base}/models",
                                                          "llama_cpp_instances": {"tiny": {
                                                              **MODEL, "model_source": f"https://models.example/{name}",
                                                              "model_sha256": sha}}})]
        words = shlex.split(next(c for c in cmds if c.startswith("curl ") and f"{base}/models/" in c))
        url = words[words.index("-o") - 1]
        got = subprocess.run(["curl", "-sSf", url], capture_output=True, timeout=30)
    assert got.returncode == 0 and got.stdout == body, (url, got.stderr)


def test_plan_model_url_that_names_no_file_is_refused():
    with pytest.raises(SettingsError, match=r"model_source = 'https://models.example/'.*names no file.*Fix: give "
                                            r"the URL of the \.gguf file"):
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": {**MODEL, "model_source": "https://models.example/"}}})
