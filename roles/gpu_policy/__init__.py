"""gpu_policy: the GPUs' power limit, application clocks, compute mode and ECC mode, as settings (gpu_policy_*),
checked against what each card allows before any change (decide.py, from the GpuPolicyCards fact) and applied at
every boot by the oneshot unit v100kit-gpu-policy.service (deploy.py). All settings None: the cards are left as they
are and no unit is installed."""
