"""Every registered family-"reasoning" architecture passes the shared drivers (tests/reasoning_drivers.py)."""

import pytest

import reasoning_drivers
from looped.models import arch_names


@pytest.mark.parametrize("check", reasoning_drivers.ALL_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("arch", arch_names("reasoning"))
def test_shared_driver(arch, check):
    check(arch)
