"""The settings model composed with roles/lmdeploy's SETTINGS mixin, as roles/settings.py will compose it (tests of
the engine before it is in the registry)."""

from roles.lmdeploy.settings import SETTINGS
from roles.settings import Settings


class ComposedSettings(Settings, SETTINGS):
    """Settings with the lmdeploy_* keys."""


def settings_of(data: dict) -> ComposedSettings:
    """Validated settings with the lmdeploy_* keys."""
    return ComposedSettings(**data)
