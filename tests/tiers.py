"""The test tiers of tests/tiers.toml: which test files each suite of the full tier (make test-all) holds, and
which project files each suite covers (tools/suites_for_change.py)."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = ROOT / "tests" / "tiers.toml"
#: the project's Python packages: the import graph is read over these
PACKAGES = ("roles", "lab", "v100kit", "tests")


@dataclass(frozen=True)
class Suite:
    """A suite of the full tier: its name, its test files and `covers` (globs relative to the repository root:
    scripts it runs in a subprocess and data it reads), and why it is not in CI's tier."""

    name: str
    tests: tuple[str, ...]
    covers: tuple[str, ...]
    why: str


def load(path: Path = TIERS) -> tuple[dict, dict[str, Suite]]:
    """(budget, suites by name) of tests/tiers.toml. Raises ValueError naming the suite and the key for a suite
    without tests or a test file that does not exist."""
    data = tomllib.loads(path.read_text())
    suites = {}
    for name, s in data.get("suite", {}).items():
        tests = tuple(s.get("tests", ()))
        if not tests:
            raise ValueError(f"{path}: suite.{name}.tests is empty: list the test files the suite runs")
        for t in tests:
            if not (ROOT / t).is_file():
                raise ValueError(f"{path}: suite.{name}.tests names {t!r}, which is not a file of the repository")
        suites[name] = Suite(name, tests, tuple(s.get("covers", ())), " ".join(s.get("why", "").split()))
    return data.get("budget", {}), suites


def full_tier_files(path: Path = TIERS) -> dict[str, str]:
    """{test file relative to the root: suite name} for every test file of the full tier."""
    return {t: s.name for s in load(path)[1].values() for t in s.tests}


@cache
def _graph():
    import grimp  # import-linter's import graph library (a dev dependency): only the change tool needs it

    return grimp.build_graph(*PACKAGES, include_external_packages=False)


def module_of(path: str) -> str | None:
    """The dotted module name of a repository-relative .py path inside one of PACKAGES, else None."""
    p = Path(path)
    if p.suffix != ".py" or p.parts[0] not in PACKAGES:
        return None
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def file_of(module: str) -> str:
    """The repository-relative path of a project module (a package's __init__.py)."""
    p = Path(*module.split("."))
    return str(p / "__init__.py") if (ROOT / p).is_dir() else str(p.with_suffix(".py"))


def _imports_of_script(path: Path) -> set[str]:
    """Project modules a script outside the packages (deploy.py, an inventory) imports directly."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        found |= {n for n in names if n.split(".")[0] in PACKAGES}
    return found


def _closure(modules: set[str]) -> set[str]:
    """`modules` and every project module they import, directly or not (with each package above them)."""
    graph = _graph()
    out = set()
    for m in modules:
        while m not in graph.modules and "." in m:  # `from pkg import name` names an attribute, not a module
            m = m.rsplit(".", 1)[0]
        if m in graph.modules:
            out |= {m} | graph.find_upstream_modules(m)
    parents = {".".join(m.split(".")[:i]) for m in out for i in range(1, m.count(".") + 1)}
    return out | parents


def covered_files(suite: Suite) -> tuple[set[str], tuple[str, ...]]:
    """(files, globs) a suite covers: files are repository-relative paths of its test files, every project module
    they and the .py scripts of `covers` import (transitively), and the non-Python files beside those modules
    (templates); globs are the other `covers` entries, matched with fnmatch."""
    roots, files, globs = set(), set(suite.tests), []
    for t in suite.tests:
        roots.add(module_of(t))
    for c in suite.covers:
        if c.endswith(".py") and (ROOT / c).is_file():
            files.add(c)
            mod = module_of(c)
            roots |= {mod} if mod else _imports_of_script(ROOT / c)
        else:
            globs.append(c)
    modules = _closure({r for r in roots if r})
    files |= {file_of(m) for m in modules}
    for m in modules:  # a module's templates and data sit in its package directory
        d = ROOT / Path(*m.split("."))
        if d.is_dir():
            files |= {str(f.relative_to(ROOT)) for f in d.rglob("*")
                      if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts}
    return files, tuple(globs)


def suites_touched(changed: list[str], path: Path = TIERS) -> list[str]:
    """Names of the full tier's suites that cover any of `changed` (repository-relative paths), in file order.
    tests/tiers.toml itself touches every suite (a test moved between tiers)."""
    suites = load(path)[1]
    out = []
    for s in suites.values():
        files, globs = covered_files(s)
        if any(c == str(path.relative_to(ROOT)) or c in files or any(fnmatch.fnmatch(c, g) for g in globs)
               for c in changed):
            out.append(s.name)
    return out
