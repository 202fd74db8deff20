"""pyinfra host data of the bundled lab hosts: the spec's settings plus a llama-server instance serving a tiny
model the lab writes, built from the cached default llama.cpp source, with an API key generated at run time."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from lab.harness import LAB_CACHE, LAB_DATA, LAB_INTERFACE, LAB_STATE, HostSpec, Lab, atomic_write, locked
from lab.models import HF_HEAD_DIM, write_tiny_hf, write_tiny_llama
from lab.sources import llama_cpp_default_source, sha256_of
from roles.llama_cpp.versions import DEFAULT_SOURCE

#: llama-server ports per lab host (hosts share the machine's network).
LLAMA_PORTS = {"lab-bookworm": 18081, "lab-trixie": 18082, "lab-offline": 18081}
#: Lab hosts that build llama.cpp and serve the tiny model in CI's tier (make test): lab-trixie, with CUDA 12.4. A
#: cold CUDA build of the pinned tree took 20 minutes of both cores (1211 s, docs/testing.md), and two did not fit
#: CI's budget (issue 25); the lab cache's ccache (bound into the hosts) makes a warm one take a few minutes.
LLAMA_HOSTS = ("lab-trixie",)
#: The host that builds with the second lab toolkit (CUDA 11.8 with g++-11, Debian 12) in the full tier
#: (tests/lab/test_llama_cpp_second_toolkit.py), which sets SECOND_TOOLKIT_ENV=1 for its deploys and checks.
SECOND_TOOLKIT_HOST = "lab-bookworm"
SECOND_TOOLKIT_ENV = "V100KIT_LAB_SECOND_TOOLKIT"


def llama_hosts() -> tuple[str, ...]:
    """The lab hosts with the tiny llama-server instance now: LLAMA_HOSTS, and SECOND_TOOLKIT_HOST while
    SECOND_TOOLKIT_ENV is 1 (read at each call: pyinfra's inventory runs in a subprocess of the tests)."""
    return LLAMA_HOSTS + ((SECOND_TOOLKIT_HOST,) if os.environ.get(SECOND_TOOLKIT_ENV) == "1" else ())
#: The full tier's monitoring suite (tests/lab/test_monitoring.py) sets MONITORING_ENV=1 for its deploys and checks:
#: host_data then turns the monitoring role on for the bundled hosts, each node exporter on its own loopback port
#: (the hosts share the machine's network), the timers run often so that a check's flip shows within a minute.
MONITORING_ENV = "V100KIT_LAB_MONITORING"
MONITORING_PORTS = {"lab-bookworm": 19101, "lab-trixie": 19102}


def monitoring_data(spec: HostSpec) -> dict:
    """The monitoring settings of a bundled host while MONITORING_ENV is 1 (read at each call), else {}."""
    if os.environ.get(MONITORING_ENV) != "1" or spec.name not in MONITORING_PORTS:
        return {}
    return {"monitoring_enabled": True, "monitoring_node_exporter_port": MONITORING_PORTS[spec.name],
            "monitoring_gpu_interval_s": 5, "monitoring_doctor_interval_s": 30}


#: Lab hosts with a vLLM instance: Debian 12, whose Python 3.11 has wheels for the default vLLM (Debian 13's 3.13
#: has none for it: tests/lab/test_vllm.py checks that refusal). Its port:
VLLM_HOSTS = ("lab-bookworm",)
VLLM_PORT = 18091


#: The lab's Ray cluster (group raylab): two Debian 12 hosts, the release whose Python 3.11 has wheels for the default
#: vLLM, each in its own network namespace with its own address, so that Ray's traffic runs between two node
#: addresses as between real boxes. lab-ray1 is the head. Started by tests/lab/test_ray_cluster.py; their state
#: (client key, known_hosts) lives beside the bundled hosts', under LAB_STATE/cluster.
CLUSTER_GROUP = "raylab"
CLUSTER_HOSTS = (HostSpec("lab-ray1", "bookworm", 22, CLUSTER_GROUP, dict(LAB_DATA), address="10.231.0.11"),
                 HostSpec("lab-ray2", "bookworm", 22, CLUSTER_GROUP, dict(LAB_DATA), address="10.231.0.12"))


#: A Debian 12 host with lab-bookworm's whole stack and no way out (#17): its own network namespace, no registry
#: proxy, no name server, no shared apt or wheel cache. `v100kit offline` provisions it from a directory the control
#: machine serves on the lab bridge. Started by tests/lab/test_offline.py; state under LAB_STATE/offline.
OFFLINE_GROUP = "offlinelab"
OFFLINE_HOST = HostSpec("lab-offline", "bookworm", 22, OFFLINE_GROUP, dict(LAB_DATA), address="10.231.0.21",
                        offline=True)


#: the offline host's model is given as a URL of the control machine's loopback, served there only while
#: `v100kit offline fill` runs (tests/lab/test_offline.py): the host can get it from the offline directory alone
OFFLINE_MODEL_PORT = 18099


def offline_lab() -> Lab:
    """The Lab that manages OFFLINE_HOST."""
    return Lab(LAB_STATE / "offline", LAB_CACHE, hosts=(OFFLINE_HOST,))


def cluster_lab() -> Lab:
    """The Lab that manages CLUSTER_HOSTS."""
    return Lab(LAB_STATE / "cluster", LAB_CACHE, hosts=CLUSTER_HOSTS, private_apt=True)


def cluster_data() -> dict:
    """The raylab group's settings: the cluster, its head and interface, and the lab's tiny vLLM instance, which
    then spans both nodes (pipeline parallel 2)."""
    return {"ray_cluster": CLUSTER_GROUP, "ray_head": CLUSTER_HOSTS[0].name, "ray_interface": LAB_INTERFACE,
            "vllm_instances": {"tiny": vllm_instance()}}


def api_key_file(state: Path = LAB_STATE) -> Path:
    """A random API key in a 0600 file, generated once per lab state directory."""
    path = state / "llama-api-key"
    with locked(path):
        if not (path.is_file() and len(path.read_text().strip()) >= 32):  # missing, or cut short by an interruption
            atomic_write(path, secrets.token_urlsafe(24) + "\n", mode=0o600)
    return path


def tiny_model(cache: Path = LAB_CACHE) -> Path:
    """The tiny GGUF model, written once per cache (atomically: a reader never sees part of it)."""
    path = cache / "models" / "tiny-llama-v2.gguf"  # v2: trained context 8192
    with locked(path):
        if not path.is_file():
            with tempfile.TemporaryDirectory(dir=path.parent, prefix=".tiny.") as tmp:
                os.replace(write_tiny_llama(Path(tmp) / path.name), path)
    return path


def tiny_hf_model(cache: Path = LAB_CACHE) -> Path:
    """The tiny safetensors llama directory (config.json, model.safetensors, tokenizer), written once per cache
    into a temporary directory that is renamed into place whole."""
    # named by its head size: a copy cached with the older 16-wide heads (which vLLM refuses on Volta) is not reused
    path = cache / "models" / f"tiny-llama-hf-h{HF_HEAD_DIM}"
    with locked(path):
        if not (path / "config.json").is_file():  # config.json is written last: without it the copy is partial
            shutil.rmtree(path, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".tiny-hf."))
            write_tiny_hf(tmp)
            os.replace(tmp, path)
    return path


def vllm_instance() -> dict:
    """The lab's vLLM instance settings (also used by tests that deploy other hosts with it)."""
    # 0.8 of the GPU: on lab-bookworm it can share GPU 0 with llama-server@tiny (the full tier's second toolkit),
    # and vLLM's CUDA context and graphs
    # come on top of its share (the default 0.9 of a 16 GB V100 leaves too little for both: refused by preflight)
    return {"model_source": str(tiny_hf_model()), "port": VLLM_PORT, "max_model_len": 4096,
            "gpu_memory_utilization": 0.8, "api_key_file": str(api_key_file())}


def host_data(spec: HostSpec) -> dict:
    """The settings of one lab host (what group_data would hold for a real box)."""
    data = dict(spec.data)
    if spec.name in llama_hosts() or spec.offline:  # the offline host gets lab-bookworm's whole stack
        source, model = llama_cpp_default_source(), tiny_model()
        data.update({
            "llama_cpp_ref": DEFAULT_SOURCE.ref,
            "llama_cpp_source": str(source),
            "llama_cpp_source_sha256": DEFAULT_SOURCE.sha256,
            "llama_cpp_instances": {"tiny": {
                # slots and context left to the defaults (roles/llama_cpp/slots.py): on the tiny model, 8 slots of
                # its trained 8192 tokens, a KV pool of 16 MiB, so that llama-server's MiB figure can be compared
                "model_source": str(model), "model_sha256": sha256_of(model), "port": LLAMA_PORTS[spec.name],
                "api_key_file": str(api_key_file())}},
        })
    if spec.offline:
        data["llama_cpp_instances"]["tiny"]["model_source"] = f"http://127.0.0.1:{OFFLINE_MODEL_PORT}/{model.name}"
    if spec.name in VLLM_HOSTS or spec.offline:
        data["vllm_instances"] = {"tiny": vllm_instance()}
    if spec.group == CLUSTER_GROUP:
        data.update(cluster_data())
    data.update(monitoring_data(spec))
    return data
