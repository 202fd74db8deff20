"""The test tiers (tests/tiers.toml) and tools/suites_for_change.py: every suite's files exist and are marked `full`
by the collection, the import map the change tool uses holds every module Python really loads for a suite's tests,
and a change is mapped to the suites that run its code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.tiers import EVERY_SUITE, ROOT, covered, full_tier_files, load, suites_touched

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


def loaded_modules(code: str) -> set[str]:
    """Repository-relative files of the project modules in sys.modules after running `code` in a new Python."""
    probe = (f"import sys, json, importlib\n{code}\nprint(json.dumps(sorted(getattr(v, '__file__', None) or '' "
             "for k, v in sys.modules.items() if k.split('.')[0] in ('roles', 'lab', 'v100kit', 'tests'))))")
    res = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return {f.removeprefix(f"{ROOT}/") for f in json.loads(res.stdout.splitlines()[-1]) if f}


@pytest.mark.parametrize("name", sorted(load()[1]))
def test_the_map_holds_every_project_module_python_loads_for_the_suite(name):
    """The interpreter's own sys.modules after importing the suite's test modules (what grimp reads statically,
    checked against what Python really loads)."""
    suite = load()[1][name]
    modules = [t[:-3].replace("/", ".") for t in suite.tests]
    loaded = loaded_modules(f"[importlib.import_module(m) for m in {modules!r}]")
    assert loaded <= covered(suite).files, sorted(loaded - covered(suite).files)


@pytest.mark.parametrize("name", [n for n, s in load()[1].items() if "v100kit/cli.py" in s.covers])
def test_a_suite_that_runs_the_command_line_covers_every_subcommand_it_loads(name):
    """v100kit/cli.py imports its subcommands by name: the modules Python loads when it builds its parser."""
    loaded = loaded_modules("import v100kit.cli; v100kit.cli.build_parser()")
    assert "v100kit/offline.py" in loaded and "lab/cli.py" in loaded
    assert loaded <= covered(load()[1][name]).files, sorted(loaded - covered(load()[1][name]).files)


def test_a_change_touches_the_suites_that_run_its_code():
    everything = set(load()[1])
    assert set(suites_touched(["roles/ray/decide.py"])) >= {"ray-cluster", "offline", "second-toolkit"}
    # only deploy.py imports it (the fast tests run roles/lmdeploy/deploy.py, which reaches roles/ray/deploy.py)
    assert "fast-tests-isolated" not in suites_touched(["roles/gpu_policy/deploy.py"])
    assert "fast-tests-isolated" in suites_touched(["roles/planner/kv.py"])  # the fast tests run it
    assert "second-toolkit" in suites_touched(["roles/llama_cpp/templates/llama-server@.service.j2"])
    assert "second-toolkit" in suites_touched(["roles/llama_cpp/templates/deleted-since.j2"])  # a deleted template
    assert suites_touched(["tests/lab/test_offline.py"]) == ["offline"]
    assert suites_touched(["tests/lab/test_vllm_releases.py"]) == ["vllm-releases"]
    assert suites_touched(["inventory/lab_offline.py"]) == ["offline"]
    assert set(suites_touched(["lab/proxy.py"])) >= {"ray-cluster", "offline"}  # python -m lab.proxy
    assert "second-toolkit" in suites_touched(["v100kit/plan.py"])  # v100kit plan, run in a subprocess
    assert suites_touched(["files/vllm/vllm-0.8.5.post1-py3.11.txt"]) == [
        "second-toolkit", "vllm-releases", "ray-cluster", "offline", "prompt-logs"]
    assert suites_touched(["files/monitoring/alerts.yml"]) == ["offline", "monitoring"]  # offline: files/**
    assert suites_touched(["tests/data/llama_cpp_fa_h200.json"]) == ["fast-tests-isolated"]
    assert suites_touched(["README.md", "docs/lab.md"]) == []
    for f in EVERY_SUITE:  # a test moved between tiers, the locked environment, pyinfra's configuration
        assert set(suites_touched([f])) == everything, f


def test_the_tool_names_the_touched_suites_and_refuses_a_bad_base():
    res = subprocess.run([sys.executable, str(TOOL), "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert set(res.stdout.split()) <= set(load()[1])
    bad = subprocess.run([sys.executable, str(TOOL), "no-such-revision"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "'no-such-revision' is not a git revision" in bad.stderr


def test_changed_files_sees_renames_deletions_and_unusual_names(tmp_path, monkeypatch):
    """In a git repository of its own: a rename gives both paths, a deletion its path, and a name with a space or
    a non-ASCII letter comes back as written (git's -z, no quoting)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suites_for_change", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True,
                       capture_output=True)

    git("init", "-q")
    (repo / "a.py").write_text("x = 1\n" * 20)
    (repo / "gone.j2").write_text("t\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("mv", "a.py", "b.py")
    (repo / "gone.j2").unlink()
    (repo / "new file ä.txt").write_text("n\n")
    monkeypatch.setattr(tool, "ROOT", repo)
    assert tool.changed_files("HEAD") == ["a.py", "b.py", "gone.j2", "new file ä.txt"]
