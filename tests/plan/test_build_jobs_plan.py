"""Plan-level tests (facts in, commands out) of issue #26: with llama_cpp_build_jobs unset, the llama.cpp build's
`cmake --build -j N` follows the host's CPUs (pyinfra's Cpus fact, `getconf NPROCESSORS_ONLN`) and memory (its
Memory fact, `vmstat -s`'s "K total memory"); the setting wins when given; 2 when the facts cannot be read. The
expected job counts are worked out here from the rule's stated inputs (2 GiB kept for the OS, NVCC_JOB_BYTES per
nvcc job), not by calling the rule."""

from __future__ import annotations

import re

from roles.llama_cpp.jobs import NVCC_JOB_BYTES, RESERVE_BYTES
from tests.plan.harness import DEBIAN_13, plan_commands, preflight_cluster

GiB = 1 << 30
MODEL = {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64, "port": 8081}
LLAMA = {"llama_cpp_instances": {"tiny": MODEL}}


def host(cpus: int | None, memory_gib: int | None) -> dict:
    """fake_responses of a host with `cpus` online CPUs and `memory_gib` GiB of memory (None: the fact's command
    prints nothing, as where getconf / vmstat fail)."""
    return {"getconf NPROCESSORS_ONLN": [] if cpus is None else [str(cpus)],
            # vmstat -s reports KiB
            "vmstat -s": [] if memory_gib is None else [f"{memory_gib * 1024 * 1024} K total memory"]}


def build_jobs_of(cmds: list[str]) -> int:
    build = next(str(c) for c in cmds if "cmake --build" in str(c))
    return int(re.search(r"cmake --build \S+ -j (\d+) ", build).group(1))


def prefix_of(cmds: list[str]) -> str:
    build = next(str(c) for c in cmds if "cmake --build" in str(c))
    return re.search(r"mv -T (\S+)\.new (\S+);", build).group(2)


def test_a_64_cpu_256_gib_host_builds_with_64_jobs():
    # memory allows (256 - 2) // 1 = 254 jobs with the 2 GiB reserve and 1 GiB per job: the 64 CPUs limit
    assert (256 * GiB - RESERVE_BYTES) // NVCC_JOB_BYTES >= 64
    assert build_jobs_of(plan_commands(DEBIAN_13, LLAMA, host(64, 256))) == 64


def test_a_64_cpu_16_gib_host_is_limited_by_its_memory():
    # by hand: (16 GiB - 2 GiB reserve) // 1 GiB per nvcc job = 14
    expected = (16 * GiB - RESERVE_BYTES) // NVCC_JOB_BYTES
    assert expected == 14  # by hand: 16 GiB less the 2 GiB reserve, at 1 GiB per job (jobs.py's measured figure)
    assert 1 <= expected < 64
    assert build_jobs_of(plan_commands(DEBIAN_13, LLAMA, host(64, 16))) == expected


def test_a_host_with_memory_for_less_than_one_job_still_builds_with_one():
    assert build_jobs_of(plan_commands(DEBIAN_13, LLAMA, host(64, 1))) == 1


def test_the_setting_wins_over_the_host():
    assert build_jobs_of(plan_commands(DEBIAN_13, {**LLAMA, "llama_cpp_build_jobs": 3}, host(64, 256))) == 3
    assert build_jobs_of(plan_commands(DEBIAN_13, {**LLAMA, "llama_cpp_build_jobs": 100}, host(4, 16))) == 100


def test_unknown_facts_give_two_jobs():
    assert build_jobs_of(plan_commands(DEBIAN_13, LLAMA, host(None, None))) == 2
    assert build_jobs_of(plan_commands(DEBIAN_13, LLAMA, host(64, None))) == 2
    assert build_jobs_of(plan_commands(DEBIAN_13, LLAMA, host(None, 256))) == 2


def test_the_jobs_do_not_enter_the_install_prefix():
    """The jobs are no CMake argument: a host with more CPUs, or a changed setting, finds the same prefix (and its
    stamp), so it does not rebuild."""
    big, small = plan_commands(DEBIAN_13, LLAMA, host(64, 256)), plan_commands(DEBIAN_13, LLAMA, host(4, 16))
    set_ = plan_commands(DEBIAN_13, {**LLAMA, "llama_cpp_build_jobs": 3}, host(64, 256))
    assert {build_jobs_of(big), build_jobs_of(small), build_jobs_of(set_)} == {64, 4, 3}
    assert prefix_of(big) == prefix_of(small) == prefix_of(set_)
    stamp = next(str(c) for c in big if "cmake --build" in str(c)).split("printf '%s\\n' ", 1)[1]
    assert "jobs" not in stamp and "-j" not in stamp.split(" > ", 1)[0]


def test_the_plan_says_the_jobs_and_why():
    from v100kit.plan import summarize, table

    node, plan = preflight_cluster({"box": (DEBIAN_13, LLAMA, host(64, 16))}, {}, "box")
    out = summarize(node, plan)
    expected = (16 * GiB - RESERVE_BYTES) // NVCC_JOB_BYTES
    assert out["llama_cpp_build"]["jobs"] == expected
    line = next(l for l in table({"box": out}).splitlines() if l.startswith("   llama.cpp /opt/llama.cpp/"))
    assert f"build -j {expected}: memory-limited: min(64 CPUs, (16.0 GiB memory" in line, line

    node, plan = preflight_cluster({"box": (DEBIAN_13, LLAMA, host(None, None))}, {}, "box")
    line = next(l for l in table({"box": summarize(node, plan)}).splitlines() if l.startswith("   llama.cpp "))
    assert "build -j 2: the host's CPUs and memory could not be read" in line, line
