"""v100kit: provision NVIDIA V100 (Volta, sm_70) boxes into LLM inference servers with pyinfra.

The console script `v100kit` (v100kit.cli) runs the read-only commands over an inventory (plan, doctor) and the
bundled lab (lab); deploy.py and repair.py are run by pyinfra itself.
"""

#: The version when the package is not installed (`v100kit --version` reads the installed one first); keep it
#: pyproject.toml's.
__version__ = "0.1.0"
