"""The engine packages (roles/NAME), in the order preflight plans them and every command lists them: the one list
both the settings model (roles/settings.py, each roles.NAME.settings SETTINGS) and the engine registry
(roles/engine_registry.py, each roles.NAME.engine ENGINE) read. Adding an engine is adding its name here.
Imports nothing, so neither reader loops through the other."""

ENGINE_PACKAGES: tuple[str, ...] = ("llama_cpp", "vllm", "lmdeploy")
