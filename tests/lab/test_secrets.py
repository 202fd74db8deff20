"""API keys on a real lab host when pyinfra logs in as an unprivileged user and runs everything through sudo (the
README's inventory): the key file still lands 0600 root, through a staging directory only that user can read, and
never appears in pyinfra's output."""

from __future__ import annotations

import secrets

import pytest

from lab.data import VLLM_HOSTS, vllm_instance
from lab.harness import HOSTS
from lab.provision import deploy
from tests.lab.test_deploy import data_args

SPEC = next(s for s in HOSTS if s.name == VLLM_HOSTS[0])
ADMIN = "v100admin"


@pytest.mark.disruptive
def test_api_key_installed_by_a_sudo_user(provisioned, tmp_path):
    lab = provisioned.lab

    def sh(cmd: str) -> str:
        rc, out = lab.run(SPEC, cmd)
        assert rc == 0, f"{cmd}: {out[-2000:]}"
        return out

    sh(f"id {ADMIN} >/dev/null 2>&1 || useradd -m -s /bin/bash {ADMIN}; "
       f"install -d -m 700 -o {ADMIN} -g {ADMIN} /home/{ADMIN}/.ssh && "
       f"install -m 600 -o {ADMIN} -g {ADMIN} /root/.ssh/authorized_keys /home/{ADMIN}/.ssh/authorized_keys && "
       f"echo '{ADMIN} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{ADMIN} && chmod 440 /etc/sudoers.d/{ADMIN}")
    key = f"sudo-{secrets.token_hex(16)}"
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    try:
        run = deploy("secrets-via-sudo", [*data_args({"ssh_user": ADMIN, "_sudo": True,
                                                      "vllm_instances": {"tiny": {**vllm_instance(),
                                                                                  "api_key_file": str(key_file)}}}),
                                          "--limit", SPEC.name])
        assert run.rc == 0, run.stderr[-3000:]
        assert any("tiny: API key (0600)" in op for op in run.changed_ops.get(SPEC.name, [])), run.changed_ops
        assert sh("stat -c '%U %a' /etc/vllm/tiny.key.env").split() == ["root", "600"]
        assert sh("cat /etc/vllm/tiny.key.env").strip() == f"VLLM_API_KEY={key}"
        assert sh("test -e /run/v100kit-secrets && echo left || echo gone").strip() == "gone"
        assert key not in run.stderr
    finally:
        back = deploy("secrets-via-sudo-back", ["--limit", SPEC.name])  # the lab's own key again, as root
        sh(f"rm -f /etc/sudoers.d/{ADMIN}; userdel -r {ADMIN} 2>/dev/null || true")
    assert back.rc == 0 and sh("cat /etc/vllm/tiny.key.env").strip() != f"VLLM_API_KEY={key}"
