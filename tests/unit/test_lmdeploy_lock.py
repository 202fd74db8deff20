"""The LMDeploy locks (files/lmdeploy/) and their sm_70 evidence: every lock of roles/lmdeploy/versions.py exists,
pins its release and an sm_70 torch build, and its cuobjdump evidence (tools/lock_lmdeploy.py) passes, with
TurboMind's own library carrying sm_70 SASS."""

from __future__ import annotations

import pytest

from roles.lmdeploy.versions import LMDEPLOY_RELEASES, lock_name_parts
from roles.vllm.machine_code import evidence_path, read_evidence
from roles.vllm.versions import TORCH_SM70
from tools.lock_vllm import torch_build

LOCKS = [(r, py) for r in LMDEPLOY_RELEASES.values() for py in r.pythons]


@pytest.mark.parametrize(("release", "python"), LOCKS, ids=lambda x: getattr(x, "version", x))
def test_each_lock_pins_its_release_and_an_sm70_torch(release, python):
    lock = release.lock_file(python)
    text = lock.read_text()
    assert lock_name_parts(lock) == (release.version, python)
    assert f"\nlmdeploy=={release.version} \\\n" in text
    assert f"(--exclude-newer {release.exclude_newer})" in text.splitlines()[1]
    build = torch_build(text)
    assert build == (release.torch.rsplit(".", 1)[0], release.torch_cuda) and TORCH_SM70[build]


@pytest.mark.parametrize(("release", "python"), LOCKS, ids=lambda x: getattr(x, "version", x))
def test_each_locks_evidence_passes_with_turbomind_on_sm70(release, python):
    check = read_evidence(evidence_path(release.lock_file(python)))
    assert check.lock == release.lock_file(python).name and check.ok and not check.failing
    turbomind = [b for b in check.binaries if b.distribution == "lmdeploy" and "_turbomind" in b.member]
    assert len(turbomind) == 1 and "sm_70" in turbomind[0].sass
    assert {b.member for b in check.not_launched} <= {"nvidia/cufft/lib/libcufftw.so.11"}
