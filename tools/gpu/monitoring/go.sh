#!/bin/bash
# Issue 29 on a real NVIDIA GPU: the GPU exporter (roles/monitoring/gpu_exporter.py) run once, and the doctor's
# hardware rows (roles/doctor/hardware.py GpuHardware fact, its own command, judged by roles/doctor/health.py) and
# the GPU policy's fact and checks (roles/gpu_policy) against this machine's GPUs. Read-only: nothing is set on the GPU.
# Run from the repository root on the device machine, with .gpu/bench-site.tar.xz carried (tools/gpu/bench/prepare.sh:
# pyinfra and pydantic for the doctor's modules; the exporter itself needs only Python's standard library):
#   bash tools/gpu/monitoring/go.sh
# Into $OUT: exporter.prom (and exporter-check.txt: it read back with the strict exposition-format reader of
# tests/unit/test_gpu_exporter.py), hardware-rows.txt / .json, gpu-health.json, policy-cards.json, policy-check.txt,
# the raw outputs (nvidia-smi-q.txt, nvlink-s.txt, query-gpu.csv, policy-q.txt, fact-hardware.txt,
# fact-policy.txt, kernel-log.txt), steps.txt (every step's exit status) and machine.txt. Seconds.
set -u
T0=$(date +%s)
G=$PWD/.gpu
mkdir -p "${OUT:=$PWD/out}"
: > $OUT/steps.txt

# step NAME CMD...: run CMD with stdout into $OUT/NAME and stderr into $OUT/NAME.err (kept only when not empty);
# its exit status into steps.txt. Never stops the script.
step() {
  local name=$1; shift
  "$@" > "$OUT/$name" 2> "$OUT/$name.err"
  local rc=$?
  [ -s "$OUT/$name.err" ] || rm -f "$OUT/$name.err"
  echo "$(date -u +%T) rc=$rc $name: $*" | tee -a $OUT/steps.txt
  return 0
}

{
  echo "== $(date -u +%FT%TZ) $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"); kernel $(uname -r); $(nproc) cores; $(python3 -V 2>&1)"
  echo "== PID 1: $(cat /proc/1/comm); /run/systemd/system: $([ -d /run/systemd/system ] && echo present || echo absent); user $(id -un)"
  echo "== nvidia-smi: $(command -v nvidia-smi || echo absent)"
  nvidia-smi -L 2>&1
} > $OUT/machine.txt 2>&1
cat $OUT/machine.txt

# 1. raw outputs, as the fact commands and the exporter ask for them
step nvidia-smi-q.txt nvidia-smi -q
step nvlink-s.txt nvidia-smi nvlink -s
step policy-q.txt nvidia-smi -q -d POWER,CLOCK,COMPUTE,ECC,SUPPORTED_CLOCKS
step query-gpu.csv nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.current.sm,clocks.current.memory,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active --format=csv
step query-gpu-old-name.csv nvidia-smi --query-gpu=index,clocks_throttle_reasons.active --format=csv
step kernel-log.txt bash -c 'journalctl -k -b --no-pager -o short 2>&1 || dmesg 2>&1'

# 2. the exporter, once, as the timer runs it (here as root, without systemd: journalctl fails, dmesg answers)
step exporter.log python3 roles/monitoring/gpu_exporter.py $OUT/exporter.prom
cat $OUT/exporter.prom 2>/dev/null | grep -v '^#' | head -60

# the modules below need pyinfra and pydantic
# (SITE: where they are unpacked; a directory that exists already is used as it is)
SITE=${SITE:-/tmp/bench-site}
[ -d "$SITE" ] || tar xJf $G/bench-site.tar.xz -C /tmp 2>> $OUT/steps.txt
export PYTHONPATH=$PWD:$SITE PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
step import-check.txt python3 -c 'import pyinfra, pydantic; print("pyinfra", pyinfra.__version__ if hasattr(pyinfra, "__version__") else "?", "pydantic", pydantic.VERSION)'

# 3. the exporter's file read back by the strict exposition-format reader of the tests (needs pytest importable)
step exporter-check.txt python3 - $OUT/exporter.prom <<'PY'
import sys
try:
    from tests.unit.test_gpu_exporter import parse_exposition
except Exception as e:  # pytest missing on the image, say so
    print(f"reader not importable: {e!r}"); sys.exit(3)
fams = parse_exposition(open(sys.argv[1]).read())
for name, fam in fams.items():
    print(name, fam["type"], len(fam["samples"]), "series")
print("OK: parses as the text exposition format")
PY

# 4. the doctor's hardware fact, by its own command, processed and judged
step fact-hardware.txt bash -c "$(python3 -c 'from roles.doctor.hardware import GpuHardware; print(GpuHardware().command())' 2>/dev/null || echo 'echo fact command unavailable; exit 3')"
step hardware-rows.txt python3 - $OUT <<'PY'
import json, sys
from dataclasses import asdict
from roles.doctor.hardware import GpuHardware
from roles.doctor.health import hardware_rows
out = sys.argv[1]
health = GpuHardware().process(open(f"{out}/fact-hardware.txt").read().splitlines())
json.dump(health, open(f"{out}/gpu-health.json", "w"), indent=1, default=str)
rows = hardware_rows(health, gpus_visible=bool(health))
json.dump([asdict(r) for r in rows], open(f"{out}/hardware-rows.json", "w"), indent=1)
for r in rows:
    print(f"{r.state:8} {r.check}\n         evidence: {r.evidence}" + (f"\n         fix: {r.fix}" if r.fix else ""))
PY
cat $OUT/hardware-rows.txt 2>/dev/null

# 5. the GPU policy's fact, by its own command, and its checks with settings at and beyond this card's range
step fact-policy.txt bash -c "$(python3 -c 'from roles.gpu_policy.facts import GpuPolicyCards; print(GpuPolicyCards().command())' 2>/dev/null || echo 'echo fact command unavailable; exit 3')"
step policy-check.txt python3 - $OUT <<'PY'
import json, sys
from roles.gpu_policy import decide
from roles.gpu_policy.facts import GpuPolicyCards
from roles.settings import load_settings
out = sys.argv[1]
cards = GpuPolicyCards().process(open(f"{out}/fact-policy.txt").read().splitlines())
json.dump(cards, open(f"{out}/policy-cards.json", "w"), indent=1, default=str)
if not cards:
    print("no card read"); sys.exit(1)
c = cards[0]
mem = max(c["supported"]) if c["supported"] else None
cases = {"power limit at the card's max": {"gpu_policy_power_limit_w": c["power_max_w"]},
         "power limit 100 W above the max": {"gpu_policy_power_limit_w": (c["power_max_w"] or 0) + 100},
         "highest supported application clocks": {"gpu_policy_application_clocks": f"{mem},{max(c['supported'][mem])}"} if mem else {},
         "a V100 SXM2's clocks 877,1530": {"gpu_policy_application_clocks": "877,1530"},
         "compute mode EXCLUSIVE_PROCESS, ECC on": {"gpu_policy_compute_mode": "EXCLUSIVE_PROCESS", "gpu_policy_ecc": True}}
for name, data in cases.items():
    p, problems = decide.plan(load_settings("h200", data), cards)
    print(f"== {name}: {data}")
    print("   refused: " + "\n   refused: ".join(problems) if problems else
          f"   plan: {p.exec_lines if p else None}; differs: {p.differs if p else None}; ECC reboot: {p.ecc_reboot if p else None}")
PY
cat $OUT/policy-check.txt 2>/dev/null

echo "done after $(( $(date +%s)-T0 ))s" | tee -a $OUT/steps.txt
# the device hands back at most 8 files from $OUT: everything also as one archive (the 2026-12-02 run lost all but 4)
( cd $OUT && tar cJf monitoring.tar.xz --exclude=monitoring.tar.xz . )
