"""v100kit bench without a lab or a GPU: the roofline arithmetic, the output check, the figures, the report's
formats, the load's bounds (against a fake streaming server on the loopback), the sweep's restart."""

from __future__ import annotations

import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from roles.bench import roofline, sweep
from roles.bench.figures import Level, Load, Sample, degenerate, level, percentile
from roles.bench.report import InstanceBench, as_json, markdown, plot, table
from roles.bench.residency import instance_vram_mib, judge_instance
from v100kit import loadgen
# first, before any thread starts: importing pyinfra's CLI (v100kit.hosts) monkey-patches threads and sockets with
# gevent, as it does in the command itself
from v100kit.bench import bench_instance
from v100kit.cli import Terminated

GB = 1e9


# -- roofline: expected values by hand from the cited bandwidth and the GGUF size ---------------------------------

def test_bandwidth_table_by_nvidia_smi_name():
    assert roofline.bandwidth("Tesla V100-SXM2-32GB").bytes_per_s == 900e9
    assert roofline.bandwidth("Tesla V100-PCIE-16GB").bytes_per_s == 900e9
    assert roofline.bandwidth("Tesla V100S-PCIE-32GB").bytes_per_s == 1134e9  # not taken for a V100
    assert roofline.bandwidth("NVIDIA H200").bytes_per_s == 4.8e12
    assert roofline.bandwidth("NVIDIA GeForce RTX 4090") is None  # unknown: no roofline, never a guess
    assert all(bw.source for _, bw in roofline.GPU_BANDWIDTH)


def test_roofline_of_the_issue_8b_q4_k_m_on_a_v100_and_the_h200():
    weights = 4.92e9  # issue 15: the 8B-shaped Q4_K_M GGUF is 4.92 GB
    # V100 900 GB/s, weights only: 900 / 4.92 = 182.93 tokens/s
    assert roofline.roofline_tps(roofline.bytes_per_token(int(weights), 0, 0), 900e9) == pytest.approx(182.93, abs=0.01)
    # KV f16 of the 8B shape: 32 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes = 131072 bytes per token;
    # at 1000 tokens of context 0.131072 GB more: 900 / 5.051072 = 178.18 tokens/s
    per_token = roofline.bytes_per_token(int(weights), 131072, 1000)
    assert per_token == 5.051072e9
    assert roofline.roofline_tps(per_token, 900e9) == pytest.approx(178.18, abs=0.01)
    # the H200's tg128 of the issue (227.2 tokens/s, -fa 1, f16 KV): 227.2 x 4.92 / 4800 = 0.23288 of 4.8 TB/s
    assert roofline.roofline_fraction(227.2, weights, 4.8e12) == pytest.approx(0.23288, abs=1e-5)


# -- output check and figures -----------------------------------------------------------------------------------

def test_degenerate_output_is_one_repeated_token():
    assert "one character" in degenerate("!!!!!!!!!!!!!!!!")
    assert "one character" in degenerate("! ! ! ! ! ! ! ! !")
    assert "one word" in degenerate("the the the the the")
    assert degenerate("The V100 has 80 streaming multiprocessors and HBM2 memory.") is None
    assert degenerate("!!!") is None  # too short to judge


def test_percentiles_interpolate_like_numpy():
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert percentile([], 50) is None


def test_a_level_summarises_ttft_itl_decode_and_aggregate():
    a = Sample(ok=True, start_s=0.0, ttft_s=0.1, token_times_s=[0.1, 0.2, 0.3], completion_tokens=3, prompt_tokens=20)
    b = Sample(ok=True, start_s=1.0, ttft_s=0.1, token_times_s=[0.1, 0.2, 0.3], completion_tokens=3, prompt_tokens=20)
    bad = Sample(ok=False, error="HTTP 503")
    lv = level(1, [a, b, bad])
    assert (lv.requests, lv.failed, lv.errors) == (3, 1, ("HTTP 503",))
    assert lv.ttft_p50_ms == pytest.approx(100)
    assert lv.itl_p50_ms == pytest.approx(100)
    assert lv.decode_tps_per_stream == pytest.approx(10)  # 2 tokens after the first in 0.2 s
    assert lv.aggregate_e2e_tps == pytest.approx(6 / 1.3)  # 6 tokens from the first send (0) to the last token (1.3)
    # decode spans [0.1, 0.3] and [1.1, 1.3], apart: 2 + 2 tokens after the first over 0.2 + 0.2 s
    assert lv.aggregate_decode_tps == pytest.approx(4 / 0.4)
    assert lv.prompt_tokens == 20


# -- a fake OpenAI-compatible streaming server on the loopback ----------------------------------------------------

class FakeServer:
    """Streams `tokens` chunks of `text` (default: word0 word1 ...) per completion, `delay` seconds apart; records each request."""

    def __init__(self, text: str | None = None, tokens: int = 4, delay: float = 0.0):
        self.requests: list[dict] = []  # the completion requests
        self.tokenized: list[dict] = []  # the /tokenize requests (the bench's prompt calibration)
        self.auth: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(200 if self.path == "/health" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":  # llama-server's: one token per word here; not a counted request
                    outer.tokenized.append(body)
                    data = json.dumps({"tokens": list(range(len(body.get("content", "").split())))}).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                outer.requests.append(body)
                outer.auth.append(self.headers.get("Authorization", ""))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for k in range(tokens):
                    time.sleep(delay)
                    piece = text if text is not None else f"word{k} "
                    self.wfile.write(b"data: " + json.dumps({"choices": [{"text": piece}]}).encode() + b"\n\n")
                    self.wfile.flush()
                usage = {"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 17}}
                self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client cut at its bound: expected here
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def test_the_load_is_bounded_in_requests_and_sends_fixed_requests_with_the_key(server, capsys):
    load = Load(depths=(12,), output_tokens=4, concurrency=(1, 4, 8), requests_per_level=8, warmup_requests=1)
    assert load.max_requests == 1 + 3 * 8
    levels, samples = loadgen.measure(server.url, "sekrit-key-123", "tiny", load)
    assert len(server.requests) == load.max_requests  # warm-up + 8 per level, never more
    assert [lv.concurrency for lv in levels] == [1, 4, 8] and all(lv.requests == 8 for lv in levels)
    assert all(lv.failed == 0 and lv.aggregate_e2e_tps > 0 and lv.ttft_p50_ms > 0 for lv in levels)
    assert all(lv.depth == 12 and lv.prompt_tokens == 17 for lv in levels)  # the server's count is reported
    assert all(s.completion_tokens == 4 and s.prompt_tokens == 17 for s in samples)
    first = server.requests[0]
    same = lambda r: {k: v for k, v in r.items() if k != "prompt"}  # noqa: E731
    assert all(same(r) == same(first) for r in server.requests)  # same length, seed and sampling every time
    assert (first["max_tokens"], first["seed"], first["ignore_eos"], first["stream"]) == (4, load.seed, True, True)
    prompts = [r["prompt"] for r in server.requests]
    assert all(len(p.split()) == 12 for p in prompts)  # 12 words: about 12 tokens
    # unique at their start: the first four words ("request N of run") already differ, so llama-server's slot
    # cache shares at most that prefix with any earlier prompt
    assert len({" ".join(p.split()[:3]) for p in prompts}) == len(prompts)
    assert set(server.auth) == {"Bearer sekrit-key-123"}
    out = capsys.readouterr()
    assert "sekrit" not in out.out + out.err


def test_no_request_starts_after_the_level_time_bound():
    slow = FakeServer(tokens=3, delay=0.1)  # ~0.3 s per request
    try:
        load = Load(output_tokens=3, concurrency=(1,), requests_per_level=50, level_time_s=0.5, warmup_requests=0)
        started = time.monotonic()
        samples = loadgen.run_level(slow.url, None, "m", load, 1)
        assert 1 <= len(samples) <= 3 and len(slow.requests) == len(samples)
        assert time.monotonic() - started < 0.5 + 1.0
    finally:
        slow.close()


def test_a_request_is_cut_at_its_timeout():
    slow = FakeServer(tokens=20, delay=0.1)
    try:
        s = loadgen.stream_completion(slow.url, None, {"prompt": "x"}, 0.35, time.monotonic())
        assert not s.ok and "request bound" in s.error
    finally:
        slow.close()


def test_more_streams_than_requests_send_one_per_stream_and_the_bound_counts_them():
    load = Load(concurrency=(1, 16, 32), requests_per_level=16)
    assert [load.requests_at(c) for c in load.concurrency] == [16, 16, 32]
    assert load.max_requests == 1 + 16 + 16 + 32


# -- residency --------------------------------------------------------------------------------------------------

def test_vram_is_the_instance_processes_and_a_foreign_pid_namespace_is_said():
    ev = {"main_pid": 10, "pids": [10, 11], "compute_apps": ["10, 5000", "11, 300", "99, 700"], "alive": [10, 11, 99]}
    assert instance_vram_mib(ev, sole_instance=False) == (5300, "")
    foreign = {"main_pid": 10, "pids": [10], "compute_apps": ["4242, 6000"], "alive": []}
    used, note = instance_vram_mib(foreign, sole_instance=True)
    assert used == 6000 and "PID namespace" in note
    assert instance_vram_mib(foreign, sole_instance=False) == (0, "")
    assert instance_vram_mib({"main_pid": 10, "compute_apps": []}, True) == (None, "")


def test_a_cpu_served_llama_server_and_a_vllm_without_gpu_memory_are_not_on_the_gpu():
    cpu = {"main_pid": 7, "pids": [7], "compute_apps": [], "alive": [],
           "log": ["ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"]}
    verdict, used = judge_instance("llama.cpp", cpu, 99, True)
    assert not verdict.on_gpu and "CPU" in verdict.evidence and used is None
    gpu = {"main_pid": 7, "pids": [7], "compute_apps": ["7, 5600"], "alive": [7],
           "log": ["load_tensors: offloaded 33/33 layers to GPU"]}
    assert judge_instance("llama.cpp", gpu, 99, True)[0].on_gpu
    assert not judge_instance("vllm", {**gpu, "compute_apps": []}, 0, True)[0].on_gpu
    assert judge_instance("vllm", gpu, 0, True)[1] == 5600


# -- report formats ---------------------------------------------------------------------------------------------

def _measured() -> InstanceBench:
    a = Sample(ok=True, start_s=0.0, ttft_s=0.05, token_times_s=[0.05, 0.06, 0.07], completion_tokens=3)
    i = InstanceBench("gpu-01", "llama-server@gemma", "llama.cpp", url="http://127.0.0.1:8080", running=True,
                      on_gpu=True, residency="offloaded 33/33 layers", vram_mib=5600, planned_vram_mib=5500,
                      levels=[level(c, [a]) for c in (1, 4, 8)],
                      rooflines=[{"depth": 0, "gpu": "Tesla V100-SXM2-32GB", "table_row": "V100",
                                  "bandwidth_gb_s": 900.0, "source": "datasheet", "context_tokens": 300,
                                  "bytes_per_token": 5e9, "ceiling_tps": 180.0, "measured_tps": 90.0,
                                  "fraction": 0.5}])
    return i


def test_json_has_the_figures_of_every_instance_and_the_load_bounds():
    cpu = InstanceBench("gpu-01", "vllm@qwen", "vllm", running=True, on_gpu=False, flags=["not on the GPU: x"])
    doc = json.loads(json.dumps(as_json({"gpu-01": [_measured(), cpu], "gpu-02": "cannot connect"}, Load())))
    assert doc["load"]["max_requests_per_instance"] == 49 and doc["load"]["concurrency"] == [1, 4, 8]
    first = doc["hosts"]["gpu-01"][0]
    for key in ("unit", "engine", "running", "on_gpu", "residency", "vram_mib", "planned_vram_mib", "vram_ratio",
                "levels", "decode_tps", "roofline", "degenerate", "flags", "sweep", "sweep_ratios"):
        assert key in first
    assert first["vram_ratio"] == pytest.approx(5600 / 5500) and first["decode_tps"] == pytest.approx(100)
    assert {"concurrency", "depth", "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms",
            "aggregate_e2e_tps", "aggregate_decode_tps", "peak_vram_mib", "peak_vram_note"} <= set(first["levels"][0])
    assert first["roofline"]["fraction"] == 0.5
    assert doc["hosts"]["gpu-01"][1]["on_gpu"] is False and doc["hosts"]["gpu-02"] == "cannot connect"


def test_markdown_report_has_one_table_row_per_instance_and_the_plot():
    cpu = InstanceBench("gpu-01", "vllm@qwen", "vllm", running=False, flags=["vllm@qwen is not running"])
    md = markdown("gpu-01", [_measured(), cpu], Load(), "gpu-01.png")
    lines = md.splitlines()
    head = next(n for n, line in enumerate(lines) if line.startswith("| instance |"))
    assert lines[head + 1].startswith("| --- | --- | ---:")
    assert lines[head + 2].startswith("| llama-server@gemma | GPU | 5600 | 1.02 |")
    # one row per level: depth 0 at concurrency 1, 4, 8 (the instance's own columns on its first row only)
    assert [line.split(" | ")[4:6] for line in lines[head + 2:head + 5]] == [["0", "1"], ["0", "4"], ["0", "8"]]
    assert lines[head + 3].startswith("| llama-server@gemma |  |  |  | 0 | 4 |")
    assert lines[head + 5].startswith("| vllm@qwen | NOT RUNNING |")
    assert all(lines[head].count("|") == lines[head + k].count("|") for k in range(1, 6))
    assert "![aggregate decode tokens/s (y) against concurrency (x)](gpu-01.png)" in md
    assert "blue llama-server@gemma" in md and "FLAG: vllm@qwen is not running" in md
    text = table({"gpu-01": [_measured(), cpu]}, (1, 4, 8))
    assert "NOT RUNNING" in text and "llama-server@gemma" in text


def test_the_plot_is_a_valid_png_of_the_stated_size():
    from PIL import Image  # pillow comes with matplotlib: an independent PNG decoder
    png = plot([_measured()])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(png))
    assert (image.format, image.size) == ("PNG", (640, 400))
    colours = {rgba[:3] for _, rgba in image.convert("RGBA").getcolors(640 * 400)}
    assert (31, 119, 180) in colours  # tab:blue, the first instance's line (COLOURS[0], named "blue" in the report)
    assert plot([InstanceBench("h", "vllm@x", "vllm")]) is None  # nothing measured: no picture


# -- the sweep ----------------------------------------------------------------------------------------------------

class FakeControl:
    def __init__(self, fail_start: set[str] = frozenset(), fail_stop_service: bool = False):
        self.calls: list[str] = []
        self.fail_start, self.fail_stop_service = fail_start, fail_stop_service

    def stop_service(self):
        self.calls.append("stop_service")
        if self.fail_stop_service:
            raise RuntimeError("systemctl stop failed")

    def start_service(self):
        self.calls.append("start_service")

    def start_alternative(self, args):
        label = " ".join(args)
        self.calls.append(f"start {label}")
        if label in self.fail_start:
            raise RuntimeError("no /health")
        return label

    def stop_alternative(self, handle):
        self.calls.append(f"stop {handle}")


ALTS = [("default", ["a"]), ("x", ["b"]), ("y", ["c"])]


def test_the_sweep_says_it_stops_the_service_and_always_starts_it_again():
    c, said = FakeControl(fail_start={"b"}), []
    runs = sweep.run(c, ALTS, lambda h: {"figures": [], "peak_vram_mib": 1.0}, said.append)
    assert c.calls == ["stop_service", "start a", "stop a", "start b", "start c", "stop c", "start_service"]
    assert "stopping the service" in said[0] and [r["error"] != "" for r in runs] == [False, True, False]


def test_ctrl_c_in_the_middle_of_the_sweep_still_starts_the_service():
    c = FakeControl()

    def measure(handle):
        if handle == "b":
            raise KeyboardInterrupt
        return {"figures": []}

    with pytest.raises(KeyboardInterrupt):
        sweep.run(c, ALTS, measure, lambda line: None)
    assert c.calls[-3:] == ["start b", "stop b", "start_service"]


def _figures(decode: float, ttft_c8: float) -> dict:
    """A measure() result: the figures of one depth-0 run at concurrency 1 and 8 (figures.Level as loadgen gives)."""
    levels = [Level(1, 2, 0, 50.0, 60.0, 4.0, 5.0, decode, decode, 200.0),
              Level(8, 16, 0, ttft_c8, ttft_c8, 9.0, 12.0, 80.0, 600.0, 200.0, aggregate_decode_tps=700.0)]
    return {"figures": sweep.figures_of(levels)}


def test_each_flag_set_s_figures_are_said_as_it_ends():
    said = []
    results = {"a": _figures(240.1, 1006.0), "c": _figures(219.0, 1062.0)}
    sweep.run(FakeControl(fail_start={"b"}), ALTS, lambda h: results[h], said.append)
    lines = [x for x in said if x.startswith(("sweep: default:", "sweep: x:", "sweep: y:"))]
    assert lines == [
        "sweep: default: d=0 decode tok/s c=1 240.1; d=0 agg decode tok/s c=8 700.0; d=0 agg e2e tok/s c=8 600.0; "
        "d=0 TTFT p50 ms c=1 50.0; d=0 TTFT p50 ms c=8 1006.0",
        "sweep: x: failed: RuntimeError: no /health",
        "sweep: y: d=0 decode tok/s c=1 219.0; d=0 agg decode tok/s c=8 700.0; d=0 agg e2e tok/s c=8 600.0; "
        "d=0 TTFT p50 ms c=1 50.0; d=0 TTFT p50 ms c=8 1062.0"]


def test_a_cut_sweep_has_said_the_figures_it_measured_and_how_many():
    said = []

    def measure(handle):
        if handle == "b":
            raise Terminated  # `timeout` cutting a sweep on the GPU (tools/gpu/bench/go.sh)
        return _figures(240.1, 1006.0)

    with pytest.raises(Terminated):
        sweep.run(FakeControl(), ALTS, measure, said.append)
    assert said[-2:] == ["sweep: cut after 1 of 3 flag sets; the figures of those measured are in the 'sweep:' "
                         "lines above, the report has none", "sweep: starting the service again"]
    assert any(x.startswith("sweep: default: d=0 decode tok/s c=1 240.1;") for x in said)
    assert not any(x.startswith("sweep: x:") for x in said)  # the cut flag set measured nothing


def test_a_sweep_cut_while_an_alternative_stops_still_says_its_figures():
    """SIGTERM landing in stop_alternative (up to 10 s of waiting for llama-server to exit) after a measured flag
    set: the cut line counts it, so its figures must have been said."""
    said = []

    class CutInStop(FakeControl):
        def stop_alternative(self, handle):
            super().stop_alternative(handle)
            if handle == "b":
                raise Terminated

    with pytest.raises(Terminated):
        sweep.run(CutInStop(), ALTS, lambda h: _figures(240.1 if h == "a" else 219.0, 1006.0), said.append)
    assert said[-2].startswith("sweep: cut after 2 of 3 flag sets")
    assert any(x.startswith("sweep: x: d=0 decode tok/s c=1 219.0;") for x in said)


def test_a_progress_line_that_cannot_be_written_still_leaves_the_service_started():
    c = FakeControl()

    def say(line):
        if "starting the service" in line:
            raise BrokenPipeError("stderr closed")

    with pytest.raises(BrokenPipeError):
        sweep.run(c, ALTS, lambda h: {"figures": []}, say)
    assert c.calls[-1] == "start_service"


def test_a_failed_stop_still_starts_the_service():
    c = FakeControl(fail_stop_service=True)
    with pytest.raises(RuntimeError):
        sweep.run(c, ALTS, lambda h: {"figures": []}, lambda line: None)
    assert c.calls == ["stop_service", "start_service"]


# -- one instance through the command's path, with a fake host -----------------------------------------------------

class FakeHost:
    """What bench_instance asks of a pyinfra host: name, data, connector, get_fact."""

    def __init__(self, evidence: dict, gpus: list, smi: str = "#no-nvidia-smi\n"):
        self.name, self.data = "gpu-01", {"ssh_hostname": "127.0.0.1"}
        self.connector = object()
        self.evidence, self.gpus, self.smi = evidence, gpus, smi
        self.commands: list[str] = []

    def run_shell_command(self, command, _sudo=False):  # the peak-VRAM sampler's nvidia-smi query (vram.QUERY)
        from types import SimpleNamespace
        self.commands.append(str(command))
        return True, SimpleNamespace(stdout=self.smi, stderr="")

    def get_fact(self, fact, **kwargs):
        return self.evidence if fact.__name__ == "InstanceEvidence" else self.gpus


def _llama_instance(port: int, memory=None):
    from roles.llama_cpp.decide import Instance
    from roles.llama_cpp.settings import LlamaCppInstance
    return Instance("tiny", LlamaCppInstance(model_path="/m/tiny.gguf", port=port), "/m/tiny.gguf", None, "k3y",
                    memory)


def test_a_cpu_served_instance_is_flagged_and_still_timed(server):
    port = int(server.url.rsplit(":", 1)[1])
    host = FakeHost({"main_pid": 7, "pids": [7], "compute_apps": [], "alive": [],
                     "log": ["ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"]}, [])
    load = Load(depths=(8,), output_tokens=4, requests_per_level=8)
    i = bench_instance(host, None, "llama.cpp", _llama_instance(port), True, load, False)
    assert i.running and i.on_gpu is False and any("not on the GPU" in f for f in i.flags)
    assert i.at(1).ttft_p50_ms > 0 and i.decode_tps > 0 and all(i.at(c).aggregate_e2e_tps > 0 for c in (1, 4, 8))
    assert i.roofline is None  # no plan and no GPU: no roofline, not a made-up one
    assert set(server.auth) == {"Bearer k3y"}


def test_an_instance_on_a_known_gpu_gets_its_roofline_and_vram_ratio(server):
    from types import SimpleNamespace

    port = int(server.url.rsplit(":", 1)[1])
    host = FakeHost({"main_pid": 7, "pids": [7], "compute_apps": ["7, 5600"], "alive": [7],
                     "log": ["load_tensors: offloaded 33/33 layers to GPU"]},
                    [{"index": 0, "name": "NVIDIA H200"}])
    memory = SimpleNamespace(weight_bytes=4_920_000_000, n_gpus=1, kv_bytes_per_token=131072,
                             total_bytes=5600 * (1 << 20))
    load = Load(depths=(8,), output_tokens=4, requests_per_level=8)
    i = bench_instance(host, None, "llama.cpp", _llama_instance(port, memory), True, load, False)
    assert i.on_gpu and not i.flags and i.vram_ratio == pytest.approx(1.0)
    r = i.roofline
    # context: the server's 17 prompt tokens + half the 4 output tokens = 19; 4.92e9 + 19 x 131072 bytes per token
    assert r["context_tokens"] == 19 and r["bytes_per_token"] == 4_920_000_000 + 19 * 131072
    assert r["ceiling_tps"] == pytest.approx(4.8e12 / r["bytes_per_token"])
    assert r["fraction"] == pytest.approx(i.decode_tps / r["ceiling_tps"])


def test_a_server_that_streams_one_repeated_token_is_flagged():
    bang = FakeServer(text="!!", tokens=6)
    try:
        port = int(bang.url.rsplit(":", 1)[1])
        host = FakeHost({"main_pid": 7, "pids": [7], "compute_apps": ["7, 5600"], "alive": [7],
                         "log": ["load_tensors: offloaded 33/33 layers to GPU"]}, [{"index": 0, "name": "NVIDIA H200"}])
        i = bench_instance(host, None, "llama.cpp", _llama_instance(port), True,
                           Load(depths=(8,), output_tokens=6, requests_per_level=8), False)
        assert i.on_gpu and "one character repeated" in i.degenerate
        assert any(f.startswith("degenerate output") for f in i.flags)
    finally:
        bang.close()


def test_a_load_longer_than_the_instances_context_is_not_sent(server):
    """Depth 16384 + 64 output tokens against 8 slots of 8192 tokens: every request would fail at the server, so the
    instance is flagged and no completion is sent."""
    import dataclasses

    from roles.llama_cpp.choices import KvChoice
    from roles.llama_cpp.slots import Serving

    port = int(server.url.rsplit(":", 1)[1])
    host = FakeHost({"main_pid": 7, "pids": [7], "compute_apps": [], "alive": [], "log": []}, [])
    inst = dataclasses.replace(_llama_instance(port),
                               serving=Serving(8, 8192, True, KvChoice("f16", "f16", True, "")))
    i = bench_instance(host, None, "llama.cpp", inst, True, Load(depths=(16384,), output_tokens=64), False)
    assert any("16448 tokens per request" in f and "context per request 8192" in f for f in i.flags), i.flags
    assert server.requests == [] and not i.levels
    ok = bench_instance(host, None, "llama.cpp", inst, True, Load(depths=(8000,), output_tokens=64,
                                                                  requests_per_level=1, concurrency=(1,)), False)
    assert ok.levels and len(server.requests) == 2  # the warm-up and one counted request


def test_rounds_measure_each_flag_set_from_its_own_start_in_rotating_order_and_compare_medians():
    """--sweep-rounds 3: every flag set started three times, round r beginning r places later, so that the default
    is not always the first after the service stops; each figure is the median of its rounds (statistics.median of
    the per-round values: 505.6, 551.7, 520.0 -> 520.0), the ratio compares medians."""
    c, said = FakeControl(), []
    per_start = {"a": iter([505.6, 551.7, 520.0]), "b": iter([543.6, 498.0, 530.0]), "c": iter([400.0, 410.0, 405.0])}

    def measure(handle):
        return _figures(next(per_start[handle]), 1006.0)

    runs = sweep.run(c, ALTS, measure, said.append, rounds=3)
    starts = [x.removeprefix("start ") for x in c.calls if x.startswith("start ") and x != "start_service"]
    assert starts == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert c.calls[0] == "stop_service" and c.calls[-1] == "start_service" and c.calls.count("start_service") == 1
    decode = {r["label"]: next(f for f in r["figures"] if f["figure"] == "decode_tps") for r in runs}
    assert decode["default"]["value"] == 520.0 and decode["default"]["values"] == [505.6, 551.7, 520.0]
    assert decode["x"]["value"] == 530.0 and [len(r["rounds"]) for r in runs] == [3, 3, 3]
    r = next(x for x in sweep.ratios(runs) if x["figure"] == "decode_tps")
    assert (r["best_label"], round(r["ratio"], 4)) == ("x", round(520.0 / 530.0, 4))
    assert "sweep: x (round 2 of 3): d=0 decode tok/s c=1 498.0; d=0 agg decode tok/s c=8 700.0; d=0 agg e2e " \
           "tok/s c=8 600.0; d=0 TTFT p50 ms c=1 50.0; d=0 TTFT p50 ms c=8 1006.0" in said
    i = InstanceBench("gpu-01", "llama-server@bench", "llama.cpp", running=True, on_gpu=True, sweep=runs,
                      sweep_ratios=sweep.ratios(runs), sweep_bound=sweep.bound(3, Load(), 300, rounds=3))
    md = markdown("gpu-01", [i], Load(), "x.png")
    assert "| decode tok/s | 0 | 1 | 520.0 (505.6/551.7/520.0) | 530.0 (543.6/498.0/530.0) |" in md
    assert "Sweep: 3 flag sets x 3 rounds (medians) x " in md
    assert "sweep of 3 flag sets x 3 rounds (medians) (at most" in table({"gpu-01": [i]})


def test_a_round_that_fails_leaves_the_flag_set_its_other_rounds_and_a_cut_counts_measurements():
    class FailOnce(FakeControl):
        def start_alternative(self, args):
            handle = super().start_alternative(args)
            if handle == "b" and self.calls.count("start b") == 1:
                raise RuntimeError("no /health")
            return handle

    runs = sweep.run(FailOnce(), ALTS, lambda h: {**_figures(300.0, 1000.0), "peak_vram_mib": 7.0}, lambda _: None,
                     rounds=2)
    x = runs[1]
    # the failed round is said, in the flag set's note and as a gap in its values, not hidden behind a median
    assert x["error"] == "1 of 2 rounds failed: RuntimeError: no /health"
    assert x["rounds"][0]["error"] == "RuntimeError: no /health"
    decode = next(f for f in x["figures"] if f["figure"] == "decode_tps")
    assert decode["values"] == [None, 300.0] and sweep.shown(decode) == "300.0 (-/300.0)"
    assert runs[0]["error"] == "" and x["peak_vram_mib"] == 7.0
    # an even count: statistics.median's mean of the middle two; the peak is the highest round's
    two = sweep.combined([{**_figures(300.0, 1000.0), "peak_vram_mib": 7.0},
                          {**_figures(310.0, 1000.0), "peak_vram_mib": 9.0}])
    assert next(f for f in two["figures"] if f["figure"] == "decode_tps")["value"] == 305.0
    assert two["peak_vram_mib"] == 9.0
    all_failed = sweep.combined([{"figures": None, "error": "E1"}, {"figures": None, "error": "E2"}])
    assert all_failed["figures"] is None and all_failed["error"] == "E2"

    said, n = [], iter(range(100))

    def measure(handle):
        if next(n) == 4:
            raise Terminated
        return _figures(240.1, 1006.0)

    with pytest.raises(Terminated):
        sweep.run(FakeControl(), ALTS, measure, said.append, rounds=2)
    assert said[-2].startswith("sweep: cut after 4 of 6 measurements (2 rounds of 3 flag sets)")
    with pytest.raises(ValueError, match="--sweep-rounds 0: give 1 to 20"):
        sweep.run(FakeControl(), ALTS, measure, said.append, rounds=0)
