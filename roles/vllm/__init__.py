"""vllm: a hash-locked vLLM virtualenv known to run on Volta, and one systemd vllm@NAME per configured model.

The venv lives at /opt/vllm/<version>-py<python>-<lock hash> and is installed by a pinned uv from the release's
lock file (files/vllm/, tools/lock_vllm.py): hashes required, wheels only, no dependency resolution on the host.
It is stamped only after it passed its checks (vLLM version, `uv pip check`, sm_70 in torch), and
/opt/vllm/current moves only then; a failed or tampered install removes its own half-made venv and leaves the
previous venv, the link and the running services untouched. Older venvs stay (roll back by setting the version
back: no reinstall).

decide.py: the plan from settings and facts (pure); deploy.py: the @deploy and its operations; facts.py: the
host's Python and model directories; versions.py: the release table; check_venv.py: run inside a venv on the host.
"""
