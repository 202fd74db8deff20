#!/bin/bash
# issue 15 on a real NVIDIA GPU: `v100kit bench --sweep` against llama-server@bench serving an 8B-shaped Q4_K_M
# GGUF with the role's rendered arguments. Run from the repository root on the device machine, with .gpu/ carried:
#   .gpu/llama.cpp-0.3.36.tar.xz (tools/gpu/README.md) and .gpu/bench-site.tar.xz (tools/gpu/bench/prepare.sh).
# Steps: the toolkit's packages for the device's python3; the pinned default tree built for the GPU's architecture
# (CUDA 13 cannot build sm_70); the model (tools/gpu/memory/mkmodel.py 8b, then llama-quantize Q4_K_M) while it
# builds; the instance set up from the deploy's own preflight (instance.py), started through a systemctl stand-in
# (no systemd there); then `v100kit bench --json --report --sweep $BENCH_ARGS` against a localhost inventory.
# The load comes from the environment: BENCH_ARGS is passed to the bench as shell words (quotes kept), e.g.
#   BENCH_ARGS="--depths 0,16384 --concurrency 1,8,16 --requests 16 --sweep-only '-np 8'" bash tools/gpu/bench/go.sh
# CONTEXT / PARALLEL set the instance's context and parallel settings (unset: the toolkit's defaults, which size
# the slots and context from the GPU); MODEL=8b (default) or 1b (Llama-3.2-1B's shape, head size 64).
# The build runs each nvcc through tools/gpu/bench/rss.py: nvcc-rss.tsv has each object's peak RSS and seconds. A bad BENCH_ARGS is refused before any request. Into $OUT:
# bench.json, report/_local.md, report/_local.png, progress.log, logs.tar.xz. State in /tmp: a second call on the
# same machine reuses the build and the model. About 6-7 minutes on 16 cores (build ~4, quantize ~1, bench+sweep ~1.5).
T0=$(date +%s)
G=$PWD/.gpu; R=/tmp/bench; M=/tmp/m; SRC=/tmp/l36/llama.cpp
mkdir -p $R $M $OUT/report
st() { echo "+$(( $(date +%s)-T0 ))s $*" | tee -a $R/progress.log; }
[ -d /tmp/bench-site ] || tar xJf $G/bench-site.tar.xz -C /tmp
export PYTHONPATH=$PWD:/tmp/bench-site PYTHONUNBUFFERED=1
st "start: $(nvidia-smi -L | head -1); $(python3 -V); $(. /etc/os-release; echo "$PRETTY_NAME"); $(nproc) cores"
python3 -c 'import pyinfra, pydantic, paramiko, gguf' 2>>$R/progress.log || { st "packages missing: run tools/gpu/bench/prepare.sh on the control machine"; exit 1; }
SM=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d . )

MODEL=${MODEL:-8b}
( [ -f $M/$MODEL-f16.gguf ] || [ -f $M/$MODEL-q4km.gguf ] || python3 tools/gpu/memory/mkmodel.py $MODEL $M/$MODEL-f16.gguf ) > $R/mk$MODEL.log 2>&1 &
PM=$!
# PREBUILT: .gpu/llama-bin-sm$SM.tar.xz.part-* (an earlier call's EXPORT_BUILD=1 output, carried) instead of a build:
# the lent machine is seldom still warm for the next call, and the build alone takes ~5 of a call's 10 minutes
# (in parts of 15 MiB, llama-bin-smSM.tar.xz.part-aa, -ab, ...: a returned file may be at most 16 MiB)
if [ ! -x $SRC/build/bin/llama-server ] && ls $G/llama-bin-sm$SM.tar.xz.part-* >/dev/null 2>&1; then
  # a part missing or cut: what was unpacked goes, and the tree is built (its source unpacked: the test below is
  # for CMakeLists.txt, as mkdir made $SRC)
  mkdir -p $SRC/build && { cat $G/llama-bin-sm$SM.tar.xz.part-* | tar xJf - -C $SRC/build \
    && echo "prebuilt: $G/llama-bin-sm$SM.tar.xz.part-*" > $R/build.log || rm -rf $SRC/build; }
fi
if [ ! -x $SRC/build/bin/llama-server ]; then
  [ -f $SRC/CMakeLists.txt ] || { mkdir -p /tmp/l36 && tar xJf $G/llama.cpp-0.3.36.tar.xz -C /tmp/l36; }
  # roles/llama_cpp/decide.py cmake_args, for this GPU's architecture, with this toolkit's own nvcc and host compiler
  cmake -S $SRC -B $SRC/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$SM \
    -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_USE_PREBUILT_UI=OFF -DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/tools/gpu/bench/rss.py > $R/cmake.log 2>&1
  s=$(date +%s); RSS_LOG=$OUT/nvcc-rss.tsv ninja -C $SRC/build llama-server llama-quantize > $R/build.log 2>&1
  echo "ninja rc=$? after $(( $(date +%s)-s ))s" >> $R/build.log
fi
st "build sm_$SM: $(tail -1 $R/build.log)"
# EXPORT_BUILD=1: the binaries and their shared libraries into $OUT, split in 15 MiB parts (the build is ~43 MB;
# a returned file may be at most 16 MiB)
[ -n "${EXPORT_BUILD:-}" ] && tar cJf - -C $SRC/build bin/llama-server bin/llama-quantize \
  $(cd $SRC/build && ls bin/*.so* 2>/dev/null) | split -b 15M - $OUT/llama-bin-sm$SM.tar.xz.part- \
  && st "exported: $(du -ch $OUT/llama-bin-sm$SM.tar.xz.part-* | tail -1 | cut -f1)"
mkdir -p /opt/llama.cpp && ln -sfn $SRC/build /opt/llama.cpp/current  # current/bin/llama-server, as the unit runs it
wait $PM; st "model f16: $(tail -1 $R/mk$MODEL.log)"
if [ ! -f $M/$MODEL-q4km.gguf ]; then
  $SRC/build/bin/llama-quantize $M/$MODEL-f16.gguf $M/$MODEL-q4km.tmp Q4_K_M $(nproc) > $R/quant.log 2>&1 \
    && mv $M/$MODEL-q4km.tmp $M/$MODEL-q4km.gguf && rm -f $M/$MODEL-f16.gguf
  st "quantize: $(grep -E 'quant size|total time' $R/quant.log | tr -s ' ' | tr '\n' ' ')"
fi
chmod 755 $M; chmod 644 $M/$MODEL-q4km.gguf
# BUILD_ONLY=1: stop after the build and the model (a later call benches them: one call stays under 10 minutes)
[ -n "${BUILD_ONLY:-}" ] && { cp $R/progress.log $OUT/; st "built; model $(du -h $M/$MODEL-q4km.gguf | cut -f1)"; exit 0; }

python3 tools/gpu/bench/instance.py $M/$MODEL-q4km.gguf $R > $R/plan.txt 2>&1 || { cat $R/plan.txt; st "instance setup failed"; exit 1; }
st "plan and rendered arguments:"; cat $R/plan.txt | tee -a $R/progress.log
[ -d /run/systemd/system ] || install -m 755 tools/gpu/bench/systemctl /usr/local/bin/systemctl
systemctl start llama-server@bench
python3 -c "from v100kit.loadgen import wait_healthy; print('healthy' if wait_healthy('http://127.0.0.1:8080', None, 60) else 'NOT healthy')" > $R/health.txt
st "llama-server@bench: $(cat $R/health.txt); $(grep -m1 -o 'offloaded [0-9/]* layers to GPU' /var/log/llama-server@bench.log)"

st "bench args: --json --report $OUT/report --sweep ${BENCH_ARGS:-(the defaults)}"
eval "BA=(${BENCH_ARGS:-})"  # shell words: a --sweep-only label has spaces
python3 -m v100kit.cli bench $R/inventory.py --json --report $OUT/report --sweep "${BA[@]}" > $OUT/bench.json 2> $R/bench.err
rc=$?
st "bench rc=$rc ($(grep -c . $R/bench.err) progress lines): $(grep -m2 'at most' $R/bench.err | tr '\n' ' ')"
[ $rc = 2 ] && tail -n 3 $R/bench.err | tee -a $R/progress.log
python3 - $OUT/bench.json <<'PY' 2>&1 | tee -a $R/progress.log
import json, sys
from roles.bench.report import InstanceBench, table
from roles.bench.figures import Level
doc = json.load(open(sys.argv[1]))
for host, rows in doc["hosts"].items():
    if isinstance(rows, dict):  # not benched: {"error": "unreachable"|"refused"|"failed", "cause": ...}
        print(host, f"{rows['error']}: {rows['cause']}"); continue
    for r in rows:
        r["levels"] = [Level(**{**lv, "errors": tuple(lv["errors"])}) for lv in r["levels"]]
        for k in ("vram_ratio", "decode_tps", "roofline", "peak_vram_mib"):  # as_dict's derived figures
            r.pop(k, None)
    print(table({host: [InstanceBench(**r) for r in rows]}))
PY
systemctl stop llama-server@bench
cp $R/progress.log $OUT/
tar cJf $OUT/logs.tar.xz -C / tmp/bench/cmake.log tmp/bench/build.log tmp/bench/quant.log tmp/bench/mk$MODEL.log \
  tmp/bench/plan.txt tmp/bench/bench.err var/log/llama-server@bench.log $(cd / && ls tmp/v100kit-sweep-*.log 2>/dev/null) 2>/dev/null
st "done"
