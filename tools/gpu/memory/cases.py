"""Start llama-server per case, read its VRAM and logged buffers. usage: cases.py DEADLINE_EPOCH CASE_ID..."""
import json, os, re, signal, subprocess, sys, time, urllib.request, random

BIN = "/tmp/llama.cpp/build/bin/llama-server"
R = "/tmp/res"
MODELS = {"8b": "/tmp/m/8b-q4km.gguf", "1.5b": "/tmp/m/1.5b-f16.gguf"}
CASES = {
    1: dict(model="8b", ctx=8192, parallel=1, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True, n_gpu_layers=99),
    2: dict(model="8b", ctx=32768, parallel=4, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True, n_gpu_layers=99),
    3: dict(model="8b", ctx=131072, parallel=1, cache_type_k="f16", cache_type_v="f16", flash_attn=True, n_gpu_layers=99),
    4: dict(model="8b", ctx=8192, parallel=1, cache_type_k="f16", cache_type_v="f16", flash_attn=False, n_gpu_layers=99),
    5: dict(model="8b", ctx=4096, parallel=1, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True, n_gpu_layers=20),
    6: dict(model="1.5b", ctx=32768, parallel=1, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True, n_gpu_layers=99),
    7: dict(model="8b", ctx=8192, parallel=2, cache_type_k="q8_0", cache_type_v="f16", flash_attn=True, n_gpu_layers=99),
}


def smi(q, extra):
    out = subprocess.run(["nvidia-smi", f"--query-{q}", "--format=csv,noheader,nounits"] + extra,
                         capture_output=True, text=True).stdout.strip()
    return out


def apps():
    rows = []
    for line in smi("compute-apps=pid,used_memory", []).splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit():
            rows.append((parts[0], int(parts[1])))
    return rows


def gpu_used():
    try:
        return int(smi("gpu=memory.used", []).splitlines()[0])
    except Exception:
        return None


def sample(pid):
    best, allrows = None, []
    for _ in range(4):
        rows = apps()
        allrows.append(rows)
        mine = [m for p, m in rows if p == str(pid)]
        v = mine[0] if mine else (rows[0][1] if len(rows) == 1 else None)
        if v is not None:
            best = v if best is None else max(best, v)
        time.sleep(0.25)
    return best, allrows[-1], gpu_used()


def parse(log):
    d = dict(model_buffers={}, kv_buffers={}, compute_buffers={}, kv_size_line=None, lines=[])
    for line in log.splitlines():
        m = re.search(r"(\S+) model buffer size\s*=\s*([\d.]+) MiB", line)
        if m:
            d["model_buffers"][m.group(1)] = d["model_buffers"].get(m.group(1), 0) + float(m.group(2))
        m = re.search(r"(\S+) KV buffer size\s*=\s*([\d.]+) MiB", line)
        if m:
            d["kv_buffers"][m.group(1)] = d["kv_buffers"].get(m.group(1), 0) + float(m.group(2))
        m = re.search(r"(\S+) compute buffer size\s*=\s*([\d.]+) MiB", line)
        if m:
            d["compute_buffers"][m.group(1)] = float(m.group(2))
        if re.search(r"llama_kv_cache\w*: size =", line):
            d["kv_size_line"] = line.strip()
        if re.search(r"buffer size|llama_kv_cache|flash_attn|n_ctx|graph nodes|graph splits|offloaded|n_seq_max|CUDA0 ", line):
            d["lines"].append(line.strip()[:250])
    m = re.findall(r"llama_kv_cache\w*: size =\s*([\d.]+) MiB", log)
    d["kv_size_mib"] = sum(float(x) for x in m) if m else None
    return d


def run(cid, port):
    c = CASES[cid]
    cmd = [BIN, "-m", MODELS[c["model"]], "--host", "127.0.0.1", "--port", str(port), "-ngl", str(c["n_gpu_layers"]),
           "-c", str(c["ctx"]), "-ctk", c["cache_type_k"], "-ctv", c["cache_type_v"], "-np", str(c["parallel"])]
    if c["flash_attn"]:
        cmd.append("-fa")
    base = gpu_used()
    logf = f"{R}/logs/case{cid}.log"
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=open(logf, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    rec = dict(case=cid, **c, cmd=" ".join(cmd), gpu_used_before_mib=base)
    ok = False
    while time.time() - t0 < 180:
        if p.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    ok = True
                    break
        except Exception:
            pass
        time.sleep(0.25)
    rec["ready_s"] = round(time.time() - t0, 2)
    rec["started"] = ok
    if ok:
        time.sleep(1.0)
        rec["measured_mib"], rec["smi_rows"], rec["gpu_used_at_health_mib"] = sample(p.pid)
        random.seed(cid)
        n_prompt = min(1000, c["ctx"] // c["parallel"] - 16)
        body = json.dumps(dict(prompt=[random.randrange(300, 100000) for _ in range(n_prompt)], n_predict=8,
                               cache_prompt=False)).encode()
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                resp = json.loads(r.read())
            rec["prompt_tokens"] = resp.get("tokens_evaluated", n_prompt)
            rec["timings"] = resp.get("timings")
        except Exception as e:
            rec["prompt_error"] = repr(e)[:300]
        rec["measured_after_prompt_mib"], rec["smi_rows_after_prompt"], rec["gpu_used_after_prompt_mib"] = sample(p.pid)
    rec["server_pid"] = p.pid
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill(); p.wait()
    rec["exit_code"] = p.returncode
    log = open(logf, errors="replace").read()
    rec["log"] = parse(log)
    if not ok:
        rec["log_tail"] = log.splitlines()[-25:]
    for _ in range(40):
        if not apps():
            break
        time.sleep(0.25)
    with open(f"{R}/results.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(f"case {cid}: started={ok} measured={rec.get('measured_mib')} after_prompt={rec.get('measured_after_prompt_mib')} "
          f"model={rec['log']['model_buffers']} kv={rec['log']['kv_size_mib']} compute={rec['log']['compute_buffers']} "
          f"ready={rec['ready_s']}s", flush=True)


if __name__ == "__main__":
    deadline = float(sys.argv[1])
    os.makedirs(f"{R}/logs", exist_ok=True)
    done = set()
    if os.path.exists(f"{R}/results.jsonl"):
        done = {json.loads(l)["case"] for l in open(f"{R}/results.jsonl")}
    for i, cid in enumerate(int(x) for x in sys.argv[2:]):
        if cid in done:
            continue
        if time.time() > deadline - (60 if cid == 3 else 35):
            print(f"case {cid}: skipped, deadline", flush=True)
            continue
        run(cid, 18080 + cid)
