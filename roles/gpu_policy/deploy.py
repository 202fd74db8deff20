"""gpu_policy deploy: the oneshot unit that applies the policy at every boot, applied now where the cards differ, and
the reboot an ECC change needs (only with gpu_policy_reboot; otherwise the deploy says a reboot is due)."""

from __future__ import annotations

from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from roles.gpu_policy.decide import UNIT, GpuPolicyPlan, wanted
from roles.settings import Settings

TEMPLATES = Path(__file__).parent / "templates"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"


@deploy("GPU policy")
def gpu_policy(settings: Settings, p: GpuPolicyPlan | None) -> None:
    """Converge the policy unit for plan `p` (roles/gpu_policy/decide.py, checked in the preflight). p None: no unit
    (an earlier one is stopped and removed; the cards keep what it set until the next reboot or driver reload), and
    where settings are given but no GPU is visible, a warning that nothing was applied."""
    if p is None:
        if wanted(settings):
            logger.warning(f"[{host.name}] gpu_policy: no GPU visible (nvidia-smi): the policy is not applied and no "
                           "unit is installed, since the cards' limits cannot be checked; deploy again once the "
                           "driver sees the GPUs")
        if host.get_fact(File, path=UNIT_PATH):
            systemd.service(name="GPU policy unit disabled", service=UNIT, running=False, enabled=False)
            removed = files.file(name="GPU policy unit removed", path=UNIT_PATH, present=False)
            systemd.daemon_reload(name="systemd reload", _if=removed.did_change)
            logger.warning(f"[{host.name}] gpu_policy: unit removed; the cards keep the policy it set until the next "
                           "reboot (ECC mode: until changed with nvidia-smi -e)")
        return
    unit = files.template(name="GPU policy unit", src=str(TEMPLATES / "v100kit-gpu-policy.service.j2"),
                          dest=UNIT_PATH, mode="644", summary=p.summary, exec_lines=p.exec_lines)
    systemd.daemon_reload(name="systemd reload", _if=unit.did_change)
    for line in p.differs:
        logger.info(f"[{host.name}] gpu_policy: {line}")
    # started on the first deploy; applied again now where a card differs from the policy or the unit changed
    systemd.service(name="GPU policy unit enabled and applied", service=UNIT, enabled=True, running=True,
                    restarted=bool(p.differs))
    if not p.differs:
        systemd.service(name="GPU policy applied again (unit changed)", service=UNIT, restarted=True,
                        _if=unit.did_change)
    if p.ecc_reboot:
        gpus = ", ".join(map(str, p.ecc_reboot))
        if p.reboot:
            logger.warning(f"[{host.name}] gpu_policy: rebooting: the ECC mode of GPUs {gpus} changes at a reboot")
            server.reboot(name="reboot for the ECC mode", delay=10, reboot_timeout=600)
        else:
            logger.warning(f"[{host.name}] gpu_policy: REBOOT REQUIRED: the ECC mode of GPUs {gpus} is set pending "
                           "and becomes current at the next reboot; reboot, or deploy again with "
                           "gpu_policy_reboot: true")
