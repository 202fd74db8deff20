"""The host suite changes nothing: every command it sends to a host passes `check` first.

testinfra's modules (file, package, service, user) and the checks' own `host.run` calls all end in the backend's
`run(command, *args)`; `guard(host)` wraps it, so a command is refused before it leaves this machine unless each
program in it is one that only reads (READ_ONLY below, with the sub-commands that read) and it redirects output
nowhere but /dev/null. A refused command raises NotReadOnly, and the check that sent it errors instead of passing.
"""

from __future__ import annotations

import re
import shlex

#: programs that only read, with the sub-commands allowed (None: any arguments). Sources: each tool's man page.
READ_ONLY: dict[str, frozenset[str] | None] = {
    "cat": None, "test": None, "[": None, "stat": None, "ls": None, "readlink": None, "grep": None, "head": None,
    "id": None, "getent": None, "uname": None, "echo": None, "true": None, "command": None, "which": None,
    "dpkg-query": None, "modinfo": None, "lspci": None, "nvidia-smi": None,  # checked below: queries only
    "nvcc": None, "wc": None, "sort": None,
    "cut": None, "tr": None, "printf": None, "lsb_release": None, "realpath": None, "systemd-detect-virt": None,
    "apt-mark": frozenset({"showhold", "showmanual", "showauto"}),
    "apt-cache": frozenset({"policy", "show", "madison"}),
    "apt-config": frozenset({"dump", "shell"}),
    "dkms": frozenset({"status"}),
    "systemctl": frozenset({"show", "is-enabled", "is-active", "is-failed", "status", "cat", "list-unit-files",
                            "list-units", "--version"}),
    "curl": None,  # checked below: GET only
}
#: options that make curl send data or write a file
CURL_WRITES = re.compile(r"(^|\s)(-d|--data\S*|-F|--form|-X|--request|-T|--upload-file|-o(?!\s*/dev/null)|"
                         r"--output(?!\s*/dev/null)|-O|--remote-name)(\s|=|$)")
#: nvidia-smi options that only read (nvidia-smi(1); -pm, -e, -c, -r, -pl, -ac, -lgc ... change the GPU)
NVIDIA_SMI_READS = ("--query-gpu=", "--query-compute-apps=", "--format=", "-L", "--list-gpus", "-q", "--query",
                    "-i", "--id=", "--help")
#: testinfra's own wrappers around a command (sudo, `sh -c`), skipped to reach the program
WRAPPERS = {"sudo", "env", "LC_ALL=C", "timeout"}


class NotReadOnly(RuntimeError):
    """A check tried to send a command that could change the host."""


def _segments(command: str) -> list[str]:
    return [s.strip() for s in re.split(r"\|\||&&|[|;]", command) if s.strip()]


def check(command: str) -> None:
    """Raise NotReadOnly unless `command` only reads (see the module docstring)."""
    redirects = re.findall(r"\d?>>?\s*(&\d|\S+)", command)
    if any(r not in ("/dev/null", "&1", "&2") for r in redirects):
        raise NotReadOnly(f"redirects output to a file: {command!r}")
    for seg in _segments(command):
        words = shlex.split(seg.replace("2>&1", "").replace("2>/dev/null", "").replace(">/dev/null", ""))
        while words and (words[0] in WRAPPERS or words[0].startswith("-") or "=" in words[0]):
            words = words[1:]
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog not in READ_ONLY:
            raise NotReadOnly(f"{prog!r} is not a read-only program: {command!r}")
        allowed = READ_ONLY[prog]
        verbs = [w for w in words[1:] if not w.startswith("-")] if prog == "systemctl" else words[1:2]
        if allowed is not None and not (verbs and verbs[0] in allowed or prog == "systemctl" and "--version" in words):
            raise NotReadOnly(f"{prog} {' '.join(verbs[:1])} changes or may change the host: {command!r}")
        if prog == "nvidia-smi" and not all(w.startswith(NVIDIA_SMI_READS) or w.isdigit() for w in words[1:]):
            raise NotReadOnly(f"nvidia-smi with an option that may change the GPU: {command!r}")
        if prog == "curl" and CURL_WRITES.search(" ".join(words[1:])):
            raise NotReadOnly(f"curl may send data or write a file: {command!r}")


def guard(host):
    """Wrap `host`'s testinfra backend so that every command passes `check` (returns the host)."""
    backend = host.backend
    if getattr(backend, "_v100kit_read_only", False):
        return host
    run = backend.run

    def read_only_run(command, *args, **kwargs):
        check(command % tuple(shlex.quote(str(a)) for a in args) if args else command)
        return run(command, *args, **kwargs)

    backend.run = read_only_run
    backend._v100kit_read_only = True
    return host
