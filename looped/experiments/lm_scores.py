"""Held-out scores of a byte-LM run as CSV rows: the whole held-out stream, by target position, and swept over a
setting of the forward pass (test-time rounds, an early-exit threshold). Every row of a table keeps the columns
it has, so one cell writer serves them all.

    model, config, score = heldout_scorer(checkpoint)     # score(**setting): evaluate_lm on the held-out blocks
    table.add_many(sweep_rows(key, score, "rounds", (1, 2, 4, 8)))
    table.add_many(sweep_rows(key, score, "threshold", (0.0, 0.01), setting="exit_threshold"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from ..data import load_heldout
from ..eval import evaluate_lm
from ..train import load_model
from .report import cell


def scorer(model, data, batch_size: int = 16) -> Callable[..., dict]:
    """score(**setting): evaluate_lm of `model` on the held-out blocks of data config `data` (loaded once)."""
    blocks, unit = load_heldout(data)
    return lambda **setting: evaluate_lm(model, blocks, batch_size=batch_size, unit=unit, **setting)


def heldout_scorer(checkpoint: Path):
    """(model, config, score) of a finished run's checkpoint: score(**setting) as `scorer` gives it."""
    model, config = load_model(checkpoint)
    return model, config, scorer(model, config.data)


def score_cells(record: dict) -> dict:
    """A held-out score's CSV cells: nll and bits/byte to 6 decimals, the mean rounds used (early exit) to 4."""
    return {"nll": cell(record["nll"]), "bits_per_byte": cell(record["bits_per_byte"]),
            "mean_rounds_used": cell(record.get("mean_rounds_used"), 4)}


def sweep_rows(key: dict, score, column: str, values: Iterable, setting: str | None = None) -> list[dict]:
    """One row per value of a forward-pass setting (`setting`, default `column`): the key, the value in
    `column`, the scores at it."""
    return [{**key, column: v, **score_cells(score(**{setting or column: v}))} for v in values]


def position_rows(key: dict, buckets: list[dict]) -> list[dict]:
    """Rows of held-out scores by target position (evaluate_lm's by_position buckets: first, last, nll, bits)."""
    return [{**key, "first": b["first"], "last": b["last"], "nll": f"{b['nll']:.6f}",
             "bits_per_byte": f"{b['bits']:.6f}"} for b in buckets]


__all__ = ["heldout_scorer", "position_rows", "score_cells", "scorer", "sweep_rows"]
