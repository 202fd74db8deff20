"""Settings for every host. Defaults live in roles/settings.py (and README.md); set only what differs here,
in group_data/<group>.py, or in the inventory's host data. Examples:

    tuning_swap_size_gib = 16
    cuda_versions = ["12.4", "11.7"]      # with cuda_source = "nvidia"
"""
