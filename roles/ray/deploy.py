"""The ray role's operations: /etc/ray/ray.env and one systemd unit per node (ray-head on the head, ray-worker on
the others) running `ray start --block` from the locked vLLM venv, for a plan decided beforehand (roles/ray/decide.py)."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files, systemd

from pyinfra.operations.util import any_changed

from roles.ops import restart_then_run
from roles.ray.decide import CONFIG_DIR, ENV_FILE, UNITS, RayPlan
from roles.settings import Settings
from roles.vllm.decide import CURRENT

TEMPLATES = Path(__file__).parent / "templates"


@deploy("Ray")
def ray(settings: Settings, p: RayPlan | None, venv=None) -> None:
    """Converge this node's Ray unit for plan `p` (restarted when its unit, its environment or `venv`, the vLLM
    role's /opt/vllm/current operation, changed); with p None (no cluster) stop and remove the units and the
    environment an earlier deploy set up. The venv stays (the vllm role owns it)."""
    unused = [u for u in UNITS if p is None or u != p.unit]
    removed = []
    for unit in unused:  # a node that left the cluster, or changed role
        path = f"/etc/systemd/system/{unit}.service"
        if host.get_fact(File, path=path):
            systemd.service(name=f"{unit} stopped and disabled", service=unit, running=False, enabled=False)
            removed.append(files.file(name=f"{unit} unit removed", path=path, present=False))
    if p is None:
        files.file(name="Ray environment removed", path=ENV_FILE, present=False)
        systemd.daemon_reload(name="systemd reload", _if=any_changed(*removed))
        return
    files.directory(name="Ray configuration", path=CONFIG_DIR, mode="755")
    env = files.put(name="Ray environment", src=StringIO("".join(f"{k}={v}\n" for k, v in p.environment().items())),
                    dest=ENV_FILE, mode="644")
    unit = files.template(name=f"{p.unit} unit", src=str(TEMPLATES / "ray.service.j2"),
                          dest=f"/etc/systemd/system/{p.unit}.service", mode="644", role=p.role, cluster=p.cluster,
                          service_user=settings.base_service_user, home=settings.base_service_home, current=CURRENT,
                          nofile=settings.tuning_nofile_limit)
    systemd.daemon_reload(name="systemd reload", _if=any_changed(unit, *removed))
    restart_then_run(p.unit, [unit, env] + ([venv] if venv is not None else []), "unit, cluster or venv")
