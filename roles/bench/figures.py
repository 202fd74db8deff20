"""The bench's figures from timed requests, the degenerate-output check, and the bounds of the load. Pure.

Units: seconds (s) for times, milliseconds (ms) in the figures shown, tokens, tokens/s, MiB for VRAM.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

#: The option of `v100kit bench` that sets each Load field (the refusals name the option, not the field).
OPTION = {"depths": "--depths/--prompt-tokens", "output_tokens": "--output-tokens", "concurrency": "--concurrency",
          "requests_per_level": "--requests", "level_time_s": "--time-limit-s",
          "request_timeout_s": "--request-timeout-s", "warmup_requests": "--warmup-requests", "seed": "--seed"}
MAX_DEPTH = 1 << 20  # prompt tokens: far above any context llama-server or vLLM serves on these GPUs
MAX_CONCURRENCY = 256
MAX_REQUESTS = 4096
MAX_OUTPUT_TOKENS = 32768
MAX_TIME_S = 3600.0


@dataclass(frozen=True)
class Load:
    """What the bench sends to one instance, and its bounds. At each depth (prompt length in tokens), warm-up
    requests, then one level per concurrency: a level sends requests_at(c) requests (requests_per_level, at least
    one per stream) and starts none after `level_time_s`; each request is cut at `request_timeout_s`. So one
    instance gets at most `max_requests` requests, for at most `max_seconds`.

    Every refusal (ValueError) names the bench option that sets the field, the value and the fix."""

    depths: tuple[int, ...] = (256,)  # prompt tokens of every request, one measurement per depth
    output_tokens: int = 64  # max_tokens, with ignore_eos: every completion as long
    seed: int = 1234
    concurrency: tuple[int, ...] = (1, 4, 8)
    requests_per_level: int = 16  # at most, but at least `concurrency` of them, so that every stream runs once
    level_time_s: float = 60.0  # no request starts later than this into a level
    request_timeout_s: float = 120.0
    warmup_requests: int = 1  # per depth, not counted

    @property
    def prompt_tokens(self) -> int:
        """The first depth (a Load of one depth: its prompt length)."""
        return self.depths[0]

    def requests_at(self, concurrency: int) -> int:
        """Requests sent at one concurrency: requests_per_level, but at least one per stream."""
        return max(concurrency, self.requests_per_level)

    @property
    def max_requests(self) -> int:
        """The most requests one instance gets: per depth the warm-up plus every level's requests_at."""
        return len(self.depths) * (self.warmup_requests + sum(self.requests_at(c) for c in self.concurrency))

    @property
    def max_seconds(self) -> float:
        """The longest one instance is loaded: per depth, the warm-up requests one after another (each at most a
        request timeout), then per level its start window plus one request's timeout."""
        per_depth = self.warmup_requests * self.request_timeout_s + len(self.concurrency) * (
            self.level_time_s + self.request_timeout_s)
        return len(self.depths) * per_depth

    def __post_init__(self) -> None:
        problems = load_problems(self)
        if problems:
            raise ValueError("; ".join(problems))


def load_problems(load: Load) -> list[str]:
    """What is wrong with a load, each naming the option, the value and the fix; [] when it is sound."""
    out = []

    def bad(name: str, value, fix: str) -> None:
        out.append(f"{OPTION[name]} {value}: {fix}")

    def ints(name: str, values, lo: int, hi: int) -> None:
        text = ",".join(map(str, values))
        if not values:
            bad(name, "(empty)", "give at least one value")
        elif not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            bad(name, text, "give whole numbers")
        elif not all(lo <= v <= hi for v in values):
            bad(name, text, f"{'each' if len(values) > 1 else 'it'} must be from {lo} to {hi}")
        elif len(set(values)) != len(values):
            bad(name, text, "give each value once")

    ints("depths", load.depths, 0, MAX_DEPTH)
    ints("concurrency", load.concurrency, 1, MAX_CONCURRENCY)
    ints("output_tokens", (load.output_tokens,), 2, MAX_OUTPUT_TOKENS)  # decode needs a token after the first
    ints("requests_per_level", (load.requests_per_level,), 1, MAX_REQUESTS)
    ints("warmup_requests", (load.warmup_requests,), 0, 16)
    ints("seed", (load.seed,), 0, 2**31 - 1)
    for name in ("level_time_s", "request_timeout_s"):
        v = getattr(load, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= MAX_TIME_S:
            bad(name, v, f"give seconds above 0 and at most {MAX_TIME_S:.0f}")
    return out


#: The prompt's words: ordinary English, so that every tokenizer makes about one token of each.
PROMPT_WORDS = ("the quick brown fox jumps over a lazy dog while seven small robots count every star in the "
                "night sky and write each number down").split()


def prompt(tokens: int, request: int | None = None, run: str = "") -> str:
    """A prompt of about `tokens` tokens: `tokens` words (about one token each with a llama tokenizer; the server's
    usage.prompt_tokens is the measured length, reported as the level's mean), the first ones naming the request.

    Why the unique start: llama-server keeps each slot's last prompt and evaluates only what follows the longest
    common prefix with the next one (cache_prompt, on by default), and vLLM's prefix caching reuses the KV blocks of
    a prompt it has seen. Identical prompts would then skip most of their prefill and the TTFT would measure a cache
    hit, not a prompt of that depth. "request N of run R:" at the very start makes the common prefix with any earlier
    prompt (this run's: N differs; an earlier run's: R differs) a few tokens at most. request None: the fixed words
    alone. Depth 0 is the request's label alone (a few tokens: no prompt at all is not a completion request)."""
    head = [] if request is None else f"request {request} of run {run or '-'}:".split()
    body = max(0, tokens - len(head))
    return " ".join(head + [PROMPT_WORDS[i % len(PROMPT_WORDS)] for i in range(body)])


@dataclass
class Sample:
    """One streamed request as the client timed it (seconds since it was sent). ok False: error says why."""

    ok: bool
    start_s: float = 0.0  # on the level's clock
    ttft_s: float | None = None  # first token
    token_times_s: list[float] = field(default_factory=list)  # arrival of each streamed token chunk after sending
    completion_tokens: int = 0  # the server's usage figure, else the streamed chunks
    prompt_tokens: int | None = None  # the server's usage figure
    text: str = ""
    error: str = ""

    @property
    def end_s(self) -> float:
        return self.start_s + (self.token_times_s[-1] if self.token_times_s else 0.0)

    @property
    def decode_span(self) -> tuple[float, float] | None:
        """(first token, last token) on the level's clock: the time this request was decoding; None with fewer
        than two streamed chunks (nothing decoded after the first token)."""
        if len(self.token_times_s) < 2 or self.completion_tokens < 2:
            return None
        return self.start_s + self.token_times_s[0], self.start_s + self.token_times_s[-1]


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile (0..100) with linear interpolation between ranks (numpy's default); None if empty."""
    if not values:
        return None
    v = sorted(values)
    rank = (len(v) - 1) * p / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def inter_token_s(s: Sample) -> list[float]:
    """Gaps between consecutive streamed tokens of one request, seconds."""
    return [b - a for a, b in zip(s.token_times_s, s.token_times_s[1:])]


def decode_tps(s: Sample) -> float | None:
    """Decode speed of one request, tokens/s: the tokens after the first over the time after the first; None with
    fewer than two tokens."""
    if s.decode_span is None:
        return None
    span = s.token_times_s[-1] - s.token_times_s[0]
    return (s.completion_tokens - 1) / span if span > 0 else None


def union_s(spans: list[tuple[float, float]]) -> float:
    """Length of the union of time intervals (overlaps counted once), seconds."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def aggregate_decode_tps(samples: list[Sample]) -> float | None:
    """Aggregate decode speed of a level, tokens/s, timed at the client:

        sum over the good requests of (completion_tokens - 1)  /  length of the union of their decode spans

    where a request's decode span is [its first token, its last token] on the level's clock. The first token of
    each request is left out (it ends the prefill: TTFT is its own figure), and time in which no stream was decoding
    (every stream waiting for a first token, or between one request's end and the next's first token) does not
    count. At concurrency 1 this is the pooled single-stream decode speed; with N streams decoding side by side
    all the time it is the sum of their speeds. None when no request decoded."""
    spans = [(s, sp) for s in samples if s.ok and (sp := s.decode_span) is not None]
    time_s = union_s([sp for _, sp in spans])
    return sum(s.completion_tokens - 1 for s, _ in spans) / time_s if time_s > 0 else None


def aggregate_e2e_tps(samples: list[Sample]) -> float | None:
    """End-to-end aggregate speed of a level, tokens/s: every completion token of the good requests over the wall
    time from the first request's send to the last token of any (prefill and queueing included)."""
    good = [s for s in samples if s.ok]
    wall = (max(s.end_s for s in good) - min(s.start_s for s in good)) if good else 0
    return sum(s.completion_tokens for s in good) / wall if wall > 0 else None


@dataclass(frozen=True)
class Level:
    """The figures of one concurrency level at one depth. Percentiles: percentile() over the good requests (TTFT:
    one value per request; ITL: every gap between consecutive streamed chunks of every request, pooled)."""

    concurrency: int
    requests: int
    failed: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    decode_tps_per_stream: float | None  # p50 over requests of decode_tps
    aggregate_e2e_tps: float | None  # aggregate_e2e_tps: completion tokens / first send to last token
    prompt_tokens: float | None  # mean as the server counted them
    errors: tuple[str, ...] = ()
    depth: int = 0  # the prompt tokens asked for (the server's count: prompt_tokens)
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    aggregate_decode_tps: float | None = None  # aggregate_decode_tps: tokens after the first / union of decode spans
    peak_vram_mib: float | None = None  # the instance's processes, the most nvidia-smi showed during the level
    peak_vram_note: str = ""  # why peak_vram_mib is None (no nvidia-smi, ...), or how it was matched


def level(concurrency: int, samples: list[Sample], depth: int = 0) -> Level:
    """Summarise one level's samples (failed ones count only in `failed` and `errors`)."""
    good = [s for s in samples if s.ok]
    ms = lambda x: None if x is None else x * 1000  # noqa: E731
    ttft = [s.ttft_s for s in good if s.ttft_s is not None]
    itl = [g for s in good for g in inter_token_s(s)]
    tps = [t for s in good if (t := decode_tps(s)) is not None]
    prompts = [s.prompt_tokens for s in good if s.prompt_tokens]
    return Level(concurrency, len(samples), len(samples) - len(good), ms(percentile(ttft, 50)),
                 ms(percentile(ttft, 95)), ms(percentile(itl, 50)), ms(percentile(itl, 95)), percentile(tps, 50),
                 aggregate_e2e_tps(samples), sum(prompts) / len(prompts) if prompts else None,
                 tuple(sorted({s.error for s in samples if not s.ok}))[:3], depth=depth,
                 ttft_p99_ms=ms(percentile(ttft, 99)), itl_p99_ms=ms(percentile(itl, 99)),
                 aggregate_decode_tps=aggregate_decode_tps(samples))


_WORD = re.compile(r"\S+|\s+")


def degenerate(text: str, min_chars: int = 8) -> str | None:
    """Why a completion is degenerate, or None: one character or one word repeated over the whole completion
    ("!!!!!!!!", "the the the the"), which is what fp16 overflow of a bf16-trained model gives (NaN/inf logits
    decode to one token id). Completions shorter than `min_chars` (non-blank) are not judged."""
    stripped = "".join(text.split())
    if len(stripped) < min_chars:
        return None
    if len(set(stripped)) == 1:
        return f"one character repeated: {stripped[:12]!r}... ({len(stripped)} chars)"
    words = text.split()
    if len(words) >= 4 and len(set(words)) == 1:
        return f"one word repeated: {words[0]!r} x {len(words)}"
    return None
