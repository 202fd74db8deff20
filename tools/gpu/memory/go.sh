#!/bin/bash
# issue 12 re-measure: build llama-server/llama-quantize (0.3.16, sm_90), write models, run cases. State in /tmp.
T0=$(date +%s); DL=$((T0+${BUDGET:-575}))
G=$PWD/.gpu; M=$G/mem; R=/tmp/res; mkdir -p $R/logs /tmp/m
python3 -m pip install -q --no-index --no-deps --target /tmp/site $G/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
st() { echo "+$(( $(date +%s)-T0 ))s $*" | tee -a $R/progress.log; }
st "start $(nvidia-smi -L) driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader) idle_used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
df -h /tmp /dev/shm | tee -a $R/progress.log
( [ -f /tmp/m/8b-f16.gguf ] || python3 $M/mkmodel.py 8b /tmp/m/8b-f16.gguf ) > $R/mk8b.log 2>&1 &
P8=$!
( [ -f /tmp/m/1.5b-f16.gguf ] || python3 $M/mkmodel.py 1.5b /tmp/m/1.5b-f16.gguf ) > $R/mk15.log 2>&1 &
P15=$!
if [ ! -x /tmp/llama.cpp/build/bin/llama-quantize ]; then
  [ -d /tmp/llama.cpp ] || tar xJf $G/llama.cpp-0.3.16.tar.xz -C /tmp
  cd /tmp/llama.cpp
  [ -f build/build.ninja ] || cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF > $R/cmake.log 2>&1
  s=$(date +%s); timeout $((DL-30-s)) ninja -C build llama-server llama-quantize > $R/build.log 2>&1; echo "ninja rc=$? after $(( $(date +%s)-s ))s" >> $R/build.log
  cd - >/dev/null
fi
st "build: $(tail -1 $R/build.log)"
wait $P8; st "8b f16: $(cat $R/mk8b.log)"
[ -f /tmp/m/8b-q4km.gguf ] || { /tmp/llama.cpp/build/bin/llama-quantize /tmp/m/8b-f16.gguf /tmp/m/8b-q4km.tmp Q4_K_M 16 > $R/quant.log 2>&1; rc=$?; [ $rc = 0 ] && mv /tmp/m/8b-q4km.tmp /tmp/m/8b-q4km.gguf; st "quantize rc=$rc $(grep -E 'model size|quant size|total time' $R/quant.log | tr '\n' ' ')"; } &
PQ=$!
wait $P15; st "1.5b: $(cat $R/mk15.log)"
PYTHONUNBUFFERED=1 python3 $M/cases.py $DL 6 2>&1 | tee -a $R/progress.log
wait $PQ
PYTHONUNBUFFERED=1 python3 $M/cases.py $DL 1 2 3 4 5 7 2>&1 | tee -a $R/progress.log
for k in 8b-q4km 1.5b-f16; do [ -f /tmp/m/$k.gguf ] && python3 $M/dump.py /tmp/m/$k.gguf $OUT/$k.json $OUT/$k.hdr; done
cp $R/results.jsonl $R/progress.log $OUT/ 2>/dev/null
tar cJf $OUT/logs.tar.xz -C $R logs cmake.log build.log quant.log mk8b.log mk15.log 2>/dev/null
st "done"
