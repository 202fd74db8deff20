"""Issue 26, the bench measures the load the user names: the load options and their refusals, prompts of a given
length that start differently, decode figures apart from TTFT (hand-computed timestamps; numpy's percentiles as an
independent source), peak VRAM sampled with a fake command runner, the sweep's flag sets (the -np/-c rewrite), its
per-depth comparison and its bound. No lab, no GPU."""

from __future__ import annotations

import argparse
import dataclasses
import json
import threading
import time

import numpy as np
import pytest

from roles.bench import sweep, vram
from roles.bench.figures import (Level, Load, Sample, aggregate_decode_tps, aggregate_e2e_tps, level,
                                 load_problems, prompt, union_s)
from roles.bench.report import InstanceBench, as_json, markdown, sweep_lines, table
from v100kit import bench, loadgen

# the fake streaming server of test_bench (imports v100kit.bench first there, as the command does)
from tests.unit.test_bench import FakeHost, FakeServer, _llama_instance  # noqa: I001
from tests.plan.harness import ROOT


# -- decode figures apart from TTFT, from timestamps written down here ----------------------------------------------

def _three() -> list[Sample]:
    """Three requests of one level (times in s; start on the level's clock, token times after each send):
      a: sent 0.0, tokens at 0.5 0.6 0.7 0.8 0.9 (5 tokens) -> decode span [0.5, 0.9] on the level's clock
      b: sent 0.2, tokens at 0.4 0.6 0.9 (3 tokens)         -> decode span [0.6, 1.1]
      c: sent 2.0, tokens at 0.3 0.5 (2 tokens)             -> decode span [2.3, 2.5]
    and one failed request (counted in `failed` only)."""
    return [Sample(ok=True, start_s=0.0, ttft_s=0.5, token_times_s=[0.5, 0.6, 0.7, 0.8, 0.9], completion_tokens=5,
                   prompt_tokens=100),
            Sample(ok=True, start_s=0.2, ttft_s=0.4, token_times_s=[0.4, 0.6, 0.9], completion_tokens=3,
                   prompt_tokens=102),
            Sample(ok=True, start_s=2.0, ttft_s=0.3, token_times_s=[0.3, 0.5], completion_tokens=2, prompt_tokens=104),
            Sample(ok=False, start_s=0.1, error="HTTP 500")]


def test_aggregate_decode_is_tokens_after_the_first_over_the_union_of_decode_spans():
    s = _three()
    # union of [0.5, 0.9], [0.6, 1.1], [2.3, 2.5] = [0.5, 1.1] + [2.3, 2.5] = 0.6 + 0.2 = 0.8 s;
    # tokens after each first: 4 + 2 + 1 = 7 -> 7 / 0.8 = 8.75 tokens/s
    assert union_s([(0.5, 0.9), (0.6, 1.1), (2.3, 2.5)]) == pytest.approx(0.8)
    assert aggregate_decode_tps(s) == pytest.approx(8.75)
    # end to end: all 10 tokens over the first send (0.0) to the last token (2.0 + 0.5): 4.0 tokens/s
    assert aggregate_e2e_tps(s) == pytest.approx(4.0)
    # the decode figure leaves the prefill out: with TTFT counted (first send to last token) it would be below
    assert aggregate_decode_tps(s) > 7 / 2.5


def test_union_counts_overlaps_once():
    assert union_s([(0, 1), (0.5, 2), (3, 4), (3.2, 3.5)]) == pytest.approx(3.0)
    assert union_s([(1, 2), (0, 3)]) == pytest.approx(3.0)  # nested
    assert union_s([]) == 0


def test_a_level_has_ttft_and_itl_percentiles_and_the_per_stream_median():
    lv = level(8, _three(), depth=100)
    assert (lv.concurrency, lv.depth, lv.requests, lv.failed, lv.errors) == (8, 100, 4, 1, ("HTTP 500",))
    ttft = [0.5, 0.4, 0.3]
    itl = [0.1, 0.1, 0.1, 0.1, 0.2, 0.3, 0.2]  # a's four gaps, b's 0.2 and 0.3, c's 0.2
    # by hand (linear interpolation): TTFT p50 0.4, p95 0.4 + 0.9 x 0.1 = 0.49, p99 0.498; ITL sorted
    # 0.1 0.1 0.1 0.1 0.2 0.2 0.3: p50 0.1, p95 rank 5.7 -> 0.2 + 0.7 x 0.1 = 0.27, p99 rank 5.94 -> 0.294
    assert [lv.ttft_p50_ms, lv.ttft_p95_ms, lv.ttft_p99_ms] == pytest.approx([400, 490, 498])
    assert [lv.itl_p50_ms, lv.itl_p95_ms, lv.itl_p99_ms] == pytest.approx([100, 270, 294])
    numpy_ms = lambda v: list(np.percentile(v, [50, 95, 99]) * 1000)  # noqa: E731  an independent source
    assert [lv.ttft_p50_ms, lv.ttft_p95_ms, lv.ttft_p99_ms] == pytest.approx(numpy_ms(ttft))
    assert [lv.itl_p50_ms, lv.itl_p95_ms, lv.itl_p99_ms] == pytest.approx(numpy_ms(itl))
    # per stream: a 4 / 0.4 = 10, b 2 / 0.5 = 4, c 1 / 0.2 = 5 -> median 5
    assert lv.decode_tps_per_stream == pytest.approx(5.0)
    assert lv.aggregate_decode_tps == pytest.approx(8.75) and lv.aggregate_e2e_tps == pytest.approx(4.0)
    assert lv.prompt_tokens == pytest.approx(102)  # the server's counts, mean


# -- prompts of a given length, unique at their start ------------------------------------------------------------

def test_a_prompt_has_the_depth_in_words_and_starts_with_its_request():
    p = prompt(16384, 7, "ab12")
    assert len(p.split()) == 16384 and p.startswith("request 7 of run ab12: the quick brown fox")
    assert prompt(0, 7, "ab12") == "request 7 of run ab12:"  # depth 0: the label alone
    assert prompt(3) == "the quick brown"  # no request: the fixed words
    a, b = prompt(64, 1, "r"), prompt(64, 2, "r")
    common = next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)
    assert common == len("request ") and a[common + 1:] == b[common + 1:]  # they differ at once, then agree


def test_every_request_of_a_measure_and_of_two_runs_has_its_own_prompt(server):
    load = Load(depths=(0, 20), output_tokens=4, concurrency=(1, 2), requests_per_level=3, warmup_requests=1)
    loadgen.measure(server.url, None, "m", load)
    loadgen.measure(server.url, None, "m", load)
    prompts = [r["prompt"] for r in server.requests]
    assert len(prompts) == 2 * load.max_requests == 2 * 2 * (1 + 3 + 3)
    assert len(set(prompts)) == len(prompts)
    assert sorted({len(p.split()) for p in prompts}) == [5, 20]  # depth 0: "request N of run R:"; depth 20


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


# -- the load: bounds, options, refusals before any request ---------------------------------------------------------

def test_the_bound_counts_depths_levels_requests_and_warmups():
    load = Load(depths=(0, 16384), concurrency=(1, 8), requests_per_level=4, warmup_requests=1,
                level_time_s=60, request_timeout_s=120)
    assert load.max_requests == 2 * (1 + 4 + 8)  # at concurrency 8: one per stream, 8 > 4
    assert load.max_seconds == 2 * (1 * 120 + 2 * (60 + 120))
    assert Load(concurrency=(1, 16, 32), requests_per_level=16).max_requests == 1 + 16 + 16 + 32


@pytest.mark.parametrize("field, value, said", [
    ("concurrency", (1, 0), "--concurrency 1,0: each must be from 1 to 256"),
    ("concurrency", (), "--concurrency (empty): give at least one value"),
    ("concurrency", (4, 4), "--concurrency 4,4: give each value once"),
    ("depths", (-1,), "--depths/--prompt-tokens -1: it must be from 0 to 1048576"),
    ("output_tokens", 1, "--output-tokens 1: it must be from 2 to 32768"),
    ("requests_per_level", 0, "--requests 0: it must be from 1 to 4096"),
    ("level_time_s", 0.0, "--time-limit-s 0.0: give seconds above 0 and at most 3600"),
    ("request_timeout_s", -5, "--request-timeout-s -5: give seconds above 0"),
])
def test_a_bad_load_is_refused_naming_the_option_the_value_and_the_fix(field, value, said):
    with pytest.raises(ValueError) as e:
        Load(**{field: value})
    assert said in str(e.value)
    assert load_problems(Load()) == []


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(["inv.py", *argv])


def test_the_options_replace_the_load_of_the_bench_and_of_the_sweep():
    load, sweep_load = bench.loads(_args("--depths", "0,16384", "--concurrency", "1,8,16", "--requests", "16",
                                         "--time-limit-s", "30", "--output-tokens", "32"))
    assert (load.depths, load.concurrency, load.requests_per_level, load.level_time_s, load.output_tokens) == \
        ((0, 16384), (1, 8, 16), 16, 30.0, 32)
    assert load.request_timeout_s == bench.LOAD.request_timeout_s  # not given: the default
    assert (sweep_load.depths, sweep_load.concurrency, sweep_load.requests_per_level) == ((0, 16384), (1, 8, 16), 16)
    assert sweep_load.request_timeout_s == bench.SWEEP_LOAD.request_timeout_s
    assert bench.loads(_args("--prompt-tokens", "4096"))[0].depths == (4096,)
    assert bench.loads(_args()) == (bench.LOAD, bench.SWEEP_LOAD)


def test_options_that_are_no_numbers_or_both_depth_options_are_usage_errors(capsys):
    with pytest.raises(SystemExit):
        _args("--concurrency", "1,eight")
    assert "--concurrency 1,eight: give whole numbers separated by commas" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _args("--depths", "0", "--prompt-tokens", "5")
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_bad_load_stops_the_command_before_any_host_is_reached(monkeypatch, capsys, tmp_path):
    from v100kit.cli import main

    reached = []
    monkeypatch.setattr(bench, "for_each_host", lambda *a, **k: reached.append(a) or {})
    inventory = tmp_path / "inv.py"
    inventory.write_text('boxes = [("gpu-01.example", {})]\n')
    assert main(["bench", str(inventory), "--concurrency", "1,0", "--requests", "0"]) == 2
    err = capsys.readouterr().err
    assert "--concurrency 1,0: each must be from 1 to 256" in err and "--requests 0: it must be from 1" in err
    assert reached == []
    assert main(["bench", str(inventory), "--concurrency", "1,16,32", "--depths", "0,16384"]) == 0
    err = capsys.readouterr().err
    assert len(reached) == 1 and "bench: per instance at most 130 requests" in err  # 2 depths x (1 + 16 + 16 + 32)
    assert main(["bench", str(inventory), "--sweep", "--sweep-only", "-np 16"]) == 2
    assert "--sweep-only '-np 16' is no flag set of the sweep" in capsys.readouterr().err
    assert main(["bench", str(inventory), "--sweep-only", "-np 8"]) == 2
    assert "--sweep-only '-np 8' needs --sweep" in capsys.readouterr().err
    assert len(reached) == 1
    assert main(["bench", str(inventory), "--sweep", "--sweep-only", "-np 8", "--sweep-only", "-np 1"]) == 0
    assert "at most 3 flag sets" in capsys.readouterr().err and len(reached) == 2  # the default and the two named
    assert main(["bench", str(inventory), "--sweep-rounds", "3"]) == 2
    assert "--sweep-rounds 3 needs --sweep" in capsys.readouterr().err
    assert main(["bench", str(inventory), "--sweep", "--sweep-rounds", "0"]) == 2
    assert "--sweep-rounds 0: give 1 to 20" in capsys.readouterr().err
    assert main(["bench", str(inventory), "--sweep", "--sweep-rounds", "100000000"]) == 2
    assert "--sweep-rounds 100000000: give 1 to 20" in capsys.readouterr().err
    assert len(reached) == 2
    assert main(["bench", str(inventory), "--sweep", "--sweep-only", "-np 8", "--sweep-rounds", "3",
                 "--depths", "16384", "--concurrency", "1", "--requests", "4"]) == 0
    err = capsys.readouterr().err
    # 3 rounds x 2 flag sets x (1 warm-up + 4 requests) at one depth and one level
    assert "at most 2 flag sets x 3 rounds (medians) x 1 depths x 1 levels" in err and "at most 30 requests" in err, err
    got = []
    monkeypatch.setattr(bench, "bench_host", lambda *a: got.append(a))
    reached[-1][2]("gpu-01.example", None)  # the per-host call the command gave: the rounds reach bench_host
    assert got[0][-1] == 3 and got[0][-2] == ("-np 8",) and len(reached) == 3


# -- peak VRAM, with a fake command runner -------------------------------------------------------------------------

PS = "#ps\n  100     1\n  101   100\n  102   101\n  200     1\n"


def _smi(*apps: str) -> str:
    return PS + "#apps\n" + "".join(a + "\n" for a in apps)


def test_one_sample_sums_the_instance_and_its_descendants():
    # 101 and 102 are below 100 (the service's main process); 200 is another program's
    assert vram.sample(_smi("101, 5000", "102, 300", "200, 700"), 100, sole_instance=False) == (5300, "")
    assert vram.descendants(100, {100: 1, 101: 100, 102: 101, 200: 1}) == {100, 101, 102}
    used, note = vram.sample(_smi("200, 700"), 100, False)
    assert used == 0 and "none of nvidia-smi's 1 compute process(es)" in note
    # nvidia-smi's PIDs of another PID namespace (a container), this the host's only instance: all of them
    used, note = vram.sample(_smi("4242, 6000"), 100, True)
    assert used == 6000 and "PID namespace" in note
    assert vram.sample("#no-nvidia-smi\n", 100, True) == (None, "no nvidia-smi on the host (no GPU driver)")
    used, note = vram.sample(_smi("No devices were found"), 100, True)
    assert used is None and "no compute process" in note and "No devices" in note


def test_the_sampler_keeps_the_most_any_sample_saw():
    outputs = [_smi("101, 5000"), _smi("101, 5600"), _smi("101, 5200")]
    calls = []

    def run(command):
        assert command == vram.QUERY
        calls.append(command)
        return outputs[min(len(calls), len(outputs)) - 1] if len(calls) <= 3 else _smi("101, 5100")

    s = vram.PeakVram(run, 100, False, interval_s=0.01).start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.stop() == (5600, "")
    assert len(calls) >= 4  # and one more at stop


def test_a_gpu_less_host_has_no_peak_and_says_why_and_a_failing_command_is_a_note():
    s = vram.PeakVram(lambda c: "#no-nvidia-smi\n", 100, True, interval_s=10).start()
    assert s.stop() == (None, "no nvidia-smi on the host (no GPU driver)")
    assert s.samples == 2  # the first at start, one at stop (the 10 s interval never came)

    def broken(command):
        raise RuntimeError("ssh went away")

    peak, note = vram.PeakVram(broken, 100, True, interval_s=10).start().stop()
    assert peak is None and "sampling failed: RuntimeError: ssh went away" in note


def test_each_level_gets_its_sampler_peak(server):
    peaks = iter([1000, 2000, 3000, 4000])
    started = []

    class Fake:
        def __init__(self):
            self.peak = next(peaks)
            started.append(self)

        def stop(self):
            return self.peak, f"fake {self.peak}"

    load = Load(depths=(0, 10), output_tokens=3, concurrency=(1, 2), requests_per_level=2, warmup_requests=0)
    levels, _ = loadgen.measure(server.url, None, "m", load, vram=Fake)
    assert [(lv.depth, lv.concurrency, lv.peak_vram_mib, lv.peak_vram_note) for lv in levels] == [
        (0, 1, 1000, "fake 1000"), (0, 2, 2000, "fake 2000"), (10, 1, 3000, "fake 3000"), (10, 2, 4000, "fake 4000")]


def test_the_command_samples_the_service_on_its_host(server):
    port = int(server.url.rsplit(":", 1)[1])
    host = FakeHost({"main_pid": 100, "pids": [100], "compute_apps": ["101, 5000"], "alive": [101],
                     "log": ["load_tensors: offloaded 33/33 layers to GPU"]}, [{"index": 0, "name": "NVIDIA H200"}],
                    smi=_smi("101, 5000", "102, 1000", "200, 700"))
    i = bench.bench_instance(host, None, "llama.cpp", _llama_instance(port), True,
                             Load(depths=(8,), output_tokens=4, concurrency=(1, 2), requests_per_level=2), False)
    assert [lv.peak_vram_mib for lv in i.levels] == [6000, 6000] and i.peak_vram_mib == 6000
    assert host.commands and all("nvidia-smi --query-compute-apps=pid,used_memory" in c for c in host.commands)
    gpu_less = FakeHost({"main_pid": 100, "pids": [100], "compute_apps": [], "alive": [], "log": []}, [])
    i = bench.bench_instance(gpu_less, None, "vllm", _llama_instance(port), True,
                             Load(depths=(8,), output_tokens=4, concurrency=(1,), requests_per_level=1), False)
    assert i.levels[0].peak_vram_mib is None and "no nvidia-smi" in i.levels[0].peak_vram_note
    assert "peak VRAM not measured: no nvidia-smi on the host" in table({"h": [i]})


# -- the sweep's flag sets -----------------------------------------------------------------------------------------

def _flags(args: list[str]) -> str:
    return " ".join(args)


NEW = ("-m /m.gguf --host 127.0.0.1 --port 8080 -ngl 99 -c 32768 -ctk f16 -ctv f16 -np 4 -kvu "
       "--kv-unified-per-slot 8192 -fa on -lv 4")


def test_the_slot_alternatives_keep_the_per_request_context_of_a_unified_pool():
    alts = dict(sweep.alternatives(NEW, "value"))
    assert list(alts) == ["default", "-np 1", "-np 8 -kvu", "-np 4", "-np 8", "-ctk q8_0 -ctv q8_0 -fa on",
                          "-ctk f16 -ctv f16 -fa off", "-ub 256", "-ub 1024"]  # -np 4 -kvu, KV f16 with -fa on and
    # -ub 512 are the default
    # a KV stream per slot: -c is split evenly over -np (llama.cpp's n_ctx_seq = n_ctx / n_seq_max without -kvu), so
    # 8 slots of 8192 tokens each need -c 65536, with neither -kvu nor the per-slot cap
    assert _flags(alts["-np 8"]) == ("-m /m.gguf --host 127.0.0.1 --port 8080 -ngl 99 -c 65536 -ctk f16 -ctv f16 "
                                     "-np 8 -fa on -lv 4")
    assert _flags(alts["-np 4"]) == ("-m /m.gguf --host 127.0.0.1 --port 8080 -ngl 99 -c 32768 -ctk f16 -ctv f16 "
                                     "-np 4 -fa on -lv 4")
    # one slot: its context is the per-request 8192, and no unified pool
    assert _flags(alts["-np 1"]) == ("-m /m.gguf --host 127.0.0.1 --port 8080 -ngl 99 -c 8192 -ctk f16 -ctv f16 "
                                     "-np 1 -fa on -lv 4")
    # eight slots: a pool of 8 x 8192, each request still capped at 8192
    assert _flags(alts["-np 8 -kvu"]) == ("-m /m.gguf --host 127.0.0.1 --port 8080 -ngl 99 -c 65536 -ctk f16 "
                                          "-ctv f16 -np 8 -kvu --kv-unified-per-slot 8192 -fa on -lv 4")
    assert _flags(alts["-ub 256"]) == NEW + " -ub 256"
    off = alts["-ctk f16 -ctv f16 -fa off"]
    assert off[off.index("-fa") + 1] == "off" and "--kv-unified-per-slot" in off


def test_the_slot_alternatives_of_the_former_rendering_divide_c_by_np():
    old = "-m /m.gguf --host 127.0.0.1 --port 8080 -ngl 99 -c 8192 -ctk q8_0 -ctv q8_0 -np 1 -fa on -lv 4"
    alts = dict(sweep.alternatives(old, "value"))
    assert list(alts) == ["default", "-np 4 -kvu", "-np 8 -kvu", "-np 4", "-np 8", "-ctk f16 -ctv f16 -fa on",
                          "-ctk f16 -ctv f16 -fa off", "-ub 256", "-ub 1024"]
    four = alts["-np 4 -kvu"]
    assert (four[four.index("-c") + 1], four[four.index("-np") + 1]) == ("32768", "4")
    assert "-kvu" in four and "--kv-unified-per-slot" not in four  # a build not given it is not given it now
    # long spellings and two slots of 4096: per request 2048
    two = sweep.with_slots(["--ctx-size", "4096", "--parallel", "2", "--kv-unified"], 8)
    assert two == ["-c", "16384", "-np", "8", "--kv-unified"]
    assert sweep.with_slots(["-c", "4096", "-np", "2", "-kvu", "--kv-unified-per-slot", "2048"], 1) == \
        ["-c", "2048", "-np", "1"]
    assert sweep.with_slots(["-m", "x"], 4) == ["-m", "x", "-np", "4", "-kvu"]  # no -c: the model's own, untouched
    bare = dict(sweep.alternatives("-m /m.gguf -ctk q8_0 -ctv q8_0 -fa", "flag"))
    assert "-fa" not in bare["-ctk f16 -ctv f16 -fa off"] and bare["-ctk f16 -ctv f16 -fa on"].count("-fa") == 1


def test_sweep_only_keeps_the_default_and_the_flag_sets_named():
    alts = sweep.alternatives(NEW, "value", ("-np 8", "-np 8 -kvu"))
    assert [label for label, _ in alts] == ["default", "-np 8 -kvu", "-np 8"]  # the sweep's order, default first
    # a flag set equal to the default is measured once, as the default
    assert [label for label, _ in sweep.alternatives(NEW, "value", ("-np 4 -kvu",))] == ["default"]
    with pytest.raises(ValueError, match=r"--sweep-only '-np 16' is no flag set of the sweep: use one of 'default'"):
        sweep.alternatives(NEW, "value", ("-np 16",))


def test_ub_512_is_an_alternative_where_the_default_sets_another():
    alts = dict(sweep.alternatives("-m /m.gguf -c 4096 -np 1 -ub 1024", "value"))
    assert "-ub 512" in alts and "-ub 1024" not in alts


# -- the sweep's figures, comparison and bound ---------------------------------------------------------------------

def _lv(depth: int, c: int, ttft: float, decode: float, agg: float, e2e: float | None = None) -> Level:
    return Level(c, 8, 0, ttft, None, None, None, decode, e2e, None, depth=depth, aggregate_decode_tps=agg)


def test_the_figures_of_a_run_are_per_depth_and_concurrency():
    levels = [_lv(0, 1, 50, 100, 100, 90), _lv(0, 8, 90, 60, 400, 350), _lv(16384, 1, 900, 70, 70, 40),
              _lv(16384, 8, 2000, 30, 200, 120)]
    assert [(f["figure"], f["depth"], f["concurrency"], f["value"]) for f in sweep.figures_of(levels)] == [
        ("decode_tps", 0, 1, 100), ("aggregate_decode_tps", 0, 8, 400), ("aggregate_e2e_tps", 0, 8, 350),
        ("ttft_p50_ms", 0, 1, 50), ("ttft_p50_ms", 0, 8, 90),
        ("decode_tps", 16384, 1, 70), ("aggregate_decode_tps", 16384, 8, 200), ("aggregate_e2e_tps", 16384, 8, 120),
        ("ttft_p50_ms", 16384, 1, 900), ("ttft_p50_ms", 16384, 8, 2000)]


def test_a_figure_no_request_measured_says_why_in_the_sweep_line():
    """The 2026-12-07 H100 sweep printed "d=16384 agg decode tok/s c=16 -" with no cause (16 clients of 16k-token
    prompts on 8 slots; the bench's own level there, bounded at 120 s, had TTFT p50 61.6 s, likely over the sweep's
    60 s request bound). Requests really cut by
    stream_completion against a server slower than the bound: the line says how many failed and the error."""
    slow = FakeServer(tokens=20, delay=0.1)
    try:
        samples = [loadgen.stream_completion(slow.url, None, {"prompt": "x"}, 0.35, time.monotonic())
                   for _ in range(2)]
    finally:
        slow.close()
    figs = sweep.figures_of([level(16, samples, depth=16384), _lv(0, 8, 90, 60, 400, 350)])
    line = sweep.figures_line({"figures": figs, "error": ""})
    assert "d=16384 agg decode tok/s c=16 - (all 2 requests failed: cut at the 0.35 s request bound)" in line, line
    assert "d=16384 TTFT p50 ms c=16 - (all 2 requests failed" in line and "d=0 agg decode tok/s c=8 400.0" in line
    assert all("why" not in f for f in figs if f["depth"] == 0)
    # the markdown report's per-flag-set table keeps the reason too
    inst = InstanceBench("h", "llama-server@m", "llama.cpp", running=True,
                         sweep=[{"label": "default", "flags": "-np 8", "figures": figs, "error": ""}])
    md = markdown("h", [inst], Load(), "h.png")
    assert "| agg decode tok/s | 16384 | 16 | - (all 2 requests failed: cut at the 0.35 s request bound) |" in md, md
    # and the terminal table's comparison, where the default has no ratio for it
    inst = dataclasses.replace(inst, sweep_ratios=sweep.ratios(inst.sweep))
    assert ("d=16384 agg decode tok/s c=16: default - (all 2 requests failed: cut at the 0.35 s request bound), "
            "no ratio") in sweep_lines(inst), sweep_lines(inst)


def test_a_figure_the_good_requests_did_not_measure_is_not_blamed_on_one_failure():
    """A review's case: 7 of 8 requests streamed one token each (no decode span) and one got an HTTP 500. The
    decode figure is None because no request decoded, not because of the one failure; and two kinds of failure are
    both named, neither as the cause of the other."""
    one_token = [Sample(ok=True, ttft_s=0.1, token_times_s=[0.1], completion_tokens=1) for _ in range(7)]
    lv = level(1, [*one_token, Sample(ok=False, error="HTTP 500")])
    line = sweep.figures_line({"figures": sweep.figures_of([lv]), "error": ""})
    assert "decode tok/s c=1 - (none of the 7 requests that succeeded measured it; 1 failed: HTTP 500)" in line, line
    mixed = level(16, [Sample(ok=False, error="cut at the 60 s request bound")] * 15
                  + [Sample(ok=False, error="HTTP 503: loading model")])
    line = sweep.figures_line({"figures": sweep.figures_of([mixed]), "error": ""})
    assert ("- (all 16 requests failed: HTTP 503: loading model; cut at the 60 s request bound)" in line), line


def test_the_end_to_end_aggregate_is_compared_apart_from_the_decode_aggregate():
    """The H200 sweep's c=8 figures (tests/data/bench_sweep_h200_1b_d16384.json, `v100kit bench --json --sweep` there;
    tools/gpu/README.md): -np 1's aggregate decode is one stream's speed (its queueing is outside every decode span),
    so it "beats" 8 slots. The default's end-to-end rate is its own level's; -np 1's (116) is the README's estimate
    from its TTFT and decode: the sweep kept no end-to-end figure then. Each figure has its own best and ratio."""
    doc = json.loads((ROOT / "tests/data/bench_sweep_h200_1b_d16384.json").read_text())
    inst = doc["hosts"]["@local"][0]
    got = {(r["label"], f["figure"]): f["value"] for r in inst["sweep"] for f in r["figures"]
           if f["depth"] == 16384 and f["concurrency"] == 8}
    e2e = next(lv["aggregate_e2e_tps"] for lv in inst["levels"] if lv["concurrency"] == 8)
    default = [_lv(16384, 8, got["default", "ttft_p50_ms"], 0, got["default", "aggregate_decode_tps"], e2e)]
    np1 = [_lv(16384, 8, got["-np 1", "ttft_p50_ms"], 0, got["-np 1", "aggregate_decode_tps"], 116.0)]
    rows = {(r["figure"], r["concurrency"]): r for r in sweep.ratios([
        {"label": "default", "figures": sweep.figures_of(default)},
        {"label": "-np 1", "figures": sweep.figures_of(np1)}])}
    assert rows["aggregate_decode_tps", 8]["best_label"] == "-np 1"
    assert rows["aggregate_decode_tps", 8]["ratio"] == pytest.approx(0.211, abs=0.001)  # the README's 103.6 / 490.3
    assert rows["aggregate_e2e_tps", 8]["best_label"] == "-np 1"
    assert rows["aggregate_e2e_tps", 8]["ratio"] == pytest.approx(0.845, abs=0.001)  # 98.0 / 116
    assert rows["ttft_p50_ms", 8]["best_label"] == "default" and rows["ttft_p50_ms", 8]["ratio"] == 1.0


def _runs() -> list[dict]:
    default = [_lv(0, 1, 50, 100, 100), _lv(0, 8, 90, 60, 400), _lv(16384, 1, 900, 70, 70),
               _lv(16384, 8, 2000, 30, 200)]
    np8 = [_lv(0, 1, 55, 95, 95), _lv(0, 8, 80, 70, 500), _lv(16384, 1, 1000, 66, 66), _lv(16384, 8, 1600, 35, 250)]
    q8 = [_lv(0, 1, 40, 100, 100), _lv(0, 8, 95, 55, 380), _lv(16384, 1, 800, 80, 80), _lv(16384, 8, 2100, 28, 190)]
    return [{"label": "default", "flags": "-np 4", "figures": sweep.figures_of(default), "error": ""},
            {"label": "-np 8 -kvu", "flags": "-np 8", "figures": sweep.figures_of(np8), "error": ""},
            {"label": "-ctk q8_0 -ctv q8_0 -fa on", "flags": "q8", "figures": sweep.figures_of(q8), "error": ""},
            {"label": "-ub 256", "flags": "-ub 256", "figures": None, "error": "no /health"}]


def test_the_comparison_names_the_best_and_the_default_share_per_depth():
    rows = {(r["figure"], r["depth"], r["concurrency"]): r for r in sweep.ratios(_runs())}
    assert len(rows) == 8
    r = rows["decode_tps", 0, 1]  # 100 (default) = 100 (q8_0): a tie keeps the first, the default
    assert (r["default"], r["best"], r["best_label"], r["ratio"]) == (100, 100, "default", 1.0)
    r = rows["decode_tps", 16384, 1]  # best q8_0 80: 70 / 80
    assert (r["best"], r["best_label"], r["ratio"]) == (80, "-ctk q8_0 -ctv q8_0 -fa on", pytest.approx(0.875))
    r = rows["aggregate_decode_tps", 16384, 8]  # best -np 8 250: 200 / 250
    assert (r["best"], r["best_label"], r["ratio"]) == (250, "-np 8 -kvu", pytest.approx(0.8))
    r = rows["ttft_p50_ms", 16384, 8]  # latency, lower is better: best 1600 / default 2000
    assert (r["best"], r["best_label"], r["ratio"], r["higher_is_better"]) == \
        (1600, "-np 8 -kvu", pytest.approx(0.8), False)
    r = rows["ttft_p50_ms", 0, 1]  # best q8_0 40: 40 / 50
    assert r["ratio"] == pytest.approx(0.8)
    assert sweep.ratios([{"label": "default", "figures": None, "error": "x"}]) == []


def test_the_table_json_and_report_carry_the_comparison():
    i = InstanceBench("gpu-01", "llama-server@gemma", "llama.cpp", running=True, on_gpu=True)
    i.sweep = _runs()
    i.sweep_ratios = sweep.ratios(i.sweep)
    i.sweep_bound = sweep.bound(4, Load(depths=(0, 16384), concurrency=(1, 8), requests_per_level=8), 300)
    text = table({"gpu-01": [i]})
    assert ("llama-server@gemma: sweep d=16384 agg decode tok/s c=8: default 200.0, best 250.0 (-np 8 -kvu), "
            "default/best 0.80") in text
    assert "sweep d=16384 TTFT p50 ms c=8: default 2000.0, best 1600.0 (-np 8 -kvu), best/default 0.80" in text
    assert "sweep -ub 256: no /health" in text
    doc = json.loads(json.dumps(as_json({"gpu-01": [i]}, Load())))
    got = doc["hosts"]["gpu-01"][0]
    assert {(r["figure"], r["depth"], r["concurrency"], r["best_label"]) for r in got["sweep_ratios"]} >= {
        ("decode_tps", 16384, 1, "-ctk q8_0 -ctv q8_0 -fa on"), ("aggregate_decode_tps", 16384, 8, "-np 8 -kvu")}
    assert got["sweep_bound"]["max_requests"] == 4 * 2 * (1 + 8 + 8)
    md = markdown("gpu-01", [i], Load(), "x.png")
    assert "| decode tok/s | 16384 | 1 | 70.0 | 80.0 | -ctk q8_0 -ctv q8_0 -fa on | 0.88 (default/best) |" in md
    assert "| agg decode tok/s | 0 | 8 | 400.0 | 500.0 | 380.0 | - |" in md  # every flag set's value, a column each
    assert "Sweep: 4 flag sets x 2 depths x 2 levels: at most 136 requests" in md


def test_the_sweep_bound_is_flag_sets_x_depths_x_levels_x_requests():
    load = Load(depths=(0, 16384), concurrency=(1, 8), requests_per_level=8, warmup_requests=1, level_time_s=30,
                request_timeout_s=60)
    b = sweep.bound(7, load, 300)
    assert b == {"alternatives": 7, "depths": 2, "levels": 2, "rounds": 1, "max_requests": 7 * 2 * (1 + 8 + 8),
                 "max_seconds": 7 * (2 * (60 + 2 * (30 + 60)) + 300)}
    b3 = sweep.bound(7, load, 300, rounds=3)  # every flag set measured three times: three times the bound
    assert (b3["rounds"], b3["max_requests"], b3["max_seconds"]) == (3, 3 * b["max_requests"], 3 * b["max_seconds"])


def test_the_sweep_measures_every_flag_set_at_every_depth_and_level_within_its_bound(server, monkeypatch):
    """bench._sweep with the host control and the rendered arguments faked: every flag set gets the user's load
    (the fake server counts the requests), its figures per depth and concurrency, and the comparison."""
    from types import SimpleNamespace

    import roles.llama_cpp.decide as decide

    calls = []

    class Control:
        def __init__(self, *a):
            pass

        def stop_service(self):
            calls.append("stop_service")

        def start_service(self):
            calls.append("start_service")

        def start_alternative(self, args):
            calls.append(" ".join(args))
            return 100

        def stop_alternative(self, handle):
            calls.append("stop")

    monkeypatch.setattr(bench, "HostControl", Control)
    monkeypatch.setattr(decide, "server_args", lambda inst, style: NEW)
    plan = SimpleNamespace(settings=SimpleNamespace(base_service_user="llm", base_service_home="/var/lib/llm"),
                           llama_cpp=SimpleNamespace(source=SimpleNamespace(flash_attn_style="value")))
    host = FakeHost({}, [], smi=_smi("101, 5000"))
    i = InstanceBench("gpu-01", "llama-server@tiny", "llama.cpp")
    load = Load(depths=(0, 16), output_tokens=3, concurrency=(1, 2), requests_per_level=2, warmup_requests=1)
    bench._sweep(host, plan, _llama_instance(int(server.url.rsplit(":", 1)[1])), i, server.url, load, True)
    assert calls[0] == "stop_service" and calls[-1] == "start_service"
    assert [r["label"] for r in i.sweep] == [label for label, _ in sweep.alternatives(NEW, "value")]
    assert len(server.requests) == i.sweep_bound["max_requests"] == 9 * 2 * (1 + 2 + 2)
    for r in i.sweep:
        assert not r["error"] and r["peak_vram_mib"] == 5000
        assert {(f["figure"], f["depth"], f["concurrency"]) for f in r["figures"]} == {
            (name, d, c) for d in (0, 16) for name, c in
            (("decode_tps", 1), ("aggregate_decode_tps", 2), ("aggregate_e2e_tps", 2), ("ttft_p50_ms", 1),
             ("ttft_p50_ms", 2))}
    assert len(i.sweep_ratios) == 10 and all(0 < r["ratio"] <= 1 for r in i.sweep_ratios)


def _sweep_control(interrupt_at_stop: int = 0):
    """(a stand-in for bench.HostControl, the argv of each alternative it started): nothing runs on a host; the
    `interrupt_at_stop`-th stop of an alternative raises KeyboardInterrupt (0: none does)."""
    starts: list[str] = []
    stops = [0]

    class Control:
        def __init__(self, *a):
            pass

        def stop_service(self):
            pass

        def start_service(self):
            pass

        def start_alternative(self, args):
            starts.append(" ".join(args))
            return 100

        def stop_alternative(self, handle):
            stops[0] += 1
            if stops[0] == interrupt_at_stop:
                raise KeyboardInterrupt

    return Control, starts


def test_on_a_terminal_each_flag_set_s_figures_stay_on_a_line_of_their_own(server, monkeypatch):
    """say() keeps one updated line on a terminal (each line cut to 150 characters, erased by the next): the
    figures said as each flag set ends, and a cut sweep's count, must stay there whole (Ctrl-C is typed there)."""
    import io
    from types import SimpleNamespace

    import roles.llama_cpp.decide as decide

    Control, _ = _sweep_control(interrupt_at_stop=2)  # Ctrl-C as the second flag set's llama-server stops

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(bench, "HostControl", Control)
    monkeypatch.setattr(decide, "server_args", lambda inst, style: NEW)
    monkeypatch.setattr(bench.sys, "stderr", term := Terminal())
    plan = SimpleNamespace(settings=SimpleNamespace(base_service_user="llm", base_service_home="/var/lib/llm"),
                           llama_cpp=SimpleNamespace(source=SimpleNamespace(flash_attn_style="value")))
    i = InstanceBench("gpu-01", "llama-server@tiny", "llama.cpp")
    load = Load(depths=(0, 16), output_tokens=3, concurrency=(1, 2), requests_per_level=2, warmup_requests=1)
    with pytest.raises(KeyboardInterrupt):
        bench._sweep(FakeHost({}, [], smi=_smi("101, 5000")), plan,
                     _llama_instance(int(server.url.rsplit(":", 1)[1])), i, server.url, load, True)
    # what a terminal shows: of each line, what the last "\r\033[K" left
    shown = [row.rsplit("\r\033[K", 1)[-1] for row in term.getvalue().split("\n")]
    first, second = (next((r for r in shown if r.startswith(f"gpu-01 llama-server@tiny: sweep: {label}: ")), "")
                     for label, _ in sweep.alternatives(NEW, "value")[:2])
    for row in (first, second):
        assert row.count("; ") == 9 and "d=16 TTFT p50 ms c=2 " in row  # every figure of both depths
    assert any(r.startswith("gpu-01 llama-server@tiny: sweep: cut after 2 of 9 flag sets; the figures of those "
                            "measured are in the 'sweep:' lines above, the report has none") for r in shown)


def test_the_sampler_thread_ends_with_its_level():
    before = threading.active_count()
    vram.PeakVram(lambda c: "#no-nvidia-smi\n", 1, True, interval_s=0.01).start().stop()
    assert threading.active_count() == before


def test_prompt_words_are_scaled_to_the_servers_token_count():
    """A tokenizer that makes 7 tokens of every word (the H200 run's made-up vocabulary spelled English byte by
    byte): 16384 tokens need 16384 / 7 words, and the prompt built with them counts 16384 tokens within a word."""
    from roles.bench.figures import prompt
    from v100kit.loadgen import words_for

    def count(text):
        return 7 * len(text.split())

    words, note = words_for(16384, count, "r")
    assert abs(count(prompt(words, 0, "r")) - 16384) <= 7 and "server's /tokenize" in note
    assert words_for(0, count) == (0, "")
    assert words_for(512, lambda text: None) == (512, "no /tokenize on the server: one word per token assumed")


def test_count_tokens_asks_the_servers_tokenize_endpoint_with_the_key():
    """A stand-in llama-server on a local port answering POST /tokenize {"content"} -> {"tokens": [...]} (its
    tools/server README); a vLLM-style one answering {"count"} only to {"model", "prompt"}."""
    import http.server
    import json
    import threading

    from v100kit.loadgen import count_tokens

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization"), body))
            if "content" in body and self.server.kind == "llama":
                out = {"tokens": list(range(len(body["content"].split()) * 2))}
            elif "prompt" in body and self.server.kind == "vllm":
                out = {"count": len(body["prompt"].split()) * 3, "tokens": []}
            else:
                self.send_response(400)
                self.end_headers()
                return
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    for kind, per_word in (("llama", 2), ("vllm", 3)):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.kind = kind
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{srv.server_address[1]}"
            assert count_tokens(url, "k3y", "m", "a b c d") == 4 * per_word
        finally:
            srv.shutdown()
    assert all(path == "/tokenize" and auth == "Bearer k3y" for path, auth, _ in seen)


def test_waiting_for_health_ends_when_the_server_has_exited():
    """A sweep alternative that dies at start (the lab's q8_0 at head size 16: "failed to create_context") no
    longer costs the whole start timeout: wait_healthy stops at the first check that says the process is gone."""
    import time as _time

    from v100kit.loadgen import wait_healthy

    calls = []
    t0 = _time.monotonic()
    assert wait_healthy("http://127.0.0.1:9", None, 60, lambda: calls.append(1) or False) is False
    assert calls == [1] and _time.monotonic() - t0 < 15



def test_the_rounds_given_reach_the_sweep_on_the_host(server, monkeypatch):
    """bench._sweep with rounds 3 (as bench_host passes --sweep-rounds): each of the two flag sets started three
    times against the fake llama-server, round r rotated by r (default, x; x, default; default, x), every flag set
    with three rounds recorded, and the instance's bound counting them."""
    from types import SimpleNamespace

    import roles.llama_cpp.decide as decide

    Control, starts = _sweep_control()
    monkeypatch.setattr(bench, "HostControl", Control)
    monkeypatch.setattr(decide, "server_args", lambda inst, style: NEW)
    plan = SimpleNamespace(settings=SimpleNamespace(base_service_user="llm", base_service_home="/var/lib/llm"),
                           llama_cpp=SimpleNamespace(source=SimpleNamespace(flash_attn_style="value")))
    i = InstanceBench("gpu-01", "llama-server@tiny", "llama.cpp")
    load = Load(depths=(0,), output_tokens=3, concurrency=(1,), requests_per_level=1, warmup_requests=0)
    bench._sweep(FakeHost({}, [], smi=_smi("101, 5000")), plan, _llama_instance(int(server.url.rsplit(":", 1)[1])),
                 i, server.url, load, True, ("-np 1",), 3)
    default, other = starts[0], starts[1]
    assert default != other and starts == [default, other, other, default, default, other]
    assert i.sweep_bound["rounds"] == 3 and [len(r["rounds"]) for r in i.sweep] == [3, 3]
