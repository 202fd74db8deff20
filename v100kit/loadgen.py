"""A small bounded load generator for OpenAI-compatible completions endpoints (llama-server, vLLM): streamed
/v1/completions requests from threads, timed per token. Standard library only.

Why no library: guidellm and aiperf are whole benchmarking applications (their own CLIs, report formats and tens of
dependencies: transformers, datasets, zmq, ...), and vLLM's serving benchmark lives inside vLLM (torch). The bench
needs a few fixed-size streamed requests per level with hard bounds in count and time, against endpoints that may
sit behind an SSH tunnel, and the raw per-token times: ~100 lines here.

The API key travels only in the Authorization header; it is never logged or put in an error message.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import os
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from roles.bench.figures import Level, Load, Sample, level, prompt


def request_body(load: Load, model: str, depth: int | None = None, request: int | None = None,
                 run: str = "") -> dict:
    """The JSON body of one request: a prompt of about `depth` tokens (default: the load's first depth) that starts
    with the request's number and the run's id (figures.prompt says why every prompt starts differently), the
    output length (ignore_eos: no early stop), the seed, greedy sampling, and the usage figures in the stream
    (stream_options; llama-server also sends `timings`)."""
    return {"model": model, "prompt": prompt(load.prompt_tokens if depth is None else depth, request, run),
            "max_tokens": load.output_tokens, "seed": load.seed, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}


def run_id() -> str:
    """A short id that differs between runs (so a prompt never starts like one an earlier run left in a slot)."""
    return os.urandom(4).hex()


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port, timeout=timeout), u.path.rstrip("/")


def get(url: str, path: str, key: str | None, timeout: float = 10) -> int:
    """HTTP status of a GET (0 when nothing answers)."""
    try:
        conn, base = _connection(url, timeout)
        conn.request("GET", base + path, headers={"Authorization": f"Bearer {key}"} if key else {})
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError:
        return 0


def wait_healthy(url: str, key: str | None, timeout_s: float, alive: Callable[[], bool] | None = None) -> bool:
    """Poll /health until it answers 200 (llama-server answers 503 while it loads), at most `timeout_s`; False at
    once when `alive` (checked every 5 s) says the server's process has exited (a start that failed: no need to
    wait out the timeout)."""
    deadline, checked = time.monotonic() + timeout_s, time.monotonic()
    while time.monotonic() < deadline:
        if get(url, "/health", key, timeout=5) == 200:
            return True
        if alive is not None and time.monotonic() - checked >= 5:
            checked = time.monotonic()
            if not alive():
                return False
        time.sleep(0.5)
    return False


def stream_completion(url: str, key: str | None, body: dict, timeout_s: float, t0: float) -> Sample:
    """One streamed completion; times on the clock of `t0` (time.monotonic at the level's start)."""
    sent = time.monotonic()
    s = Sample(ok=False, start_s=sent - t0)
    try:
        conn, base = _connection(url, timeout_s)
        conn.request("POST", base + "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream",
                              **({"Authorization": f"Bearer {key}"} if key else {})})
        r = conn.getresponse()
        if r.status != 200:
            said = r.read(400).decode("utf-8", "replace").strip().replace("\n", " ")
            s.error = f"HTTP {r.status}" + (f": {said[:200]}" if said else "")  # e.g. the context is too small
            conn.close()
            return s
        chunks, text = 0, []
        while True:
            if time.monotonic() - sent > timeout_s:
                s.error = f"cut at the {timeout_s:g} s request bound"
                conn.close()
                return s
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            msg = json.loads(data)
            piece = "".join(c.get("text") or "" for c in msg.get("choices") or [])
            if piece:
                now = time.monotonic() - sent
                if s.ttft_s is None:
                    s.ttft_s = now
                s.token_times_s.append(now)
                text.append(piece)
                chunks += 1
            usage = msg.get("usage") or {}
            timings = msg.get("timings") or {}
            s.completion_tokens = usage.get("completion_tokens") or timings.get("predicted_n") or s.completion_tokens
            s.prompt_tokens = usage.get("prompt_tokens") or timings.get("prompt_n") or s.prompt_tokens
        conn.close()
        s.completion_tokens = s.completion_tokens or chunks
        s.text = "".join(text)
        s.ok = chunks > 0
        s.error = "" if s.ok else "no token streamed"
    except (OSError, ValueError, http.client.HTTPException) as e:
        s.error = type(e).__name__ + (f": {e}" if str(e) else "")
    return s


def run_level(url: str, key: str | None, model: str, load: Load, concurrency: int,
              progress: Callable[[int, int], None] = lambda done, total: None, depth: int | None = None,
              numbers: Callable[[], int] | None = None, run: str = "") -> list[Sample]:
    """`concurrency` streams sending load.requests_at(concurrency) requests in all; no request starts after
    load.level_time_s, each is cut at load.request_timeout_s. progress(done, total) after each request. Each
    request's prompt starts with the next of `numbers` (default: 0, 1, ... for this level) and `run`."""
    total = load.requests_at(concurrency)
    numbers = numbers or itertools.count().__next__
    t0 = time.monotonic()
    lock, samples = threading.Lock(), []
    left = [total]
    stop = threading.Event()

    def stream() -> None:
        while True:
            with lock:
                if stop.is_set() or left[0] <= 0 or time.monotonic() - t0 > load.level_time_s:
                    return
                left[0] -= 1
                body = request_body(load, model, depth, numbers(), run)
            s = stream_completion(url, key, body, load.request_timeout_s, t0)
            with lock:
                samples.append(s)
                progress(len(samples), total)

    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        for _ in range(concurrency):
            pool.submit(stream)
        pool.shutdown(wait=True)
    except BaseException:  # Ctrl-C or SIGTERM (v100kit/cli.py): no stream starts another request, and the
        stop.set()  # process, which waits for its threads at exit, ends with the requests under way
        pool.shutdown(wait=False)
        raise
    return sorted(samples, key=lambda s: s.start_s)


def count_tokens(url: str, key: str | None, model: str, text: str, timeout: float = 60) -> int | None:
    """How many tokens the server's own tokenizer makes of `text` (the prompt's tokens, without the BOS a
    completion adds): llama-server's POST /tokenize {"content"} -> {"tokens": [...]}, else vLLM's POST /tokenize
    {"model", "prompt"} -> {"count"}; None when neither answers."""
    for body, read in (({"content": text}, lambda d: len(d["tokens"])),
                       ({"model": model, "prompt": text}, lambda d: d.get("count", len(d["tokens"])))):
        try:
            conn, base = _connection(url, timeout)
            conn.request("POST", base + "/tokenize", body=json.dumps(body),
                         headers={"Content-Type": "application/json",
                                  **({"Authorization": f"Bearer {key}"} if key else {})})
            r = conn.getresponse()
            data = r.read()
            conn.close()
            if r.status == 200:
                return int(read(json.loads(data)))
        except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
            continue
    return None


def words_for(depth: int, count: Callable[[str], int | None], run: str = "") -> tuple[int, str]:
    """The number of prompt words (figures.prompt) that makes about `depth` tokens with the server's tokenizer:
    (words, note). A tokenizer need not make one token of each word (a model with a made-up vocabulary spells
    English byte by byte: 16384 words were 117k tokens on the H200 run), so the words are scaled by what the
    server counts, twice (the ratio is nearly constant). Without a /tokenize: `depth` words, and the note says so.
    Depth 0: the request's label alone."""
    if depth <= 0:
        return 0, ""
    words = depth
    for _ in range(2):
        n = count(prompt(words, 0, run))
        if not n:
            return depth, "no /tokenize on the server: one word per token assumed"
        words = max(1, round(words * depth / n))
    return words, f"{words} words for {depth} tokens (the server's /tokenize)"


def measure(url: str, key: str | None, model: str, load: Load,
            say: Callable[[str], None] = lambda line: None,
            vram: Callable[[], object] | None = None) -> tuple[list[Level], list[Sample]]:
    """Per depth: warm-up requests (not counted), then one Level per load.concurrency: (levels in (depth,
    concurrency) order, every counted sample). Every request of the call has its own number in its prompt.
    vram: a factory of a started sampler (roles/bench/vram.py PeakVram) run during each level; its stop() gives the
    level's peak_vram_mib and peak_vram_note; None: not sampled."""
    numbers, run = itertools.count().__next__, run_id()
    levels, all_samples = [], []
    for depth in load.depths:
        words, note = words_for(depth, lambda text: count_tokens(url, key, model, text), run)
        if note:
            say(f"depth {depth}: {note}")
        t0 = time.monotonic()
        for _ in range(load.warmup_requests):
            stream_completion(url, key, request_body(load, model, words, numbers(), run), load.request_timeout_s, t0)
        for c in load.concurrency:
            sampler = vram() if vram is not None else None
            try:
                samples = run_level(url, key, model, load, c,
                                    lambda done, total, c=c: say(f"depth {depth} concurrency {c}: {done}/{total} "
                                                                 "requests"), words, numbers, run)
            finally:
                peak, note = sampler.stop() if sampler is not None else (None, "not sampled")
            levels.append(dataclasses.replace(level(c, samples, depth), peak_vram_mib=peak, peak_vram_note=note))
            all_samples += samples
    return levels, all_samples
