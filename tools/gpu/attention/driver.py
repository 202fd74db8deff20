"""Placement + speed matrix driver (resumable; state in /tmp/res). usage: driver.py DEADLINE_EPOCH"""
import collections, concurrent.futures as cf, itertools, json, os, queue, re, subprocess, sys, threading, time

R = "/tmp/res"
DEADLINE = float(sys.argv[1])
TREES = {"0.3.16": "/tmp/src16/llama.cpp/build/bin", "0.3.36": "/tmp/src36/llama.cpp/build/bin"}
CLI = {"0.3.16": "llama-cli", "0.3.36": "llama-completion"}
HEADS = [64, 128, 256]
TYPES = ["f16", "q8_0", "q4_0", "bf16"]
PAIRS = list(itertools.product(TYPES, TYPES))
NODE = re.compile(r"node #\s*(\d+) \(\s*([^)]*?)\):\s+(\S+) \([^)]*\) \[\s*(\S+)\s")
ATTN = re.compile(r"^(kq|kqv|kq_soft_max|kq_soft_max_ext|kq_scaled|__fattn__|fattn|kqv_out|k_cache_view|v_cache_view|cache_k.*|cache_v.*)(-\d+)?(\s.*)?$")
ERR = re.compile(r"error|fatal|unsupported|abort|failed|requires|GGML_ASSERT|terminate|what\(\)|exception|missing support|not supported", re.I)
SPL = re.compile(r"graph splits = .*|graph.*: nodes = .*splits = .*")
lock = threading.Lock()


def log(msg):
    with lock, open(f"{R}/progress.log", "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {msg}\n")


def append(name, rec):
    with lock, open(f"{R}/{name}", "a") as f:
        f.write(json.dumps(rec) + "\n")


def done_keys(name, fields):
    keys = set()
    try:
        for line in open(f"{R}/{name}"):
            r = json.loads(line)
            keys.add(tuple(r[k] for k in fields))
    except FileNotFoundError:
        pass
    return keys


def model(h):
    return f"/tmp/models/m{h}.gguf"


def placement(tree, h, tk, tv, fa):
    b = TREES[tree]
    cmd = [f"{b}/{CLI[tree]}", "-m", model(h), "-ngl", "99", "-c", "4096", "-ctk", tk, "-ctv", tv,
           "-n", "4", "-p", "hello", "-no-cnv", "-v", "-t", "2", "--temp", "0", "-s", "1"]
    if tree == "0.3.16":
        if fa:
            cmd.append("-fa")
    else:
        cmd += ["-fa", "on" if fa else "off"]
    env = dict(os.environ, GGML_SCHED_DEBUG="2")
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                           env=env, timeout=60)
        rc, out = p.returncode, p.stdout + "\n" + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = (e.stdout or b"").decode("utf8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += (e.stderr or b"").decode("utf8", "replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    el = round(time.time() - t0, 2)
    attn = collections.defaultdict(set)
    fa_b, cpu_ops = set(), collections.Counter()
    splits, errs, warns = [], [], []
    for line in out.splitlines():
        m = NODE.search(line)
        if m:
            op, name, be = m.group(2), m.group(3), m.group(4)
            if op.startswith("FLASH_ATTN"):
                fa_b.add(be)
            base = re.sub(r"-\d+$", "", name)
            if ATTN.match(name) or op.startswith("FLASH_ATTN") or op.startswith("SOFT_MAX"):
                attn[f"{op}:{base}"].add(be)
            if be == "CPU":
                cpu_ops[f"{op}:{base}"] += 1
            continue
        s = SPL.search(line)
        if s and s.group(0) not in splits:
            splits.append(s.group(0))
        if ERR.search(line) and len(errs) < 6 and "llama_model_loader" not in line and line.strip() not in errs:
            errs.append(line.strip()[:300])
        if ("Flash Attention" in line or "flash_attn" in line) and len(warns) < 6 and line.strip() not in warns:
            warns.append(line.strip()[:300])
    tag = f"{tree}_h{h}_{tk}_{tv}_fa{int(fa)}"
    keep = [l for l in out.splitlines() if "node #" not in l][-60:]
    with open(f"{R}/logs/{tag}.txt", "w") as f:
        f.write(" ".join(cmd) + "\n" + "\n".join(keep) + "\n")
        f.write("\n".join(l for l in out.splitlines() if "FLASH_ATTN" in l or "SPLIT #" in l)[:20000])
    aborted = rc not in (0, "timeout") and bool(re.search(r"fatal error|GGML_ASSERT|Unsupported|abort|core dumped", out, re.I))
    refused = bool(re.search(r"requires flash_attn|requires Flash Attention|V cache quantization requires", out))
    rec = dict(tree=tree, head_size=h, type_k=tk, type_v=tv, fa=int(fa),
               fa_backend="/".join(sorted(fa_b)) if fa_b else "none", splits=splits, exit_code=rc,
               aborted=aborted, refused=refused, error_lines=errs, fa_lines=warns,
               attn_backends={k: sorted(v) for k, v in sorted(attn.items())}, cpu_nodes=dict(cpu_ops),
               elapsed_s=el)
    append("placement.jsonl", rec)
    return rec


def run_placement():
    done = done_keys("placement.jsonl", ["tree", "head_size", "type_k", "type_v", "fa"])
    todo = [(t, h, tk, tv, fa) for t in TREES for h in HEADS for fa in (1, 0) for tk, tv in PAIRS
            if (t, h, tk, tv, fa) not in done and os.path.exists(f"{TREES[t]}/{CLI[t]}")]
    log(f"placement todo {len(todo)}")
    with cf.ThreadPoolExecutor(8) as ex:
        futs = []
        for c in todo:
            futs.append(ex.submit(lambda c=c: placement(*c) if time.time() < DEADLINE - 65 else None))
        for f in futs:
            f.result()
    log("placement pass finished")


def bench_invocation(tree, h, fa, cells):
    """cells: ordered list of (tk, tv) in llama-bench product order. Returns the cells not yet finished."""
    tks = list(dict.fromkeys(c[0] for c in cells))
    tvs = list(dict.fromkeys(c[1] for c in cells))
    assert list(itertools.product(tks, tvs)) == cells
    cmd = [f"{TREES[tree]}/llama-bench", "-m", model(h), "-ngl", "99", "-p", "512", "-n", "32", "-r", "1",
           "-d", "2048", "-ctk", ",".join(tks), "-ctv", ",".join(tvs), "-fa", str(fa), "-o", "jsonl"]
    log("bench " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    q = queue.Queue()
    errtail = collections.deque(maxlen=15)
    threading.Thread(target=lambda: [q.put(l) for l in p.stdout] + [q.put(None)], daemon=True).start()
    threading.Thread(target=lambda: [errtail.append(l.rstrip()) for l in p.stderr], daemon=True).start()
    i, res, start = 0, {}, time.time()
    status = None
    while i < len(cells):
        wait = min(60 - (time.time() - start), DEADLINE - time.time())
        if wait <= 0:
            status = "timeout" if time.time() < DEADLINE else "deadline"
            break
        try:
            line = q.get(timeout=wait)
        except queue.Empty:
            continue
        if line is None:
            status = "error"
            break
        try:
            r = json.loads(line)
        except ValueError:
            continue
        kind = "pp512" if r.get("n_prompt", 0) > 0 else "tg32"
        res[kind] = round(r["avg_ts"], 2)
        if kind == "tg32":
            tk, tv = cells[i]
            append("bench.jsonl", dict(tree=tree, head_size=h, type_k=tk, type_v=tv, fa=fa, pp512=res.get("pp512"),
                                       tg32=res["tg32"], record_types=[r.get("type_k"), r.get("type_v")],
                                       wall_s=round(time.time() - start, 2)))
            i, res, start = i + 1, {}, time.time()
    if p.poll() is None:
        p.kill()
    p.wait()
    time.sleep(0.2)
    if status in ("timeout", "error") and i < len(cells):
        tk, tv = cells[i]
        append("bench.jsonl", dict(tree=tree, head_size=h, type_k=tk, type_v=tv, fa=fa,
                                   pp512=res.get("pp512", status), tg32=status, rc=p.returncode,
                                   stderr_tail=list(errtail)[-6:], wall_s=round(time.time() - start, 2)))
        i += 1
    if status == "deadline":
        return []
    return cells[i:]


def run_bench():
    pl = {}
    for line in open(f"{R}/placement.jsonl"):
        r = json.loads(line)
        pl[(r["tree"], r["head_size"], r["type_k"], r["type_v"], r["fa"])] = r
    done = done_keys("bench.jsonl", ["tree", "head_size", "type_k", "type_v", "fa"])
    for fa in (1, 0):
        for tree in TREES:
            for h in HEADS:
                ok = [(tk, tv) for tk, tv in PAIRS if (tree, h, tk, tv, fa) not in done
                      and pl.get((tree, h, tk, tv, fa), {}).get("exit_code") == 0
                      and not pl[(tree, h, tk, tv, fa)]["refused"]]
                if not ok:
                    continue
                tks = list(dict.fromkeys(c[0] for c in ok))
                tvs = list(dict.fromkeys(c[1] for c in ok))
                groups = [ok] if list(itertools.product(tks, tvs)) == ok else \
                    [[c for c in ok if c[0] == tk] for tk in tks]
                while groups:
                    if time.time() > DEADLINE - 70:
                        log("bench: deadline")
                        return
                    g = groups.pop(0)
                    rest = bench_invocation(tree, h, fa, g)
                    if rest:
                        rtks = list(dict.fromkeys(c[0] for c in rest))
                        groups = [[c for c in rest if c[0] == tk] for tk in rtks] + groups
    log("bench pass finished")


if __name__ == "__main__":
    os.makedirs(f"{R}/logs", exist_ok=True)
    run_placement()
    if time.time() < DEADLINE - 70:
        run_bench()
