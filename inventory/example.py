"""Example inventory for real V100 boxes: copy, rename the hosts, and run
    .venv/bin/pyinfra -y inventory/example.py deploy.py
Group names are OS releases so that group_data/<group>.py can hold per-release settings."""

ubuntu2204 = [
    ("gpu-01.lab.example", {"ssh_user": "admin", "_sudo": True, "tuning_swap_size_gib": 32}),
    ("gpu-02.lab.example", {"ssh_user": "admin", "_sudo": True}),
]
