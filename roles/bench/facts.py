"""What a running instance shows of itself on its host, for the bench. Read-only."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class InstanceEvidence(FactBase[dict]):
    """For the unit `unit` (llama-server@NAME, vllm@NAME) serving on TCP `port`: {'main_pid': int (0: none),
    'pids': [the unit's processes (its cgroup), else the main PID and its children], 'compute_apps': [nvidia-smi
    --query-compute-apps lines, [] without nvidia-smi], 'alive': [PIDs of those lines that are processes here],
    'log': [this PID's log lines: its journal, else the file its stderr goes to]}.

    A server started by hand (no active unit) is found by its listening port (`ss -ltnp`), and its log is the file
    its stderr was redirected to: how tools/gpu/bench/go.sh runs one on a machine without systemd."""

    def command(self, unit: str, port: int) -> str:
        u, p = shlex.quote(unit), int(port)
        return (f"pid=$(systemctl show -p MainPID --value {u} 2>/dev/null); [ -n \"$pid\" ] || pid=0; "
                f"[ \"$pid\" != 0 ] || pid=$(ss -Hltnp 'sport = :{p}' 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 "
                "| cut -d= -f2); [ -n \"$pid\" ] || pid=0; echo \"#pid $pid\"; echo '#pids'; "
                f"if [ \"$pid\" != 0 ]; then cg=$(systemctl show -p ControlGroup --value {u} 2>/dev/null); "
                "if [ -n \"$cg\" ] && [ -r \"/sys/fs/cgroup$cg/cgroup.procs\" ]; then cat \"/sys/fs/cgroup$cg/cgroup.procs\"; "
                "else echo \"$pid\"; pgrep -P \"$pid\" 2>/dev/null; fi; fi; "
                "echo '#apps'; apps=''; command -v nvidia-smi >/dev/null && "
                "apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null); "
                "[ -n \"$apps\" ] && echo \"$apps\"; echo '#alive'; "
                "for a in $(echo \"$apps\" | cut -d, -f1); do [ -d \"/proc/$a\" ] && echo \"$a\"; done; echo '#log'; "
                f"if [ \"$pid\" != 0 ]; then l=$(journalctl -b -u {u} _PID=$pid -o cat --no-pager 2>/dev/null | "
                "tail -n 2000); if [ -n \"$l\" ]; then echo \"$l\"; else f=$(readlink \"/proc/$pid/fd/2\" 2>/dev/null); "
                "[ -f \"$f\" ] && tail -n 2000 \"$f\"; fi; fi; true")

    def process(self, output: list[str]) -> dict:
        out: dict = {"main_pid": 0, "pids": [], "compute_apps": [], "alive": [], "log": []}
        sections = {"#pids": "pids", "#apps": "compute_apps", "#alive": "alive", "#log": "log"}
        section = None
        for line in output:
            if line.startswith("#pid "):
                value = line.split()[1] if len(line.split()) > 1 else "0"
                out["main_pid"] = int(value) if value.isdigit() else 0
            elif line in sections:
                section = sections[line]
            elif section in ("pids", "alive"):
                if line.strip().isdigit():
                    out[section].append(int(line.strip()))
            elif section:
                out[section].append(line)
        return out
