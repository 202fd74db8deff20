"""Facts for the vllm role. All read-only; each works on a host without a GPU."""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

CONFIG_DIR = "/etc/vllm"


class PythonVersion(FactBase):
    """'3.11' for the Python at `path` ("major.minor"), or None when there is no such executable."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"test -x {q} && {q} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' || true"

    def process(self, output: list[str]) -> str | None:
        line = "".join(output).strip()
        return line or None


class HfModelDir(FactBase):
    """A Hugging Face model directory on the host: {'config': dict (config.json), 'safetensors_bytes': int (sum of
    the *.safetensors file sizes, headers included)}, or None when `path` has no readable config.json."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (f"test -r {q}/config.json || exit 0; echo SIZE $(find {q} -maxdepth 1 -name '*.safetensors' "
                f"-printf '%s\\n' | awk '{{s+=$1}} END {{print s+0}}'); cat {q}/config.json")

    def process(self, output: list[str]) -> dict | None:
        if not output or not output[0].startswith("SIZE "):
            return None
        try:
            config = json.loads("\n".join(output[1:]))
        except json.JSONDecodeError:
            return {"config": None, "safetensors_bytes": int(output[0].split()[1])}
        return {"config": config, "safetensors_bytes": int(output[0].split()[1])}


class InstalledVllmInstances(FactBase):
    """Names of the vLLM instances configured on the host (/etc/vllm/NAME.env)."""

    default = list

    def command(self) -> str:
        return f"ls {CONFIG_DIR}/*.env 2>/dev/null | grep -v '\\.key\\.env$' || true"

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip().rsplit("/", 1)[-1].removesuffix(".env") for line in output if line.strip())
