"""Synthetic tasks: each is `sample(rng, n, difficulty)` plus a scorer, registered by name.

Two kinds:
  reasoning  (seed 002) binary classification of one instance per row, `ReasoningBatch`
  sequence   (seed 003) per-token targets with a loss mask over a token stream, `SequenceBatch`
Every task is deterministic given its numpy Generator, renders examples for humans (`looped data show`),
and documents its token format in its class docstring.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch


SEQUENCE_PAD = 258  # PAD of the 277-symbol task vocabulary (vocabulary.PAD): fills rows, never scored


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

    def select(self, index) -> ReasoningBatch:
        """Rows `index` (a slice, index tensor or boolean mask) of every field."""
        return ReasoningBatch(tokens=self.tokens[index], labels=self.labels[index], padding=self.padding[index],
                              difficulty=self.difficulty[index],
                              extras={name: value[index] for name, value in self.extras.items()})

    def first_per_difficulty(self, n: int | None) -> ReasoningBatch:
        """The first `n` rows of every difficulty, in order (every row for None): a sample of each test bucket."""
        if n is None:
            return self
        keep, seen = [], {}
        for i, d in enumerate(self.difficulty.tolist()):
            seen[d] = seen.get(d, 0) + 1
            if seen[d] <= n:
                keep.append(i)
        return self.select(torch.tensor(keep, dtype=torch.long))

    @staticmethod
    def concat(batches: Sequence[ReasoningBatch]) -> ReasoningBatch:
        """Rows of all batches, in order (extras must carry the same names)."""
        names = sorted(batches[0].extras)
        return ReasoningBatch(
            tokens=torch.cat([b.tokens for b in batches]),
            labels=torch.cat([b.labels for b in batches]),
            padding=torch.cat([b.padding for b in batches]),
            difficulty=torch.cat([b.difficulty for b in batches]),
            extras={name: torch.cat([b.extras[name] for b in batches]) for name in names},
        )

    def to(self, device) -> ReasoningBatch:
        return ReasoningBatch(tokens=self.tokens.to(device), labels=self.labels.to(device),
                              padding=self.padding.to(device), difficulty=self.difficulty.to(device),
                              extras={name: value.to(device) for name, value in self.extras.items()})

    def trim(self) -> ReasoningBatch:
        """Sequence rows cut to the longest real row of the batch.

        PAD keys are masked out of attention and the readout reads position 0, so the columns after the longest
        row change nothing but the cost: nested-boolean rows average 38 of their 128 positions. Graph rows keep
        their 20 node slots (the adjacency mask and the query indices are laid out on them).
        """
        if "adjacency" in self.extras or self.tokens.shape[1] == 0:
            return self
        real = (~self.padding).any(dim=0).nonzero()
        keep = int(real.max()) + 1 if len(real) else 1
        if keep == self.tokens.shape[1]:
            return self
        return ReasoningBatch(tokens=self.tokens[:, :keep], labels=self.labels, padding=self.padding[:, :keep],
                              difficulty=self.difficulty, extras=dict(self.extras))


@dataclass
class SequenceBatch:
    tokens: torch.Tensor  # (n, length) int64 inputs
    targets: torch.Tensor  # (n, length) int64 next-token targets (any value where loss_mask is False)
    loss_mask: torch.Tensor  # (n, length) bool: positions that are scored
    lengths: torch.Tensor  # (n,) int64 real (unpadded) lengths
    difficulty: torch.Tensor  # (n,) int64 task length parameter (bits, digits, operations ...)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def select(self, rows: Sequence[int] | torch.Tensor) -> SequenceBatch:
        """The batch restricted to `rows` (in that order), with padding trimmed to the longest kept row."""
        index = torch.as_tensor(rows, dtype=torch.int64)
        width = int(self.lengths[index].max()) if len(index) else self.tokens.shape[1]
        return SequenceBatch(tokens=self.tokens[index, :width], targets=self.targets[index, :width],
                             loss_mask=self.loss_mask[index, :width], lengths=self.lengths[index],
                             difficulty=self.difficulty[index])

    @staticmethod
    def concat(batches: Sequence[SequenceBatch]) -> SequenceBatch:
        """Rows of several batches in order, padded to the widest (inputs and targets with PAD)."""
        width = max(b.tokens.shape[1] for b in batches)

        def padded(name: str, fill) -> torch.Tensor:
            parts = []
            for b in batches:
                part = getattr(b, name)
                extra = width - part.shape[1]
                parts.append(torch.nn.functional.pad(part, (0, extra), value=fill) if extra else part)
            return torch.cat(parts)

        return SequenceBatch(tokens=padded("tokens", SEQUENCE_PAD), targets=padded("targets", SEQUENCE_PAD),
                             loss_mask=padded("loss_mask", False), lengths=torch.cat([b.lengths for b in batches]),
                             difficulty=torch.cat([b.difficulty for b in batches]))

    def to(self, device) -> SequenceBatch:
        return SequenceBatch(*(t.to(device, non_blocking=True) for t in
                               (self.tokens, self.targets, self.loss_mask, self.lengths, self.difficulty)))

    def trim(self, width: int | None = None) -> SequenceBatch:
        """The first `width` positions of every row; by default up to and including the last scored position
        (later inputs cannot influence any scored prediction (causality), so they need not be run)."""
        if width is None:
            scored = self.loss_mask.any(0).nonzero()
            width = int(scored[-1]) + 1 if len(scored) else self.tokens.shape[1]
        return SequenceBatch(self.tokens[:, :width], self.targets[:, :width], self.loss_mask[:, :width],
                             self.lengths, self.difficulty)


_TASKS: dict[str, type] = {}
# Other names for a registered task with preset options (a study recipe's name, e.g. "logic" for "boolean"),
# collected from each task class's `aliases` when it registers: accepted wherever a task is named.
_ALIASES: dict[str, tuple[str, dict]] = {}


def register_task(name: str):
    """Class decorator: register the task under `name`, and its class attribute `aliases` beside it."""
    def wrap(cls: type) -> type:
        aliases = dict(getattr(cls, "aliases", {}))
        taken = [n for n in (name, *aliases) if n in _TASKS or n in _ALIASES]
        if taken:
            raise ValueError(f"task name {taken[0]!r} is already registered")
        cls.name = name
        _TASKS[name] = cls
        _ALIASES.update({alias: (name, dict(preset)) for alias, preset in aliases.items()})
        return cls
    return wrap


# Loaded by module name (their @register_task decorators fill _TASKS), so no task module imports a module
# that imports it. A new task is its module plus its name here.
BUILTIN_MODULES = ("addition", "parity", "mod5", "s5", "graph", "boolean", "family", "chomsky", "chomsky_cs")


def _load_builtin() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{module}")


def _resolve(name: str) -> tuple[str, dict]:
    """(registered name, preset options) of a task name or alias; TaskError naming the known tasks."""
    _load_builtin()
    name, preset = _ALIASES.get(name, (name, {}))
    if name not in _TASKS:
        raise TaskError(f"unknown task {name!r} (known: {', '.join(sorted(_TASKS))})")
    return name, preset


def task_class(name: str) -> type:
    """The class of task `name` (or of an alias's task): its facts are class attributes, no instance needed."""
    return _TASKS[_resolve(name)[0]]


def task_options(name: str) -> dict:
    """The options alias `name` presets (e.g. {"hard_negatives": True}); {} for a task's own name."""
    return dict(_resolve(name)[1])


def get_task(name: str, **options):
    name, preset = _resolve(name)
    return _TASKS[name](**{**preset, **options})


def task_names() -> list[str]:
    _load_builtin()
    return sorted(_TASKS)


def alias_names() -> list[str]:
    _load_builtin()
    return sorted(_ALIASES)


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)
