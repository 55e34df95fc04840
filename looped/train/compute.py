"""Training compute from the compute ledger (looped/models/ledger.py): FLOPs per update and the FLOP budget.

Only runs of task kind "lm" have a fixed FLOP count per update: every update is batch_size blocks of
data.block_size - 1 inputs at the model's trained depth, or under its depth schedule the expected depth at that
update. (Sequence and reasoning tasks vary the length or the step budget from batch to batch.)
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..models.ledger import TRAINING_FACTOR, model_ledger


class UpdateFlops:
    """Training FLOPs of each update (3 x forward, the ledger's convention, or what the model's depth schedule runs
    and back-propagates; 1 x forward where only an exit gate learns). Constant, except under a depth schedule that
    changes with the update (progressive): then one figure per update until the schedule settles, and the settled
    one after.
    `calls`: forward calls per update over every process (processes x accumulation steps); work the ledger counts
    once per call (the workspace fold) is paid per call. Held-out evaluation is not training and is not counted."""

    def __init__(self, model, context: int, batch: int, calls: int = 1):
        ledger = model_ledger(model, context)
        self.steady = ledger.training_flops(batch, calls)
        if getattr(model, "gate_target", None) is not None:
            # Ouro stage II: the LM is frozen and nothing back-propagates through it, so an update costs the forward
            # with the training readout (head and gate every step); the gate's own backward, a few FLOPs per
            # position and step, is left out
            self.steady /= TRAINING_FACTOR
        rounds_at = getattr(model, "training_rounds", None)
        settles = getattr(model, "schedule_settles", 0) if rounds_at is not None else 0
        # updates 0 .. settles - 1, each with its own expected depth
        self.ramp = [replace(ledger, training_rounds=rounds_at(u)).training_flops(batch, calls) for u in range(settles)]

    def of(self, update: int) -> float:
        """FLOPs of update `update` (0-based)."""
        return self.ramp[update] if update < len(self.ramp) else self.steady

    def until(self, steps: int) -> float:
        """FLOPs of the first `steps` updates."""
        if not self.ramp:
            return steps * self.steady
        ramp = min(steps, len(self.ramp))
        return sum(self.ramp[:ramp]) + (steps - ramp) * self.steady

    def steps_within(self, budget: float) -> int:
        """The most updates whose FLOPs together fit in `budget`."""
        spent = 0.0
        for update, flops in enumerate(self.ramp):
            if spent + flops > budget:
                return update
            spent += flops
        return len(self.ramp) + math.floor((budget - spent) / self.steady)


def update_flops(model, config, task, calls: int = 1) -> UpdateFlops | None:
    """The training FLOPs of the run's updates, or None where they are not fixed (not an "lm" task, no ledger)."""
    if config.task.kind != "lm" or not hasattr(model, "ledger"):
        return None
    return UpdateFlops(model, task.targets_per_sequence, config.train.batch_size, calls)


def budget_steps(train_config, targets_per_update: int, flops: UpdateFlops | None) -> int:
    """Updates in the run's budget: max_steps, max_targets rounded up, or the updates whose FLOPs fit in
    max_flops (training stops before the first update that would exceed it)."""
    if train_config.max_steps is not None:
        return train_config.max_steps
    if train_config.max_targets is not None:
        return math.ceil(train_config.max_targets / targets_per_update)
    if flops is None:  # RunConfig.validate refuses other task kinds; a plugin model may lack a ledger
        raise ValueError("train.max_flops: this model has no compute ledger; set train.max_steps or train.max_targets")
    steps = flops.steps_within(train_config.max_flops)
    if steps < 1:
        raise ValueError(f"train.max_flops: {train_config.max_flops:.4g} FLOPs do not pay for one update "
                         f"({flops.of(0):.4g} FLOPs)")
    return steps
