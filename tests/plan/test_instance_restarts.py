"""README: a running llama-server@NAME restarts after a change of its API key, its arguments or its model, and not
when nothing changed (docs/promises.md).

Each case first plans a deploy on a bare Debian 13 box, then plans again on a fake host that answers what that first
deploy left there (tests/plan/harness.py converged: the uploaded files with their content, mode and owner, the
`current` link) with the unit running, after changing one setting. The unchanged case is what makes the others able
to fail: a fake host that answers every fact as "absent" restarts on any plan."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from lab.models import write_llama
from tests.plan.harness import DEBIAN_13, converged, plan_uploads_raw

UNIT = "llama-server@m.service"
#: systemd's answers for a unit that runs and is enabled (`systemctl show --property ...`, systemd.unit(5))
RUNNING = {f"--property SubState {UNIT}": [f"Id={UNIT}", "SubState=running"],
           f"--property UnitFileState {UNIT}": [f"Id={UNIT}", "UnitFileState=enabled"]}


MODEL = "/var/lib/llm/models/h64.gguf"


def model(directory: Path, seed: int) -> dict:
    """A GGUF written with the gguf package, always named h64.gguf: another seed changes the weights only, so the
    model's path on the host and the server's arguments stay the same."""
    directory.mkdir(parents=True, exist_ok=True)
    path = write_llama(directory / "h64.gguf", seed=seed, n_embd=256, n_head=4, n_head_kv=2)
    return {"model_source": str(path), "model_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def key(directory: Path, text: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "key").write_text(text + "\n")
    return str(directory / "key")


def data(inst: dict) -> dict:
    return {"llama_cpp_ref": "pypi-0.3.16", "llama_cpp_instances": {"m": inst}}


def systemctl(cmds: list[str]) -> list[str]:
    return [str(c) for c in cmds if str(c).startswith(("systemctl start llama-server@", "systemctl restart llama-",
                                                       "systemctl stop llama-server@"))]


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The settings of the first deploy and the fake host it leaves: (instance settings, fake responses, tmp)."""
    tmp = tmp_path_factory.mktemp("restarts")
    inst = {**model(tmp / "a", seed=0), "port": 8081, "context": 4096,
            "api_key_file": key(tmp / "a", "key-one-0123456789")}
    cmds, uploads = plan_uploads_raw(DEBIAN_13, data(inst), responses=placed(inst))
    assert f"systemctl start {UNIT}" in systemctl(cmds)  # a first deploy starts the instance, no restart
    host = converged(cmds, uploads)
    for path in ("/etc/llama-server/m.env", "/etc/llama-server/m.key.env", "/var/lib/llm/models/h64.gguf",
                 "/etc/systemd/system/llama-server@.service", "/opt/llama.cpp/current"):
        assert any(getattr(k, "pattern", "").startswith(f"test -e {re.escape(path)} ") for k in host), path
    return inst, {**host, **RUNNING}, tmp


def placed(inst: dict) -> dict:
    """The model's sha256 on the host as the `verified` operation reads it: after files.put placed it. pyinfra
    evaluates the operation when it plans too, before the put, and the fake host answers a fact the same either
    time (README's deploy runs with -y, which checks it only when it executes)."""
    return {f"sha256sum {MODEL} 2>": [f"{inst['model_sha256']}  {MODEL}"]}


def again(first, **change) -> list[str]:
    inst, host, _ = first
    new = {**inst, **change}
    cmds, _ = plan_uploads_raw(DEBIAN_13, data(new), responses={**placed(new), **host})
    return systemctl(cmds)


def test_no_restart_when_nothing_changed(first):
    assert again(first) == []


def test_restart_after_an_api_key_change(first):
    assert again(first, api_key_file=key(first[2] / "b", "key-two-9876543210")) == [f"systemctl restart {UNIT}"]


@pytest.mark.parametrize("change", [{"port": 8082}, {"context": 2048}], ids=["port", "context"])
def test_restart_after_an_argument_change(first, change):
    """--port and -c are llama-server's documented options (tools/server/README.md of llama.cpp)."""
    assert again(first, **change) == [f"systemctl restart {UNIT}"]


def test_restart_after_a_model_change(first):
    """The same file name with other weights: only the model's content differs, not the arguments."""
    assert again(first, **model(first[2] / "c", seed=1)) == [f"systemctl restart {UNIT}"]


def test_a_first_plan_checks_a_model_not_uploaded_yet_on_the_host_instead_of_failing(tmp_path):
    # README: `pyinfra ... --dry` plans without changing anything. Planned before the upload runs, the model is not
    # on the host yet (no sha256sum answer): the plan must hold the host-side check, not raise "sha256 is not".
    inst = {**model(tmp_path, seed=0), "port": 8081, "context": 4096}
    cmds, _ = plan_uploads_raw(DEBIAN_13, data(inst))
    check = [str(c) for c in cmds if "sha256sum --check" in str(c) and MODEL in str(c)]
    assert check == [f"echo '{inst['model_sha256']}  {MODEL}' | sha256sum --check --status || "
                     f"{{ echo '{MODEL}: sha256 is not {inst['model_sha256']}; nothing was replaced' >&2; exit 1; }}"]
    # and once the host has it, no check is planned: a repeat deploy changes nothing
    cmds, _ = plan_uploads_raw(DEBIAN_13, data(inst), responses=placed(inst))
    assert not [c for c in cmds if "sha256sum --check" in str(c)]
