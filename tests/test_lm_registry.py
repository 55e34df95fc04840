"""Every registered LM architecture passes every shared driver."""

import pytest

from looped.models import arch_names

import lm_drivers

ARCHS = arch_names("lm")


@pytest.mark.parametrize("check", lm_drivers.ALL_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("arch", ARCHS)
def test_shared_driver(arch, check):
    check(arch)
