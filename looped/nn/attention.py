"""Multi-head attention through F.scaled_dot_product_attention, with RoPE, QK-RMSNorm and a KV cache.

One module covers the masks the three papers need:
  causal            token i sees j <= i                       (byte LMs, RLT encoder)
  sliding window W  token i sees i-W < j <= i (W includes i)   (RLT decoder)
  bidirectional     every token sees every token              (DRT sequence tasks, padding via `mask`)
  arbitrary mask    a boolean (batch, 1|heads, q, k) tensor   (DRT graph adjacency)
Shapes: x (batch, length, dim); heads work on (batch, heads, length, head_dim).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .memory import empty
from .norm import RMSNorm


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (half-split convention) applied at absolute positions."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x (batch, heads, length, head_dim); positions (length,) int64, or (batch, length): each row its own
        angles = positions.to(self.inv_freq.dtype)[..., None] * self.inv_freq  # (length | batch, length, hd/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if positions.dim() == 2:  # (batch, 1, length, head_dim/2): the same angles for every head
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class KVCache:
    """Keys and values of the positions one attention layer has already seen.

    `length` counts every position appended so far (the absolute position of the next token).
    A full cache preallocates `capacity` slots and writes in place; a sliding-window cache keeps only
    the last window-1 positions, which is everything a window-W query can still see.
    """

    def __init__(self, batch: int, heads: int, head_dim: int, capacity: int, *, window: int | None = None,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.capacity, self.window, self.length = capacity, window, 0
        kept = capacity if window is None else window - 1
        self.keys = empty(batch, heads, kept, head_dim, dtype=dtype, device=device)
        self.values = empty(batch, heads, kept, head_dim, dtype=dtype, device=device)
        self.kept = 0  # valid entries at the front of keys/values (window mode: the last `kept` positions)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Add (batch, heads, n, head_dim) new entries; return all visible keys, values, first key position."""
        n = k.shape[2]
        if self.window is None:
            end = self.length + n
            if end > self.capacity:
                raise ValueError(f"sequence too long: position {end} exceeds the cache capacity {self.capacity}")
            self.keys[:, :, self.length:end] = k
            self.values[:, :, self.length:end] = v
            self.length = end
            return self.keys[:, :, :end], self.values[:, :, :end], 0
        keys = torch.cat((self.keys[:, :, :self.kept], k), dim=2)
        values = torch.cat((self.values[:, :, :self.kept], v), dim=2)
        first = self.length - self.kept
        self.length += n
        self.kept = min(self.window - 1, keys.shape[2])
        if self.kept:
            self.keys[:, :, :self.kept] = keys[:, :, keys.shape[2] - self.kept:]
            self.values[:, :, :self.kept] = values[:, :, values.shape[2] - self.kept:]
        return keys, values, first


class StackedSlot(KVCache):
    """A full KVCache whose keys and values are slot `index` of stacked (count, batch, heads, capacity, head_dim)
    tensors (stacked_caches). The slot's views are taken anew at each use: a view taken before the store first
    holds a tensor that requires grad would afterwards count as a leaf, into which autograd refuses to write."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, index: int):
        self.capacity, self.window, self.length, self.kept = keys.shape[3], None, 0, 0
        self.store, self.index = (keys, values), index

    @property
    def keys(self) -> torch.Tensor:
        return self.store[0][self.index]

    @property
    def values(self) -> torch.Tensor:
        return self.store[1][self.index]


def stacked_caches(count: int, batch: int, heads: int, head_dim: int, capacity: int, *, dtype: torch.dtype,
                   device=None) -> tuple[list[KVCache], torch.Tensor, torch.Tensor]:
    """`count` full caches whose keys and values are the slices [i] of one (count, batch, heads, capacity,
    head_dim) tensor each, returned with them: one indexing op can then read or write a different cache for each
    row (MultiHeadAttention.attend_stacked)."""
    keys = empty(count, batch, heads, capacity, head_dim, dtype=dtype, device=device)
    values = empty(count, batch, heads, capacity, head_dim, dtype=dtype, device=device)
    return [StackedSlot(keys, values, i) for i in range(count)], keys, values


def position_mask(q_start: int, q_len: int, k_start: int, k_len: int, *, causal: bool, window: int | None,
                  device: torch.device) -> torch.Tensor | None:
    """Boolean (q_len, k_len) mask, True = may attend, from absolute positions; None when all is visible."""
    if not causal and window is None:
        return None
    q = torch.arange(q_start, q_start + q_len, device=device)[:, None]
    k = torch.arange(k_start, k_start + k_len, device=device)[None, :]
    allowed = k <= q if causal else torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if window is not None:
        allowed = allowed & (k > q - window)
    return allowed


class MultiHeadAttention(nn.Module):
    """Self-attention with a fused QKV projection (seed 000 eqs. 10-11 when bias=True, no RoPE)."""

    def __init__(self, dim: int, heads: int, *, bias: bool = True, rope: bool = False, rope_base: float = 10000.0,
                 qk_norm: bool = False, norm_eps: float = 1e-6):
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not divisible by heads {heads}")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.out = nn.Linear(dim, dim, bias=bias)
        self.rotary = RotaryEmbedding(self.head_dim, rope_base) if rope else None
        self.q_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None

    def new_cache(self, batch: int, capacity: int, *, window: int | None = None, dtype=None, device=None) -> KVCache:
        dtype = dtype or self.qkv.weight.dtype
        device = device or self.qkv.weight.device
        return KVCache(batch, self.heads, self.head_dim, capacity, window=window, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, *, causal: bool = True, window: int | None = None,
                mask: torch.Tensor | None = None, cache: KVCache | None = None,
                values: torch.Tensor | None = None) -> torch.Tensor:
        """`values` (batch, length, dim), if given, is added to the projected values before they are cached
        (value embeddings, looped/models/stable_loop.py)."""
        batch, length, _ = x.shape
        # (batch, length, 3, heads, head_dim) -> three (batch, heads, length, head_dim)
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if values is not None:
            v = v + values.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        start = cache.length if cache is not None else 0
        if self.rotary is not None:
            positions = torch.arange(start, start + length, device=x.device)
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        k_start = 0
        if cache is not None:
            k, v, k_start = cache.append(k, v)
        y = self._attend(q, k, v, start, k_start, causal=causal, window=window, mask=mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, self.dim))

    # --- early exit: every new position offers keys/values, only some ask a query (models/loop_exit.py) ------------
    def keys_values(self, x: torch.Tensor) -> torch.Tensor:
        """Raw key and value projections (..., 2 dim) of normalised inputs x (..., dim): the part of the fused QKV
        projection a position needs in order to be read by other queries (no query of its own)."""
        bias = self.qkv.bias[self.dim:] if self.qkv.bias is not None else None
        return F.linear(x, self.qkv.weight[self.dim:], bias)

    def offer(self, kv: torch.Tensor, cache: KVCache | None) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        """Keys and values (batch, heads, n, head_dim) of the n new positions whose raw projections are kv
        (batch, n, 2 dim), k-normed and rotated at their absolute positions and appended to `cache`; returns every
        visible key and value, the position of the first key and the position of the first new one."""
        batch, n, _ = kv.shape
        k, v = kv.view(batch, n, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.k_norm is not None:
            k = self.k_norm(k)
        start = cache.length if cache is not None else 0
        if self.rotary is not None:
            k = self.rotary(k, torch.arange(start, start + n, device=kv.device))
        if cache is None:
            return k, v, 0, start
        if cache.window is not None:
            raise ValueError("attention at selected positions supports full caches only (no sliding window)")
        k, v, k_start = cache.append(k, v)
        return k, v, k_start, start

    def attend_selected(self, xq: torch.Tensor, kv: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor,
                        cache: KVCache | None = None) -> torch.Tensor:
        """Causal attention asked by selected new positions only, after every new position offered its keys and
        values (`offer`). xq (k, m, dim): the normalised inputs of the selected positions, laid out per row and
        padded to the longest row; rows (k,): the row of each; slots (k, m): each one's index among the n new
        positions of its row (padding repeats a real index; its output is junk the caller drops); kv (batch, n,
        2 dim): `keys_values` of every new position. Returns (k, m, dim) after the output projection: what
        `forward` returns at those positions, for the queries' rows only."""
        batch, n, _ = kv.shape
        k_rows, m, _ = xq.shape
        bias = self.qkv.bias[:self.dim] if self.qkv.bias is not None else None
        q = F.linear(xq, self.qkv.weight[:self.dim], bias).view(k_rows, m, self.heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q = self.q_norm(q)
        k, v, k_start, start = self.offer(kv, cache)
        if self.rotary is not None:
            q = self.rotary(q, slots + start)
        if k_rows < batch:  # only the rows that ask read their keys
            k, v = k.index_select(0, rows), v.index_select(0, rows)
        mask = None
        if n > 1:  # with one new position per row every query is the newest one: it sees every key
            keys = torch.arange(k_start, k_start + k.shape[2], device=kv.device)
            mask = (keys <= (slots + start)[..., None]).unsqueeze(1)  # (k, 1, m, keys)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(k_rows, m, self.dim))

    # --- one position per query, each in its own cache of a stacked store (models/loop_stream.py) -----------------
    def write_stacked(self, kv: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slot: torch.Tensor,
                      rows: torch.Tensor, positions: torch.Tensor) -> None:
        """Write M single positions' raw key/value projections kv (M, 2 dim) into a stacked store (stacked_caches):
        entry i at position positions[i] of row rows[i] of cache slot[i], k-normed and rotated at that position."""
        k, v = kv.view(-1, 2, self.heads, self.head_dim).unbind(1)  # (M, heads, head_dim)
        if self.k_norm is not None:
            k = self.k_norm(k)
        if self.rotary is not None:
            k = self.rotary(k.unsqueeze(2), positions[:, None]).squeeze(2)
        keys[slot, rows, :, positions] = k
        values[slot, rows, :, positions] = v

    def attend_stacked(self, x: torch.Tensor, queries: int, keys: torch.Tensor, values: torch.Tensor,
                       slot: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                       source: torch.Tensor | None = None) -> torch.Tensor:
        """Causal attention of independent single positions, each in its own cache of a stacked store
        (stacked_caches). x (N, dim): normalised inputs of N entries; the first `queries` (M) ask a query, the others
        only offer keys/values. Write w puts entry source[w]'s key/value (default: entry w) at position
        positions[w] of row rows[w] of cache slot[w]; the first M writes are the queries' own, so query i then
        reads cache slot[i], row rows[i], positions <= positions[i]. Returns the output projection (M, dim).
        Every query reads slots up to the largest position, its later ones masked out: those must hold finite
        values (a masked NaN still poisons the softmax).
        One projection serves every entry: decoding a small batch is bound by reading the weights, so the
        entries that only offer keys cost almost nothing."""
        qkv = self.qkv(x)
        kv = qkv[:, self.dim:] if source is None else qkv.index_select(0, source)[:, self.dim:]
        self.write_stacked(kv, keys, values, slot, rows, positions)
        q = qkv[:queries, :self.dim].reshape(queries, self.heads, 1, self.head_dim)
        slot, rows, positions = slot[:queries], rows[:queries], positions[:queries]
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.rotary is not None:
            q = self.rotary(q, positions[:, None])
        length = int(positions.max()) + 1
        # (cache, row) flattened into one index: index_select copies whole (heads, length, head_dim) blocks, far
        # faster than advanced indexing over two dimensions
        which = slot * keys.shape[1] + rows
        k = keys[:, :, :, :length].flatten(0, 1).index_select(0, which)  # (M, heads, length, head_dim)
        v = values[:, :, :, :length].flatten(0, 1).index_select(0, which)
        mask = None
        if int(positions.min()) + 1 < length:  # rows at different positions: each sees its own prefix only
            mask = (torch.arange(length, device=x.device) <= positions[:, None]).view(-1, 1, 1, length)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.reshape(queries, self.dim))

    def new_stacked_caches(self, count: int, batch: int, capacity: int) -> tuple[list[KVCache], torch.Tensor,
                                                                                  torch.Tensor]:
        """stacked_caches in this layer's shape, dtype and device."""
        return stacked_caches(count, batch, self.heads, self.head_dim, capacity, dtype=self.qkv.weight.dtype,
                              device=self.qkv.weight.device)

    @staticmethod
    def _attend(q, k, v, q_start: int, k_start: int, *, causal: bool, window: int | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        q_len, k_len = q.shape[2], k.shape[2]
        aligned = q_start == k_start and q_len == k_len  # no cached past: the plain square case
        if mask is None and window is None and causal and aligned:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if mask is None and window is None and causal and q_len == 1:
            return F.scaled_dot_product_attention(q, k, v)  # one new token sees its whole past
        allowed = position_mask(q_start, q_len, k_start, k_len, causal=causal, window=window, device=q.device)
        if mask is not None:
            allowed = mask if allowed is None else mask & allowed
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
