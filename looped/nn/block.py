"""The pre-norm Transformer block shared by every family."""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .mlp import make_mlp
from .norm import LayerScale, make_norm


class SelectedPositions:
    """Early exit in a batch (models/loop_exit.py) for a block whose forward is
        y = attention_residual(x, Attn(attention_input(x)));  out = feed_forward(y)
    run at selected positions only, while every new position still writes its keys/values into the cache."""

    attn: MultiHeadAttention

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attention_residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def keys_values(self, x: torch.Tensor) -> torch.Tensor:
        """Raw key/value projections (..., 2 dim) of block inputs x (..., dim): what a position that does not run
        the block must still offer to the queries of others."""
        return self.attn.keys_values(self.attention_input(x))

    def forward_selected(self, x: torch.Tensor, kv: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor,
                         valid: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """The block (causal) at selected positions only: x (k, m, dim) their block inputs, laid out per row as
        MultiHeadAttention.attend_selected describes; kv (batch, n, 2 dim) `keys_values` of every new position of
        the call, all of which reach `cache`. Returns (k, m, dim), or with `valid` (k, m) the (s, dim) outputs of
        its True entries in row-major order (the padding skips the feed-forward half)."""
        attended = self.attn.attend_selected(self.attention_input(x), kv, rows, slots, cache)
        x = self.attention_residual(x, attended)
        if valid is not None:
            x = x[valid]
        return self.feed_forward(x)


class PreNormBlock(SelectedPositions, nn.Module):
    """y = t + Attn(N1(t)); T(t) = y + FFN(N2(y)) (seed 000 eqs. 11-12 with the defaults).

    Options used by the other families: RMSNorm, SwiGLU, no biases, RoPE, QK-norm, LayerScale on both
    residual branches (seed 002).
    """

    def __init__(self, dim: int, heads: int, ffn_dim: int, *, norm: str = "layernorm", norm_eps: float = 1e-5,
                 mlp: str = "gelu", bias: bool = True, rope: bool = False, qk_norm: bool = False,
                 layer_scale: float | None = None):
        super().__init__()
        self.norm1 = make_norm(norm, dim, norm_eps)
        self.attn = MultiHeadAttention(dim, heads, bias=bias, rope=rope, qk_norm=qk_norm)
        self.norm2 = make_norm(norm, dim, norm_eps)
        self.mlp = make_mlp(mlp, dim, ffn_dim, bias=bias)
        self.scale1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.scale2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()

    def forward(self, x: torch.Tensor, *, causal: bool = True, window: int | None = None,
                mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        x = self.attention_residual(x, self.attn(self.attention_input(x), causal=causal, window=window, mask=mask,
                                                 cache=cache))
        return self.feed_forward(x)

    # --- early exit (models/loop_exit.py): SelectedPositions ------------------------------------------------
    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm1(x)

    def attention_residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        return x + self.scale1(attended)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale2(self.mlp(self.norm2(x)))

    def forward_stacked(self, x: torch.Tensor, queries: int, keys: torch.Tensor, values: torch.Tensor,
                        slot: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                        source: torch.Tensor | None = None) -> torch.Tensor:
        """T(x) of the first `queries` (M) of N independent single positions x (N, dim), each in its own cache of
        a stacked store; the other entries only write their keys/values (MultiHeadAttention.attend_stacked has
        the writes' layout). Returns (M, dim)."""
        attended = self.attn.attend_stacked(self.norm1(x), queries, keys, values, slot, rows, positions, source)
        x = x[:queries] + self.scale1(attended)
        return x + self.scale2(self.mlp(self.norm2(x)))
