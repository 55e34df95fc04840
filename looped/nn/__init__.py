"""Building blocks with no model knowledge: attention, feed-forward networks, norms, blocks."""

from .attention import KVCache, MultiHeadAttention, RotaryEmbedding, position_mask, stacked_caches
from .block import PreNormBlock
from .memory import empty, set_poison
from .mlp import GeluMLP, Relu2MLP, ReluMLP, SwiGLU, make_mlp
from .norm import LayerNorm, LayerScale, RMSNorm, make_norm

__all__ = [
    "KVCache", "MultiHeadAttention", "RotaryEmbedding", "position_mask", "stacked_caches", "PreNormBlock", "empty",
    "set_poison",
    "GeluMLP", "Relu2MLP", "ReluMLP", "SwiGLU", "make_mlp", "LayerNorm", "LayerScale", "RMSNorm", "make_norm",
]
