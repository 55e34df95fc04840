"""A new reasoning architecture in one file: a looped encoder without depth embeddings.

    H = perception(batch)                       the shared front end (embedding, role vectors, LN, dropout)
    for t = 0 .. T-1:   H <- block(H)           one shared encoder layer, nothing tells it which step it is on
    logit = readout(H)                          the shared readout ([H_source ; H_target] or H[CLS])

The seed 002 core adds a learned depth embedding E[t] and a gate to each step; dropping both asks whether
the step index matters at all (a step-agnostic loop also runs past any table at test time). Everything but
the loop comes from looped/models/reasoning.py; this file declares what the model can do (`depth_mode`,
`trained_steps`) and registers it. Use it from the command line and run the shared drivers on it:

    export LOOPED_PLUGINS=examples/looped_encoder.py
    looped params looped_encoder
    python -m pytest tests/test_reasoning_registry.py -k looped_encoder     # every shared reasoning driver
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from looped.models.reasoning import (EncoderBlock, Perception, Readout, ReasoningConfig, ReasoningModel,
                                     ReasoningTrace, attention_mask)
from looped.models.registry import register


@dataclass
class LoopedEncoderConfig(ReasoningConfig):
    arch: str = "looped_encoder"
    heads: int = 8
    steps_range: list[int] = field(default_factory=lambda: [4, 16])  # training T ~ U{lo..hi}

    per_task: ClassVar[dict[str, dict[str, Any]]] = {"graph": dict(steps_range=[5, 8])}

    def trained_steps(self) -> tuple[int, int]:
        return tuple(self.steps_range)

    def validate(self) -> None:
        super().validate()
        self.check_heads(self.heads)
        if len(self.steps_range) != 2 or not 1 <= self.steps_range[0] <= self.steps_range[1]:
            raise ValueError(f"model.steps_range must be [lo, hi] with 1 <= lo <= hi, got {self.steps_range}")


@register("looped_encoder", LoopedEncoderConfig, family="reasoning",
          test_overrides=dict(dim=32, heads=4, ffn_dim=64, steps_range=[1, 3]))
class LoopedEncoder(ReasoningModel):
    """Perception -> one shared encoder block applied `steps` times -> readout."""

    depth_mode = "per_step"  # step t never looks at the budget T: one pass gives every smaller budget

    def __init__(self, config: LoopedEncoderConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.block = EncoderBlock(config, config.heads, layer_scale=None)
        self.readout = Readout(config)

    def forward(self, batch, steps: int, *, return_all: bool = False, return_trace: bool = False):
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.check_batch(batch)  # one-line errors for inputs the model cannot read
        h = self.perception(batch)  # (n, L, d)
        mask = attention_mask(self.config.input_kind, batch)  # adjacency (graph) or padding (tokens)
        logits = []
        for t in range(steps):
            h = self.block(h, mask)
            if return_all or t == steps - 1:
                logits.append(self.readout(h, batch))
        return self.output(torch.stack(logits) if return_all else logits[-1], ReasoningTrace(), return_trace)
