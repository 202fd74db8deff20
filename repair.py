"""Bring a broken box back to its pinned state. Run it before deploy.py, in one pyinfra run:

    pyinfra -y INVENTORY repair.py deploy.py                                  # containers, or no module change
    pyinfra -y INVENTORY repair.py deploy.py --data nvidia_driver_reboot=true # reboot if the module must change

repair.py removes what the roles cannot converge on their own (half-installed packages, a runfile driver, other
driver branches); deploy.py then reinstalls, re-holds and re-pins the driver, rebuilds DKMS for every installed
kernel, restores the nouveau blacklist in every initramfs and re-enables nvidia-persistenced. Models, venvs and
llama.cpp builds are never touched. `v100kit doctor INVENTORY` says what is broken, before and after.
"""

from pyinfra import host

from roles.doctor.repair import repair
from roles.preflight import preflight

plan = preflight(host)  # the same refusals as deploy.py, before any change
repair(plan.driver.pin)
