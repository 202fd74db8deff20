"""llama_cpp: llama.cpp built for sm_70 against a configured CUDA toolkit, installed in a versioned prefix, and
one systemd llama-server@NAME per configured model.

The install prefix is named by source ref, architectures, CUDA version and a hash of the build configuration
(/opt/llama.cpp/<ref>-sm70-cuda12.4-<hash>); /opt/llama.cpp/current moves only after a new build passed its
smoke check, and the previous prefix stays for rollback (set the old ref back: no rebuild, the link moves back).
A checksum mismatch or a failing build stops before the link moves, so the running service is untouched.

decide.py: the plan from settings and facts (pure); deploy.py: the @deploy and its operations; versions.py: the
pinned source and the architectures each toolkit builds.
"""
