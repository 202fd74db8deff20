"""The monitoring role's operations: the distribution's prometheus-node-exporter on the address the settings name,
its textfile collector fed by two timers (the GPU exporter, the doctor's host-local checks), from a plan decided
beforehand (roles/monitoring/decide.py). With monitoring off it removes what an earlier deploy set up (the package
stays installed, stopped and disabled)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, systemd
from pyinfra.operations.util import any_changed

from roles.monitoring.decide import (DOCTOR_PROM, DOCTOR_UNIT, DROPIN, DROPIN_DIR, EXPECT_FILE, GPU_PROM, GPU_UNIT,
                                     LIB_DIR, NODE_EXPORTER_UNIT, PACKAGE, UNITS, MonitoringPlan)
from roles.settings import Settings

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
#: the GPU exporter script (written beside this module by its own author; installed as it is)
GPU_EXPORTER = HERE / "gpu_exporter.py"
DOCTOR_LOCAL = HERE / "doctor_local.py"
#: the doctor's own judgement of llama-server's residency, imported by doctor_local.py on the box
RESIDENCY = HERE.parent / "llama_cpp" / "residency.py"

#: pyinfra data defaults of the role: the monitoring_* settings' defaults, read from their one declaration
MONITORING_DEFAULTS = {name: f.get_default(call_default_factory=True) for name, f in Settings.model_fields.items()
                       if name.startswith("monitoring_")}


@deploy("Monitoring", data_defaults=MONITORING_DEFAULTS)
def monitoring(settings: Settings, p: MonitoringPlan | None) -> None:
    """Converge the node exporter and the two timers of `p`; with p None (monitoring_enabled false) remove the
    timers, their scripts' configuration and the node exporter's drop-in an earlier deploy wrote."""
    if p is None:
        _remove()
        return
    user = settings.base_service_user
    # the drop-in first: the package starts the service when it is installed, and must already listen where the
    # settings say (Debian's own default is every address)
    files.directory(name="node exporter drop-in directory", path=DROPIN_DIR, mode="755")
    dropin = files.template(name="node exporter address and textfile directory",
                            src=str(TEMPLATES / "prometheus-node-exporter.conf.j2"), dest=DROPIN, mode="644",
                            args=" ".join(p.node_exporter_args), allow=" ".join(p.ip_address_allow))
    systemd.daemon_reload(name="systemd reload (drop-in)", _if=dropin.did_change)
    apt.packages(name="node exporter and python3", packages=[PACKAGE, "python3"], no_recommends=True)
    # the timers write as the service user; the node exporter (user prometheus) reads
    files.directory(name="textfile collector directory", path=p.textfile_dir, user="root", group=user, mode="775")
    files.directory(name="v100kit scripts", path=LIB_DIR, mode="755")
    scripts = [files.put(name=f"{path.name}", src=str(path), dest=f"{LIB_DIR}/{path.name}", mode="644")
               for path in (GPU_EXPORTER, DOCTOR_LOCAL, RESIDENCY)]
    files.directory(name="v100kit configuration", path=str(Path(EXPECT_FILE).parent), mode="755")
    expect = files.put(name="doctor's expectations", src=StringIO(json.dumps(p.expect, indent=1, sort_keys=True) + "\n"),
                       dest=EXPECT_FILE, mode="644")
    common = {"service_user": user, "lib_dir": LIB_DIR, "textfile_dir": p.textfile_dir, "expect_file": EXPECT_FILE}
    per_unit = {GPU_UNIT: {"prom": GPU_PROM, "interval_s": p.gpu_interval_s},
                DOCTOR_UNIT: {"prom": DOCTOR_PROM, "interval_s": p.doctor_interval_s}}
    units = []
    for unit, template in UNITS.items():
        base = unit.rsplit(".", 1)[0]
        units.append(files.template(name=f"{unit}", src=str(TEMPLATES / template), dest=f"/etc/systemd/system/{unit}",
                                    mode="644", service=f"{base}.service", **common, **per_unit[base]))
    systemd.daemon_reload(name="systemd reload (timers)", _if=any_changed(*units))
    systemd.service(name=f"{NODE_EXPORTER_UNIT} restarted (address or arguments changed)", service=NODE_EXPORTER_UNIT,
                    running=None, restarted=True, _if=dropin.did_change)
    systemd.service(name=f"{NODE_EXPORTER_UNIT} enabled and running", service=NODE_EXPORTER_UNIT, enabled=True,
                    running=True)
    for base in (GPU_UNIT, DOCTOR_UNIT):
        # a changed script, unit or expectation is run once now, so the metrics say the new state at once
        # (a oneshot is never "running" after it ran: started here only when something changed, so a second deploy
        # changes nothing)
        systemd.service(name=f"{base}.service run (its script or settings changed)", service=f"{base}.service",
                        running=True, _if=any_changed(expect, *scripts, *units))
        systemd.service(name=f"{base}.timer enabled and running", service=f"{base}.timer", enabled=True, running=True)


def _remove() -> None:
    """Stop and remove what an earlier deploy with monitoring on set up; nothing where it never was."""
    for base in (GPU_UNIT, DOCTOR_UNIT):
        if host.get_fact(File, path=f"/etc/systemd/system/{base}.timer"):
            systemd.service(name=f"{base}.timer stopped and disabled", service=f"{base}.timer", running=False,
                            enabled=False)
    removed = [files.file(name=f"{unit} removed", path=f"/etc/systemd/system/{unit}", present=False)
               for unit in UNITS]
    removed.append(files.file(name="doctor's expectations removed", path=EXPECT_FILE, present=False))
    if host.get_fact(File, path=DROPIN):  # the node exporter was ours: it stops with the setting
        systemd.service(name=f"{NODE_EXPORTER_UNIT} stopped and disabled", service=NODE_EXPORTER_UNIT, running=False,
                        enabled=False)
        removed.append(files.file(name="node exporter drop-in removed", path=DROPIN, present=False))
    systemd.daemon_reload(name="systemd reload (monitoring removed)", _if=any_changed(*removed))
