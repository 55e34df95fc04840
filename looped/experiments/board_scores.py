"""The leaderboard (issue 31 part 3): how a finished run is scored, and the training FLOPs it used.

Each suite kind has one score (looped.experiments.board.METRICS) and, for a row with a test-time depth, the same
score at 1x / 2x / 4x its trained depth (board.DEPTH_FACTORS):

  lm         held-out bits per byte of the whole capped held-out stream (evaluate_lm), at rounds k x R
  chomsky    per-token output accuracy averaged over the test lengths (evaluate_lengths, length_average)
  sequence   final-state accuracy averaged over the test lengths above the longest training length
  reasoning  OOD accuracy, best over sufficient budgets (id_ood, seed 002 Table 3); the depth columns hold the
             mean OOD accuracy at exactly k x the top of the trained step range

Training FLOPs come from the compute ledger. A byte-LM update always costs the same (batch x block at the trained
depth). A task update's cost follows its batch (the padded width of a sequence batch, the rows and step budget of
a reasoning batch), so the run's data stream is replayed from the start (every task's batches are a pure function
of its seed and the update index) and each batch is priced by the ledger.
"""

from __future__ import annotations

import statistics

import torch

from ..eval.lengths import evaluate_lengths, length_average
from ..models.ledger import model_ledger
from ..train import reasoning as rtask
from ..train.sequence import allowed_lengths, build_task
from ..train.tasks import make_train_task
from . import board
from .lm_scores import scorer


class AtDepth(torch.nn.Module):
    """A looped LM called at a fixed test-time depth, for scorers that call `model(tokens)`."""

    def __init__(self, model, rounds: int):
        super().__init__()
        self.model, self.rounds = model, rounds
        self.train(model.training)  # a scorer restores the mode it found: the wrapped model's, not a new module's

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, rounds=self.rounds)


def depths(model) -> list[int]:
    """The test-time depths an LM row is scored at (k x its trained rounds); [] for a fixed-depth row."""
    trained = model.default_rounds
    return [] if trained is None else [k * trained for k in board.DEPTH_FACTORS]


def trained_depth(model, config) -> int | None:
    """What the depth sweep multiplies: an LM row's rounds (recursions), a reasoning core's top trained step
    budget; None for a fixed-depth row."""
    if config.task.kind == "reasoning":
        return None if model.depth_mode == "fixed" else rtask.trained_steps_range(config)[1]
    return model.default_rounds


def score_lm(model, config, *, batch_size: int) -> dict:
    """{"score": bits/byte at the trained depth, "depth": {k: bits/byte at k x R}} on the run's held-out stream."""
    scored = scorer(model, config.data, batch_size)
    score = scored()["bits_per_byte"]
    swept = {k: score if k == 1 else scored(rounds=rounds)["bits_per_byte"]  # k = 1: the score itself (same forward)
             for k, rounds in zip(board.DEPTH_FACTORS, depths(model))}
    return {"score": score, "depth": swept}


def sequence_score(records: list[dict], kind: str, longest_trained: int) -> float:
    """The suite's score from per-length records (board.METRICS)."""
    if kind == "chomsky":
        return length_average(records, "prefix_token_accuracy")
    beyond = [r for r in records if r["length"] > longest_trained] or records
    return length_average(beyond, "final_state_accuracy")


def score_sequence(model, config, kind: str, *, test_size: int | None, depth_rows: int | None,
                   lengths: list[int] | None, cache: dict, batch_size: int = 64) -> dict:
    """{"score", "depth": {k: score at k x R on `depth_rows` rows per length}} over the task's test grid."""
    task = build_task(config.task)
    longest = allowed_lengths(task, config.task.train_lengths)[-1]
    grid = lengths or list(task.test_lengths)
    records = evaluate_lengths(model, task, lengths=grid, n=test_size, batch_size=batch_size, cache=cache)
    swept = {}
    for k, rounds in zip(board.DEPTH_FACTORS, depths(model)):
        at_depth = evaluate_lengths(AtDepth(model, rounds), task, lengths=grid, n=depth_rows, batch_size=batch_size,
                                    cache=cache)
        swept[k] = sequence_score(at_depth, kind, longest)
    return {"score": sequence_score(records, kind, longest), "depth": swept}


def score_reasoning(model, config, tests, *, batch_size: int = 256) -> dict:
    """{"score": OOD accuracy (best over sufficient budgets), "depth": {k: mean OOD accuracy at k x the top of the
    trained step range}} on the run's test buckets (tests: train.reasoning.TestSets)."""
    trained = trained_depth(model, config)
    sweep = {k: k * trained for k in board.DEPTH_FACTORS} if trained else {}
    grid, summary = rtask.score_grid(model, tests.get(config.task), config.task, batch_size=batch_size,
                                     steps=tuple(sweep.values()))
    outside = summary["ood_difficulties"]
    swept = {k: statistics.fmean(grid.at(steps, d) for d in outside) for k, steps in sweep.items()}
    return {"score": summary["ood"], "depth": swept}


def training_flops(config, model, updates: int) -> float:
    """Training FLOPs of the run's `updates` updates, from the ledger (module docstring)."""
    batch_size = config.train.batch_size
    if config.task.kind == "lm":
        return updates * model_ledger(model, config.data.block_size - 1).training_flops(batch_size)
    task = make_train_task(config, log=lambda message: None)
    priced: dict[tuple, float] = {}
    total = 0.0
    for _ in range(updates):
        batch = task.global_batch(batch_size)
        rows, steps = (batch.rows, batch.steps) if hasattr(batch, "steps") else (batch, None)
        shape = (len(rows), rows.trim().tokens.shape[1], steps)
        if shape not in priced:
            priced[shape] = model_ledger(model, shape[1], shape[2]).training_flops(shape[0])
        total += priced[shape]
    return total


__all__ = ["AtDepth", "depths", "score_lm", "score_reasoning", "score_sequence", "sequence_score", "trained_depth",
           "training_flops"]
