"""Facts for the llama_cpp role: what a running llama-server@NAME shows of itself. Read-only."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class ServerEvidence(FactBase[dict]):
    """For the unit `unit` (llama-server@NAME): {'main_pid': int (0: not running), 'log': [lines this PID logged
    this boot], 'compute_apps': [nvidia-smi --query-compute-apps lines, [] without nvidia-smi]}."""

    def command(self, unit: str) -> str:
        u = shlex.quote(unit)
        return (f"pid=$(systemctl show -p MainPID --value {u} 2>/dev/null || echo 0); echo \"#pid $pid\"; "
                "echo '#apps'; command -v nvidia-smi >/dev/null && "
                "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null; "
                f"echo '#log'; [ \"$pid\" -gt 0 ] 2>/dev/null && journalctl -b -u {u} _PID=$pid -o cat --no-pager "
                "2>/dev/null | tail -n 2000; true")

    def process(self, output: list[str]) -> dict:
        out: dict = {"main_pid": 0, "compute_apps": [], "log": []}
        section = None
        for line in output:
            if line.startswith("#pid "):
                value = line.split()[1] if len(line.split()) > 1 else "0"
                out["main_pid"] = int(value) if value.isdigit() else 0
            elif line in ("#apps", "#log"):
                section = {"#apps": "compute_apps", "#log": "log"}[line]
            elif section:
                out[section].append(line)
        return out
