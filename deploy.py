"""Turn an NVIDIA V100 box into an LLM inference server, and keep it that way.

    pyinfra -y inventory/lab.py deploy.py        # the bundled lab hosts (make lab does this)
    pyinfra -y inventory/example.py deploy.py    # your own boxes

Settings: roles/settings.py (every key, default and meaning; listed in README.md).
"""

from pyinfra import host

from roles.base.deploy import base
from roles.cuda.deploy import cuda
from roles.engine_registry import ENGINES
from roles.gpu_policy.deploy import gpu_policy
from roles.monitoring.deploy import monitoring
from roles.nvidia_driver.deploy import nvidia_driver
from roles.preflight import preflight
from roles.tuning.deploy import tuning

# 1. Preflight: settings and the whole stack (OS, driver branch, kernel module, CUDA vs sm_70 and vs the driver,
#    the vLLM release vs the host Python, each model vs the GPUs: quantization, dtype, VRAM and KV cache, and the
#    nodes of a Ray cluster against each other)
#    are checked from read-only facts. Any refusal stops the deploy on every host before the first change.
plan = preflight(host)

# 2. Converge, in dependency order. Each role only changes what differs, so a second run changes nothing.
base(plan.settings, plan.platform)                         # apt sources + components, packages, service user
tuning(plan.settings)                                      # sysctl.d, swapfile, THP at boot, open-file limits
nvidia_driver(plan.settings, plan.driver)                  # pinned + held driver, DKMS, nouveau blacklist
gpu_policy(plan.settings, plan.gpu_policy)                 # power limit, clocks, compute and ECC mode at boot
cuda(plan.settings, plan.platform, plan.toolkits)          # CUDA toolkits that can build sm_70
for engine in ENGINES:                                     # each engine (roles/engine_registry.py), in order:
    engine.converge(plan)                                  #   llama.cpp: built for sm_70 + llama-server@NAME units
                                                           #   vLLM: hash-locked venv, the ray-head / ray-worker of
                                                           #   a multi-box cluster (run from that venv), vllm@NAME
monitoring(plan.settings, plan.monitoring)                 # node exporter + GPU exporter and doctor timers
# (a role without configured instances only stops and unconfigures the ones an earlier deploy set up)
