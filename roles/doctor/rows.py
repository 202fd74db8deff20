"""The doctor's row: one check on one host, and the rows every engine with a venv shares. Pure (no host is read
here): roles/doctor/checks.py and each engine's doctor hook (roles/NAME/engine.py, Engine.doctor) build their rows
with it."""

from __future__ import annotations

from dataclasses import dataclass

NO_GPU = "no GPU visible (nvidia-smi)"


@dataclass(frozen=True)
class Row:
    """One check on one host: state is 'ok', 'broken' or 'skipped'."""

    check: str
    state: str
    evidence: str
    fix: str = ""


def ok(check: str, evidence: str) -> Row:
    """A passed check with what it saw."""
    return Row(check, "ok", evidence)


def broken(check: str, evidence: str, fix: str) -> Row:
    """A failed check with what it saw and how to fix it."""
    return Row(check, "broken", evidence, fix)


def venv_in_use(label: str, venv: str, current: str | None, stamped: bool) -> list[Row]:
    """One row: the engine's current link (`current`: its target, None when absent) points at the planned `venv`,
    which was installed and checked (`stamped`: its stamp file is there). `label`: 'vLLM', 'LMDeploy'."""
    check = f"{label} venv in use"
    if current == venv and stamped:
        return [ok(check, f"{current} (checked at install)")]
    return [broken(check, f"current -> {current}, settings say {venv}{'' if stamped else ' (not installed and checked)'}",
                   "run deploy.py")]


def venv_evidence(host, current: str, venv: str, stamp: str) -> dict:
    """What venv_in_use reads on `host` (a pyinfra Host): {'current': the target of the link `current` (None when it
    is absent), 'stamped': whether `venv`/`stamp` exists}. Read-only (pyinfra's Link and File facts)."""
    from pyinfra.facts.files import File, Link

    return {"current": (host.get_fact(Link, path=current) or {}).get("link_target"),
            "stamped": bool(host.get_fact(File, path=f"{venv}/{stamp}"))}
