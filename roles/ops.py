"""Operations more than one role uses."""

from __future__ import annotations

import hashlib
from io import StringIO

from pyinfra import host
from pyinfra.api import FactBase, operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.files import Link, Sha256File
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed


#: curl arguments for every download from the network: retry transient failures (timeouts, HTTP 408, 429, 5xx;
#: curl's --retry) five times, 3 s apart, instead of failing the deploy on one 503 from a registry or its proxy.
CURL_RETRY = {"--retry": "5", "--retry-delay": "3"}


@operation()
def current_link(link: str, target: str):
    """Point the symlink `link` at `target` atomically (rename of a new symlink), only if it points elsewhere."""
    if (host.get_fact(Link, path=link) or {}).get("link_target") != target:
        yield f"ln -sfn {target} {link}.new && mv -T {link}.new {link}"


@operation()
def verified(path: str, sha256: str):
    """Fail unless `path` on the host has this sha256 (files.put compares sha1 only). No change where the host
    already has it; otherwise the check runs on the host when the operation executes, after the upload before it:
    `pyinfra --dry` (and any plan made before the earlier operations ran) then shows the check instead of failing
    on a file not uploaded yet. A mismatch fails the operation with the path and the wanted sha256."""
    if host.get_fact(Sha256File, path=path) == sha256:
        return
    yield (f"echo '{sha256}  {path}' | sha256sum --check --status || "
           f"{{ echo '{path}: sha256 is not {sha256}; nothing was replaced' >&2; exit 1; }}")


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


class ConfiguredInstances(FactBase[list[str]]):
    """Names of the service instances configured on the host: CONFIG_DIR/NAME.env (NAME.key.env excluded)."""

    default = list

    def command(self, config_dir: str) -> str:
        return f"ls {config_dir}/*.env 2>/dev/null | grep -v '\\.key\\.env$' || true"

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip().rsplit("/", 1)[-1].removesuffix(".env") for line in output if line.strip())


def instance_config(name: str, config_dir: str, env: str, key_var: str, api_key: str | None) -> list:
    """Write an instance's EnvironmentFile (`env`, 0644) and its API key file (`key_var`=key, 0600, root) or remove
    the key file; returns the operations, for restarts on change."""
    key_file = f"{config_dir}/{name}.key.env"
    return [
        files.put(name=f"{name}: arguments", src=StringIO(env), dest=f"{config_dir}/{name}.env", mode="644"),
        secret_file(name=f"{name}: API key (0600)", dest=key_file, content=f"{key_var}={api_key}\n") if api_key
        else files.file(name=f"{name}: no API key", path=key_file, present=False),
    ]


def restart_then_run(service: str, changed: list, what: str) -> list:
    """Restart `service` if it was running and any of `changed` changed, then make sure it is enabled and running:
    a first start is not also a restart. Returns both operations (either changed: the service was (re)started)."""
    return [
        systemd.service(name=f"{service} restarted ({what} changed)", service=service, running=None, restarted=True,
                        _if=any_changed(*changed)),
        systemd.service(name=f"{service} enabled and running", service=service, enabled=True, running=True),
    ]


def remove_instances(unit: str, config_dir: str, kept: set[str]) -> None:
    """Stop, disable and unconfigure the instances of `unit`@ configured under `config_dir` but not in `kept`
    (their models, builds and venvs stay)."""
    for name in sorted(set(host.get_fact(ConfiguredInstances, config_dir=config_dir)) - kept):
        systemd.service(name=f"{unit}@{name} removed", service=f"{unit}@{name}", running=False, enabled=False)
        for path in (f"{config_dir}/{name}.env", f"{config_dir}/{name}.key.env"):
            files.file(name=f"{path} removed", path=path, present=False)
