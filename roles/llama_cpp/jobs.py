"""How many compile jobs the llama.cpp build runs (`cmake --build -j N`): the setting when given, else what the
host's CPUs and memory allow (issue #26). The number is not part of the CMake arguments, so it never enters the
build's configuration hash or its install prefix (roles/llama_cpp/decide.py prefix()): a host with more CPUs
does not rebuild."""

from __future__ import annotations

GiB = 1 << 30

#: peak resident memory of one compile job of the CUDA build (one nvcc and the cicc/ptxas it runs; getrusage of its
#: children through tools/gpu/bench/rss.py as CMake's CUDA compiler launcher), for the default pin's 144 CUDA
#: objects: built for sm_70 with Debian trixie's CUDA 12.4.131 and g++-13 (tools/build_rss/sm70.sh, 2026-12-07:
#: tests/data/nvcc_rss_sm70_cuda12.4.tsv) at most 609 MiB (mmq-instance-nvfp4.cu), 365 MiB on average; for sm_90
#: with the lent H200's nvcc 13.0.88 at most 703 MiB (argsort.cu), 390 on average. Rounded up to 1 GiB for other
#: toolkits and trees. (M)
NVCC_JOB_BYTES = 1 * GiB

#: memory kept out of the build for the OS and the services running there: an idle Debian/Ubuntu server (systemd,
#: journald, sshd, the pyinfra session) stays under 1 GiB, and cmake/make themselves and the C++ jobs are far
#: smaller than an nvcc job; the rest is headroom so that the build neither swaps nor wakes the OOM killer. Running
#: llama-server instances mostly hold their models as page cache of a mmap (reclaimable), which this does not count
RESERVE_BYTES = 2 * GiB

#: jobs when the host's CPUs or memory could not be read: the setting's former fixed default
FALLBACK_JOBS = 2


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def build_jobs(setting: int | None, cpus: int | None, memory_bytes: int | None) -> tuple[int, str]:
    """(compile jobs, why in one line) for the llama.cpp build.

    `setting`: llama_cpp_build_jobs; when not None it wins as given. `cpus`: the host's online CPUs (pyinfra's
    Cpus fact, `getconf NPROCESSORS_ONLN`). `memory_bytes`: the host's total memory in bytes (pyinfra's Memory
    fact is in MiB: vmstat's "K total memory" / 1024; host_build_jobs converts). Either unknown (None, or not
    positive): FALLBACK_JOBS, and the reason says so.

    The rule: max(1, min(cpus, (memory_bytes - RESERVE_BYTES) // NVCC_JOB_BYTES)), where RESERVE_BYTES (2 GiB) is
    kept for the OS and running services and NVCC_JOB_BYTES (1 GiB) is the peak memory of one nvcc job, measured
    (see the constant)."""
    if setting is not None:
        return setting, f"-j {setting}: llama_cpp_build_jobs = {setting}"
    if not cpus or cpus < 1 or not memory_bytes or memory_bytes < 1:
        unknown = " and ".join(n for n, v in (("CPUs", cpus), ("memory", memory_bytes)) if not v or v < 1)
        return FALLBACK_JOBS, (f"-j {FALLBACK_JOBS}: the host's {unknown} could not be read, so the fallback "
                               f"{FALLBACK_JOBS} (set llama_cpp_build_jobs to choose)")
    by_memory = max(0, memory_bytes - RESERVE_BYTES) // NVCC_JOB_BYTES
    jobs = max(1, min(cpus, by_memory))
    limit = "CPU-limited" if cpus <= by_memory else "memory-limited"
    return jobs, (f"-j {jobs}: {limit}: min({cpus} CPUs, ({_gib(memory_bytes)} memory - {_gib(RESERVE_BYTES)} "
                  f"reserve) // {_gib(NVCC_JOB_BYTES)} per nvcc job = {by_memory}), at least 1")


def host_build_jobs(host, setting: int | None) -> tuple[int, str]:
    """build_jobs() from `host`'s pyinfra facts (Cpus; Memory, MiB, converted to bytes). Both the deploy and
    `v100kit plan` call this, so the plan shows the jobs the build will run with."""
    from pyinfra.facts.hardware import Cpus, Memory

    if setting is not None:  # no fact gathered when the setting decides
        return build_jobs(setting, None, None)
    mib = host.get_fact(Memory)
    return build_jobs(None, host.get_fact(Cpus), mib * (1 << 20) if mib else None)
