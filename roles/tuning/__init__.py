"""tuning: kernel settings (sysctl.d), a swapfile in fstab, the transparent hugepage mode at every boot, and the
service user's open-file limit.

Where the host refuses a live change (a container's read-only /proc/sys or /sys, swapon not permitted), the
persistent configuration is still written, the live step is skipped and the deploy says so and why: it never
claims a value that is not in effect.

decide.py: refusals and sizes from settings and facts (pure); facts.py: swap and free-space facts; deploy.py: the
operations and the `tuning` deploy.
"""
