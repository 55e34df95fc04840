"""Normalisation layers and LayerScale."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.LayerNorm):
    """LayerNorm with gain and offset (seed 000 eq. 13); eps 1e-5 unless told otherwise."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__(dim, eps=eps, bias=bias)


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain and no offset: x / rms(x) * g."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class LayerScale(nn.Module):
    """Per-channel learned scale on a residual branch (CaiT); small init keeps a deep loop near identity."""

    def __init__(self, dim: int, init: float = 1e-4):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """'layernorm' or 'rmsnorm' by name, so blocks can be configured from YAML."""
    if kind == "layernorm":
        return LayerNorm(dim, eps)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps)
    raise ValueError(f"unknown norm {kind!r} (expected 'layernorm' or 'rmsnorm')")
