#!/bin/bash
# resumable: build both trees, write models, placement matrix, bench matrix. State in /tmp/res, /tmp/src*, /tmp/models.
T0=$(date +%s); BUDGET=${BUDGET:-570}; DL=$((T0+BUDGET))
R=/tmp/res; mkdir -p $R/logs /tmp/models
G=$PWD/.gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $G/whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
echo "=== call start $(date)" >> $R/progress.log
[ -f $R/env.txt ] || { nvidia-smi -L; nvcc --version | tail -2; cmake --version | head -1; nproc; ls /usr/local/cuda/lib64 | grep -i cublas; } > $R/env.txt 2>&1
for h in 64 128 256; do [ -f /tmp/models/m$h.gguf ] || python3 $G/mkmodels.py /tmp/models/m$h.gguf $h > $R/model$h.log 2>&1 & done
build() {
  v=$1; tg=$2; d=/tmp/src$v
  [ -d $d/llama.cpp ] || { mkdir -p $d; tar xJf $G/llama.cpp-0.3.$v.tar.xz -C $d; }
  cd $d/llama.cpp
  if [ ! -f build/build.ninja ]; then
    cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF > $R/cmake$v.log 2>&1
    if [ $? -ne 0 ]; then
      lib=$(find / -xdev -name 'libcublas.so*' 2>/dev/null | head -1); lt=$(find / -xdev -name 'libcublasLt.so*' 2>/dev/null | head -1)
      inc=$(dirname "$(find / -xdev -name cublas_v2.h 2>/dev/null | head -1)")
      echo "cublas fallback lib=$lib lt=$lt inc=$inc" >> $R/cmake$v.log
      rm -rf build; cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DCUDA_cublas_LIBRARY=$lib -DCUDA_cublasLt_LIBRARY=$lt -DCMAKE_CUDA_FLAGS="-I$inc" -DCMAKE_CXX_FLAGS="-I$inc" >> $R/cmake$v.log 2>&1
    fi
  fi
  s=$(date +%s); timeout $((DL-30-s)) ninja -C build $tg >> $R/build$v.log 2>&1; echo "ninja rc=$? after $(( $(date +%s)-s ))s" >> $R/build$v.log
}
[ -x /tmp/src16/llama.cpp/build/bin/llama-cli ] && [ -x /tmp/src16/llama.cpp/build/bin/llama-bench ] || build 16 "llama-bench llama-cli" &
[ -x /tmp/src36/llama.cpp/build/bin/llama-completion ] && [ -x /tmp/src36/llama.cpp/build/bin/llama-bench ] || build 36 "llama-bench llama-completion" &
wait
echo "builds+models done at +$(( $(date +%s)-T0 ))s" >> $R/progress.log
ls -la /tmp/models >> $R/progress.log
PYTHONUNBUFFERED=1 python3 $G/driver.py $DL >> $R/progress.log 2>&1
echo "driver done at +$(( $(date +%s)-T0 ))s" >> $R/progress.log
# collect
cp $R/placement.jsonl $R/bench.jsonl $R/progress.log $R/env.txt $OUT/ 2>/dev/null
for v in 16 36; do echo "##### cmake$v"; tail -15 $R/cmake$v.log; echo "##### build$v"; tail -25 $R/build$v.log; done > $OUT/build_tails.txt 2>&1
tar cJf $OUT/logs.tar.xz -C $R logs model*.log cmake*.log 2>/dev/null
wc -l $R/*.jsonl; tail -5 $R/progress.log
