"""base: apt sources with the components NVIDIA's packages need, essential packages, the service user.

decide.py: the refusals from settings and host facts (pure); facts.py: the role's own facts; deploy.py: the
operations and the `base` deploy.
"""
