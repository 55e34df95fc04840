"""Task kind "reasoning": seed 002's training recipe for family-"reasoning" models, run by the shared Trainer.

    task:
      kind: reasoning
      name: graph              # data task: graph | boolean ("logic") | family
      steps_range: [5, 8]      # training T ~ U{lo..hi} per batch (null: the model's own steps_range)
      alpha: 0.0               # 0 = silent thinking; L = (1-a) BCE(final) + a mean_t BCE(t)
    train:
      batch_size: 64
      max_targets: 480000      # epochs x training rows (one scored target per row): 40 x 12,000

Data (all of it a function of `task.data_seed`, so every seed of a study trains on the same rows):
  training set  `train_size` rows (default, seed 002: graph 12,000, boolean 64,000, family 60,000), split equally
                over `train_difficulties` (default: the task's training range); generated once, then visited
                epoch by epoch in a fresh permutation without replacement;
  validation    `val_size` rows of the training distribution, minus any whose input (`row_key`) occurs in the
                training set or earlier in the validation set, so the printed count can fall short on tasks with
                few distinct easy instances (boolean depth 1);
  test          `test_set(...)` buckets, disjoint from training and validation rows (see `test_rows`).

Per-batch randomness is derived from (train.seed, counter), never from a stream: the permutation of epoch e
from (seed, e), the depth T of batch b from (seed, b). With `same_difficulty_batches` the epoch's permutation is
regrouped: rows of one difficulty are cut into batches of `train.batch_size` and the batches are visited in a
random order, so short (shallow) rows are no longer padded to the longest row of a mixed batch; every row is
still seen once per epoch. The task's state is therefore just two counters,
and a resumed run draws exactly the rows and depths it would have drawn.

Validation (the Trainer's `evaluate`) scores the final step at T = `val_steps` (default: the top of the
trained range) and returns {"loss": BCE, "accuracy", "steps", "rows"}.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.tasks import ReasoningBatch, get_task
from ..data.tasks.reasoning import reasoning_task_class, reasoning_task_names
from ..eval.reasoning import AccuracyGrid, evaluate_grid, id_ood, unwrap, validation_metrics
from .tasks import register_task_kind

# Independent random streams derived from the data seed (numpy SeedSequence entropy [seed, stream]).
_TRAIN_STREAM, _VAL_STREAM, _TEST_STREAM = 1, 2, 3
# ... and from train.seed for the order of rows and the depth of each batch.
_ORDER_STREAM, _DEPTH_STREAM = 11, 12


@dataclass
class ReasoningTaskConfig:
    kind: str = "reasoning"
    name: str = "graph"  # a registered reasoning task: graph | boolean | family (looped.data.tasks)
    hard_negatives: bool = False  # graph only: negatives with the hop-depth guarantees of the generator
    decued: bool = False  # family only: the generator without the shortcut cues (FamilyRelations(decued=True))
    train_difficulties: list[int] | None = None  # None: the task's training range (seed 002)
    train_size: int | None = None  # None: seed 002's size for the task (its paper_train_size)
    val_size: int = 1000  # validation rows, drawn like the training mix
    steps_range: list[int] | None = None  # training T ~ U{lo..hi}; None: model.steps_range (core), see below
    alpha: float = 0.0  # intermediate-supervision weight; 0 = silent thinking
    same_difficulty_batches: bool = False  # every batch from one difficulty (less padding); else mixed (paper)
    val_steps: int | None = None  # validation budget; None: the top of the trained range
    eval_steps: list[int] | None = None  # test budgets (steps x difficulty grid); None: seed 002's (the task's)
    test_difficulties: list[int] | None = None  # None: the task's test buckets
    test_per_bucket: int | None = None  # None: seed 002's (500 / 500 / 2,000)
    data_seed: int = 0  # seed of the generated training / validation / test rows

    def validate(self) -> None:
        known = reasoning_task_names()
        if self.name not in known:
            raise ValueError(f"task.name must be one of {', '.join(known)}, got {self.name!r}")
        if self.hard_negatives and self.name != "graph":
            raise ValueError("task.hard_negatives applies to the graph task only")
        if self.decued and self.name != "family":
            raise ValueError("task.decued applies to the family task only")
        if self.train_size is not None and self.train_size < 1:
            raise ValueError(f"task.train_size must be >= 1, got {self.train_size}")
        if self.val_size < 1:
            raise ValueError(f"task.val_size must be >= 1, got {self.val_size}")
        if self.steps_range is not None and (len(self.steps_range) != 2
                                             or not 1 <= self.steps_range[0] <= self.steps_range[1]):
            raise ValueError(f"task.steps_range must be [lo, hi] with 1 <= lo <= hi, got {self.steps_range}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"task.alpha must be in [0, 1], got {self.alpha}")
        if self.val_steps is not None and self.val_steps < 1:
            raise ValueError(f"task.val_steps must be >= 1, got {self.val_steps}")
        for name in ("eval_steps", "train_difficulties", "test_difficulties"):
            values = getattr(self, name)
            if values is not None and (not values or min(values) < (1 if name == "eval_steps" else 0)):
                raise ValueError(f"task.{name} must be a non-empty list of positive numbers, got {values}")
        if self.test_per_bucket is not None and self.test_per_bucket < 1:
            raise ValueError(f"task.test_per_bucket must be >= 1, got {self.test_per_bucket}")


# ============================================================================ resolved settings


def data_task(tc: ReasoningTaskConfig):
    """The data generator (looped.data.tasks) the config names, training split."""
    options = {"hard_negatives": True} if tc.hard_negatives else {}
    options.update({"decued": True} if tc.decued else {})
    return get_task(tc.name, **options)


def trained_steps_range(config) -> tuple[int, int]:
    """Training T range of a RunConfig: task.steps_range, else what the model config declares
    (`trained_steps()`: the core's steps_range, ACT's (max_steps, max_steps), (1, 1) for fixed depth)."""
    if config.task.steps_range:
        return tuple(config.task.steps_range)
    return tuple(config.model.trained_steps())


def trained_difficulties(tc: ReasoningTaskConfig) -> list[int]:
    return list(tc.train_difficulties or data_task(tc).train_difficulties)


def eval_steps(tc: ReasoningTaskConfig) -> list[int]:
    return sorted(tc.eval_steps or reasoning_task_class(tc.name).eval_steps)


def _seed(*entropy: int) -> np.random.Generator:
    return np.random.default_rng(list(entropy))


def _seed_int(*entropy: int) -> int:
    """A 32-bit seed for APIs that take an int (test_set)."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


# ============================================================================ data sets


def drop_seen(task, batch: ReasoningBatch, seen: set[bytes]) -> ReasoningBatch:
    """Rows whose key is not in `seen` nor repeats an earlier row; `seen` grows by the kept keys."""
    keep = []
    for i in range(len(batch)):
        key = task.row_key(batch, i)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return batch.select(torch.tensor(keep, dtype=torch.long))


def training_data(tc: ReasoningTaskConfig) -> tuple[Any, ReasoningBatch, ReasoningBatch]:
    """(data task, training rows, validation rows), a pure function of the task config."""
    task = data_task(tc)
    difficulties = trained_difficulties(tc)
    size = tc.train_size or task.paper_train_size
    train = task.sample_mixed(_seed(tc.data_seed, _TRAIN_STREAM), size, difficulties)
    seen = task.keys(train)
    val = drop_seen(task, task.sample_mixed(_seed(tc.data_seed, _VAL_STREAM), tc.val_size, difficulties), seen)
    return task, train, val


def test_rows(tc: ReasoningTaskConfig, train: ReasoningBatch, val: ReasoningBatch) -> ReasoningBatch:
    """The test buckets (`test_per_bucket` rows per test difficulty), none seen in training or validation."""
    task = data_task(tc)
    exclude = task.keys(train) | task.keys(val)
    return task.test_set(_seed_int(tc.data_seed, _TEST_STREAM), tc.test_per_bucket, tc.test_difficulties,
                         exclude=exclude)


class TestSets:
    """Test buckets per data configuration, built once per study (every row and seed shares the training data)."""

    def __init__(self):
        self._cache: dict[str, ReasoningBatch] = {}

    def get(self, tc: ReasoningTaskConfig, *, other_generator: bool = False) -> ReasoningBatch:
        """The test buckets of `tc`; with `other_generator` (graph only) the buckets of the other negative
        generator (hard <-> the paper's), still none of them a training or validation row of `tc`."""
        key = json.dumps({k: v for k, v in vars(tc).items() if k not in ("alpha", "steps_range", "val_steps",
                                                                           "eval_steps")},
                         sort_keys=True) + (" other" if other_generator else "")
        if key not in self._cache:
            _, train, val = training_data(tc)
            test_config = dataclasses.replace(tc, hard_negatives=not tc.hard_negatives) if other_generator else tc
            self._cache[key] = test_rows(test_config, train, val)
        return self._cache[key]


def score_grid(model, test: ReasoningBatch, tc: ReasoningTaskConfig, *, batch_size: int,
               steps: tuple[int, ...] = ()) -> tuple[AccuracyGrid, dict]:
    """A model's accuracy over the recipe's step budgets (and `steps`) x the test difficulties, and its ID / OOD
    summary over the trained difficulty range (eval.reasoning.id_ood: best over sufficient budgets)."""
    grid = evaluate_grid(model, test, sorted({*eval_steps(tc), *steps}), batch_size=batch_size)
    trained = trained_difficulties(tc)
    return grid, id_ood(grid, (min(trained), max(trained)))


# ============================================================================ the Trainer's task


@dataclass
class StepBatch:
    """The rows of one update and the depth T every micro-batch and process of that update runs."""

    rows: ReasoningBatch
    steps: int

    def __len__(self) -> int:
        return len(self.rows)


def group_by_difficulty(order: np.ndarray, difficulty: np.ndarray, group: int,
                        rng: np.random.Generator) -> np.ndarray:
    """`order` regrouped into runs of `group` rows of one difficulty each, the runs in a random order.

    Within a difficulty the rows keep their order in `order`; a difficulty's last run may be shorter (then the
    batch that takes it also takes the start of the next run, the only mixed batch)."""
    runs = []
    for value in np.unique(difficulty):
        rows = order[difficulty[order] == value]
        runs.extend(rows[start:start + group] for start in range(0, len(rows), group))
    return np.concatenate([runs[i] for i in rng.permutation(len(runs))])


def check_model_fits(config, task) -> None:
    """One-line errors when the model cannot read the task's rows."""
    from ..models import get_arch

    model = config.model
    if get_arch(model.arch).family != "reasoning":
        raise ValueError(f"task.kind 'reasoning' needs a family-'reasoning' model, got model.arch {model.arch!r}")
    if config.task.alpha > 0 and not get_arch(model.arch).model_cls.intermediate_supervision:
        raise ValueError(f"task.alpha: {model.arch} supervises its own steps (its loss ignores alpha); "
                         f"set task.alpha to 0, got {config.task.alpha}")
    want = task.input_kind
    if model.input_kind != want:
        raise ValueError(f"model.input_kind is {model.input_kind!r}, but task {config.task.name!r} needs {want!r}")
    if model.vocab_size != task.vocab_size or model.max_length < task.max_length:
        raise ValueError(f"model vocab_size/max_length {model.vocab_size}/{model.max_length} do not fit task "
                         f"{config.task.name!r} ({task.vocab_size} tokens, {task.max_length} positions)")


def samples_steps(config) -> bool:
    """Whether the run's model draws T from a range itself (a per-step core, model.steps_range)."""
    from ..models import get_arch

    return get_arch(config.model.arch).model_cls.depth_mode == "per_step"


class ReasoningTrainTask:
    """Binary classification of one instance per row with a per-batch depth T (see the module docstring)."""

    targets_per_sequence = 1  # one label per row: train.max_targets counts rows, i.e. epochs x train_size

    def __init__(self, config, log=print):
        tc = config.task
        self.config = tc
        self.task, self.train_rows, self.val_rows = training_data(tc)
        check_model_fits(config, self.task)
        self.steps_range = trained_steps_range(config)
        model_range = list(config.model.trained_steps())
        if tc.steps_range and model_range != list(tc.steps_range) and samples_steps(config):
            log(f"task.steps_range {list(tc.steps_range)} overrides model.steps_range {model_range}")
        self.val_steps = tc.val_steps or self.steps_range[1]
        self.alpha = tc.alpha
        self.seed = config.train.seed
        self.group = config.train.batch_size if tc.same_difficulty_batches else None  # rows per one-difficulty batch
        self.rows_served = 0  # rows handed out so far, across epochs
        self.batches_served = 0
        self._epoch, self._order = -1, None
        lo, hi = self.steps_range
        self.description = (f"{tc.name}: {len(self.train_rows):,} training rows (difficulties "
                            f"{trained_difficulties(tc)}), {len(self.val_rows):,} validation rows; "
                            f"T ~ U{{{lo}..{hi}}}, alpha {self.alpha}"
                            f"{', one difficulty per batch' if self.group else ''}")

    # --- sampling ---------------------------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> torch.Tensor:
        """Permutation of the training rows for `epoch`, from (train.seed, epoch)."""
        if epoch != self._epoch:
            rng = _seed(self.seed, _ORDER_STREAM, epoch)
            order = rng.permutation(len(self.train_rows))
            if self.group:
                order = group_by_difficulty(order, self.train_rows.difficulty.numpy(), self.group, rng)
            self._epoch, self._order = epoch, torch.from_numpy(order)
        return self._order

    def batch_steps(self, index: int) -> int:
        """Depth T of update `index`, uniform over the trained range, from (train.seed, index)."""
        lo, hi = self.steps_range
        return int(_seed(self.seed, _DEPTH_STREAM, index).integers(lo, hi + 1))

    def next_indices(self, n: int) -> torch.Tensor:
        """The next n training rows: epoch by epoch, each a permutation, without replacement within an epoch."""
        size, parts = len(self.train_rows), []
        while n > 0:
            epoch, offset = divmod(self.rows_served, size)
            take = min(n, size - offset)
            parts.append(self.epoch_order(epoch)[offset:offset + take])
            self.rows_served += take
            n -= take
        return torch.cat(parts)

    def global_batch(self, n: int) -> StepBatch:
        batch = StepBatch(self.train_rows.select(self.next_indices(n)), self.batch_steps(self.batches_served))
        self.batches_served += 1
        return batch

    @staticmethod
    def shard(batch: StepBatch, start: int, end: int) -> StepBatch:
        return StepBatch(batch.rows.select(slice(start, end)), batch.steps)

    @staticmethod
    def to(batch: StepBatch, device) -> StepBatch:
        return StepBatch(batch.rows.trim().to(device), batch.steps)

    # --- objective ---------------------------------------------------------------------------------------
    def loss(self, model, batch: StepBatch) -> torch.Tensor:
        """The model's own loss (BCE, alpha mix; ACT adds its ponder cost) at this update's depth T."""
        logits, trace = model(batch.rows, batch.steps, return_all=self.alpha > 0, return_trace=True)
        return unwrap(model).loss(logits, batch.rows.labels, self.alpha, trace)

    def evaluate(self, model, *, batch_size: int, max_batches: int, device, autocast_dtype=None) -> dict:
        with torch.autocast(torch.device(device).type, dtype=autocast_dtype or torch.bfloat16,
                            enabled=autocast_dtype is not None):
            return validation_metrics(model, self.val_rows, self.val_steps, batch_size=batch_size,
                                      max_batches=max_batches, device=device)

    # --- resume -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"rows_served": self.rows_served, "batches_served": self.batches_served}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows_served = int(state["rows_served"])
        self.batches_served = int(state["batches_served"])


register_task_kind("reasoning", ReasoningTaskConfig, ReasoningTrainTask)

__all__ = ["ReasoningTaskConfig", "ReasoningTrainTask", "StepBatch", "TestSets", "data_task",
           "eval_steps", "score_grid", "test_rows", "trained_difficulties", "trained_steps_range", "training_data"]
