"""Position-wise feed-forward networks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GeluMLP(nn.Module):
    """W2 GELU(W1 x + b1) + b2 (seed 000 eq. 12); exact (erf) GELU."""

    def __init__(self, dim: int, hidden: int, bias: bool = True):
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class ReluMLP(GeluMLP):
    """The same two-layer network with ReLU (the standard PyTorch encoder layer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.relu(self.up(x)))


class Relu2MLP(GeluMLP):
    """W2 ReLU(W1 x)^2 (+ biases): the squared-ReLU network of the nanochat backbone (stable_loop)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.relu(self.up(x)).square())


class SwiGLU(nn.Module):
    """W_down (SiLU(W_gate x) * W_up x): three matrices, no biases by default."""

    def __init__(self, dim: int, hidden: int, bias: bool = False):
        super().__init__()
        # gate and up share one matmul: fewer kernel launches, same arithmetic.
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


def make_mlp(kind: str, dim: int, hidden: int, bias: bool) -> nn.Module:
    kinds = {"gelu": GeluMLP, "relu": ReluMLP, "relu2": Relu2MLP, "swiglu": SwiGLU}
    if kind not in kinds:
        raise ValueError(f"unknown mlp {kind!r} (expected one of {sorted(kinds)})")
    return kinds[kind](dim, hidden, bias=bias)
