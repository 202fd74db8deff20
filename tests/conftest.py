"""Fast tests (tests/unit, tests/plan) run in seconds; tests/lab provisions real lab hosts and is marked `lab`."""

from pathlib import Path

import pytest

LAB_DIR = Path(__file__).parent / "lab"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if LAB_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)
