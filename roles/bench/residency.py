"""Is an instance on the GPU, and how much VRAM do its processes hold? Pure, over InstanceEvidence (facts.py).

llama.cpp: roles/llama_cpp/residency.py judge (its log's CUDA and offload lines, and nvidia-smi). vLLM: its
processes hold GPU memory (nvidia-smi --query-compute-apps); vLLM has no CPU fallback on a CUDA build, so memory
held is the evidence.
"""

from __future__ import annotations

from roles.llama_cpp.residency import Residency, judge, parse_compute_apps


def instance_vram_mib(ev: dict, sole_instance: bool) -> tuple[int | None, str]:
    """(MiB the instance's processes hold, a note): the compute apps whose PID is one of the instance's. When
    nvidia-smi lists processes but none of their PIDs exists here (its PIDs are of another PID namespace, as in a
    container) and the host runs only this instance, all of them are taken as its own, and the note says so.
    None: nvidia-smi gave nothing."""
    apps = parse_compute_apps(ev.get("compute_apps", []))
    if not apps:
        return None, ""
    mine = set(ev.get("pids") or []) | ({ev["main_pid"]} if ev.get("main_pid") else set())
    used = sum(m for p, m in apps.items() if p in mine)
    if used:
        return used, ""
    if sole_instance and not set(ev.get("alive") or []) and mine:
        return sum(apps.values()), ("nvidia-smi's PIDs are not processes here (another PID namespace): its "
                                    f"{len(apps)} process(es) taken as this instance's, the only one on the host")
    return 0, ""


def judge_instance(engine: str, ev: dict, n_gpu_layers: int, sole_instance: bool) -> tuple[Residency, int | None]:
    """(verdict, VRAM MiB or None) of one running instance."""
    used, note = instance_vram_mib(ev, sole_instance)
    main = ev.get("main_pid", 0)
    if engine == "llama.cpp":
        verdict = judge(ev.get("log", []), main, {main: used} if used else {}, n_gpu_layers)
    elif main <= 0:
        verdict = Residency(False, "the service has no running process")
    elif used:
        verdict = Residency(True, f"its processes hold {used} MiB of VRAM (nvidia-smi --query-compute-apps)")
    else:
        verdict = Residency(False, "no process of the service holds GPU memory (nvidia-smi --query-compute-apps"
                                   + (" answered nothing)" if used is None else ")"))
    if note:
        verdict = Residency(verdict.on_gpu, f"{verdict.evidence} ({note})")
    return verdict, used
