"""nvidia_driver: an exact pinned driver with the proprietary kernel module, built by DKMS for every installed
kernel, held against upgrades, nouveau blacklisted (also inside the initramfs), nvidia-persistenced enabled.

decide.py: `plan()` decides everything that can be refused from settings and facts, before any operation (pure);
facts.py: the driver's host facts; versions.py: the version map; deploy.py: `nvidia_driver()` applies the plan.
Reboots are explicit: only with `nvidia_driver_reboot: true`, otherwise the deploy says one is due.
"""
