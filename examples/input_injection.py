"""A new looped architecture in one file: the shared loop with input injection.

    h^{r+1} = T(h^r + lambda_r * e)        lambda_r: a learned per-round, per-channel scale, initialised to 1

Re-adding the input embedding e every round is a common way to keep a deep loop anchored to its input
(cheaper than seed 000's anchor MLP: d parameters per round). Everything else (the shared block, per-round KV
caches, test-time depth, early exit, the readout) comes from `LoopedLM`; this file only says what the block
reads each round. Use it from the command line and run the shared test drivers on it:

    export LOOPED_PLUGINS=examples/input_injection.py
    looped params injected_loop
    looped train examples/injected_loop.yaml --out runs/injected_loop     # the quickstart's recipe, this model
    python -m pytest tests/test_lm_registry.py -k injected_loop           # every shared driver
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from looped.models.loop import LoopConfig, LoopedLM
from looped.models.registry import register


@dataclass
class InjectedLoopConfig(LoopConfig):
    arch: str = "injected_loop"
    injection_init: float = 1.0  # lambda_r at initialisation


@register("injected_loop", InjectedLoopConfig,
          test_overrides=dict(dim=32, heads=4, ffn_dim=48, rounds=4, context_length=40), test_depths=(1, 4, 6))
class InjectedLoop(LoopedLM):
    """h^{r+1} = T(h^r + lambda_r * e), h^0 = e."""

    injects_input = True  # e enters every round, so truncated backprop (depth_schedule.backprop_rounds) still trains it

    def build_extras(self) -> None:
        c = self.config
        self.injection = nn.Parameter(torch.full((c.rounds, c.dim), float(c.injection_init)))  # lambda_r

    def block_input(self, r, e, h, state, aux):
        # rounds beyond the trained depth R reuse the last trained scale (test-time depth, as the seed 000 rows)
        return h + self.injection[min(r, self.config.rounds - 1)] * e
