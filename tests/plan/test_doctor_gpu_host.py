"""The doctor's GPU checks, unchanged, against a fake GPU host answering with recorded outputs: the loaded
module's /proc/driver/nvidia/version, nvidia-smi, and kernel log lines with Xid errors."""

from tests.plan.harness import UBUNTU_2204, doctor_rows
from tests.unit.test_doctor_facts import KERNEL_LOG, PROC_PROPRIETARY

SMI = ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Disabled, 535.261.03",
       "1, GPU-00000000-0000-0000-0000-000000000001, Tesla V100-SXM2-16GB, 7.0, 16160, 0, 16160, Enabled, 535.261.03"]


def test_doctor_flags_library_mismatch_xid79_and_persistence_off():
    rows = doctor_rows(UBUNTU_2204, responses={
        "cat /proc/driver/nvidia/version": PROC_PROPRIETARY.splitlines(),  # 535 loaded, 580 pinned
        "nvidia-smi --query-gpu": SMI,
        "NVRM: Xid": KERNEL_LOG[1:3],
    })
    assert rows["loaded module matches the userland"].state == "broken"
    assert "Driver/library version mismatch" in rows["loaded module matches the userland"].evidence
    assert rows["no serious Xid errors this boot"].state == "broken" and "79" in rows[
        "no serious Xid errors this boot"].evidence
    assert rows["persistence mode on"].state == "broken" and "[0]" in rows["persistence mode on"].evidence


def test_doctor_skips_gpu_checks_without_gpu_saying_why():
    rows = doctor_rows(UBUNTU_2204)
    for check in ("loaded module matches the userland", "persistence mode on", "no serious Xid errors this boot"):
        assert rows[check].state == "skipped" and rows[check].evidence


LLAMA = {"llama_cpp_instances": {"tiny": {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64,
                                          "port": 8081}}}
GPU_RESPONSES = {"cat /proc/driver/nvidia/version": PROC_PROPRIETARY.splitlines(), "nvidia-smi --query-gpu": SMI}


def test_doctor_row_per_llama_server_on_the_gpu():
    # llama.cpp's own lines: ggml-cuda.cu ggml_cuda_init, llama-model.cpp load_tensors
    rows = doctor_rows(UBUNTU_2204, LLAMA, {**GPU_RESPONSES, "systemctl show -p MainPID": [
        "#pid 4242", "#apps", "4242, 5802", "#log", "load_tensors: offloaded 33/33 layers to GPU"]})
    row = rows["llama-server@tiny serves from the GPU"]
    assert row.state == "ok" and "5802 MiB" in row.evidence


def test_doctor_flags_llama_server_serving_from_the_cpu():
    rows = doctor_rows(UBUNTU_2204, LLAMA, {**GPU_RESPONSES, "systemctl show -p MainPID": [
        "#pid 4242", "#apps", "#log", "ggml_cuda_init: failed to initialize CUDA: unknown error"]})
    row = rows["llama-server@tiny serves from the GPU"]
    assert row.state == "broken" and "failed to initialize CUDA" in row.evidence and row.fix


def test_doctor_skips_the_llama_server_row_without_gpu_saying_why():
    row = doctor_rows(UBUNTU_2204, LLAMA)["llama-server@tiny serves from the GPU"]
    assert row.state == "skipped" and "no GPU visible" in row.evidence


def test_doctor_hardware_rows_from_a_v100_hosts_nvidia_smi():
    """The hardware rows through the doctor's own gathering: the fake host answers the GpuHardware fact with the
    real idle V100-SXM2 log (PCIe x2 of x16) and the Azure report's NVLink status (links 3 and 5 inactive,
    renumbered to GPU 0)."""
    from tests.unit.test_doctor_hardware import NVLINK_DOWN, SXM2_Q

    out = (SXM2_Q + "\n#nvlink\n" + NVLINK_DOWN.replace("GPU 3:", "GPU 0:")).splitlines()
    rows = doctor_rows(UBUNTU_2204, responses={**GPU_RESPONSES, "echo '#nvlink'": out})
    assert rows["GPU PCIe link at the card's maximum"].state == "broken"
    assert "x2 of x16" in rows["GPU PCIe link at the card's maximum"].evidence
    assert rows["GPU NVLink links up"].state == "broken" and "3, 5" in rows["GPU NVLink links up"].evidence
    for check in ("GPU ECC on, no uncorrected errors", "GPU memory: no retired or pending pages",
                  "GPU clocks not throttled by a fault", "GPU temperature below the slowdown threshold"):
        assert rows[check].state == "ok", rows[check]


def test_doctor_hardware_rows_skip_without_gpu():
    rows = doctor_rows(UBUNTU_2204)
    for check in ("GPU PCIe link at the card's maximum", "GPU NVLink links up", "GPU temperature below the "
                  "slowdown threshold"):
        assert rows[check].state == "skipped" and "no GPU visible" in rows[check].evidence
