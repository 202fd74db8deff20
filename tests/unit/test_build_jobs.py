"""roles/llama_cpp/jobs.py build_jobs (issue #26): jobs = max(1, min(CPUs, (memory - 2 GiB) // per-job memory))
with the setting winning and 2 for unknown facts. Expected values are worked out here by hand from the rule's
stated inputs (2 GiB reserve, NVCC_JOB_BYTES per job)."""

from __future__ import annotations

import pytest

from roles.llama_cpp.jobs import NVCC_JOB_BYTES, RESERVE_BYTES, build_jobs

GiB = 1 << 30


def test_the_stated_inputs():
    assert RESERVE_BYTES == 2 * GiB


def test_cpu_limited():
    jobs, why = build_jobs(None, 64, 256 * GiB)
    assert jobs == 64 and why.startswith("-j 64: CPU-limited")


def test_memory_limited_exactly_at_the_boundary():
    # memory for exactly 5 jobs above the reserve: 5; one byte less: 4
    assert build_jobs(None, 64, RESERVE_BYTES + 5 * NVCC_JOB_BYTES)[0] == 5
    jobs, why = build_jobs(None, 64, RESERVE_BYTES + 5 * NVCC_JOB_BYTES - 1)
    assert jobs == 4 and "memory-limited" in why


def test_never_below_one():
    assert build_jobs(None, 8, RESERVE_BYTES)[0] == 1
    assert build_jobs(None, 8, GiB)[0] == 1  # less than the reserve


def test_the_setting_wins():
    assert build_jobs(3, 64, 256 * GiB) == (3, "-j 3: llama_cpp_build_jobs = 3")
    assert build_jobs(100, None, None)[0] == 100


@pytest.mark.parametrize("cpus, memory, unknown", [(None, None, "CPUs and memory"), (64, None, "memory"),
                                                   (None, 256 * GiB, "CPUs"), (0, 256 * GiB, "CPUs")])
def test_unknown_facts_fall_back_to_two_and_say_so(cpus, memory, unknown):
    jobs, why = build_jobs(None, cpus, memory)
    assert jobs == 2 and f"the host's {unknown} could not be read" in why


def test_the_reason_is_one_line():
    for args in ((None, 64, 16 * GiB), (None, None, None), (4, None, None)):
        assert "\n" not in build_jobs(*args)[1]


def test_one_job_s_memory_covers_every_object_measured_for_sm_70():
    """NVCC_JOB_BYTES is at least the largest peak RSS nvcc reached for any CUDA object of the default pin built for
    sm_70 with CUDA 12.4 (tests/data/nvcc_rss_sm70_cuda12.4.tsv, tools/build_rss/sm70.sh: KiB, seconds, object),
    so -j N never asks for more memory than N such jobs took."""
    from pathlib import Path

    rows = [line.split("\t") for line in (Path(__file__).resolve().parents[1] / "data" / "nvcc_rss_sm70_cuda12.4.tsv")
            .read_text().splitlines() if line]
    assert len(rows) == 144 and any(r[2] == "argsort.cu.o" for r in rows)
    assert max(int(r[0]) for r in rows) * 1024 <= NVCC_JOB_BYTES
