"""Baselines of seed 002 Table 3, with the protocol of reasoning.py: logits = model(batch, steps, return_all=False).

  fixed_transformer  `layers` untied encoder layers (graph: adjacency-masked, so layer k sees k hops);
                     `steps` is ignored, return_all gives the single (1, n) final row.
  gnn                `layers` message-passing layers averaging over each node's in-neighbours (graph only);
                     `steps` ignored as above.
  ut_act             Universal Transformer: one shared encoder layer with per-position ACT halting and a
                     ponder cost; `steps` is the halting budget (default `max_steps`).
The weight-tied ablation (no LayerScale, no gate) is `drt_tied` in recurrent_depth.py.

Every baseline shares the core's perception (embedding, role vectors, LN, dropout), encoder block
flavour (graph: ReLU FFN, adjacency mask; tokens: RoPE, GELU FFN, padding mask) and readout, so the
rows differ only in how depth is spent.

Fixed-Transformer depths follow from the paper's reported sizes (0.8M / 6.4M / 4.0M):
6 layers at d=128 (graph, 832,385 parameters), 8 at d=256 (boolean, 6.39M), 5 at d=256 (family, 4.03M).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..data.tasks.base import ReasoningBatch
from ..nn import LayerNorm
from .reasoning import (EncoderBlock, PonderStats, Perception, Readout, ReasoningConfig, ReasoningModel,
                        ReasoningTrace, attention_mask, masked_mean, reasoning_loss)
from .reasoning_ledger import act_ledger, fixed_transformer_ledger, gnn_ledger
from .registry import register
from .trace import RoundTrace

# ============================================================================ fixed-depth Transformer


@dataclass
class FixedTransformerConfig(ReasoningConfig):
    arch: str = "fixed_transformer"
    heads: int = 8
    layers: int = 8
    layer_scale: float | None = None  # a plain Transformer: no LayerScale unless asked for

    per_task: ClassVar[dict[str, dict[str, Any]]] = {"graph": dict(layers=6), "boolean": dict(layers=8),
                                                     "family": dict(layers=5)}

    def validate(self) -> None:
        super().validate()
        self.check_heads(self.heads)
        if self.layers < 1:
            raise ValueError(f"model.layers must be >= 1, got {self.layers}")


@register("fixed_transformer", FixedTransformerConfig, family="reasoning",
          test_overrides=dict(dim=32, heads=4, ffn_dim=64, layers=2))
class FixedDepthTransformer(ReasoningModel):
    """Perception -> `layers` untied encoder layers -> readout; depth is fixed by construction."""

    depth_mode = "fixed"  # `steps` changes nothing: one pass serves every budget
    compiled_methods = ("apply_layers",)
    ledger = fixed_transformer_ledger  # FLOPs by part and layer (looped/models/reasoning_ledger.py)

    def __init__(self, config: FixedTransformerConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.blocks = nn.ModuleList(EncoderBlock(config, config.heads, config.layer_scale)
                                    for _ in range(config.layers))
        self.readout = Readout(config)

    def forward(self, batch: ReasoningBatch, steps: int | None = None, *, return_all: bool = False,
                return_trace: bool = False):
        self.check_batch(batch)
        h = self.apply_layers(self.perception(batch), attention_mask(self.config.input_kind, batch))  # (n, L, d)
        logits = self.readout(h, batch)  # (n,)
        return self.output(logits[None] if return_all else logits, ReasoningTrace(), return_trace)

    def trace(self, batch: ReasoningBatch, steps: int | None = None):
        """Per layer (models/trace.py): the readout applied after each layer; the last is the forward."""
        self.check_batch(batch)
        return traced_layers(self.blocks, self.perception(batch), attention_mask(self.config.input_kind, batch),
                             lambda h: self.readout(h, batch))

    def apply_layers(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            h = block(h, mask)
        return h


def traced_layers(layers, h: torch.Tensor, context: torch.Tensor, readout):
    """RoundTrace after each of `layers` (each called as layer(h, context)), read out by `readout(h)`."""
    for depth, layer in enumerate(layers, 1):
        h = layer(h, context)
        yield RoundTrace(depth, h, readout(h))


# ============================================================================ GNN


@dataclass
class GNNConfig(ReasoningConfig):
    arch: str = "gnn"
    input_kind: Literal["graph", "tokens"] = "graph"
    vocab_size: int = 27
    max_length: int = 20
    dim: int = 128
    ffn_dim: int = 256
    layers: int = 6

    input_kinds: ClassVar[tuple[str, ...]] = ("graph",)  # messages pass along the graph's edges

    def validate(self) -> None:
        if self.input_kind != "graph":
            raise ValueError("model.input_kind: the GNN needs a graph to pass messages over ('graph' only)")
        super().validate()
        if self.layers < 1:
            raise ValueError(f"model.layers must be >= 1, got {self.layers}")


def in_neighbour_mean(h: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
    """Mean of h over each node's in-neighbours u (edges u->v, self-loops excluded); 0 for a node with none.

    h (n, L, d); adjacency (n, L, L) bool with [v, u] = edge u->v (plus self-loops, ignored here).
    """
    length = adjacency.shape[-1]
    no_self = ~torch.eye(length, dtype=torch.bool, device=adjacency.device)
    edges = (adjacency & no_self).to(h.dtype)  # (n, L, L)
    in_degree = edges.sum(dim=-1, keepdim=True).clamp_min(1)  # (n, L, 1); 1 avoids 0/0 for isolated nodes
    return (edges @ h) / in_degree


class MeanAggregationLayer(nn.Module):
    """h_v <- h_v + W2 drop(ReLU(W1 [LN h_v ; mean_{u->v} LN h_u] + b1)) + b2 (then dropout)."""

    def __init__(self, config: GNNConfig):
        super().__init__()
        self.norm = LayerNorm(config.dim, config.norm_eps)
        self.up = nn.Linear(2 * config.dim, config.ffn_dim)
        self.down = nn.Linear(config.ffn_dim, config.dim)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, h: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        x = self.norm(h)
        message = torch.cat((x, in_neighbour_mean(x, adjacency)), dim=-1)  # (n, L, 2d)
        return h + self.drop(self.down(self.drop(F.relu(self.up(message)))))


@register("gnn", GNNConfig, family="reasoning", test_overrides=dict(dim=32, ffn_dim=64, layers=2))
class FixedDepthGNN(ReasoningModel):
    """Perception -> `layers` mean-aggregation layers (one hop each) -> pairwise readout."""

    depth_mode = "fixed"  # `steps` changes nothing: one pass serves every budget
    compiled_methods = ("apply_layers",)
    ledger = gnn_ledger

    def __init__(self, config: GNNConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.layers = nn.ModuleList(MeanAggregationLayer(config) for _ in range(config.layers))
        self.readout = Readout(config)

    def forward(self, batch: ReasoningBatch, steps: int | None = None, *, return_all: bool = False,
                return_trace: bool = False):
        self.check_batch(batch)
        h = self.apply_layers(self.perception(batch), batch.extras["adjacency"])  # (n, L, d)
        logits = self.readout(h, batch)
        return self.output(logits[None] if return_all else logits, ReasoningTrace(), return_trace)

    def trace(self, batch: ReasoningBatch, steps: int | None = None):
        """Per layer (models/trace.py): the readout applied after each layer; the last is the forward."""
        self.check_batch(batch)
        return traced_layers(self.layers, self.perception(batch), batch.extras["adjacency"],
                             lambda h: self.readout(h, batch))

    def apply_layers(self, h: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = layer(h, adjacency)
        return h


# ============================================================================ Universal Transformer + ACT


@dataclass
class UniversalTransformerConfig(ReasoningConfig):
    arch: str = "ut_act"
    heads: int = 8
    max_steps: int = 28  # halting budget N_max and rows of the step embedding (the core's T_max)
    halting_threshold: float = 0.99  # 1 - epsilon: a position halts once its halting mass would pass this
    halting_bias_init: float = 1.0  # sigmoid(1) = 0.73: halting after ~2 steps at init (the UT default)
    ponder_cost: float = 0.01  # tau in loss = BCE + tau * mean(N + R)
    layer_scale: float | None = None

    per_task: ClassVar[dict[str, dict[str, Any]]] = {"graph": dict(max_steps=20), "boolean": dict(max_steps=28),
                                                     "family": dict(max_steps=20)}

    def trained_steps(self) -> tuple[int, int]:
        return self.max_steps, self.max_steps  # the halting budget; the model decides how much of it to use

    def validate(self) -> None:
        super().validate()
        self.check_heads(self.heads)
        if self.max_steps < 1:
            raise ValueError(f"model.max_steps must be >= 1, got {self.max_steps}")
        if not 0 < self.halting_threshold <= 1:
            raise ValueError(f"model.halting_threshold must be in (0, 1], got {self.halting_threshold}")
        if self.ponder_cost < 0:
            raise ValueError(f"model.ponder_cost must be >= 0, got {self.ponder_cost}")


@register("ut_act", UniversalTransformerConfig, family="reasoning",
          test_overrides=dict(dim=32, heads=4, ffn_dim=64, max_steps=6))
class UniversalTransformerACT(ReasoningModel):
    """A shared encoder layer with Adaptive Computation Time per position (Graves 2016; Dehghani et al. 2019).

    At step t every still-running position computes p_t = sigmoid(w . H + b) from its current state, then
    the block runs: H <- block(H + E[t]). A position halts at the first step where its accumulated halting
    mass would pass the threshold (or at the budget); that step is weighted by the remainder
    R = 1 - sum of its earlier p, the earlier steps by their p, so the weights of the output
    sum_t w_t H^(t+1) add up to exactly 1. Halted positions keep being updated (the others attend to them)
    but their output is frozen; the loop stops once every position has halted.
    The ponder cost tau * mean(N + R) is added by `loss`; only R carries a gradient (towards halting sooner).
    """

    depth_mode = "halting"  # the budget changes the whole computation: one pass per budget
    compiled_methods = ("act_step",)
    ledger = act_ledger

    def __init__(self, config: UniversalTransformerConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.depth_embedding = nn.Embedding(config.max_steps, config.dim)  # step signal, as in the core
        self.block = EncoderBlock(config, config.heads, config.layer_scale)
        self.halting = nn.Linear(config.dim, 1)
        nn.init.constant_(self.halting.bias, config.halting_bias_init)
        self.readout = Readout(config)

    def forward(self, batch: ReasoningBatch, steps: int | None = None, *, return_all: bool = False,
                return_trace: bool = False):
        budget = self.check_budget(steps)
        self.check_batch(batch)
        h = self.perception(batch)  # (n, L, d)
        mask = attention_mask(self.config.input_kind, batch)
        output, stats = self.ponder(h, mask, budget, real=~batch.padding)
        trace = ReasoningTrace(ponder=stats, ponder_cost=masked_mean(stats.steps + stats.remainders, stats.real))
        logits = self.readout(output, batch)
        return self.output(logits[None] if return_all else logits, trace, return_trace)

    def trace(self, batch: ReasoningBatch, steps: int | None = None):
        """Every ACT step (models/trace.py) until all positions halt, as forward runs them. Step t's readout is
        the output had the budget been t (running positions halt with their remainder: forward at budget t);
        stats: the halting probability p and whether the position still runs after the step."""
        budget = self.check_budget(steps)
        self.check_batch(batch)
        return self.traced_steps(batch, budget)

    def traced_steps(self, batch: ReasoningBatch, budget: int):
        h = self.perception(batch)
        mask = attention_mask(self.config.input_kind, batch)
        n, length, _ = h.shape
        carry = (h, h.new_zeros(n, length), h.new_zeros(n, length), h.new_zeros(n, length), h.new_zeros(n, length),
                 torch.ones(n, length, dtype=torch.bool, device=h.device), torch.zeros_like(h))
        last = torch.arange(budget, device=h.device) == budget - 1
        for t in range(budget):
            p = torch.sigmoid(self.halting(carry[0])).squeeze(-1)
            mass, running, output = carry[1], carry[5], carry[6]
            carry = self.act_step(carry, self.depth_embedding.weight[t], mask, last[t])
            # a budget of t+1 gives every running position its remainder 1 - mass at this step (act_step's last)
            halted_here = output + torch.where(running, 1 - mass, torch.zeros_like(mass)).unsqueeze(-1) * carry[0]
            yield RoundTrace(t + 1, carry[0], self.readout(halted_here, batch),
                             {"halting probability": p, "running": carry[5].to(p.dtype)})
            if not carry[5].any():
                break

    def check_budget(self, steps: int | None) -> int:
        budget = self.config.max_steps if steps is None else int(steps)
        if not 1 <= budget <= self.config.max_steps:
            raise ValueError(f"steps (halting budget) must be in [1, model.max_steps={self.config.max_steps}], "
                             f"got {budget}")
        return budget

    def ponder(self, h: torch.Tensor, mask: torch.Tensor, budget: int,
               real: torch.Tensor) -> tuple[torch.Tensor, PonderStats]:
        """Run ACT for at most `budget` steps: (halting-weighted output state (n, L, d), per-position stats)."""
        n, length, _ = h.shape
        # mass: sum of p over the steps a position has run without halting; then remainders, weight sums,
        # steps taken (each (n, L)), the running flags and the weighted output (n, L, d)
        carry = (h, h.new_zeros(n, length), h.new_zeros(n, length), h.new_zeros(n, length), h.new_zeros(n, length),
                 torch.ones(n, length, dtype=torch.bool, device=h.device), torch.zeros_like(h))
        last = torch.arange(budget, device=h.device) == budget - 1  # a tensor flag: one compiled graph per step
        for t in range(budget):
            carry = self.act_step(carry, self.depth_embedding.weight[t], mask, last[t])
            if not carry[5].any():  # every position has halted (a host sync: kept out of the compiled step)
                break
        _, _, remainders, weight_sum, steps_taken, _, output = carry
        return output, PonderStats(steps_taken, remainders, weight_sum, real)

    def act_step(self, carry: tuple[torch.Tensor, ...], row: torch.Tensor, mask: torch.Tensor, last: torch.Tensor):
        """One ACT step with depth row E[t] (d,); `last` (bool, 0-d): the budget's final step, where every
        position halts."""
        h, mass, remainders, weight_sum, steps_taken, running, output = carry
        p = torch.sigmoid(self.halting(h)).squeeze(-1)  # (n, L)
        halts_now = running & ((mass + p > self.config.halting_threshold) | last)
        continues = running & ~halts_now
        remainder = torch.where(halts_now, 1 - mass, torch.zeros_like(mass))
        weight = torch.where(continues, p, remainder)  # 0 for positions halted earlier
        mass = mass + torch.where(continues, p, torch.zeros_like(p))
        steps_taken = steps_taken + running.to(h.dtype)
        h = self.block(h + row, mask)
        return (h, mass, remainders + remainder, weight_sum + weight, steps_taken, continues,
                output + weight.unsqueeze(-1) * h)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, alpha: float = 0.0,
             trace: ReasoningTrace | None = None) -> torch.Tensor:
        """BCE + tau * mean(N + R) of the forward call that gave `logits` (its trace)."""
        if trace is None or trace.ponder_cost is None:
            raise ValueError("ut_act.loss needs the trace of its forward call: model(batch, steps, return_trace=True)")
        return reasoning_loss(logits, labels, alpha) + self.config.ponder_cost * trace.ponder_cost
