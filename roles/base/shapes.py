"""The shape of the base role's apt sources fact (roles/base/facts.py), importable without pyinfra."""

from __future__ import annotations

from typing import NamedTuple


class SourceEntry(NamedTuple):
    """One enabled apt source entry: the file it is in, its URI and suite."""

    file: str
    uri: str
    suite: str
