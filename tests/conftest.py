"""Fast tests (tests/unit, tests/plan) run in seconds; tests/lab provisions real lab hosts and is marked `lab`; the
test files of tests/tiers.toml's suites are marked `full` (make test-all, not CI's make test)."""

from pathlib import Path

import pytest

from tests.tiers import ROOT, full_tier_files

LAB_DIR = Path(__file__).parent / "lab"
FULL = full_tier_files()


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if LAB_DIR in path.parents:
            item.add_marker(pytest.mark.lab)
        if str(path.relative_to(ROOT)) in FULL:
            item.add_marker(pytest.mark.full)
    # the fast tests first: they need little disk, and the lab hosts of the next tests fill most of it (CI once
    # failed there: every fast test that wrote a temporary file errored after the bundled hosts were provisioned).
    # The Ray cluster's and the offline host's tests last: their fixtures free the bundled lab hosts first (four
    # fully provisioned hosts, each with a CUDA toolkit and a vLLM venv, do not fit beside the lab cache).
    items.sort(key=lambda item: (item.get_closest_marker("lab") is not None,
                                 item.get_closest_marker("cluster") is not None))
