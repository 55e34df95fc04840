"""The Llama layer of Mixture-of-Recursions (models/mor.py) and the attention recursion-wise caching needs.

Under recursion-wise KV caching a recursion sees only the tokens still active at it, so the positions a layer
reads are not contiguous and differ from row to row. Every call here therefore carries explicit positions:

    x (B, n, d)            the rows' tokens at this layer, each row's active tokens first, padded to n
    positions (B, n)       their absolute positions (RoPE and the causal rule read them)
    valid (B, n)           False on padding: padded slots are never keys, and their outputs are discarded

A query at position p attends to the valid keys at positions <= p. With a `RowCache` the keys are the row's
cached entries (all earlier than any new query) followed by the chunk's own. `compact` / `take` / `put_back`
gather each row's active tokens into that layout and scatter the results back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import RMSNorm, RotaryEmbedding, SwiGLU


# --- gathering the active tokens --------------------------------------------------------------------------
def compact(active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(index, valid), both (B, n): each row's active positions in order, padded to the row with the most
    (n = its count). Padded slots index inactive positions of their row: masked as keys, discarded on return."""
    count = active.sum(1)
    n = int(count.max())
    index = torch.sort((~active).to(torch.int8), dim=1, stable=True).indices[:, :n]  # active first, in order
    valid = torch.arange(n, device=active.device) < count[:, None]
    return index, valid


def take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows of x (B, L, ...) at index (B, n): (B, n, ...)."""
    if x.dim() == 2:
        return x.gather(1, index)
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[-1]))


def put_back(full: torch.Tensor, index: torch.Tensor, values: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """full (B, L, d) with the active positions replaced by `values` (B, n, d) gathered by compact(active)."""
    placed = full.scatter(1, index[..., None].expand(-1, -1, full.shape[-1]), values)  # indices distinct per row
    return torch.where(active[..., None], placed, full)  # padded slots wrote inactive positions: dropped here


# --- the cache --------------------------------------------------------------------------------------------
@dataclass
class RowCache:
    """Keys and values one attention layer kept, row by row, (kv_heads, entries, head_dim) each: rows hold
    different numbers of entries, since only the tokens active at a recursion write there."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @classmethod
    def empty(cls, batch: int, kv_heads: int, head_dim: int, dtype, device) -> RowCache:
        def blank():
            return torch.empty(kv_heads, 0, head_dim, dtype=dtype, device=device)
        return cls([blank() for _ in range(batch)], [blank() for _ in range(batch)])

    def extend(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor):
        """The keys a chunk's queries see, then store the chunk's valid entries. k, v (B, kv_heads, n, hd) ->
        keys, values (B, kv_heads, m, hd), key positions (B, m) (-1 for cached entries: earlier than any query)
        and key validity (B, m); m = the longest row's cached entries + n."""
        cached = [key.shape[1] for key in self.keys]
        n, m = k.shape[2], max(cached) + k.shape[2]

        def row(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
            return F.pad(torch.cat((old, new), 1), (0, 0, 0, m - old.shape[1] - n))

        keys = torch.stack([row(old, new) for old, new in zip(self.keys, k)])
        values = torch.stack([row(old, new) for old, new in zip(self.values, v)])
        key_pos = torch.stack([F.pad(torch.cat((p.new_full((c,), -1), p)), (0, m - c - n))
                               for c, p in zip(cached, positions)])
        key_valid = torch.stack([F.pad(torch.cat((ok.new_ones(c), ok)), (0, m - c - n))
                                 for c, ok in zip(cached, valid)])
        for b in range(len(self.keys)):
            self.keys[b] = torch.cat((self.keys[b], k[b][:, valid[b]]), 1)
            self.values[b] = torch.cat((self.values[b], v[b][:, valid[b]]), 1)
        return keys, values, key_pos, key_valid


# --- attention and the layer ------------------------------------------------------------------------------
def rotate(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """RoPE in looped.nn.RotaryEmbedding's half-split convention at per-row positions: x (B, heads, n, hd),
    positions (B, n)."""
    angles = positions.to(inv_freq.dtype)[:, None, :, None] * inv_freq  # (B, 1, n, hd / 2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with RoPE and `kv_heads` key/value heads shared by groups of query heads (GQA, as
    the SmolLM bases of the paper use); no biases."""

    def __init__(self, dim: int, heads: int, kv_heads: int, rope_base: float):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, rope_base)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor,
                cache: RowCache | None = None) -> torch.Tensor:
        batch, n, dim = x.shape
        q = self.q(x).view(batch, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(batch, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, positions, self.rotary.inv_freq), rotate(k, positions, self.rotary.inv_freq)
        key_pos, key_valid = positions, valid
        if cache is not None:
            k, v, key_pos, key_valid = cache.extend(k, v, positions, valid)
        # a padded query attends to every key: its output is discarded, and an empty row would give NaN
        allowed = (key_valid[:, None, :] & (key_pos[:, None, :] <= positions[:, :, None])) | ~valid[:, :, None]
        group = self.heads // self.kv_heads
        y = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                           attn_mask=allowed[:, None])
        return self.out(y.transpose(1, 2).reshape(batch, n, dim))


class LlamaLayer(nn.Module):
    """h + Attn(N(h)), then y + SwiGLU(N(y)): the pre-norm Llama layer (RMSNorm, RoPE, GQA, no biases). As a
    map h -> f(h; Phi) it includes both residual connections (the paper's f, section 2.1)."""

    def __init__(self, dim: int, heads: int, kv_heads: int, ffn_dim: int, rope_base: float, eps: float):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(dim, eps), RMSNorm(dim, eps)
        self.attn = GroupedQueryAttention(dim, heads, kv_heads, rope_base)
        self.mlp = SwiGLU(dim, ffn_dim, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor,
                cache: RowCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), positions, valid, cache)
        return x + self.mlp(self.mlp_norm(x))
