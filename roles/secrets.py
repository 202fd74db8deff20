"""Secrets on hosts (API keys): read on the control machine, written without ever being shown, in a 0600
root-owned file."""

from __future__ import annotations

import hashlib
import re
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.files import Sha256File

#: Characters an API key may use: they pass systemd's EnvironmentFile parser unchanged (no quotes, backslashes,
#: spaces or '$').
API_KEY_RE = re.compile(r"[A-Za-z0-9._~+/=:-]{8,512}")


def read_api_key(setting: str, path: str | None) -> tuple[str | None, list[str]]:
    """The API key in the control-machine file `path` (one line), or None without a path: (key, problems).
    Never raises: an unreadable, binary, empty or multi-line file, or a key with characters systemd would
    mangle, is a problem naming `setting` (the file's content is never quoted)."""
    from roles.settings import problem

    if not path:
        return None, []
    try:
        key = Path(path).expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        return None, [problem(setting, path, f"cannot be read as text ({type(e).__name__})",
                              "write the key alone into a file readable by you")]
    if not API_KEY_RE.fullmatch(key):
        return None, [problem(setting, path, "must hold one line of 8-512 characters from A-Z a-z 0-9 . _ ~ + / = : -",
                              "generate one, e.g. `openssl rand -hex 32 > FILE`")]
    return key, []


#: Staging directory on tmpfs: it belongs to the SSH user (who uploads over SFTP, also when pyinfra runs
#: commands with sudo) and is 0700, so the key never lands where others can read it, nor on disk before its place.
STAGING = "/run/v100kit-secrets"


@operation()
def secret_file(dest: str, content: str):
    """`dest` holds exactly `content`, mode 0600, owned by root. Compared by sha256, so the content is never
    printed (not even with pyinfra --diff) and never passed on a command line; uploaded into a 0700 staging
    directory of the SSH user, restricted, then renamed into place."""
    if host.get_fact(Sha256File, path=dest) == hashlib.sha256(content.encode()).hexdigest():
        return
    staged = f"{STAGING}/{hashlib.sha256(dest.encode()).hexdigest()[:16]}"
    # under sudo, SUDO_USER is the SSH login user, who uploads; without sudo the login user is root
    yield f"rm -rf {STAGING} && install -d -m 700 -o \"${{SUDO_USER:-root}}\" {STAGING}"
    yield FileUploadCommand(StringIO(content), staged, remote_temp_filename=f"{staged}.part")
    yield f"chown root:root {staged} && chmod 600 {staged} && mv -f {staged} {dest} && rm -rf {STAGING}"
