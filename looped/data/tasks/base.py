"""Synthetic tasks: each is `sample(rng, n, difficulty)` plus a scorer, registered by name.

Two kinds:
  reasoning  (seed 002) binary classification of one instance per row, `ReasoningBatch`
  sequence   (seed 003) per-token targets with a loss mask over a token stream, `SequenceBatch`
Every task is deterministic given its numpy Generator, renders examples for humans (`looped data show`),
and documents its token format in its class docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


class TaskError(ValueError):
    """Bad task input (unknown token, difficulty outside what a generator supports ...); one line."""


@dataclass
class ReasoningBatch:
    tokens: torch.Tensor  # (n, length) int64, PAD-padded
    labels: torch.Tensor  # (n,) float 0/1
    padding: torch.Tensor  # (n, length) bool, True at PAD positions
    difficulty: torch.Tensor  # (n,) int64: hops / nesting depth / chain length of each row
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. adjacency (n, L, L), query (n, 2)

    def __len__(self) -> int:
        return self.tokens.shape[0]


@dataclass
class SequenceBatch:
    tokens: torch.Tensor  # (n, length) int64 inputs
    targets: torch.Tensor  # (n, length) int64 next-token targets (any value where loss_mask is False)
    loss_mask: torch.Tensor  # (n, length) bool: positions that are scored
    lengths: torch.Tensor  # (n,) int64 real (unpadded) lengths
    difficulty: torch.Tensor  # (n,) int64 task length parameter (bits, digits, operations ...)

    def __len__(self) -> int:
        return self.tokens.shape[0]


_TASKS: dict[str, type] = {}


def register_task(name: str):
    def wrap(cls: type) -> type:
        if name in _TASKS:
            raise ValueError(f"task {name!r} is already registered")
        cls.name = name
        _TASKS[name] = cls
        return cls
    return wrap


def _load_builtin() -> None:
    from . import algorithmic, reasoning  # noqa: F401  (their @register_task decorators fill _TASKS)


def get_task(name: str, **options):
    _load_builtin()
    if name not in _TASKS:
        raise TaskError(f"unknown task {name!r} (known: {', '.join(sorted(_TASKS))})")
    return _TASKS[name](**options)


def task_names() -> list[str]:
    _load_builtin()
    return sorted(_TASKS)


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)
