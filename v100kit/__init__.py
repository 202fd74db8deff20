"""v100kit: provision NVIDIA V100 (Volta, sm_70) boxes into LLM inference servers with pyinfra.

The console script `v100kit` (v100kit.cli) runs the read-only commands over an inventory (plan, doctor) and the
bundled lab (lab); deploy.py and repair.py are run by pyinfra itself.
"""
