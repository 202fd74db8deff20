"""The engines' systemd unit templates render, for the lab's settings, to the units committed in tests/data/units/.

Those files were rendered from the templates as they were before the hardening block became one shared include
(roles/templates/engine-hardening.j2): a change to either template or to the include that alters a unit by one byte
fails here, so a unit change is always a deliberate one (and the lab's unit tests, tests/lab/test_units.py, rerun).
Rendered as pyinfra's files.template renders them (pyinfra.api.util.get_template, the loader each role passes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.api.util import get_template

from lab.harness import LAB_DATA
from roles.engines import unit_jinja
from roles.llama_cpp import decide as llama_cpp
from roles.ray.decide import HEAD_TEMP_DIR
from roles.settings import load_settings
from roles.vllm import decide as vllm

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "tests" / "data" / "units"


@pytest.mark.parametrize("golden, template, role, extra", [
    ("llama-server@.service", "roles/llama_cpp/templates/llama-server@.service.j2", llama_cpp, {}),
    ("vllm@.service", "roles/vllm/templates/vllm@.service.j2", vllm, {"ray_temp_dir": None}),
    ("vllm@.service.ray", "roles/vllm/templates/vllm@.service.j2", vllm, {"ray_temp_dir": HEAD_TEMP_DIR}),
])
def test_unit_renders_as_committed(golden, template, role, extra):
    s = load_settings("lab", dict(LAB_DATA))
    text = get_template(str(ROOT / template), unit_jinja((ROOT / template).parent)).render(
        service_user=s.base_service_user, current=role.CURRENT, home=s.base_service_home,
        nofile=s.tuning_nofile_limit, **extra)
    assert text == (UNITS / golden).read_text()
