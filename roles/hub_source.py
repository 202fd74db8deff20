"""The form of a Hugging Face hub model source, `hf://ORG/REPO@COMMIT[/FILE]` (roles/hub.py fetches it).

Pure: the settings check a source's form with it while they are validated, without the hub client.
"""

from __future__ import annotations

import re

#: hf://ORG/REPO@COMMIT[/PATH]: the hub's repository id rules (letters, digits, - _ .), a full commit hash
HUB_SOURCE = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)"
                        r"@(?P<revision>[^/\s]+)(?:/(?P<path>\S+))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def is_hub_source(value: str | None) -> bool:
    return bool(value) and value.startswith("hf://")


def source_problem(value: str, needs_file: bool) -> str | None:
    """None when `value` is a usable hf:// source; else why not (for a settings problem). `needs_file`: llama.cpp
    takes one .gguf file of the repository, vLLM the whole snapshot (no file)."""
    m = HUB_SOURCE.match(value)
    if not m:
        return "not hf://ORG/REPO@COMMIT" + ("/FILE.gguf" if needs_file else "")
    if not COMMIT.match(m["revision"]) and COMMIT.match(m["revision"].lower()):  # the hub's ids are lower case
        return (f"revision {m['revision']!r} is a commit hash in upper case: the hub names commits in lower case; "
                f"write it as {m['revision'].lower()!r}")
    if not COMMIT.match(m["revision"]):
        return (f"revision {m['revision']!r} is not a commit hash (40 lower-case hex digits): a branch or tag moves, and the "
                "next deploy would serve other weights")
    if needs_file and not (m["path"] or "").endswith(".gguf"):
        return "names no .gguf file of the repository (hf://ORG/REPO@COMMIT/FILE.gguf)"
    if not needs_file and m["path"]:
        return "vLLM takes the repository's snapshot: leave out the file path"
    return None
