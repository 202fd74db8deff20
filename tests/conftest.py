"""Fast tests (tests/unit, tests/plan) run in seconds; tests/lab provisions real lab hosts and is marked `lab`."""

from pathlib import Path

import pytest

LAB_DIR = Path(__file__).parent / "lab"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if LAB_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)
    # the Ray cluster's tests last: their fixture frees the bundled lab hosts first (disk: four fully provisioned
    # hosts, each with a CUDA toolkit and a vLLM venv, do not fit beside the lab cache on this machine kind)
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)
