"""Training compute from the compute ledger (looped/models/ledger.py): FLOPs per update and the FLOP budget.

Only runs of task kind "lm" have a fixed FLOP count per update: every update is batch_size blocks of
data.block_size - 1 inputs at the model's trained depth. (Sequence and reasoning tasks vary the length or the
step budget from batch to batch.)
"""

from __future__ import annotations

import math

from ..models.ledger import model_ledger


def flops_per_update(model, config, task, calls: int = 1) -> float | None:
    """Training FLOPs of one update (3 x forward, the ledger's convention), or None where they are not fixed.
    `calls`: forward calls per update over every process (processes x accumulation steps); work the ledger counts
    once per call (the workspace fold) is paid per call. Held-out evaluation is not training and is not counted."""
    if config.task.kind != "lm" or not hasattr(model, "ledger"):
        return None
    return model_ledger(model, task.targets_per_sequence).training_flops(config.train.batch_size, calls)


def budget_steps(train_config, targets_per_update: int, update_flops: float | None) -> int:
    """Updates in the run's budget: max_steps, max_targets rounded up, or the updates whose FLOPs fit in
    max_flops (training stops before the first update that would exceed it)."""
    if train_config.max_steps is not None:
        return train_config.max_steps
    if train_config.max_targets is not None:
        return math.ceil(train_config.max_targets / targets_per_update)
    if update_flops is None:  # RunConfig.validate refuses other task kinds; a plugin model may lack a ledger
        raise ValueError("train.max_flops: this model has no compute ledger; set train.max_steps or train.max_targets")
    steps = math.floor(train_config.max_flops / update_flops)
    if steps < 1:
        raise ValueError(f"train.max_flops: {train_config.max_flops:.4g} FLOPs do not pay for one update "
                         f"({update_flops:.4g} FLOPs)")
    return steps
