"""The bench's figures from timed requests, the degenerate-output check, and the bounds of the load. Pure.

Units: seconds (s) for times, milliseconds (ms) in the figures shown, tokens, tokens/s.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Load:
    """What the bench sends to one instance, and its bounds. Every level (one concurrency) sends at most
    `requests_per_level` requests and starts none after `level_time_s`; each request is cut at `request_timeout_s`.
    So one instance gets at most len(concurrency) * requests_per_level + warm-up requests, for at most
    len(concurrency) * (level_time_s + request_timeout_s) seconds."""

    prompt_words: int = 256  # the prompt: this many fixed words (about as many tokens with a llama tokenizer)
    output_tokens: int = 64  # max_tokens, with ignore_eos: every completion as long
    seed: int = 1234
    concurrency: tuple[int, ...] = (1, 4, 8)
    requests_per_level: int = 16  # at most; at least `concurrency` of them, so that every stream runs once
    level_time_s: float = 60.0  # no request starts later than this into a level
    request_timeout_s: float = 120.0
    warmup_requests: int = 1

    @property
    def max_requests(self) -> int:
        """The most requests one instance gets."""
        return self.warmup_requests + len(self.concurrency) * self.requests_per_level

    @property
    def max_seconds(self) -> float:
        """The longest one instance is loaded: each level's start window plus one request's timeout."""
        return (self.warmup_requests + len(self.concurrency)) * (self.level_time_s + self.request_timeout_s)

    def requests_at(self, concurrency: int) -> int:
        """Requests sent at one concurrency: requests_per_level, but at least one per stream."""
        return max(concurrency, self.requests_per_level)

    def __post_init__(self) -> None:
        if max(self.concurrency) > self.requests_per_level:
            raise ValueError(f"requests_per_level {self.requests_per_level} is below the largest concurrency "
                             f"{max(self.concurrency)}: the bound would not hold")


#: The fixed prompt's words: ordinary English, so that every tokenizer makes about one token of each.
PROMPT_WORDS = ("the quick brown fox jumps over a lazy dog while seven small robots count every star in the "
                "night sky and write each number down").split()


def prompt(words: int) -> str:
    """The fixed prompt of `words` words (the same bytes on every run)."""
    return " ".join(PROMPT_WORDS[i % len(PROMPT_WORDS)] for i in range(words))


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
    if s.completion_tokens < 2 or len(s.token_times_s) < 2:
        return None
    span = s.token_times_s[-1] - s.token_times_s[0]
    return (s.completion_tokens - 1) / span if span > 0 else None


@dataclass(frozen=True)
class Level:
    """The figures of one concurrency level."""

    concurrency: int
    requests: int
    failed: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    decode_tps_per_stream: float | None  # median over requests
    aggregate_tps: float | None  # all completion tokens / wall time from the first send to the last token
    prompt_tokens: float | None  # mean as the server counted them
    errors: tuple[str, ...] = ()


def level(concurrency: int, samples: list[Sample]) -> Level:
    """Summarise one level's samples (failed ones count only in `failed` and `errors`)."""
    good = [s for s in samples if s.ok]
    ms = lambda x: None if x is None else x * 1000  # noqa: E731
    ttft = [s.ttft_s for s in good if s.ttft_s is not None]
    itl = [g for s in good for g in inter_token_s(s)]
    tps = [t for s in good if (t := decode_tps(s)) is not None]
    wall = (max(s.end_s for s in good) - min(s.start_s for s in good)) if good else 0
    tokens = sum(s.completion_tokens for s in good)
    prompts = [s.prompt_tokens for s in good if s.prompt_tokens]
    return Level(concurrency, len(samples), len(samples) - len(good), ms(percentile(ttft, 50)),
                 ms(percentile(ttft, 95)), ms(percentile(itl, 50)), ms(percentile(itl, 95)), percentile(tps, 50),
                 tokens / wall if wall > 0 else None, sum(prompts) / len(prompts) if prompts else None,
                 tuple(sorted({s.error for s in samples if not s.ok}))[:3])


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
