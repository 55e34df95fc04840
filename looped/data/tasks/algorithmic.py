"""Algorithmic length-generalisation tasks of seed 003 (Recurrent Looped Transformer).

Six task settings, all byte-level token streams over a 277-symbol vocabulary (256 byte values + 21 specials):

  addition         reversed-digit addition, 1–8 digits per operand for training
  parity           parity of a bit string, 3–40 bits for training
  mod5_flat        flat +, −, × expression over digits 0..4 with precedence, odd lengths 3–39
  mod5_bracketed   bracketed expression trees over digits 0..4, lengths 3–40
  s5               running product of S5 permutations, 32 inputs for training
                   (variant "standard": inputs from all 120 permutations; "swaps": identity + 10 transpositions)

One file per task: addition.py, parity.py, mod5.py (flat and bracketed), s5.py. Shared: vocabulary.py (the 277
symbols, the task-text codec, batch builders), splits.py (data seeds, held-out sets, the training stream) and
this file (the data seeds and set sizes, and `AlgorithmicTask`, the interface every task implements).

Every batch is a `SequenceBatch`: `tokens` starts with BOS, `targets[t]` is the token the model must predict at
position t (the next token, except for S5 where it is the running state, see `S5Task`), `loss_mask` marks the
scored positions, rows are padded with PAD. One call to `sample` uses one length for all rows.

Data seeds follow the paper (Appendix J.4): 20260914 / 20260915 / 20260916 for train / validation / test, and 42
for addition's training and validation data (its test pairs use the test seed, Appendix J.6). `fixed_set` draws a
deterministic, duplicate-free held-out set per (task, split, length); test sets exclude the validation rows of the
same length. `train_batch` draws step `k` of the shared, indexed training stream.

Pure-Python reference evaluators (`reference_*`) recompute every label from the rendered text, by a different code
path than the generators; the tests compare the two.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
import torch

from .base import SequenceBatch, TaskError
from .vocabulary import decode_task_text

# ---------------------------------------------------------------------------------------------------------------
# Data seeds and held-out set sizes (paper Appendix J.1.1, J.4, J.6).

DATA_SEEDS: dict[str, int] = {"train": 20260914, "validation": 20260915, "test": 20260916}
ADDITION_DATA_SEED = 42
SPLITS = ("train", "validation", "test")
VALIDATION_ROWS_PER_LENGTH = 256  # formal tasks: 256 per validation length
TEST_ROWS_PER_LENGTH = 1024  # formal tasks: 1,024 per test length
ADDITION_VALIDATION_ROWS_PER_WIDTH = 32  # 8 widths x 32 = the paper's 256 mixed 1-8-digit validation pairs
ADDITION_TEST_ROWS_PER_WIDTH = 256


# ---------------------------------------------------------------------------------------------------------------
# The common task interface.


class AlgorithmicTask:
    """Shared machinery: length checks, training-length draws, scoring, rendering, deduplication.

    Subclasses set the length attributes and implement `_generate(rng, n, difficulty) -> SequenceBatch`.
    """

    name: str = "?"  # set by @register_task
    min_length: int = 1
    max_length: int = 4096
    train_lengths: Sequence[int] = ()
    validation_lengths: tuple[int, ...] = ()
    test_lengths: tuple[int, ...] = ()
    validation_rows_per_length: int = VALIDATION_ROWS_PER_LENGTH
    test_rows_per_length: int = TEST_ROWS_PER_LENGTH
    primary_metric: str = "final_state_accuracy"  # the paper's headline number for this task
    chance_accuracy: float = 0.0  # uniform-prediction accuracy of the primary metric's label

    @property
    def data_key(self) -> str:
        """Names the data distribution (task + options); part of every fixed-set seed."""
        return self.name

    # -- lengths -------------------------------------------------------------------------------------------------

    def validate_length(self, difficulty: int) -> int:
        """`difficulty` as an int, or TaskError when the generator cannot produce that length."""
        try:
            length = operator.index(difficulty)
        except TypeError:
            raise TaskError(f"{self.name}: length must be an integer, got {difficulty!r}") from None
        if not self.min_length <= length <= self.max_length:
            raise TaskError(
                f"{self.name}: length {length} outside the supported range {self.min_length}..{self.max_length}"
            )
        return length

    def draw_train_length(self, rng: np.random.Generator) -> int:
        """One training length, uniform over `train_lengths`."""
        return int(self.train_lengths[int(rng.integers(len(self.train_lengths)))])

    # -- sampling ------------------------------------------------------------------------------------------------

    def sample(self, rng: np.random.Generator, n: int, difficulty: int) -> SequenceBatch:
        """`n` rows of length parameter `difficulty`, deterministic given `rng`'s state."""
        length = self.validate_length(difficulty)
        if operator.index(n) < 0:
            raise TaskError(f"{self.name}: number of rows must be >= 0, got {n}")
        return self._generate(rng, n, length)

    def sample_train(self, rng: np.random.Generator, n: int) -> SequenceBatch:
        """A same-length training batch: one length drawn uniformly from `train_lengths` for all rows."""
        return self.sample(rng, n, self.draw_train_length(rng))

    def sample_examples(self, rng: np.random.Generator, n: int) -> SequenceBatch:
        """n rows of the training mix (one training length for the batch, as `sample_train`)."""
        return self.sample_train(rng, n)

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        raise NotImplementedError

    # -- scoring -------------------------------------------------------------------------------------------------

    def score(self, batch: SequenceBatch, predictions: torch.Tensor) -> dict[str, float]:
        """Accuracies of argmax `predictions` (n, width) — or logits (n, width, vocab) — against the targets.

        final_state_accuracy   fraction of rows whose last scored position is right
        prefix_token_accuracy  fraction of all scored positions that are right (pooled over rows)
        sequence_accuracy      fraction of rows with every scored position right
        sequences, scored_tokens  the denominators, so callers can pool several batches exactly
        """
        if len(batch) == 0:
            raise TaskError(f"{self.name}: cannot score an empty batch")
        if predictions.dim() == 3:
            predictions = predictions.argmax(-1)
        if tuple(predictions.shape) != tuple(batch.targets.shape):
            raise TaskError(
                f"{self.name}: predictions of shape {tuple(predictions.shape)} do not match "
                f"targets of shape {tuple(batch.targets.shape)}"
            )
        mask = batch.loss_mask
        correct = (predictions.to(batch.targets.device) == batch.targets) & mask
        scored_per_row = mask.sum(1)
        last = mask.shape[1] - 1 - mask.flip(1).to(torch.int64).argmax(1)  # last scored position of each row
        final = correct[torch.arange(len(batch)), last]
        return {
            "final_state_accuracy": final.double().mean().item(),
            "prefix_token_accuracy": int(correct.sum()) / int(mask.sum()),
            "sequence_accuracy": (correct.sum(1) == scored_per_row).double().mean().item(),
            "sequences": float(len(batch)),
            "scored_tokens": float(mask.sum()),
        }

    # -- display -------------------------------------------------------------------------------------------------

    def render(self, batch: SequenceBatch, i: int) -> str:
        """Row `i` as text, followed by the scored targets."""
        length = int(batch.lengths[i])
        tokens = batch.tokens[i, :length].tolist()
        scored = batch.targets[i][batch.loss_mask[i]].tolist()
        text = self._render_tokens(tokens)
        return f"{text}\n  scored targets: {self._render_tokens(scored)}"

    def _render_tokens(self, tokens: Sequence[int]) -> str:
        return decode_task_text(tokens)

    # -- deduplication -------------------------------------------------------------------------------------------

    def row_key(self, batch: SequenceBatch, i: int) -> bytes:
        """Identity of row `i` for deduplication: its real tokens."""
        length = int(batch.lengths[i])
        return batch.tokens[i, :length].numpy().astype("<u2").tobytes()

    def keys(self, batch: SequenceBatch) -> list[bytes]:
        return [self.row_key(batch, i) for i in range(len(batch))]

    def dedup(self, batch: SequenceBatch, exclude: set[bytes] | frozenset[bytes] = frozenset()) -> SequenceBatch:
        """The batch without rows whose key is in `exclude` or repeats an earlier row of the batch."""
        seen = set(exclude)
        keep = []
        for i, key in enumerate(self.keys(batch)):
            if key not in seen:
                seen.add(key)
                keep.append(i)
        return batch.select(keep)
