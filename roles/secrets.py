"""Secrets on hosts (API keys): written without ever being shown, in a 0600 root-owned file."""

from __future__ import annotations

import hashlib
from io import StringIO

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.files import Sha256File

STAGING = "/root/.v100kit-secrets"  # root-only: the upload never lands where others can read it


@operation()
def secret_file(dest: str, content: str):
    """`dest` holds exactly `content`, mode 0600, owned by root. Compared by sha256, so the content is never
    printed (not even with pyinfra --diff) and never passed on a command line; uploaded into a 0700 staging
    directory, restricted, then renamed into place."""
    if host.get_fact(Sha256File, path=dest) == hashlib.sha256(content.encode()).hexdigest():
        return
    staged = f"{STAGING}/{hashlib.sha256(dest.encode()).hexdigest()[:16]}"
    yield f"install -d -m 700 -o root -g root {STAGING}"
    yield FileUploadCommand(StringIO(content), staged, remote_temp_filename=f"{staged}.part")
    yield f"chown root:root {staged} && chmod 600 {staged} && mv -f {staged} {dest}"
