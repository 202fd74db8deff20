"""Peak VRAM of one instance during a level: nvidia-smi --query-compute-apps sampled on the host in a background
thread, the instance's processes summed (residency.py instance_vram_mib: its PID and every descendant, or all
processes where nvidia-smi's PIDs are of another PID namespace and the instance is the host's only one), the most
kept. Pure apart from the thread: the host is reached through `run(command) -> stdout` that the command gives.
"""

from __future__ import annotations

import threading
from typing import Callable

from roles.bench.residency import instance_vram_mib

#: One sample: every process with its parent, then nvidia-smi's compute processes; "#no-nvidia-smi" without one.
QUERY = ("command -v nvidia-smi >/dev/null 2>&1 || { echo '#no-nvidia-smi'; exit 0; }; echo '#ps'; "
         "ps -e -o pid=,ppid= 2>/dev/null; echo '#apps'; "
         "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>&1; true")


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    """`root` and every process below it, from {pid: parent pid}."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo += children.get(p, [])
    return out


def sample(output: str, root: int, sole_instance: bool) -> tuple[int | None, str]:
    """(MiB the processes of `root` hold, a note) from one QUERY output; None with the reason when there is no
    figure (no nvidia-smi, or it answered no compute process or an error)."""
    lines = output.splitlines()
    if "#no-nvidia-smi" in lines:
        return None, "no nvidia-smi on the host (no GPU driver)"
    section, parents, apps = None, {}, []
    for line in lines:
        if line in ("#ps", "#apps"):
            section = line
        elif section == "#ps":
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                parents[int(parts[0])] = int(parts[1])
        elif section == "#apps" and line.strip():
            apps.append(line)
    pids = descendants(root, parents) if root > 0 else set()
    app_pids = {int(a.split(",")[0]) for a in apps if a.split(",")[0].strip().isdigit()}
    ev = {"main_pid": root, "pids": sorted(pids), "compute_apps": apps, "alive": sorted(app_pids & set(parents))}
    used, note = instance_vram_mib(ev, sole_instance)
    if used is None:
        said = " ".join(apps)[:120]
        return None, "nvidia-smi listed no compute process" + (f" ({said})" if said else "")
    if used == 0:
        return 0, f"none of nvidia-smi's {len(app_pids)} compute process(es) is process {root} or below it"
    return used, note


class PeakVram:
    """Samples in a thread from start() to stop(), every `interval_s`, and once more at stop (a level shorter than
    the interval still has its first and last sample). stop() -> (the most MiB any sample saw or None, a note)."""

    def __init__(self, run: Callable[[str], str], root: int, sole_instance: bool, interval_s: float = 1.0):
        self.run, self.root, self.sole, self.interval_s = run, root, sole_instance, interval_s
        self.peak: int | None = None
        self.notes: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _one(self) -> None:
        try:
            used, note = sample(self.run(QUERY), self.root, self.sole)
        except Exception as e:  # a failed sample is a note, never a failed level
            used, note = None, f"sampling failed: {type(e).__name__}: {e}"[:200]
        self.samples += 1
        if used is not None:
            self.peak = used if self.peak is None else max(self.peak, used)
        if note and note not in self.notes:
            self.notes.append(note)

    def _loop(self) -> None:
        while True:
            self._one()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> PeakVram:
        self._thread = threading.Thread(target=self._loop, name="peak-vram", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> tuple[int | None, str]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._one()
        return self.peak, "; ".join(self.notes)
