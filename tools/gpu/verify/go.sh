#!/bin/bash
# Issue 14 on a real NVIDIA GPU: the host suite of `v100kit verify` (v100kit/verify/suite, pytest-testinfra) against
# this machine through testinfra's local backend (pyinfra's @local), with this machine's own settings as inventory
# data: its GPUs' compute capability and count read from nvidia-smi, and its running driver given as
# --expect-driver-version (that driver did not come from v100kit's packages, so those checks skip and say so).
# Run from the repository root on the device machine, with .gpu/verify-site.tar.xz carried (tools/gpu/verify/prepare.sh):
#   bash tools/gpu/verify/go.sh
# Into $OUT: verify.xml (JUnit, every check with its state and message), verify.txt (pytest -rA -v output),
# machine.txt (what the checks are judged against), inventory.py. Read-only like the suite; well under a minute.
T0=$(date +%s)
G=$PWD/.gpu; R=/tmp/verify
mkdir -p $R "${OUT:=$PWD/out}"
[ -d /tmp/verify-site ] || tar xJf $G/verify-site.tar.xz -C /tmp
export PYTHONPATH=$PWD:/tmp/verify-site PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -c 'import pyinfra, pydantic, paramiko, testinfra, gguf' || { echo "packages missing: run tools/gpu/verify/prepare.sh on the control machine"; exit 1; }

DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | tr -d ' ')
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')
COUNT=$(nvidia-smi --query-gpu=index --format=csv,noheader | grep -c .)
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')
{
  echo "== $(date -u +%FT%TZ) $(. /etc/os-release; echo "$PRETTY_NAME"); kernel $(uname -r); $(nproc) cores; $(python3 -V)"
  echo "== nvidia-smi: driver $DRIVER, compute capability $CC, $COUNT GPU(s), $MIB MiB each"
  nvidia-smi --query-gpu=index,name,pci.bus_id,compute_cap,persistence_mode,driver_version --format=csv
  echo "== /sys/module/nvidia/version: $(cat /sys/module/nvidia/version 2>&1)"
  echo "== /proc/driver/nvidia/version: $(head -1 /proc/driver/nvidia/version 2>&1)"
  echo "== NVIDIA functions in /sys/bus/pci/devices (vendor 0x10de): $(grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>/dev/null | wc -l)"
  for d in $(grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>/dev/null); do d=${d%/vendor}; echo "   ${d##*/} class $(cat $d/class)"; done
  echo "== PID 1: $(cat /proc/1/comm); /run/systemd/system: $([ -d /run/systemd/system ] && echo present || echo absent)"
  echo "== dpkg-query: $(command -v dpkg-query || echo absent); apt-mark: $(command -v apt-mark || echo absent); curl: $(command -v curl || echo absent)"
} > $OUT/machine.txt 2>&1
cat $OUT/machine.txt

# this machine's settings: its compute capability and GPU count, as a user would write them for a real box
# (nothing from nvidia-smi: the settings' defaults, and the GPU checks say that no GPU is visible)
python3 - "$CC" "$COUNT" "$MIB" > $OUT/inventory.py <<'PY'
import sys
cc, count, mib = sys.argv[1:]
data = {k: v for k, v in (("gpu_compute_capability", cc), ("gpu_count", int(count or 0)),
                          ("gpu_memory_mib", int(mib or 0))) if v}
print('"""This machine, as tools/gpu/verify/go.sh checks it (pyinfra @local; testinfra local backend)."""')
print(f"gpu = [('@local', {data!r})]")
PY
python3 -m v100kit.cli verify $OUT/inventory.py --expect-driver-version "$DRIVER" --junitxml $OUT/verify.xml \
  -- -rA -v > $OUT/verify.txt 2>&1
rc=$?
tail -40 $OUT/verify.txt
echo "verify rc=$rc after $(( $(date +%s)-T0 ))s" | tee -a $OUT/machine.txt
