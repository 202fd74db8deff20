#!/bin/bash
# nvcc peak RSS per CUDA object of the default pin (llama-cpp-python 0.3.36's llama.cpp), built for sm_70 with
# Debian trixie's nvidia-cuda-toolkit 12.4.131 and g++-13 with the role's CMake options (roles/llama_cpp/decide.py
# cmake_args), each nvcc run through tools/gpu/bench/rss.py. The figure behind roles/llama_cpp/jobs.py
# NVCC_JOB_BYTES; its output is tests/data/nvcc_rss_sm70_cuda12.4.tsv (peak RSS KiB, seconds, object).
# Needs root, systemd-nspawn and the lab cache (/var/cache/v100kit-lab: the trixie image, its apt cache, the 0.3.36
# sdist; `make test` fills it). Not a lab run: never beside one (two CUDA builds on 2 cores). About 25 minutes at
# -j2 on 2 cores. Output in $NVRSS_DIR/root/w/nvcc-rss-sm70-cuda12.4.tsv.
set -ex
W=${NVRSS_DIR:-/var/tmp/nvrss}; R=$W/root; REPO=$(cd "$(dirname "$0")/../.." && pwd)
C=${V100KIT_LAB_CACHE:-/var/cache/v100kit-lab}
# the toolkit the role pins on Debian 13 (roles/cuda/versions.py DISTRO_TOOLKITS)
TK=$(cd "$REPO" && python3 -c 'from roles.cuda.versions import DISTRO_TOOLKITS as d; print(d["debian13"].packages["nvidia-cuda-toolkit"])')
[ -d $R/usr ] || { mkdir -p $R && tar xf "$(ls $C/images/trixie-*.tar | tail -1)" -C $R; }
mkdir -p $R/w && cp $REPO/tools/gpu/bench/rss.py $R/w/ && tar xzf $C/src/llama_cpp_python-0.3.36.tar.gz -C $R/w
rm -rf $R/w/b $R/w/nvcc-rss-sm70-cuda12.4.tsv  # a second run measures every object again
systemd-nspawn -q -D $R --register=no --keep-unit -M nvrss --bind=$C/apt/trixie:/var/cache/apt/archives --pipe bash -c '
set -ex
export DEBIAN_FRONTEND=noninteractive
grep -q non-free /etc/apt/sources.list.d/* /etc/apt/sources.list 2>/dev/null || echo "deb http://deb.debian.org/debian trixie main contrib non-free non-free-firmware" > /etc/apt/sources.list.d/nf.list
apt-get update -q
apt-get install -y -q --no-install-recommends nvidia-cuda-toolkit='$TK' g++-13 cmake make libc6-dev
nvcc --version | tail -2
S=$(ls -d /w/llama_cpp_python-0.3.36/vendor/llama.cpp)
cmake -S $S -B /w/b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=70 -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc \
  -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-13 -DCMAKE_C_COMPILER=/usr/bin/gcc-13 -DCMAKE_CXX_COMPILER=/usr/bin/g++-13 \
  -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_USE_PREBUILT_UI=OFF -DCMAKE_CUDA_COMPILER_LAUNCHER="python3;/w/rss.py"
s=$(date +%s)
RSS_LOG=/w/nvcc-rss-sm70-cuda12.4.tsv cmake --build /w/b --target ggml-cuda -j 2
echo "ggml-cuda built in $(( $(date +%s)-s )) s"
nproc; free -m
'
echo rc=$?
