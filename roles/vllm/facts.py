"""Facts for the vllm role. All read-only; each works on a host without a GPU."""

from __future__ import annotations

import json
import shlex

from typing import Any, TypedDict

from pyinfra.api import FactBase


class HfModelDirInfo(TypedDict):
    """What HfModelDir reads: the parsed config.json (None when it is not JSON) and the weight bytes."""

    config: dict[str, Any] | None
    safetensors_bytes: int


class PythonVersion(FactBase[str | None]):
    """'3.11' for the Python at `path` ("major.minor"), or None when there is no such executable."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"test -x {q} && {q} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' || true"

    def process(self, output: list[str]) -> str | None:
        line = "".join(output).strip()
        return line or None


class HfModelDir(FactBase[HfModelDirInfo | None]):
    """A Hugging Face model directory on the host: {'config': parsed config.json (None if not JSON),
    'safetensors_bytes': int}, or None when `path` has no readable config.json.

    The bytes are the sizes of the weight files vLLM loads, as planner.read_hf picks them (those named by
    model.safetensors.index.json, else every *.safetensors except Mistral-style consolidated* duplicates),
    following symlinks (a Hugging Face cache snapshot is all links). Headers count too: a few KiB at most."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (f"test -r {q}/config.json || exit 0; echo '#files'; "
                f"find -L {q} -maxdepth 1 -name '*.safetensors' -printf '%s %f\\n'; "
                f"echo '#index'; cat {q}/model.safetensors.index.json 2>/dev/null; echo; "
                f"echo '#config'; cat {q}/config.json")

    def process(self, output: list[str]) -> HfModelDirInfo | None:
        sections: dict[str, list[str]] = {}
        current = None
        for line in output:
            if line in ("#files", "#index", "#config"):
                current = sections.setdefault(line, [])
            elif current is not None:
                current.append(line)
        if "#config" not in sections:
            return None
        sizes = dict(reversed(line.split(" ", 1)) for line in sections.get("#files", []) if " " in line)
        try:
            wanted = set(json.loads("\n".join(sections.get("#index", [])))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            sharded = [n for n in sizes if not n.startswith("consolidated")]
            wanted = set(sharded or sizes)
        try:
            config = json.loads("\n".join(sections["#config"]))
        except ValueError:
            config = None
        return {"config": config, "safetensors_bytes": sum(int(sizes[n]) for n in wanted if n in sizes)}
