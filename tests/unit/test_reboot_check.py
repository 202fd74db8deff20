"""The check after a driver reboot: the deploy resumes only on a host that really booted again."""

import pytest
from pyinfra.api.exceptions import OperationError

from roles.nvidia_driver.deploy import _booted_again


class Host:
    """Answers every fact with one boot_id, as a host does right after reconnecting."""

    name = "gpu-01"

    def __init__(self, boot_id: str) -> None:
        self.boot_id = boot_id

    def get_fact(self, fact, **kwargs):
        return self.boot_id


def test_new_boot_id_passes():
    assert _booted_again(None, Host("2f3c"), "1a2b")


@pytest.mark.parametrize("now", ["1a2b", ""])
def test_same_or_missing_boot_id_fails(now):
    with pytest.raises(OperationError, match="boot_id"):
        _booted_again(None, Host(now), "1a2b")
