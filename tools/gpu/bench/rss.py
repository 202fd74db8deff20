#!/usr/bin/env python3
"""CMAKE_CUDA_COMPILER_LAUNCHER for tools/gpu/bench/go.sh's build: runs one nvcc command line as given and appends
to $RSS_LOG a line "peak RSS KiB<TAB>seconds<TAB>object": the largest resident set of nvcc and the processes it
waited for (cicc, ptxas, fatbinary, the host compiler: getrusage RUSAGE_CHILDREN ru_maxrss, in KiB on Linux).
That is the memory one build job needs (roles/llama_cpp/jobs.py NVCC_JOB_BYTES)."""
import os
import resource
import subprocess
import sys
import time

t0 = time.monotonic()
rc = subprocess.call(sys.argv[1:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
out = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "-o"), "?")
if os.environ.get("RSS_LOG"):
    with open(os.environ["RSS_LOG"], "a") as f:
        f.write(f"{peak}\t{time.monotonic() - t0:.1f}\t{os.path.basename(out)}\n")
sys.exit(rc)
