"""Fixed data of the seed 003 tasks: the data seeds of each split, the deterministic duplicate-free held-out
sets (validation, test), and the indexed training stream. Test sets never share a row with validation sets;
training streams can be filtered against both (`replace_excluded`)."""

from __future__ import annotations

import operator
import zlib
from collections.abc import Iterable, Sequence

import numpy as np

from .algorithmic import ADDITION_DATA_SEED, DATA_SEEDS, SPLITS, AlgorithmicTask
from .base import SequenceBatch, TaskError, get_task

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
