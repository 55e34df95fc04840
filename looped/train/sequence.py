"""Task kind `sequence`: train any family-"lm" model on an algorithmic task of seed 003 (parity, S5, mod-5,
addition) with next-token loss restricted to the task's `loss_mask`.

    task: {kind: sequence, name: parity}                        # the paper's recipe
    task: {kind: sequence, name: s5, variant: swaps}
    task: {kind: sequence, name: parity, curriculum_start: 3, same_length_batches: true}   # CPU recipe

Loss (eq. 24): every token of a row passes through the model, so unscored tokens still update the state
(encoder memory, SWA KV, feedback); only the scored targets enter the loss, normalised per example, then
averaged over examples (Appendix F.3 step 4).

Data: global batch k is a pure function of (data seed, task, k), so every row of a study sees the same stream
and a resumed run continues it exactly (the step counter is the only state). Rows draw their length
uniformly from the training range (`same_length_batches: false`, the paper's "randomly sample") or one length
per micro-batch (`true`: no padding, so the token-sequential RLT decoder runs no wasted positions). No
training row is a row of the test set of its length (a colliding row is redrawn); test sets in turn skip the
validation rows, so test rows are unseen in both.

Length curriculum (a change to the paper's recipe, off by default): the longest allowed training length
ramps linearly from `curriculum_start` to the top of the training range over the first `curriculum_fraction`
of the updates; lengths are drawn uniformly from the training lengths not above it. It is a property of the
task config, so it applies to every model row alike.

Validation (every train.eval_every updates): the paper's ID sets (256 rows per validation length, seed
20260915); "loss" is the mean per-example loss pooled over the lengths, which the trainer minimises for the
`best` checkpoint (earliest step on ties). Accuracies: final_state (last scored position of each row),
prefix_token (all scored positions pooled), sequence (every scored position right).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.tasks import SequenceBatch, TaskError
from ..data.tasks.algorithmic import AlgorithmicTask
from ..data.tasks.algorithmic import fixed_set, replace_excluded, split_seed
from ..data.tasks.vocabulary import VOCAB_SIZE
from ..eval.reasoning import unwrap
from ..eval.sequence import accuracies, algorithmic_task, score_rows
from .objectives import masked_sequence_loss, masked_terms_loss
from .tasks import register_task_kind


@dataclass
class SequenceTaskConfig:
    kind: str = "sequence"
    name: str = "parity"  # addition | parity | mod5_flat | mod5_bracketed | s5 | a Chomsky-suite task (chomsky.py)
    variant: str | None = None  # s5 only: standard | swaps
    train_lengths: list[int] | None = None  # [shortest, longest] training length; None = the task's range
    curriculum_start: int | None = None  # longest training length at update 0; None = no curriculum
    curriculum_fraction: float = 0.5  # share of the updates over which the longest length ramps up
    same_length_batches: bool = False  # one length per micro-batch (else one per row)
    data_seed: int | None = None  # training stream; None = the paper's (20260914, addition 42)
    validation_lengths: list[int] | None = None  # None = the task's (e.g. parity 32, 36, 40)
    validation_size: int | None = None  # rows per validation length; None = the paper's (256, addition 32)

    def validate(self) -> None:
        task = build_task(self)  # unknown name / variant -> one line
        if self.train_lengths is not None:
            if len(self.train_lengths) != 2 or self.train_lengths[0] > self.train_lengths[1]:
                raise ValueError(f"task.train_lengths must be [shortest, longest], got {self.train_lengths}")
            if not allowed_lengths(task, self.train_lengths):
                raise ValueError(f"task.train_lengths: {self.train_lengths} holds no length {task.name} can train on")
        if self.curriculum_start is not None and self.curriculum_start < 1:
            raise ValueError(f"task.curriculum_start must be >= 1 or null, got {self.curriculum_start}")
        self.check_curriculum_applies(task)
        if not 0 < self.curriculum_fraction <= 1:
            raise ValueError(f"task.curriculum_fraction must be in (0, 1], got {self.curriculum_fraction}")
        if self.validation_size is not None and self.validation_size < 1:
            raise ValueError(f"task.validation_size must be >= 1, got {self.validation_size}")
        for length in self.validation_lengths or ():
            try:
                task.validate_length(length)
            except TaskError as err:
                raise ValueError(f"task.validation_lengths: {err}") from None


    def check_curriculum_applies(self, task: AlgorithmicTask) -> None:
        """A curriculum that can never shorten a batch is a mistake, not a no-op: S5 trains on 32 operations
        only unless task.train_lengths widens its range, so `curriculum_start: 3` alone would change nothing."""
        if self.curriculum_start is None:
            return
        lengths = allowed_lengths(task, self.train_lengths)
        if len(lengths) < 2 or self.curriculum_start >= lengths[-1]:
            where = f"{lengths[0]} only" if len(lengths) < 2 else f"{lengths[0]}..{lengths[-1]}"
            raise ValueError(f"task.curriculum_start: {self.curriculum_start} has no effect: {task.data_key} trains "
                             f"on length {where} (widen task.train_lengths, e.g. [2, {lengths[-1]}], or set "
                             f"curriculum_start: null)")


def build_task(config: SequenceTaskConfig) -> AlgorithmicTask:
    """The algorithmic task a config names; ValueError (one line) for an unknown name or variant."""
    return algorithmic_task(config.name, config.variant)


def allowed_lengths(task: AlgorithmicTask, bounds: list[int] | None = None) -> list[int]:
    """The task's training lengths, restricted to [shortest, longest] when bounds are given. A range wider
    than the task's own keeps the lengths its generator accepts (flat mod-5: odd ones only)."""
    if bounds is None:
        return [int(x) for x in task.train_lengths]
    lengths = []
    for length in range(bounds[0], bounds[1] + 1):
        try:
            lengths.append(task.validate_length(length))
        except TaskError:
            continue
    return lengths


def curriculum_cap(step: int, total_steps: int, start: int | None, longest: int, fraction: float) -> int:
    """Longest training length allowed at update `step` (0-based): `start` ramping linearly to `longest`
    over the first `fraction` of training, then `longest`."""
    if start is None or start >= longest:
        return longest
    ramp = max(1, fraction * total_steps)
    return int(start + (longest - start) * min(1.0, step / ramp))


def batch_rng(seed: int, task: AlgorithmicTask, step: int, group: int) -> np.random.Generator:
    """Independent stream per (data seed, task + options, update, group), stable across runs (crc32)."""
    label = zlib.crc32(f"{task.data_key}/train/sequence-kind".encode())
    return np.random.default_rng(np.random.SeedSequence([seed, label, step, group]))


class SequenceTrainTask:
    """TrainTask over an algorithmic task (see the module docstring)."""

    def __init__(self, config, log=print):
        c = self.config = config.task
        self.task = build_task(c)
        self.lengths = allowed_lengths(self.task, c.train_lengths)
        self.seed = c.data_seed if c.data_seed is not None else split_seed(self.task, "train")
        tc = config.train
        self.group = tc.micro_batch_size or tc.batch_size  # rows sharing a length when same_length_batches
        self.step = 0  # index of the next global batch
        self._test_keys: dict[int, frozenset[bytes]] = {}  # length -> keys of its test rows (training skips them)
        size = c.validation_size or self.task.validation_rows_per_length
        lengths = c.validation_lengths or self.task.validation_lengths
        self.validation = {int(n): fixed_set(self.task, "validation", n, size) for n in lengths}
        scored = sum(int(b.loss_mask.sum()) for b in self.validation.values())
        self.targets_per_sequence = max(1, round(scored / sum(len(b) for b in self.validation.values())))
        self.total_steps = tc.max_steps or math.ceil(tc.max_targets / (tc.batch_size * self.targets_per_sequence))
        self.check_model(config.model)
        curriculum = "" if c.curriculum_start is None else \
            f", curriculum {c.curriculum_start}->{self.lengths[-1]} over {c.curriculum_fraction:.0%}"
        self.description = (f"{self.task.data_key} lengths {self.lengths[0]}-{self.lengths[-1]}{curriculum}, "
                            f"{'same-length batches' if c.same_length_batches else 'per-row lengths'}, "
                            f"data seed {self.seed}")

    def check_model(self, model_config) -> None:
        """Refuse, in one line, a model that cannot read the task's tokens or hold its longest row."""
        if model_config.vocab_size < VOCAB_SIZE:
            raise TaskError(f"model.vocab_size: {self.task.name} uses {VOCAB_SIZE} symbols, the model has "
                            f"{model_config.vocab_size}")
        longest = max(self.lengths[-1], *self.validation)
        width = self.task.sample(np.random.default_rng(0), 1, longest).tokens.shape[1]
        if width > model_config.context_length:
            raise TaskError(f"model.context_length: {self.task.name} rows of length {longest} take {width} "
                            f"positions, more than {model_config.context_length}")

    # --- training data ---------------------------------------------------------------------------------
    def lengths_at(self, step: int) -> list[int]:
        c = self.config
        cap = curriculum_cap(step, self.total_steps, c.curriculum_start, self.lengths[-1], c.curriculum_fraction)
        return [n for n in self.lengths if n <= cap] or self.lengths[:1]

    def batch_at(self, step: int, n: int) -> SequenceBatch:
        """Global batch `step` (pure function of the data seed, the task and the step); never a test row."""
        lengths = self.lengths_at(step)
        if self.config.same_length_batches:
            groups = []
            for g, start in enumerate(range(0, n, self.group)):
                rng = batch_rng(self.seed, self.task, step, g)
                length = int(lengths[rng.integers(len(lengths))])
                groups.append(self.sample_unseen(rng, min(self.group, n - start), length))
            return SequenceBatch.concat(groups)
        rng = batch_rng(self.seed, self.task, step, 0)
        draws = np.asarray(lengths)[rng.integers(len(lengths), size=n)]
        parts, order = [], []
        for length in np.unique(draws):  # one generator call per distinct length, rows back in draw order
            rows = np.flatnonzero(draws == length)
            parts.append(self.sample_unseen(rng, len(rows), int(length)))
            order.extend(rows.tolist())
        merged = SequenceBatch.concat(parts)
        return merged.select(np.argsort(order, kind="stable").tolist())

    def sample_unseen(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        """n training rows of one length, none of them a row of the task's test set at that length (the rare
        collision is redrawn after the batch is drawn, so every other batch is exactly the generator's)."""
        return replace_excluded(self.task, self.task.sample(rng, n, length), length, rng, self.test_keys(length))

    def test_keys(self, length: int) -> frozenset[bytes]:
        """Keys of the default test rows of one length; empty where the test grid has no such length."""
        if length not in self._test_keys:
            self._test_keys[length] = frozenset(self.task.heldout_keys(length, splits=("test",)))
        return self._test_keys[length]

    def global_batch(self, n: int) -> SequenceBatch:
        batch = self.batch_at(self.step, n)
        self.step += 1
        return batch

    @staticmethod
    def shard(batch: SequenceBatch, start: int, end: int) -> SequenceBatch:
        return batch.select(list(range(start, min(end, len(batch)))))

    @staticmethod
    def to(batch: SequenceBatch, device) -> SequenceBatch:
        return batch.trim().to(device)

    @staticmethod
    def loss(model, batch: SequenceBatch) -> torch.Tensor:
        """Eq. 24 on one micro-batch: per-example mean over scored targets, averaged over examples. Micro-
        batches are equal in size, so the trainer's average over them is the global per-example mean. A model
        with its own objective (`has_objective`, exit_gate_loop) gets the same averaging over its terms."""
        inner = unwrap(model)
        if getattr(inner, "has_objective", False):
            valid_targets = torch.where(batch.loss_mask, batch.targets, 0)  # unscored targets may be placeholders
            terms = inner.position_objective(model(batch.tokens, with_exits=True), valid_targets)
            return masked_terms_loss(terms, batch.loss_mask)
        return masked_sequence_loss(model(batch.tokens), batch.targets, batch.loss_mask)

    # --- validation -------------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model, *, batch_size: int, max_batches: int = 0, device="cpu", autocast_dtype=None) -> dict:
        """ID validation: pooled example loss ("loss") and accuracies, plus accuracy per length."""
        was_training = model.training
        model.eval()
        totals = dict(loss=0.0, rows=0, final=0, tokens=0, scored=0, whole=0)
        result: dict[str, Any] = {}
        device = torch.device(device)
        for length, rows in self.validation.items():
            per_length = score_rows(model, self.task, rows, batch_size=batch_size, max_batches=max_batches,
                                    device=device, autocast_dtype=autocast_dtype)
            for key in totals:
                totals[key] += per_length[key]
            result[f"final_state_accuracy_{length}"] = per_length["final"] / per_length["rows"]
        model.train(was_training)
        result = {"loss": totals["loss"] / totals["rows"], **accuracies(totals), **result}
        return result

    # --- resume -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


register_task_kind("sequence", SequenceTaskConfig, SequenceTrainTask)

__all__ = ["SequenceTrainTask", "SequenceTaskConfig", "accuracies", "allowed_lengths", "build_task", "curriculum_cap",
           "score_rows"]
