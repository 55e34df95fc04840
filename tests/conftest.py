import os

import pytest
import torch

from looped.nn import set_poison

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(autouse=True)
def _deterministic_and_poisoned():
    """Seed every test and fill fresh buffers with NaN so reads of unwritten memory fail loudly."""
    torch.manual_seed(0)
    set_poison(True)
    yield
    set_poison(False)
