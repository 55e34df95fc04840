"""Plain decoder-only Transformer (seed 000 Appendix A, eqs. 10-13): the reference for every LM code path.

e_i = E(x_i) + p_i  ->  `layers` untied pre-norm blocks (causal attention, GELU FFN with biases)
-> final LayerNorm -> untied, bias-free 257-way head.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ..nn import KVCache, LayerNorm, PreNormBlock
from .base import CausalLM, DecodeState, LMConfig
from .ledger import Ledger, block_flops, item_bytes, linear_flops
from .registry import register
from .trace import RoundTrace


@dataclass
class TransformerConfig(LMConfig):
    arch: str = "transformer"
    dim: int = 128
    heads: int = 4
    layers: int = 4
    ffn_dim: int = 512
    norm_eps: float = 1e-5

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "layers", "ffn_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ValueError(f"model.dim: width {self.dim} is not divisible by heads {self.heads}")


@dataclass
class TransformerState(DecodeState):
    caches: list[KVCache] = field(default_factory=list)  # one per block


@register("transformer", TransformerConfig,
          test_overrides=dict(dim=32, heads=4, layers=2, ffn_dim=48, context_length=40))
class Transformer(CausalLM):
    compiled_methods = ("compute",)

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.positions = nn.Embedding(config.context_length, config.dim)  # learned p_i
        self.blocks = nn.ModuleList(
            PreNormBlock(config.dim, config.heads, config.ffn_dim, norm_eps=config.norm_eps)
            for _ in range(config.layers))
        self.final_norm = LayerNorm(config.dim, config.norm_eps)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)

    def embed_tokens(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """e_i = E(x_i) + p_i for positions start .. start+length-1."""
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        return self.embed(tokens) + self.positions(positions)

    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.compute(tokens)

    def compute(self, tokens: torch.Tensor) -> torch.Tensor:
        """The full forward on validated tokens (batch, length) -> logits (batch, length, vocab)."""
        x = self.embed_tokens(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        """Per layer (models/trace.py): the final norm and head applied after each block; the last is forward."""
        self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.traced_layers(tokens)

    def traced_layers(self, tokens: torch.Tensor) -> Iterator[RoundTrace]:
        x = self.embed_tokens(tokens)
        for depth, block in enumerate(self.blocks, 1):
            x = block(x)
            yield RoundTrace(depth, x, self.head(self.final_norm(x)))

    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """Per-token FLOPs by layer (untied blocks) and the KV caches (looped/models/ledger.py)."""
        c = self.config
        self.resolve_rounds(depth)
        layers = [block_flops(c.dim, c.ffn_dim, context) for _ in range(c.layers)]
        return Ledger(self.arch_name, context, None, {"head": linear_flops(c.dim, c.vocab_size)}, layers,
                      round_name="layer", state_per_token={"kv cache": c.layers * 2 * c.dim * item_bytes(self)})

    def init_state(self, batch: int, *, rounds: int | None = None) -> TransformerState:
        self.resolve_rounds(rounds)
        caches = [block.attn.new_cache(batch, self.config.context_length) for block in self.blocks]
        return TransformerState(batch=batch, caches=caches)

    def decode(self, tokens: torch.Tensor, state: TransformerState) -> torch.Tensor:
        self.check_tokens(tokens, start=state.position)
        x = self.embed_tokens(tokens, state.position)
        for block, cache in zip(self.blocks, state.caches):
            x = block(x, cache=cache)
        state.position += tokens.shape[1]
        return self.head(self.final_norm(x))
