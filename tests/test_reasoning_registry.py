"""Every registered family-"reasoning" architecture passes the shared drivers (tests/reasoning_drivers.py), on
every input kind (graph, sequence) it declares it reads."""

import pytest

import reasoning_drivers
from looped.models import arch_names


@pytest.mark.parametrize("check", reasoning_drivers.ALL_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("arch, kind", reasoning_drivers.cases(arch_names("reasoning")))
def test_shared_driver(arch, kind, check):
    check(arch, kind)
