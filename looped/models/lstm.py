"""A one-layer LSTM language model: the recurrent calibration row of the seed 003 CPU study.

    h_t, c_t = LSTM(E x_t, (h_{t-1}, c_{t-1}))       one nn.LSTM layer, hidden size = width
    logits_t = E^T RMSNorm(h_t)                       head tied to the embedding by default

It is not a paper's architecture. It answers one question beside the RLT rows: is a task learnable at the
CPU budget at all by a model whose whole state is carried forward token by token? If the LSTM learns a task
and RLT-1 does not, the recipe suits recurrence but the looped model misses it; if neither does, the budget
is the limit. At width 160 it has 250,560 parameters, within 0.5 % of RLT-1 2+2 at width 64 (251,824).

Embedding init N(0, 1), not the Transformers' N(0, 0.02): the LSTM's gates see their inputs unscaled.

The state is (h, c), constant size, so incremental decoding is exact and costs the same at any position.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import RMSNorm
from .base import CausalLM, DecodeState, LMConfig
from .ledger import Ledger, item_bytes, linear_flops
from .registry import register


@dataclass
class LSTMConfig(LMConfig):
    arch: str = "lstm"
    vocab_size: int = 277  # the algorithmic tasks' symbols (256 bytes + 21 specials)
    dim: int = 160  # embedding width = LSTM hidden size
    context_length: int = 1024  # no positional limit of its own; kept for the shared input checks
    tie_embeddings: bool = True
    norm_eps: float = 1e-6

    def validate(self) -> None:
        super().validate()
        if self.dim < 1:
            raise ValueError(f"model.dim must be >= 1, got {self.dim}")


@dataclass
class LSTMState(DecodeState):
    hidden: tuple[torch.Tensor, torch.Tensor] | None = None  # (h, c), each (1, batch, dim); None = zeros


@register("lstm", LSTMConfig, test_overrides=dict(dim=16, context_length=64))
class LSTMLM(CausalLM):
    # train.compile: the readout. nn.LSTM is one fused operator already, and Dynamo does not trace it (a graph
    # break; its RNN support is experimental).
    compiled_methods = ("readout",)

    def __init__(self, config: LSTMConfig):
        super().__init__()
        config.validate()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.dim)
        self.lstm = nn.LSTM(c.dim, c.dim, num_layers=1, batch_first=True)
        self.out_norm = RMSNorm(c.dim, c.norm_eps)
        self.head = None if c.tie_embeddings else nn.Linear(c.dim, c.vocab_size, bias=False)
        # Unit-scale inputs (PyTorch's own embedding init). With the Transformers' std 0.02 the inputs barely move
        # the gates (their weights are U(+-1/sqrt(dim))): the row then failed to fit even parity at 4,500 updates,
        # while with std 1 it holds parity at 40 bits after 500 (session 9).
        nn.init.normal_(self.embed.weight, std=1.0)

    def parameter_components(self) -> dict[str, list[str]]:
        return {"embedding": ["embed"], "lstm": ["lstm"], "readout": ["out_norm", "head"]}

    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """Per token: the four gates from x_t and h_{t-1} (d -> 4d twice) and the head; the state is h and c."""
        self.resolve_rounds(depth)
        d, vocab = self.config.dim, self.config.vocab_size
        outside = {"lstm": linear_flops(2 * d, 4 * d), "head": linear_flops(d, vocab)}
        return Ledger(self.arch_name, context, None, outside, [], state_fixed={"lstm h, c": 2 * d * item_bytes(self)},
                      notes=["nn.LSTM is one fused operator: torch's FlopCounterMode counts 0 for it"])

    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.run(tokens, None)[0]

    def init_state(self, batch: int, *, rounds: int | None = None) -> LSTMState:
        self.resolve_rounds(rounds)
        return LSTMState(batch)

    def decode(self, tokens: torch.Tensor, state: LSTMState) -> torch.Tensor:
        self.check_tokens(tokens, start=state.position)
        logits, state.hidden = self.run(tokens, state.hidden)
        state.position += tokens.shape[1]
        return logits

    def run(self, tokens: torch.Tensor, hidden):
        """Logits (batch, n, vocab) of n new tokens after `hidden`, and the new (h, c)."""
        if not tokens.shape[1]:  # nn.LSTM refuses an empty sequence; nothing changes
            return self.embed.weight.new_zeros(tokens.shape[0], 0, self.config.vocab_size), hidden
        out, hidden = self.lstm(self.embed(tokens), hidden)
        return self.readout(out), hidden

    def readout(self, out: torch.Tensor) -> torch.Tensor:
        """LSTM outputs (batch, n, dim) -> logits (batch, n, vocab)."""
        out = self.out_norm(out)
        return self.head(out) if self.head is not None else F.linear(out, self.embed.weight)


__all__ = ["LSTMConfig", "LSTMLM", "LSTMState"]
