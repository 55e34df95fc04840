"""Algorithmic length-generalisation tasks of seed 003 (Recurrent Looped Transformer).

Six task settings, all byte-level token streams over a 277-symbol vocabulary (256 byte values + 21 specials):

  addition         reversed-digit addition, 1–8 digits per operand for training
  parity           parity of a bit string, 3–40 bits for training
  mod5_flat        flat +, −, × expression over digits 0..4 with precedence, odd lengths 3–39
  mod5_bracketed   bracketed expression trees over digits 0..4, lengths 3–40
  s5               running product of S5 permutations, 32 inputs for training
                   (variant "standard": inputs from all 120 permutations; "swaps": identity + 10 transpositions)

One file per task: addition.py, parity.py, mod5.py (flat and bracketed), s5.py; chomsky.py and chomsky_cs.py
hold the external Chomsky-hierarchy suite. Shared: vocabulary.py (the 277 symbols, the task-text codec, batch
builders) and this file (the data seeds, set sizes, held-out sets and training stream, and `AlgorithmicTask`, the
interface every task implements).

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
import zlib
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .base import SequenceBatch, TaskError, get_task, rng_for
from .vocabulary import PAD, decode_task_text

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
    aliases: dict[str, dict] = {}  # other names with preset options, e.g. a study recipe's (base.register_task)

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

    # -- the symbols a prompt may use ------------------------------------------------------------------------------

    def alphabet(self, rows: int = 512) -> list[int]:
        """Tokens of the task's rows (inputs and scored targets, BOS and EOS included), read off `rows` training rows
        at the longest training length: no task spells its alphabet out, and a sample that large holds every symbol
        (S5's 120 group elements included) with overwhelming probability. Used to refuse a prompt the model has
        never seen, e.g. `looped continue` of a parity model with --prompt "abc"."""
        batch = self.sample(rng_for(0), rows, max(self.train_lengths or self.test_lengths))
        seen = set(batch.tokens[batch.tokens != PAD].tolist()) | set(batch.targets[batch.loss_mask].tolist())
        return sorted(seen)

    # -- display -------------------------------------------------------------------------------------------------

    def render(self, batch: SequenceBatch, i: int) -> str:
        """Row `i` as text, followed by what the model must predict at the scored positions (worded so that a
        label such as parity's 0 is not read as a count)."""
        length = int(batch.lengths[i])
        tokens = batch.tokens[i, :length].tolist()
        scored = batch.targets[i][batch.loss_mask[i]].tolist()
        text = self._render_tokens(tokens)
        return f"{text}\n  expected output: {self._render_tokens(scored)}"

    def _render_tokens(self, tokens: Sequence[int]) -> str:
        return decode_task_text(tokens)

    # -- held-out sets (owned by the task; the functions below hold the seeds and the drawing) ----------------

    def validation_sets(self) -> dict[int, SequenceBatch]:
        """{length: batch} over `validation_lengths`, `validation_rows_per_length` rows each."""
        return validation_sets(self)

    def test_sets(self, lengths: Iterable[int] | None = None, n: int | None = None) -> dict[int, SequenceBatch]:
        """{length: batch}: the paper's test grid and sizes by default, disjoint from the validation rows."""
        return test_sets(self, lengths, n)

    test_sets.__test__ = False  # not a pytest test despite its name

    def heldout_keys(self, difficulty: int, splits: Sequence[str] = ("validation", "test")) -> set[bytes]:
        """Row keys of the held-out sets of one length (training streams skip them)."""
        return heldout_keys(self, difficulty, splits)

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


# ---------------------------------------------------------------------------------------------------------------
# Fixed data: seeds, held-out sets, the indexed training stream.

TaskLike = AlgorithmicTask | str


def _resolve(task: TaskLike) -> AlgorithmicTask:
    if isinstance(task, AlgorithmicTask):
        return task
    resolved = get_task(task)
    if not isinstance(resolved, AlgorithmicTask):
        raise TaskError(f"{task!r} is not an algorithmic task")
    return resolved


def split_seed(task: TaskLike, split: str) -> int:
    """The paper's data seed of a split: 20260914/5/6, except addition's train and validation data (42)."""
    if split not in DATA_SEEDS:
        raise TaskError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    if _resolve(task).name == "addition" and split != "test":
        return ADDITION_DATA_SEED
    return DATA_SEEDS[split]


def _stream_rng(task: AlgorithmicTask, split: str, index: int, purpose: str) -> np.random.Generator:
    """A generator keyed by (split seed, task + options + split + purpose, index): independent streams for
    every combination, stable across Python runs (crc32, not hash())."""
    label = zlib.crc32(f"{task.data_key}/{split}/{purpose}".encode())
    return np.random.default_rng(np.random.SeedSequence([split_seed(task, split), label, index]))


def fixed_set(
    task: TaskLike, split: str, difficulty: int, n: int, *, exclude: Iterable[bytes] = ()
) -> SequenceBatch:
    """`n` distinct rows of one length, drawn deterministically from the split's seed and the length.

    Rows are unique under `task.row_key`; rows whose key is in `exclude` are skipped. A test set also skips
    the validation rows of the same length (when that length is a validation length), so the two never
    share an example. Raises TaskError when the length has fewer than `n` distinct admissible rows.
    """
    task = _resolve(task)
    length = task.validate_length(difficulty)
    excluded = set(exclude)
    if split == "test" and length in task.validation_lengths:
        excluded |= set(task.keys(fixed_set(task, "validation", length, task.validation_rows_per_length)))
    rng = _stream_rng(task, split, length, "fixed")
    return _draw(task, rng, n, length, excluded, unique=True)


def validation_sets(task: TaskLike) -> dict[int, SequenceBatch]:
    """The paper's validation sets: {length: batch} over `validation_lengths`."""
    task = _resolve(task)
    return {d: fixed_set(task, "validation", d, task.validation_rows_per_length) for d in task.validation_lengths}


def test_sets(task: TaskLike, lengths: Iterable[int] | None = None, n: int | None = None) -> dict[int, SequenceBatch]:
    """Test sets {length: batch}; defaults are the paper's grid and sizes (1,024 rows, addition 256)."""
    task = _resolve(task)
    lengths = task.test_lengths if lengths is None else lengths
    return {d: fixed_set(task, "test", d, n or task.test_rows_per_length) for d in lengths}


test_sets.__test__ = False  # not a pytest test despite its name


def heldout_keys(task: TaskLike, difficulty: int, splits: Sequence[str] = ("validation", "test")) -> set[bytes]:
    """Keys of the default rows of one length in `splits`, for filtering training data against them."""
    task = _resolve(task)
    keys: set[bytes] = set()
    if "validation" in splits and difficulty in task.validation_lengths:
        keys |= set(task.keys(fixed_set(task, "validation", difficulty, task.validation_rows_per_length)))
    if "test" in splits and difficulty in task.test_lengths:
        keys |= set(task.keys(fixed_set(task, "test", difficulty, task.test_rows_per_length)))
    return keys


def train_batch(task: TaskLike, step: int, n: int, *, exclude: Iterable[bytes] = ()) -> SequenceBatch:
    """Batch `step` of the shared training stream: one training length, `n` rows, rows in `exclude` redrawn.

    The same (task, step, n) always gives the same batch, so runs that share the seed share the stream and a
    resumed run continues it exactly. Duplicates within a batch are allowed (short lengths have few rows).
    """
    task = _resolve(task)
    rng = _stream_rng(task, "train", operator.index(step), "stream")
    return _draw(task, rng, n, task.draw_train_length(rng), set(exclude), unique=False)


def replace_excluded(task: TaskLike, batch: SequenceBatch, length: int, rng: np.random.Generator,
                     exclude: set[bytes] | frozenset[bytes]) -> SequenceBatch:
    """`batch` (rows of one `length`) with every row whose key is in `exclude` replaced by a fresh admissible row
    drawn from `rng`. A batch with no such row comes back unchanged (the same object), so filtering a training
    stream against held-out rows leaves every batch that never met one exactly as it was."""
    if not exclude:  # most training lengths have no held-out rows: skip hashing the batch
        return batch
    task = _resolve(task)
    hits = {i for i, key in enumerate(task.keys(batch)) if key in exclude}
    if not hits:
        return batch
    kept = batch.select([i for i in range(len(batch)) if i not in hits])
    return SequenceBatch.concat([kept, _draw(task, rng, len(hits), length, set(exclude), unique=False)])


MAX_BARREN_DRAWS = 20_000  # consecutive candidates without a new admissible row before a request is refused


def _draw(
    task: AlgorithmicTask, rng: np.random.Generator, n: int, length: int, exclude: set[bytes], *, unique: bool
) -> SequenceBatch:
    """Sample rounds until `n` admissible rows are collected.

    Small spaces (a few bits, one-digit operands) can run out of admissible rows; the request is refused with
    TaskError once MAX_BARREN_DRAWS consecutive candidates brought nothing new. Rounds double while they come
    back empty, so collecting the last few rows of a nearly exhausted space stays quick.
    """
    if not exclude and not unique:
        return task.sample(rng, n, length)
    kept: list[SequenceBatch] = []
    seen = set(exclude)
    have, barren_draws, round_size = 0, 0, 0
    while have < n:
        round_size = 2 * (n - have) + 16 if barren_draws == 0 else min(2 * round_size, 4096)
        candidates = task.sample(rng, round_size, length)
        keep = []
        for i, key in enumerate(task.keys(candidates)):
            if key in seen or have + len(keep) == n:
                continue
            keep.append(i)
            if unique:
                seen.add(key)
        barren_draws = 0 if keep else barren_draws + round_size
        if barren_draws >= MAX_BARREN_DRAWS:
            raise TaskError(
                f"{task.name}: only {have} distinct admissible rows found at length {length}; {n} were requested"
            )
        if keep:
            kept.append(candidates.select(keep))
            have += len(keep)
    return SequenceBatch.concat(kept) if kept else task.sample(rng, 0, length)
