"""roles/llama_cpp/residency.py on log lines in llama.cpp's own format (src/llama-model.cpp load_tensors:
"offloaded %d/%d layers to GPU"; ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_init: "failed to initialize CUDA: %s")
and nvidia-smi's --query-compute-apps CSV."""

from roles.llama_cpp.residency import judge, parse_compute_apps

ALL = ["ggml_cuda_init: found 1 CUDA devices:", "load_tensors: offloaded 33/33 layers to GPU"]


def test_all_layers_and_vram_is_on_the_gpu():
    v = judge(ALL, 4242, {4242: 5802}, 99)
    assert v.on_gpu and "33/33" in v.evidence and "5802 MiB" in v.evidence


def test_cuda_init_failure_is_the_cpu_whatever_else_the_log_says():
    v = judge(["ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"] + ALL, 4242,
              {4242: 300}, 99)
    assert not v.on_gpu and "no CUDA-capable device" in v.evidence


def test_fewer_layers_than_ngl_asks_for():
    v = judge(["load_tensors: offloaded 20/33 layers to GPU"], 4242, {4242: 3000}, 99)
    assert not v.on_gpu and "20/33" in v.evidence


def test_a_planned_partial_offload_is_what_ngl_asked_for():
    assert judge(["load_tensors: offloaded 20/33 layers to GPU"], 4242, {4242: 3000}, 20).on_gpu


def test_no_vram_for_the_process():
    v = judge(ALL, 4242, {777: 5000}, 99)
    assert not v.on_gpu and "holds no GPU memory" in v.evidence


def test_no_offload_line_and_no_process():
    assert not judge(["main: server is listening"], 4242, {4242: 10}, 99).on_gpu
    assert not judge(ALL, 0, {}, 99).on_gpu


def test_compute_apps_csv():
    assert parse_compute_apps(["4242, 5802", "4242, 10", "[N/A], [N/A]", "", "pid, used_gpu_memory [MiB]"]) == \
        {4242: 5812}
