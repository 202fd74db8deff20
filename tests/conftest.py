"""Fast tests (tests/unit, tests/plan) run in seconds; tests/lab provisions real lab hosts and is marked `lab`."""

from pathlib import Path

import pytest

LAB_DIR = Path(__file__).parent / "lab"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if LAB_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)
    # the fast tests first: they need little disk, and the lab hosts of the next tests fill most of it (CI once
    # failed there: every fast test that wrote a temporary file errored after the bundled hosts were provisioned).
    # The Ray cluster's and the offline host's tests last: their fixtures free the bundled lab hosts first (four
    # fully provisioned hosts, each with a CUDA toolkit and a vLLM venv, do not fit beside the lab cache).
    items.sort(key=lambda item: (item.get_closest_marker("lab") is not None,
                                 item.get_closest_marker("cluster") is not None))
