"""Both service units, as installed on the lab hosts, score an exposure of 4.0 or lower in `systemd-analyze
security` (systemd's own scoring of the unit's sandboxing), on the host's own systemd."""

from __future__ import annotations

import re

import pytest

from lab.data import LLAMA_HOSTS, VLLM_HOSTS

#: the highest `systemd-analyze security` exposure a service unit of the toolkit may have
MAX_EXPOSURE = 4.0

UNITS = [("llama-server@tiny.service", name) for name in LLAMA_HOSTS] + [("vllm@tiny.service", name)
                                                                          for name in VLLM_HOSTS]


@pytest.mark.parametrize("unit,host_name", UNITS, ids=[f"{u}-{h}" for u, h in UNITS])
def test_unit_exposure_at_most_4(provisioned, unit, host_name):
    spec = next(s for s in provisioned.lab.hosts if s.name == host_name)
    rc, out = provisioned.lab.run(spec, f"systemd-analyze security --no-pager {unit}")
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out)
    assert m, out[-2000:]
    assert float(m.group(1)) <= MAX_EXPOSURE, out[-3000:]
