"""Allocation helper: `empty` is torch.empty, or NaN-filled while tests poison fresh buffers.

Tests switch poisoning on (see tests/conftest.py) so that any read of a buffer slot that was never
written turns into NaN and fails an equivalence check loudly instead of silently reading stale memory.
"""

from __future__ import annotations

import torch

_POISON = False


def set_poison(enabled: bool) -> None:
    global _POISON
    _POISON = bool(enabled)


def empty(*shape: int, dtype: torch.dtype, device: torch.device | str | None = None) -> torch.Tensor:
    out = torch.empty(*shape, dtype=dtype, device=device)
    if _POISON and out.is_floating_point():
        out.fill_(float("nan"))
    return out
