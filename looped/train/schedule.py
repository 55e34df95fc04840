"""Learning-rate schedules as pure functions of the update index (nothing to checkpoint)."""

from __future__ import annotations

import math


def learning_rate(step: int, *, lr: float, total_steps: int, warmup_steps: int, schedule: str,
                  min_lr: float = 0.0) -> float:
    """LR for optimizer update `step` (0-based): linear warm-up to `lr`, then constant or cosine to min_lr."""
    if warmup_steps and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {schedule!r}")
