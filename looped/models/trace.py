"""The per-round trace: what a model computed after each round, step or layer, returned (never stored).

    for entry in model.trace(tokens, rounds=8):        # LM rows: (batch, length) tokens
        entry.depth, entry.state, entry.logits, entry.stats
    for entry in core.trace(batch, steps=8):           # reasoning cores: a ReasoningBatch

`logits` is the model's own readout applied after that round, so the last entry's logits equal the ordinary
forward at the same depth (tests/test_lens.py holds every row that traces to it). For the looped LM rows
entry r is also the forward at depth r: no round depends on how many rounds follow it. `stats` holds
per-position statistics (batch, length) where the model has them: the adaptive-exit router's weight on the
round's exit, a core's gate, ACT's halting probability and whether the position is still running.

A model opts in by defining `trace`; the base classes refuse in one line (`looped lens` reports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class RoundTrace:
    depth: int  # rounds / steps / layers done so far (1-based)
    state: torch.Tensor  # the hidden state after it, (batch, length, dim)
    logits: torch.Tensor  # the prediction read out of that state: (batch, length, vocab) or (batch,)
    stats: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (batch, length)


def no_trace(model) -> ValueError:
    """The one-line refusal of a model that does not define `trace`."""
    name = getattr(model, "arch_name", "") or type(model).__name__
    return ValueError(f"{name} has no per-round trace (looped rows, the plain transformer and the reasoning "
                      f"models define one)")
