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


#: Files every suite depends on: the tier data and the code that reads it, pytest's configuration and markers, the
#: locked environment (pyinfra, testinfra, pytest versions), pyinfra's own configuration file (read by every deploy)
EVERY_SUITE = ("tests/tiers.toml", "tests/tiers.py", "tests/conftest.py", "tests/lab/conftest.py", "pyproject.toml",
               "uv.lock", "config.py")


def _dynamic_imports(module: str) -> list[str]:
    """Project modules `module` loads without an import statement grimp can see: the v100kit command line imports
    each subcommand's module by name (v100kit/cli.py COMMANDS), and the lab harness starts its registry proxy as
    `python -m lab.proxy` (lab/harness.py), and the settings model and the engine registry import each engine
    package's settings and engine module by the names in roles/engine_packages.py."""
    if module in ("roles.settings", "roles.engine_registry"):
        from roles.engine_packages import ENGINE_PACKAGES

        leaf = "settings" if module == "roles.settings" else "engine"
        return [f"roles.{p}.{leaf}" for p in ENGINE_PACKAGES]
    if module == "v100kit.cli":
        from v100kit.cli import COMMANDS

        return [m for m, _ in COMMANDS.values()]
    if module == "lab.harness":
        return ["lab.proxy"]
    return []


@cache
def _graph():
    import grimp  # import-linter's import graph library (a dev dependency): only the change tool needs it

    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


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
    if "roles.engine_registry" in found and ".converge(" in path.read_text():
        # Engine.converge imports each engine's deploy module by the name its declaration holds (deploy.py)
        from roles.engine_registry import ENGINES

        found |= {e.deploy.partition(":")[0] for e in ENGINES}
    return found


def _closure(modules: set[str]) -> set[str]:
    """`modules` and every project module they import, directly, by name, or as a `python -m` subprocess."""
    graph = _graph()
    out: set[str] = set()
    todo = set(modules)
    while todo:
        m = todo.pop()
        while m not in graph.modules and "." in m:  # `from pkg import name` names an attribute, not a module
            m = m.rsplit(".", 1)[0]
        if m in graph.modules and m not in out:
            found = {m} | graph.find_upstream_modules(m)
            out |= found
            todo |= {d for f in found for d in _dynamic_imports(f)} - out
    return out


@dataclass(frozen=True)
class Coverage:
    """What a suite covers: `files` (repository-relative paths of Python files), `data_dirs` (directories whose
    files, present or deleted, are read by a covered module: a module's own package directory and the directories
    under it that are not packages, such as templates/), and `globs` (tests/tiers.toml `covers` patterns)."""

    files: frozenset[str]
    data_dirs: frozenset[str]
    globs: tuple[str, ...]

    def holds(self, path: str) -> bool:
        """Whether a changed file (repository-relative; it may be deleted) is covered."""
        if path in self.files or path in EVERY_SUITE or any(fnmatch.fnmatch(path, g) for g in self.globs):
            return True
        return not path.endswith(".py") and str(Path(path).parent) in self.data_dirs


def _data_dirs(module: str) -> set[str]:
    """The directory a module's files sit in (a package's own directory, or the package of a plain module) and
    the directories below it that are not packages (templates/, data): what the module can read beside itself."""
    p = ROOT / Path(*module.split("."))
    top = p if p.is_dir() else p.parent
    out, todo = set(), [top]
    while todo:
        d = todo.pop()
        out.add(str(d.relative_to(ROOT)))
        todo += [c for c in d.iterdir() if c.is_dir() and c.name != "__pycache__" and not (c / "__init__.py").exists()]
    return out


def covered(suite: Suite) -> Coverage:
    """The suite's Coverage: its test files, every project module they and the .py scripts of `covers` import
    (transitively; a .py glob such as tests/unit/*.py names scripts too), the __init__.py of the packages above
    them, and the data directories of the imported modules (not of the packages above them)."""
    roots, files, globs = set(), set(suite.tests), []
    for t in suite.tests:
        roots.add(module_of(t))
    for c in suite.covers:
        scripts = [str(p.relative_to(ROOT)) for p in ROOT.glob(c)] if c.endswith(".py") else []
        if not scripts:
            globs.append(c)
        for script in scripts:
            files.add(script)
            mod = module_of(script)
            roots |= {mod} if mod else _imports_of_script(ROOT / script)
    modules = _closure({r for r in roots if r})
    parents = {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 1)} - modules
    files |= {file_of(m) for m in modules | parents}
    dirs = {d for m in modules for d in _data_dirs(m)}
    return Coverage(frozenset(files), frozenset(dirs), tuple(globs))


def suites_touched(changed: list[str], path: Path = TIERS) -> list[str]:
    """Names of the full tier's suites that cover any of `changed` (repository-relative paths, deleted ones
    included), in file order. A file of EVERY_SUITE touches every suite."""
    suites = load(path)[1]
    return [s.name for s in suites.values() if (c := covered(s)) and any(c.holds(path) for path in changed)]
