"""Facts for the ray role. Read-only; each works on a host without a GPU or without Ray."""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

#: Asks the GCS at argv[1] for its alive nodes' addresses (Ray's own ray.nodes(): NodeManagerAddress).
_ALIVE = ("import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR'); "
          "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))")


class RayAliveNodes(FactBase[list[str] | None]):
    """The IPv4 addresses of the nodes the Ray cluster at `gcs_address` (HEAD:PORT) lists as alive, asked with the
    venv's own Ray (`python` of the locked vLLM venv) as the service `user`; None when Ray cannot be asked (no venv,
    no head listening). Takes a few seconds: Ray connects as a driver."""

    def command(self, python: str, gcs_address: str, user: str) -> str:
        return (f"test -x {shlex.quote(python)} || exit 0; cd /tmp && timeout 60 runuser -u {shlex.quote(user)} -- "
                f"env HOME=/tmp {shlex.quote(python)} -c {shlex.quote(_ALIVE)} {shlex.quote(gcs_address)} "
                "2>/dev/null | tail -1 || true")

    def process(self, output: list[str]) -> list[str] | None:
        try:
            nodes = json.loads("".join(output).strip() or "null")
        except ValueError:
            return None
        return nodes if isinstance(nodes, list) else None
