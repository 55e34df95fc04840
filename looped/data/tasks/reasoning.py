"""What the reasoning tasks of seed 002 (DRT) share: rows, collation, de-duplication, test sets, scoring.

The tasks, one file each: graph.py (graph reachability), boolean.py (nested boolean logic), family.py (family
relations).

Each task is a binary classifier over one instance per row (`ReasoningBatch`), with

  sample(rng, n, difficulty)          n rows of exactly that difficulty
  sample_mixed(rng, n, difficulties)  an equal share per difficulty, rows shuffled
  test_set(seed, per_bucket, ...)     per-difficulty test rows, minus any row seen in `exclude`
  from_text(text) / to_text(batch, i) a user's own instance in a small text syntax, and back
  render(batch, i)                    a human-readable example with its label
  label_of(batch, i)                  the label from an independent reference solver (for tests)
  row_key(batch, i)                   bytes identifying a row's input, for de-duplication

and the facts the rest of the package reads as class attributes through the registry (`reasoning_task_class`):
input_kind, paper_width (`task_shape()` for the models), paper_train_size, eval_steps, difficulty_name,
answer_words and aliases. A new task is its module plus its name in base.BUILTIN_MODULES.

Generation follows the paper's generators (seed 002); where the paper leaves a choice open, the choice
is written in the class docstring. All randomness comes from the numpy Generator that is passed in,
so equal generators give equal batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from .base import ReasoningBatch, TaskError, rng_for, task_class, task_names

__all__ = ["CLS", "PAD", "SEP", "ReasoningTask", "Row", "balanced_labels", "pad_ids", "reasoning_task_class",
           "reasoning_task_names", "row_hits"]

PAD, CLS, SEP = "[PAD]", "[CLS]", "[SEP]"

# ============================================================================ shared machinery


@dataclass
class Row:
    """One generated instance before collation: padded tokens plus fixed-shape extras."""

    tokens: np.ndarray  # (max_length,) int64, PAD = 0
    label: int
    difficulty: int
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def key(self) -> bytes:
        return _key_bytes(self.tokens, self.extras)


def _key_bytes(tokens: np.ndarray, extras: dict[str, np.ndarray]) -> bytes:
    """The identity of a row's input: its token bytes, then every extra (sorted by name)."""
    parts = [np.ascontiguousarray(tokens, dtype=np.int64).tobytes()]
    parts += [np.ascontiguousarray(extras[name]).tobytes() for name in sorted(extras)]
    return b"".join(parts)


def pad_ids(ids: list[int], length: int) -> np.ndarray:
    out = np.zeros(length, dtype=np.int64)
    out[: len(ids)] = ids
    return out


def balanced_labels(rng: np.random.Generator, n: int) -> np.ndarray:
    """n labels, ⌈n/2⌉ positive and ⌊n/2⌋ negative, in random order (exact 50/50 for even n)."""
    labels = np.zeros(n, dtype=np.int64)
    labels[: (n + 1) // 2] = 1
    return rng.permutation(labels)


def row_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-row correctness (n,) float64 on the CPU: the prediction is label 1 where the logit is > 0."""
    if logits.shape != labels.shape:
        raise TaskError(f"logits of shape {tuple(logits.shape)} do not match labels of shape {tuple(labels.shape)}")
    return ((logits.detach().float().cpu() > 0) == (labels.detach().cpu() > 0.5)).double()


class ReasoningTask:
    """Batching, mixing, test sets and de-duplication shared by the three tasks.

    A subclass supplies `_row(rng, difficulty, label)` (label None: the task picks its natural
    label), `_check_difficulty`, `label_of`, `to_text`, `from_text` and `render`.
    """

    name: str
    vocab: list[str]
    max_length: int
    train_difficulties: list[int]
    test_difficulties: list[int]
    test_per_bucket: int
    balanced: bool = True  # 50/50 labels by construction; False: natural labels
    _extra_names: tuple[str, ...] = ()

    # Seed 002's facts about the task, read through the task registry (`task_class`) by the models, the
    # trainer, the CLI and the study: a new task declares them here and needs no entry anywhere else.
    input_kind: str  # the models' perception: "graph" (node slots, adjacency, query) or "tokens" (a token string)
    paper_width: dict[str, int]  # the paper's model width for the task: dim, heads, ffn_dim
    paper_train_size: int  # training rows (task.train_size's default)
    eval_steps: tuple[int, ...]  # the test step budgets (task.eval_steps's default)
    difficulty_name: str  # what a difficulty counts, for tables and plots: "hops", "nesting depth" ...
    answer_words: tuple[str, str]  # label 1 and label 0 in the words a reader expects (`looped think`)
    aliases: dict[str, dict] = {}  # other names with preset options, e.g. a study recipe's (base.register_task)

    @classmethod
    def task_shape(cls) -> dict:
        """What every model of this task shares (seed 002's table), as model config fields."""
        return {"input_kind": cls.input_kind, "vocab_size": len(cls.vocab), "max_length": cls.max_length,
                **cls.paper_width}

    # ---------------------------------------------------------------- to implement per task

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> Row:
        raise NotImplementedError

    def _check_difficulty(self, difficulty: int) -> None:
        raise NotImplementedError

    def label_of(self, batch: ReasoningBatch, i: int) -> int:
        raise NotImplementedError

    def _test_view(self) -> ReasoningTask:
        """The task configured for test rows (the graph task changes its node-count range)."""
        return self

    # ---------------------------------------------------------------- sampling

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def sample(self, rng: np.random.Generator, n: int, difficulty: int) -> ReasoningBatch:
        """n rows, all of exactly `difficulty`; 50/50 labels unless the task has natural labels."""
        difficulty = int(difficulty)
        self._check_difficulty(difficulty)
        labels: Iterable[int | None] = balanced_labels(rng, n) if self.balanced else [None] * n
        return self._collate([self._row(rng, difficulty, None if lab is None else int(lab)) for lab in labels])

    def sample_examples(self, rng: np.random.Generator, n: int) -> ReasoningBatch:
        """n rows of the training mix: the training difficulties in equal shares, shuffled."""
        return self.sample_mixed(rng, n, self.train_difficulties)

    def sample_mixed(self, rng: np.random.Generator, n: int, difficulties: list[int]) -> ReasoningBatch:
        """n rows split equally over the k `difficulties` (the first n % k get one row more), shuffled."""
        if not difficulties:
            raise TaskError("sample_mixed needs at least one difficulty")
        share, extra = divmod(n, len(difficulties))
        parts = [self.sample(rng, share + (j < extra), d) for j, d in enumerate(difficulties)]
        return ReasoningBatch.concat(parts).select(torch.from_numpy(rng.permutation(n)))

    def test_set(
        self,
        seed: int,
        per_bucket: int | None = None,
        difficulties: list[int] | None = None,
        exclude: set[bytes] | frozenset[bytes] = frozenset(),
        max_tries: int = 1000,
    ) -> ReasoningBatch:
        """`per_bucket` rows per test difficulty, none of whose `row_key` is in `exclude`.

        Rows are also unique within the returned set. A dropped row is replaced by a fresh one of
        the same label, so balanced tasks stay exactly 50/50 per bucket. Raises TaskError when
        `max_tries` fresh draws in a row all collide (the difficulty has too few distinct instances).
        """
        view = self._test_view()
        rng = rng_for(seed)
        per_bucket = self.test_per_bucket if per_bucket is None else per_bucket
        seen = set(exclude)
        parts = []
        for difficulty in difficulties or view.test_difficulties:
            view._check_difficulty(int(difficulty))
            labels = balanced_labels(rng, per_bucket) if view.balanced else [None] * per_bucket
            rows = [view._fresh_row(rng, int(difficulty), lab, seen, max_tries) for lab in labels]
            parts.append(view._collate(rows))
        return ReasoningBatch.concat(parts)

    def _fresh_row(
        self, rng: np.random.Generator, difficulty: int, label: int | None, seen: set[bytes], max_tries: int
    ) -> Row:
        for _ in range(max_tries):
            row = self._row(rng, difficulty, None if label is None else int(label))
            key = row.key()
            if key not in seen:
                seen.add(key)
                return row
        raise TaskError(f"{self.name}: no unseen instance of difficulty {difficulty} in {max_tries} draws")

    # ---------------------------------------------------------------- scoring

    def score(self, batch: ReasoningBatch, logits: torch.Tensor) -> dict:
        """Accuracy of final-step `logits` (n,) on `batch`: overall and per difficulty, with the row counts."""
        if len(batch) == 0:
            raise TaskError(f"{self.name}: cannot score an empty batch")
        hits = row_hits(logits, batch.labels)
        difficulty = batch.difficulty.cpu()
        by_difficulty = {int(d): float(hits[difficulty == d].mean()) for d in difficulty.unique().tolist()}
        return {"accuracy": float(hits.mean()), "rows": len(batch), "by_difficulty": by_difficulty}

    # ---------------------------------------------------------------- identity of rows

    def row_key(self, batch: ReasoningBatch, i: int) -> bytes:
        """Bytes of row i's input (tokens, then every extra such as adjacency and query)."""
        extras = {name: value[i].numpy() for name, value in batch.extras.items()}
        return _key_bytes(batch.tokens[i].numpy(), extras)

    def keys(self, batch: ReasoningBatch) -> set[bytes]:
        """`row_key` of every row: pass the union over training/validation sets as `exclude`."""
        return {self.row_key(batch, i) for i in range(len(batch))}

    # ---------------------------------------------------------------- collation

    def _collate(self, rows: list[Row]) -> ReasoningBatch:
        if rows:
            tokens = torch.from_numpy(np.stack([r.tokens for r in rows]))
        else:
            tokens = torch.zeros(0, self.max_length, dtype=torch.int64)
        extras = {}
        for name in self._extra_names:
            if rows:
                extras[name] = torch.from_numpy(np.stack([r.extras[name] for r in rows]))
            else:
                extras[name] = torch.from_numpy(self._empty_extra(name))
        return ReasoningBatch(
            tokens=tokens,
            labels=torch.tensor([r.label for r in rows], dtype=torch.float32),
            padding=tokens == 0,
            difficulty=torch.tensor([r.difficulty for r in rows], dtype=torch.int64),
            extras=extras,
        )

    def _empty_extra(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def _ids(self, batch: ReasoningBatch, i: int) -> list[int]:
        """Row i's token ids without the padding."""
        return [int(t) for t in batch.tokens[i][~batch.padding[i]]]


def reasoning_task_names() -> list[str]:
    """The registered tasks of seed 002's kind (binary classification of one instance per row)."""
    return [name for name in task_names() if issubclass(task_class(name), ReasoningTask)]


def reasoning_task_class(name: str) -> type[ReasoningTask]:
    """The class of reasoning task `name` (or of an alias); TaskError naming the reasoning tasks otherwise."""
    try:
        cls = task_class(name)
    except TaskError:
        cls = None
    if cls is None or not issubclass(cls, ReasoningTask):
        raise TaskError(f"unknown reasoning task {name!r} (known: {', '.join(reasoning_task_names())})")
    return cls
