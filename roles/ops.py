"""Operations more than one role uses."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import Link, Sha256File


@operation()
def current_link(link: str, target: str):
    """Point the symlink `link` at `target` atomically (rename of a new symlink), only if it points elsewhere."""
    if (host.get_fact(Link, path=link) or {}).get("link_target") != target:
        yield f"ln -sfn {target} {link}.new && mv -T {link}.new {link}"


@operation()
def verified(path: str, sha256: str):
    """Fail unless `path` on the host has this sha256 (files.put compares sha1 only)."""
    if host.get_fact(Sha256File, path=path) != sha256:
        raise OperationError(f"{path}: sha256 is not {sha256}; nothing was replaced")
    return
    yield  # an operation is a generator
