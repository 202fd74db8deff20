"""The inference engines v100kit knows, in the order preflight plans them and every command lists them. Each entry
is the one declaration of its package (roles/NAME/engine.py ENGINE; roles/engines.py Engine says what it holds).
The packages are those roles/engine_packages.py names, the one list the settings model reads too: adding an engine
is one name there. docs/engines.md lists what an engine provides."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from roles.engine_packages import ENGINE_PACKAGES
from roles.engines import Engine

ENGINES: tuple[Engine, ...] = tuple(importlib.import_module(f"roles.{pkg}.engine").ENGINE for pkg in ENGINE_PACKAGES)


class UnknownEngine(ValueError):
    """An engine name, settings key or unit that no registered engine has."""


def _one(matches: Callable[[Engine], bool], missing: str, known: Callable[[Engine], str]) -> Engine:
    """The first registered engine that `matches`; else UnknownEngine: `missing`, then the registry's engines
    as `known` names each."""
    for e in ENGINES:
        if matches(e):
            return e
    raise UnknownEngine(f"{missing}: the registry (roles/engine_registry.py) knows "
                        f"{', '.join(known(e) for e in ENGINES)}")


def by_role(role: str) -> Engine:
    """The engine whose package is roles/`role`. Raises UnknownEngine naming the known engines."""
    return _one(lambda e: e.role == role, f"no engine {role!r}", lambda e: e.role)


def by_name(name: str) -> Engine:
    """The engine labelled `name` ('llama.cpp', 'vllm'). Raises UnknownEngine naming the known engines."""
    return _one(lambda e: e.name == name, f"no engine {name!r}", lambda e: e.name)


def by_unit(unit: str) -> Engine:
    """The engine whose template `unit` ('vllm@chat') is an instance of. Raises UnknownEngine naming the known
    engines' units."""
    stem = unit.partition("@")[0]
    return _one(lambda e: e.unit == stem and "@" in unit, f"{unit!r} is no engine's unit",
                lambda e: e.unit + "@NAME")
