"""Building blocks against naive reference computations."""

import math

import pytest
import torch

from looped.nn import (GeluMLP, KVCache, LayerNorm, LayerScale, MultiHeadAttention, PreNormBlock, RMSNorm,
                       RotaryEmbedding, SwiGLU)


def naive_attention(attn: MultiHeadAttention, x, allowed, positions=None):
    """Softmax(QK^T/sqrt(d_h)) V written out, with a (q, k) or (batch, q, k) boolean mask."""
    b, n, d = x.shape
    h, dh = attn.heads, attn.head_dim
    q, k, v = attn.qkv(x).split(d, dim=-1)
    q, k, v = (t.view(b, n, h, dh).transpose(1, 2) for t in (q, k, v))
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if attn.rotary is not None:
        pos = torch.arange(n) if positions is None else positions
        q, k = attn.rotary(q, pos), attn.rotary(k, pos)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    mask = allowed if allowed.dim() == 4 else allowed[None, None] if allowed.dim() == 2 else allowed[:, None]
    scores = scores.masked_fill(~mask, float("-inf"))
    y = scores.softmax(-1) @ v
    return attn.out(y.transpose(1, 2).reshape(b, n, d))


@pytest.fixture
def x():
    return torch.randn(2, 11, 16, dtype=torch.float64)


def make_attn(**kw):
    return MultiHeadAttention(16, 4, **kw).double()


@pytest.mark.parametrize("kw", [{}, {"rope": True}, {"qk_norm": True, "bias": False}])
def test_causal_matches_naive(x, kw):
    attn = make_attn(**kw)
    allowed = torch.tril(torch.ones(11, 11, dtype=torch.bool))
    torch.testing.assert_close(attn(x), naive_attention(attn, x, allowed))


def test_bidirectional_matches_naive(x):
    attn = make_attn()
    torch.testing.assert_close(attn(x, causal=False), naive_attention(attn, x, torch.ones(11, 11, dtype=torch.bool)))


@pytest.mark.parametrize("window", [1, 3, 8])
def test_sliding_window_includes_current_token(x, window):
    attn = make_attn(rope=True)
    i = torch.arange(11)
    allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    torch.testing.assert_close(attn(x, window=window), naive_attention(attn, x, allowed))
    if window == 1:  # each token sees itself only: output is the per-token value projection
        v = attn.qkv(x)[..., 32:]
        torch.testing.assert_close(attn(x, window=1), attn.out(v))


def test_arbitrary_mask(x):
    attn = make_attn()
    allowed = torch.rand(2, 11, 11) < 0.4
    allowed |= torch.eye(11, dtype=torch.bool)  # every row attends somewhere
    out = attn(x, causal=False, mask=allowed[:, None])
    torch.testing.assert_close(out, naive_attention(attn, x, allowed))


@pytest.mark.parametrize("window", [None, 1, 4])
def test_kv_cache_chunks_equal_full(x, window):
    attn = make_attn(rope=True, qk_norm=True)
    full = attn(x, window=window)
    cache = attn.new_cache(2, 11, window=window)
    parts = [attn(x[:, a:b], window=window, cache=cache) for a, b in [(0, 3), (3, 4), (4, 9), (9, 11)]]
    torch.testing.assert_close(torch.cat(parts, 1), full)
    assert cache.length == 11
    if window is not None:
        assert cache.kept == window - 1  # eviction keeps exactly W-1 past positions


def test_kv_cache_overflow_is_a_clear_error():
    cache = KVCache(1, 2, 4, capacity=3)
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="sequence too long"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))


def test_rope_depends_on_relative_position_only():
    rope = RotaryEmbedding(8).double()
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    def score(i, j):
        return (rope(q, torch.tensor([i])) * rope(k, torch.tensor([j]))).sum()
    torch.testing.assert_close(score(5, 2), score(13, 10))
    torch.testing.assert_close(rope(q, torch.tensor([0])), q)


def test_norms_and_layerscale():
    z = torch.randn(3, 10, dtype=torch.float64)
    ln = LayerNorm(10).double()
    mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(ln(z), (z - mu) / torch.sqrt(var + 1e-5))
    rms = RMSNorm(10, eps=1e-6).double()
    torch.testing.assert_close(rms(z), z / torch.sqrt(z.pow(2).mean(-1, keepdim=True) + 1e-6))
    assert torch.allclose(LayerScale(10, 1e-4)(z), z * 1e-4)


def test_mlps():
    z = torch.randn(4, 6, dtype=torch.float64)
    mlp = GeluMLP(6, 9).double()
    ref = mlp.down(0.5 * mlp.up(z) * (1 + torch.erf(mlp.up(z) / math.sqrt(2))))
    torch.testing.assert_close(mlp(z), ref)
    sw = SwiGLU(6, 9).double()
    gate, up = sw.gate_up.weight[:9], sw.gate_up.weight[9:]
    ref = sw.down(torch.nn.functional.silu(z @ gate.T) * (z @ up.T))
    torch.testing.assert_close(sw(z), ref)
    assert sum(p.numel() for p in sw.parameters()) == 3 * 6 * 9


def test_prenorm_block_is_eqs_11_12(x):
    blk = PreNormBlock(16, 4, 32).double()
    allowed = torch.tril(torch.ones(11, 11, dtype=torch.bool))
    y = x + naive_attention(blk.attn, blk.norm1(x), allowed)
    torch.testing.assert_close(blk(x), y + blk.mlp(blk.norm2(y)))


def test_width_not_divisible_by_heads():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)
