"""The test tiers (tests/tiers.toml) and tools/suites_for_change.py: every suite's files exist and are marked `full`
by the collection, the import map the change tool uses holds every module Python really loads for a suite's tests,
and a change is mapped to the suites that run its code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.tiers import ROOT, covered_files, full_tier_files, load, suites_touched

TOOL = ROOT / "tools" / "suites_for_change.py"


def test_the_full_tier_is_what_pytest_collects_as_full():
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "full", "-p",
                          "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = {line.split("::")[0] for line in res.stdout.splitlines() if "::" in line}
    assert collected == set(full_tier_files()), res.stdout[-2000:]


def test_budgets_are_the_issue_25_limits():
    budget, suites = load()
    assert budget["ci_cold"] <= 70 and budget["ci_warm"] <= 35 and budget["ci_limit"] == 90
    assert all(s.why for s in suites.values())


@pytest.mark.parametrize("name", sorted(load()[1]))
def test_the_map_holds_every_project_module_python_loads_for_the_suite(name):
    """The independent source: the interpreter's own sys.modules after importing the suite's test modules."""
    suite = load()[1][name]
    modules = [t[:-3].replace("/", ".") for t in suite.tests]
    code = (f"import sys, json, importlib; [importlib.import_module(m) for m in {modules!r}]; "
            "print(json.dumps(sorted(k for k, v in sys.modules.items() "
            "if k.split('.')[0] in ('roles', 'lab', 'v100kit', 'tests') and getattr(v, '__file__', None))))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = {str(__import__(m, fromlist=["_"]).__file__).removeprefix(f"{ROOT}/") for m in json.loads(res.stdout)}
    files, _ = covered_files(suite)
    assert loaded <= files, sorted(loaded - files)


def test_a_change_touches_the_suites_that_run_its_code():
    everything = set(load()[1])
    assert set(suites_touched(["roles/ray/decide.py"])) >= {"ray-cluster", "offline", "second-toolkit"}
    assert "fast-tests-isolated" not in suites_touched(["roles/ray/deploy.py"])  # only the deploys import it
    assert suites_touched(["roles/llama_cpp/templates/llama-server@.service.j2"])[:1] == ["second-toolkit"]
    assert suites_touched(["tests/lab/test_offline.py"]) == ["offline"]
    assert suites_touched(["files/vllm/vllm-0.8.5.post1-py3.11.txt"]) == ["ray-cluster", "offline"]
    assert suites_touched(["README.md", "docs/lab.md"]) == []
    assert set(suites_touched(["tests/tiers.toml"])) == everything  # a test moved between tiers


def test_the_tool_names_the_touched_suites_and_refuses_a_bad_base():
    res = subprocess.run([sys.executable, str(TOOL), "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert set(res.stdout.split()) <= set(load()[1])
    bad = subprocess.run([sys.executable, str(TOOL), "no-such-revision"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "'no-such-revision' is not a git revision" in bad.stderr
