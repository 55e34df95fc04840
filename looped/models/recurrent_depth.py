"""Depth-recurrent reasoning core of seed 002 (DRT): one shared encoder block unrolled for T steps.

    H = Dropout(LN(Embed(tokens) [+ source/target role vectors at the two query nodes]))   (n, L, d)
    for t = 0 .. T-1:
        H~ = block(H + E[t])                    shared weights; E = depth embedding, one row per step
        z  = sigmoid(W_z [H~ ; H] + b_z)        identity-biased gate, b_z = -2 at init (gate=False: H <- H~)
        H  = z * H~ + (1 - z) * H
    logit = Linear(d, 1)(Dropout(GELU(Linear(in, d)(LN(x)))))
            x = [H_source ; H_target] (graph, in = 2d) or H[CLS] at position 0 (tokens, in = d)

Two perception interfaces (`input_kind`), each fixing its block flavour:
  graph     node i at position i; attention restricted by the adjacency mask ([v, u] = edge u->v, plus
            self-loops), so one step moves information exactly one hop; ReLU FFN, no RoPE (the paper's
            "standard PyTorch encoder layer"); learned role vectors mark the query nodes.
  tokens    [CLS] + characters/words; bidirectional attention over real tokens (PAD keys masked out),
            RoPE (base 10000) on q/k, GELU FFN.
LayerScale (gamma init 1e-4 on both residual branches) is a config field: on for the paper's token-input
tasks, off for its graph task (see `per_task` / `for_task`). Attention and FFN projections carry biases.

Steps are a call argument, `model(batch, steps=T)`; training samples T ~ U{steps_range}. E has
`depth_rows` (T_max) rows; `beyond_table` decides what T > depth_rows means:
  "error"  refuse with a one-line ValueError (the paper evaluates only T <= T_max), the default;
  "clamp"  reuse the last row E[depth_rows - 1] for every later step (the paper's "clamping" diagnostic,
           which changed beyond-range accuracy by at most 0.5 points).

Dropout (p = `dropout`) acts on the front end, both residual branches, the FFN hidden layer and the
readout hidden layer. Attention probabilities are not dropped (PyTorch's encoder layer does; our
attention module has no such option).

Seed 002's shapes give 205,441 (graph), 998,145 (nested boolean) and 1,007,617 (family) parameters:
graph = 3,456 tokens + 256 roles + 256 front LN + 2,560 depth + 132,480 block + 32,896 gate + 33,537 readout.

The family-"reasoning" protocol and the pieces every reasoning model shares (config fields, perception,
readout, encoder block, `reasoning_loss`) are in reasoning.py.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from ..data.tasks.base import ReasoningBatch
from .reasoning import (EncoderBlock, Perception, Readout, ReasoningConfig, ReasoningModel, ReasoningTrace,
                        attention_mask, masked_mean)
from .reasoning_ledger import recurrent_core_ledger
from .registry import register
from .trace import RoundTrace

# ============================================================================ configs


@dataclass
class DepthRecurrentConfig(ReasoningConfig):
    arch: str = "drt"
    heads: int = 8
    depth_rows: int = 28  # T_max: rows of the depth embedding E
    steps_range: list[int] = field(default_factory=lambda: [4, 16])  # training T ~ U{lo..hi}, inclusive
    layer_scale: float | None = 1e-4  # LayerScale init on both residual branches; None: no LayerScale
    gate: bool = True  # False: H <- block(H + E[t]), the block's own residual update
    gate_bias_init: float = -2.0  # sigmoid(-2) = 0.12: keep 88 % of the previous state at init
    beyond_table: Literal["clamp", "error"] = "error"  # steps > depth_rows: reuse E[-1], or refuse

    per_task: ClassVar[dict[str, dict[str, Any]]] = {
        "graph": dict(depth_rows=20, steps_range=[5, 8], layer_scale=None),
        "boolean": dict(depth_rows=28, steps_range=[4, 16]),
        "family": dict(depth_rows=20, steps_range=[1, 12]),
    }

    def trained_steps(self) -> tuple[int, int]:
        return tuple(self.steps_range)

    def validate(self) -> None:
        super().validate()
        self.check_heads(self.heads)
        if self.depth_rows < 1:
            raise ValueError(f"model.depth_rows must be >= 1, got {self.depth_rows}")
        if len(self.steps_range) != 2 or not 1 <= self.steps_range[0] <= self.steps_range[1] <= self.depth_rows:
            raise ValueError(f"model.steps_range must be [lo, hi] with 1 <= lo <= hi <= depth_rows "
                             f"({self.depth_rows}), got {list(self.steps_range)}")
        if self.layer_scale is not None and self.layer_scale <= 0:
            raise ValueError(f"model.layer_scale must be > 0 or null, got {self.layer_scale}")
        if self.beyond_table not in ("clamp", "error"):
            raise ValueError(f"model.beyond_table must be 'clamp' or 'error', got {self.beyond_table!r}")


@dataclass
class TiedCoreConfig(DepthRecurrentConfig):
    """The stability ablation of Table 3: the same core with no LayerScale and no gate."""

    arch: str = "drt_tied"
    layer_scale: float | None = None
    gate: bool = False


# ============================================================================ the core

_TINY = dict(dim=32, heads=4, ffn_dim=64, depth_rows=6, steps_range=[1, 3])


@register("drt", DepthRecurrentConfig, family="reasoning", test_overrides=_TINY)
class DepthRecurrentCore(ReasoningModel):
    """One shared block unrolled `steps` times with depth embeddings and the identity-biased gate."""

    depth_mode = "per_step"  # the state after step t does not depend on the budget T
    compiled_methods = ("update",)
    ledger = recurrent_core_ledger  # FLOPs by part and step (looped/models/reasoning_ledger.py)

    def __init__(self, config: DepthRecurrentConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.depth_embedding = nn.Embedding(config.depth_rows, config.dim)  # E, N(0, 1) init
        self.block = EncoderBlock(config, config.heads, config.layer_scale)
        self.gate = None
        if config.gate:
            self.gate = nn.Linear(2 * config.dim, config.dim)  # W_z: [H~ ; H] -> d
            nn.init.constant_(self.gate.bias, config.gate_bias_init)
        self.readout = Readout(config)

    def forward(self, batch: ReasoningBatch, steps: int, *, return_all: bool = False, return_trace: bool = False):
        steps = self.check_steps(steps)
        h, mask = self.perceive(batch)
        real = ~batch.padding  # (n, L)
        logits, gate_means = [], []
        for t in range(steps):
            h, z = self.step(h, t, mask)
            if z is not None:
                gate_means.append(masked_mean(z.detach(), real))
            z = None  # drop the gate before the next step: inference memory stays flat in T
            if return_all or t == steps - 1:  # the readout of other steps is only needed for return_all
                logits.append(self.readout(h, batch))
        trace = ReasoningTrace(gate_means=torch.stack(gate_means) if gate_means else None)
        return self.output(torch.stack(logits) if return_all else logits[-1], trace, return_trace)

    def trace(self, batch: ReasoningBatch, steps: int):
        """Every step (models/trace.py): the state, the readout (= forward at that budget) and the mean gate z
        per position."""
        steps = self.check_steps(steps)
        h, mask = self.perceive(batch)
        return self.traced_steps(batch, h, mask, steps)

    def traced_steps(self, batch: ReasoningBatch, h: torch.Tensor, mask: torch.Tensor, steps: int):
        for t in range(steps):
            h, z = self.step(h, t, mask)
            yield RoundTrace(t + 1, h, self.readout(h, batch), {} if z is None else {"gate": z.mean(-1)})

    def perceive(self, batch: ReasoningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The state before step 0 and the attention mask every step uses: (H (n, L, d), mask)."""
        self.check_batch(batch)
        return self.perception(batch), attention_mask(self.config.input_kind, batch)

    def run_steps(self, h: torch.Tensor, mask: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Steps start .. stop-1 (0-based) from the state H after `start` steps: the state after `stop` steps."""
        for t in range(start, stop):
            h, _ = self.step(h, t, mask)
        return h

    def step(self, h: torch.Tensor, t: int, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Recurrence step t (0-based): H (n, L, d) -> (new H, gate z (n, L, d) or None)."""
        return self.update(h, self.depth_row(t), mask)

    def update(self, h: torch.Tensor, row: torch.Tensor,
               mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step with depth row E[t] (d,) given as a tensor, so every step shares one compiled graph."""
        h_block = self.block(h + row, mask)  # H~ = block(H + E[t])
        if self.gate is None:
            return h_block, None
        z = torch.sigmoid(self.gate(torch.cat((h_block, h), dim=-1)))  # the gate sees H without E[t]
        return z * h_block + (1 - z) * h, z

    def depth_row(self, t: int) -> torch.Tensor:
        """E[t] (d,); past the table the last row (beyond_table='clamp'; 'error' stops in check_steps)."""
        return self.depth_embedding.weight[min(t, self.config.depth_rows - 1)]

    def check_steps(self, steps: int) -> int:
        steps = operator.index(steps)
        rows = self.config.depth_rows
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if steps > rows and self.config.beyond_table == "error":
            raise ValueError(f"steps {steps} > model.depth_rows {rows}: the depth embedding has no row for step "
                             f"{rows + 1} (set model.beyond_table='clamp' to reuse the last row)")
        return steps


@register("drt_tied", TiedCoreConfig, family="reasoning", test_overrides=_TINY)
class TiedDepthRecurrentCore(DepthRecurrentCore):
    """The weight-tied ablation: H <- block(H + E[t]) with no LayerScale and no gate (TiedCoreConfig)."""
