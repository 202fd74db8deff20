"""Secrets on hosts (API keys): read and checked on the control machine. Pure: the operation that writes one
into a 0600 root-owned file without ever showing it is roles.ops.secret_file."""

from __future__ import annotations

import re
from pathlib import Path

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
