"""`v100kit verify inventory/lab.py` on the provisioned lab hosts: the host suite (v100kit/verify/suite), the same
one a user runs against real boxes, passes on both hosts; its GPU checks skip with the reason (no GPU on the lab
machine, docs/lab.md §Machine); and nothing on the hosts changed by running it. The checks that used to live here as
lab-only tests (driver packages pinned and held, the headers metapackage, nvidia-persistenced enabled, each toolkit's nvcc, the service user,
the GPU checks of the former test_gpu.py) are in the suite now and must have passed here, per host."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from lab.data import llama_hosts
from lab.harness import HOSTS
from lab.provision import ROOT
from tests.lab.test_deploy import SNAPSHOT

V100KIT = str(Path(sys.executable).with_name("v100kit"))

#: checks that must pass on every lab host (systemd, dpkg and apt are there; each host serves an instance with an
#: API key: lab/data.py)
MUST_PASS = {"test_driver_packages_at_the_pinned_versions", "test_driver_packages_held_and_pinned_for_apt",
             "test_headers_metapackage_installed", "test_nvidia_persistenced_enabled",
             "test_each_toolkit_nvcc_reports_its_version",
             "test_service_user_is_an_unprivileged_system_user", "test_instance_units_enabled",
             "test_instance_api_keys_root_only"}
#: checks that must pass on the hosts with llama-server@tiny (lab/data.py llama_hosts) and skip, saying so, on the others
LLAMA_CHECKS = {"test_llama_cpp_instances_answer_health"}
#: checks that need a GPU: the lab machine has none, so each must skip and say so
GPU_CHECKS = {"test_driver_module_loaded_at_the_pinned_version", "test_nvidia_smi_sees_every_gpu_on_the_bus",
              "test_compute_capability_is_the_configured_one", "test_persistence_mode_on",
              "test_vllm_instances_answer_health", "test_lmdeploy_instances_answer_health"}


def results(xml: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """{(check, host): (passed|failed|skipped, message)} from pytest's JUnit XML (test ids end in [HOST])."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name, _, host = case.get("name").partition("[")
        child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        state = "passed" if child is None else {"skipped": "skipped"}.get(child.tag, "failed")
        out[(name, host.rstrip("]"))] = (state, "" if child is None else (child.get("message") or ""))
    return out


def test_verify_passes_on_the_lab_hosts_skips_gpu_checks_and_changes_nothing(provisioned, tmp_path):
    lab = provisioned.lab
    before = {s.name: lab.run(s, SNAPSHOT)[1] for s in HOSTS}
    xml = tmp_path / "verify.xml"
    res = subprocess.run([V100KIT, "verify", "inventory/lab.py", "--junitxml", str(xml)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    found = results(xml)
    assert {h for _, h in found} == {s.name for s in HOSTS}, sorted(found)
    for s in HOSTS:
        for check in MUST_PASS:
            assert found[(check, s.name)][0] == "passed", (check, s.name, found[(check, s.name)])
        for check in LLAMA_CHECKS:
            state, message = found[(check, s.name)]
            if s.name in llama_hosts():
                assert state == "passed", (check, s.name, message)
            else:
                assert state == "skipped" and f"configure no llama.cpp instance on {s.name}" in message, \
                    (check, s.name, message)
        for check in GPU_CHECKS:
            state, message = found[(check, s.name)]
            assert state == "skipped" and f"no GPU visible on {s.name}" in message, (check, s.name, message)
    assert not [k for k, (state, _) in found.items() if state == "failed"]
    assert {s.name: lab.run(s, SNAPSHOT)[1] for s in HOSTS} == before
