"""The inference engines v100kit knows, in the order preflight plans them and every command lists them. Each entry
is the one declaration of its package (roles/NAME/engine.py ENGINE; roles/engines.py Engine says what it holds).
The packages are those roles/engine_packages.py names, the one list the settings model reads too: adding an engine
is one name there. docs/engines.md lists what an engine provides."""

from __future__ import annotations

import importlib

from roles.engine_packages import ENGINE_PACKAGES
from roles.engines import Engine

ENGINES: tuple[Engine, ...] = tuple(importlib.import_module(f"roles.{pkg}.engine").ENGINE for pkg in ENGINE_PACKAGES)


class UnknownEngine(ValueError):
    """An engine name, settings key or unit that no registered engine has."""


def by_role(role: str) -> Engine:
    """The engine whose package is roles/`role`. Raises UnknownEngine naming the known engines."""
    for e in ENGINES:
        if e.role == role:
            return e
    raise UnknownEngine(f"no engine {role!r}: the registry (roles/engine_registry.py) knows "
                        f"{', '.join(e.role for e in ENGINES)}")


def by_name(name: str) -> Engine:
    """The engine labelled `name` ('llama.cpp', 'vllm'). Raises UnknownEngine naming the known engines."""
    for e in ENGINES:
        if e.name == name:
            return e
    raise UnknownEngine(f"no engine {name!r}: the registry (roles/engine_registry.py) knows "
                        f"{', '.join(e.name for e in ENGINES)}")


def by_unit(unit: str) -> Engine:
    """The engine whose template `unit` ('vllm@chat') is an instance of. Raises UnknownEngine naming the known
    engines' units."""
    stem = unit.partition("@")[0]
    for e in ENGINES:
        if e.unit == stem and "@" in unit:
            return e
    raise UnknownEngine(f"{unit!r} is no engine's unit: the registry (roles/engine_registry.py) knows "
                        f"{', '.join(e.unit + '@NAME' for e in ENGINES)}")
