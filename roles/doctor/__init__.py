"""doctor: read-only diagnosis of a provisioned box against its pinned state, one row per check.

    .venv/bin/v100kit doctor inventory/lab.py [--json] [--limit HOST]

Each check gives a state (ok, broken, skipped), the evidence it saw and the fix. The exit status is 1 when any
check is broken. Nothing on a host is changed. `repair.py` converges a broken host back to the pinned state.

gather.py reads the facts into one DoctorFacts; checks.py judges them (pure: as_dict, one function per check);
rows.py: the Row (ok, broken) and the venv row engines share; each registered engine's own rows and what they read
are its Engine.doctor and Engine.evidence (roles/NAME/engine.py); facts.py: the doctor's own facts; repair.py: the
repair operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyinfra.api.host import Host

    from roles.doctor.checks import Row
    from roles.preflight import HostPlan


def diagnose(host: Host, plan: HostPlan) -> list[Row]:
    """All checks for one host (facts read now; nothing changed): gather.gather, then checks.diagnose. Imported
    here on first use so that importing roles.doctor.checks stays free of pyinfra's facts and the roles."""
    from roles.doctor.checks import diagnose as judge
    from roles.doctor.gather import gather

    return judge(gather(host, plan), plan)
