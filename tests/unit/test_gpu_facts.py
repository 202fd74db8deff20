"""The NvidiaGpus fact's parser (roles/nvidia_driver/facts.py gpus_from_smi, NvidiaGpus.process) and the memory in use
outside v100kit (roles/engines.py outside_use, usable_mib), against nvidia-smi output as real boxes printed it.

Test data: tests/data/nvidia_smi_captures.txt, sections copied verbatim from utkuozdemir/nvidia_gpu_exporter
internal/captures/*.txt (an H200 under load with three processes of a synthetic load; a Windows WDDM RTX 2080 SUPER,
whose per-process memory reads "[N/A]"). Those captures ran `--format=csv` with every field; nvidia-smi prints any
subset of them the same way, so `projected` picks the fact's fields by nvidia-smi's own header names and drops the
units, as `--format=csv,noheader,nounits` does (the same projection the exporter's cmd/fake-nvidia-smi replays).
Expected values are read off the capture text in each test, not from the parser.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from roles.engines import describe_outside, outside_use, usable_mib
from roles.nvidia_driver.facts import APP_FIELDS, GPU_FIELDS, NvidiaGpus, gpus_from_smi

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi_captures.txt"
H200, WDDM = "linux-x86_64__nvidia-h200__590.48.01", "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86"


def section(capture: str, name: str) -> list[str]:
    """The CSV lines (header first) of one captured section."""
    lines = CAPTURES.read_text().splitlines()
    start = lines.index(f"== {capture} :: load :: {name}") + 2
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def projected(capture: str, name: str, fields: tuple[str, ...]) -> list[str]:
    """The section's rows as `nvidia-smi --query-...=FIELDS --format=csv,noheader,nounits` prints them."""
    rows = list(csv.reader(section(capture, name), skipinitialspace=True))
    header = [h.split(" [")[0] for h in rows[0]]  # "memory.used [MiB]" -> "memory.used"
    alias = {"used_memory": "used_gpu_memory"}  # --query-compute-apps takes both names for one field
    out = []
    for row in rows[1:]:
        d = dict(zip(header, row))
        out.append(", ".join(d[alias.get(f, f)].removesuffix(" MiB") for f in fields))
    return out


def test_h200_under_load_one_gpu_with_its_three_processes():
    gpu_rows = projected(H200, "query-gpu", GPU_FIELDS)
    assert gpu_rows == ["0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 9.0, 143771, 32362, 110796, "
                        "Enabled, 590.48.01"]  # the capture's own figures, projected
    (g,) = gpus_from_smi(gpu_rows, projected(H200, "query-compute-apps", APP_FIELDS))
    assert (g["index"], g["name"], g["compute_cap"], g["memory_mib"]) == (0, "NVIDIA H200", "9.0", 143771)
    assert (g["memory_used_mib"], g["memory_free_mib"], g["driver_version"]) == (32362, 110796, "590.48.01")
    assert [(p["pid"], p["name"], p["used_mib"]) for p in g["processes"]] == [
        (10291, "/root/tools/memhog", 2566), (10293, "/root/tools/memhog", 1542), (10309, "./gpu_burn", 28234)]
    # the capture's memory.reserved (614 MiB) is in neither used nor free: processes can have used + free
    assert usable_mib(g) == 32362 + 110796 == 143771 - 614 + 1  # nvidia-smi rounds each figure to whole MiB
    # nothing of v100kit runs there: all of memory.used is outside, the 20 MiB no process lists included
    mib, procs = outside_use(g)
    assert mib == 32362 and [p["pid"] for p in procs] == [10291, 10293, 10309]
    assert describe_outside(g) == ("GPU 0 (NVIDIA H200): 32362 MiB in use by processes outside v100kit: PIDs "
                                   "10291 (/root/tools/memhog, 2566 MiB), 10293 (/root/tools/memhog, 1542 MiB), "
                                   "10309 (./gpu_burn, 28234 MiB)")


def test_a_process_of_v100kit_s_own_unit_is_not_outside():
    """A re-deploy must not refuse itself: the PID in a llama-server@ unit's cgroup is the toolkit's own."""
    (g,) = gpus_from_smi(projected(H200, "query-gpu", GPU_FIELDS), projected(H200, "query-compute-apps", APP_FIELDS),
                         {10309: "llama-server@big.service", 10291: "user@1000.service"})
    mib, procs = outside_use(g)
    assert mib == 32362 - 28234 and [p["pid"] for p in procs] == [10291, 10293]
    (g,) = gpus_from_smi(projected(H200, "query-gpu", GPU_FIELDS), projected(H200, "query-compute-apps", APP_FIELDS),
                         {10291: "vllm@a.service", 10293: "vllm@a.service", 10309: "ray.service"})
    assert outside_use(g) == (32362 - 2566 - 1542 - 28234, [])
    assert describe_outside(g) == ""  # 20 MiB no process accounts for: not named (IDLE_USED_MIB)


def test_wddm_per_process_memory_reads_na():
    gpu_rows = projected(WDDM, "query-gpu", GPU_FIELDS)
    assert gpu_rows == ["0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA GeForce RTX 2080 SUPER, 7.5, 8192, "
                        "1296, 6692, [N/A], 591.86"]
    apps = projected(WDDM, "query-compute-apps", APP_FIELDS)
    assert len(apps) == 12 and all(", [N/A], " in a for a in apps)
    (g,) = gpus_from_smi(gpu_rows, apps)
    assert len(g["processes"]) == 12 and all(p["used_mib"] is None for p in g["processes"])
    assert g["processes"][2] == {"pid": 2056, "name": r"C:\Windows\System32\dwm.exe", "used_mib": None, "unit": ""}
    assert g["persistence_mode"] is False  # "[N/A]"
    assert outside_use(g)[0] == 1296  # memory.used still tells, though no process's share does


def test_rows_nvidia_smi_cannot_fill():
    """A compute-apps row from a MIG GPU in a container (utkuozdemir/nvidia_gpu_exporter
    internal/nvidiasmi/computeapps_test.go, "from the MIG-in-container capture") says nothing of its process: it is
    skipped, and memory.used "[Insufficient Permissions]" (docs/CONFIGURE.md there: "even some GPU-level fields")
    leaves the GPU's usable memory at memory.total."""
    uuid = "GPU-ae3738d5-9aa2-e1c9-53be-65b6d373d3d9"
    (g,) = gpus_from_smi(
        [f"0, {uuid}, NVIDIA H200, 9.0, 143771, [Insufficient Permissions], [Insufficient Permissions], Enabled, "
         "590.48.01"],
        [f"{uuid}, [Insufficient Permissions], [Insufficient Permissions], [Insufficient Permissions]",
         f"{uuid}, 41, 10, ./before"])
    assert [p["pid"] for p in g["processes"]] == [41]
    assert g["memory_used_mib"] is None and usable_mib(g) == 143771
    assert outside_use(g) == (10, g["processes"])  # the processes' own figures where memory.used is unknown


def test_a_comma_in_a_process_name_stays_in_the_name():
    # computeapps_test.go there: "defense for drivers that do not sanitize commas"; the fact asks for the name last
    (g,) = gpus_from_smi(["0, GPU-abc, Tesla V100-SXM2-32GB, 7.0, 32510, 818, 31692, Enabled, 570.158.01"],
                         ["GPU-abc, 42, 818, /root/tools/mem, hog"])
    assert g["processes"][0]["name"] == "/root/tools/mem, hog" and g["processes"][0]["used_mib"] == 818


def test_processes_join_their_gpu_by_uuid_on_a_box_of_two_models():
    """A 32 GB V100 (7.0) and a T4 (7.5) with one process each: each process lands on its own GPU."""
    gpus = gpus_from_smi(["0, GPU-aaaa, Tesla V100-SXM2-32GB, 7.0, 32510, 4000, 28510, Enabled, 570.158.01",
                          "1, GPU-bbbb, Tesla T4, 7.5, 15360, 1000, 14360, Enabled, 570.158.01"],
                         ["GPU-bbbb, 7, 1000, python", "GPU-aaaa, 5, 4000, trainer"])
    assert [(g["compute_cap"], [p["pid"] for p in g["processes"]]) for g in gpus] == [("7.0", [5]), ("7.5", [7])]


def test_the_fact_reads_its_three_sections():
    out = ["0, GPU-aaaa, Tesla V100-SXM2-16GB, 7.0, 16160, 5000, 11160, Enabled, 535.261.03",
           "#apps", "GPU-aaaa, 4242, 5000, /opt/llama.cpp/current/bin/llama-server",
           "#units", "4242 llama-server@chat.service", "4343 "]
    (g,) = NvidiaGpus().process(out)
    assert g["processes"] == [{"pid": 4242, "name": "/opt/llama.cpp/current/bin/llama-server", "used_mib": 5000,
                               "unit": "llama-server@chat.service"}]
    assert outside_use(g) == (0, [])


@pytest.mark.parametrize("output", [
    [], ["#apps", "#units"],
    # what nvidia-smi prints without a loaded driver, on stdout
    ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.", "#apps", "#units"],
])
def test_no_gpu_no_rows(output):
    assert NvidiaGpus().process(output) == []


def test_a_gpu_without_a_compute_capability_is_left_out_not_a_crash():
    # nvidia-smi prints "[N/A]" for a field the driver cannot fill (the captures' WDDM rows above); a GPU whose
    # compute_cap reads so cannot be planned for, so it is left out and the settings' capability stands in
    gpus = gpus_from_smi(["0, GPU-aaaa, Tesla V100-SXM2-32GB, [N/A], 32510, 0, 32510, Enabled, 580.95.05",
                          "1, GPU-bbbb, Tesla V100-SXM2-32GB, 7.0, 32510, 0, 32510, Enabled, 580.95.05"], [])
    assert [g["index"] for g in gpus] == [1]


def test_inside_a_container_memory_no_listed_process_holds_is_not_called_outside():
    # inside a container nvidia-smi lists no process at all (its PID namespace hides them, the toolkit's own
    # llama-server included), while memory.used counts them: nothing there can be called "outside v100kit"
    (g,) = gpus_from_smi(["0, GPU-aaaa, Tesla V100-SXM2-32GB, 7.0, 32510, 20000, 12510, Enabled, 580.95.05"], [])
    assert outside_use(g) == (0, []) and describe_outside(g) == ""
    # on the host itself the same memory with a foreign process listed is outside
    (h,) = gpus_from_smi(["0, GPU-aaaa, Tesla V100-SXM2-32GB, 7.0, 32510, 20000, 12510, Enabled, 580.95.05"],
                         ["GPU-aaaa, 4242, 20000, python"])
    assert outside_use(h)[0] == 20000
