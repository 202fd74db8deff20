#!/bin/bash
# issue 27 on a real NVIDIA GPU: a llama-server instance planned and started while another process holds a known
# amount of GPU memory; the plan's free memory (v100kit plan's memory_mib less outside_v100kit_mib) against
# nvidia-smi's memory.free at the same moment. Run from the repository root on the device machine after
# tools/gpu/bench/go.sh has built llama-server and written the model (same call, or PREBUILT): MODEL=1b|8b as there.
# HOLD_GIB (default 40): what the holder (PyTorch, the image's python3) allocates on GPU 0.
# Into $OUT/freemem: smi-*.csv (nvidia-smi before and after the start), apps-*.csv (--query-compute-apps),
# plan.txt / plan.json (the preflight's plan, ALLOW_GPU_IN_USE=0), start.log, result.txt.
set -u
T0=$(date +%s)
O=$OUT/freemem; R=/tmp/freemem; M=/tmp/m; MODEL=${MODEL:-8b}; HOLD_GIB=${HOLD_GIB:-40}
mkdir -p $O $R
st() { echo "+$(( $(date +%s)-T0 ))s $*" | tee -a $O/result.txt; }
export PYTHONPATH=$PWD:/tmp/bench-site PYTHONUNBUFFERED=1
smi() {  # $1: label
  nvidia-smi --query-gpu=index,name,memory.total,memory.reserved,memory.used,memory.free --format=csv,nounits > $O/smi-$1.csv
  nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,nounits > $O/apps-$1.csv
}
[ -d /run/systemd/system ] || install -m 755 tools/gpu/bench/systemctl /usr/local/bin/systemctl
systemctl stop llama-server@bench 2>/dev/null
smi idle
python3 - $HOLD_GIB $R/holder.ready <<'PY' > $R/holder.log 2>&1 &
import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device="cuda:0")
x.fill_(1); torch.cuda.synchronize()
open(sys.argv[2], "w").write("ready\n")
time.sleep(900)
PY
HOLDER=$!
for i in $(seq 120); do [ -f $R/holder.ready ] && break; sleep 0.5; done
st "holder pid $HOLDER: $(cat $R/holder.ready 2>/dev/null || echo 'NOT ready'; tail -2 $R/holder.log)"
sleep 1; smi held
ALLOW_GPU_IN_USE=0 PLAN_JSON=$O/plan.json python3 tools/gpu/bench/instance.py $M/$MODEL-q4km.gguf $R > $O/plan.txt 2>&1
st "plan rc=$?"
smi planned
systemctl start llama-server@bench
python3 -c "from v100kit.loadgen import wait_healthy; print('healthy' if wait_healthy('http://127.0.0.1:8080', None, 120) else 'NOT healthy')" > $R/health.txt
st "llama-server@bench: $(cat $R/health.txt)"
smi started
cp /var/log/llama-server@bench.log $O/start.log 2>/dev/null
python3 - $O <<'PY' 2>&1 | tee -a $O/result.txt
import csv, json, sys
o = sys.argv[1]
def row(label):
    r = list(csv.DictReader(open(f"{o}/smi-{label}.csv"), skipinitialspace=True))[0]
    return {k.split(" [")[0]: v for k, v in r.items()}
plan = json.load(open(f"{o}/plan.json"))
g = plan["gpus"]["0"]
held, started = row("held"), row("started")
plan_free = g["memory_mib"] - g["outside_v100kit_mib"]
smi_free = int(held["memory.free"])
inst = plan["instances"]["llama-server@bench"]["plan"] or {}  # plan_row: outcome, total_mib, budget_mib
print(f"nvidia-smi with the holder: used {held['memory.used']} free {held['memory.free']} MiB; "
      f"plan: usable {g['memory_mib']} MiB, outside v100kit {g['outside_v100kit_mib']} MiB "
      f"({g['outside_v100kit_why']}) -> free {plan_free} MiB")
print(f"plan free / nvidia-smi free = {plan_free / smi_free:.4f} (|diff| {abs(plan_free - smi_free) / smi_free:.2%}; "
      f"the target: within 2 %)")
print(f"instance: {inst.get('outcome')} planned {inst.get('total_mib')} of {inst.get('budget_mib')} MiB; after the "
      f"start nvidia-smi used {started['memory.used']} free {started['memory.free']} MiB")
PY
systemctl stop llama-server@bench
kill $HOLDER 2>/dev/null; wait $HOLDER 2>/dev/null
st "done"
