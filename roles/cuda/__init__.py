"""cuda: one or more CUDA toolkits side by side, from the distribution (Debian's nvidia-cuda-toolkit) or from
NVIDIA's repository (cuda-toolkit-X-Y under /usr/local/cuda-X.Y, /usr/local/cuda at the default one).

decide.py: `plan()` refuses, before any change, a toolkit that cannot build sm_70 (CUDA 13+) and a toolkit whose
minimum driver is newer than the pinned driver, unless minor-version compatibility is explicitly allowed (pure);
versions.py: the toolkit map; deploy.py: the operations and the `cuda` deploy.
"""
