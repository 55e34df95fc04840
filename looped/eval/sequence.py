"""Scoring a family-"lm" model on algorithmic sequence rows (seed 003, Appendix J.4), teacher-forced.

    task = algorithmic_task("s5", "swaps")                  # one-line ValueError for an unknown name / variant
    totals = score_rows(model, task, rows, batch_size=32)   # integer counts over the rows
    accuracies(totals)                                      # final_state / prefix_token / sequence accuracy

Shared by training validation (train/sequence.py) and the length-generalisation grids (eval/lengths.py).
Scores come from integer counts, so pooling batches or lengths is exact.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..data.tasks import SequenceBatch, TaskError, get_task
from ..data.tasks.algorithmic import AlgorithmicTask


def algorithmic_task(name: str, variant: str | None = None) -> AlgorithmicTask:
    """The algorithmic task `name` (with its variant); ValueError (one line) for an unknown name or variant."""
    options = {} if variant is None else {"variant": variant}
    try:
        task = get_task(name, **options)
    except TypeError:
        raise ValueError(f"task.variant: {name} has no variants") from None
    except TaskError as err:
        raise ValueError(f"task.name: {err}") from None
    if not isinstance(task, AlgorithmicTask):
        raise ValueError(f"task.name: {name!r} is not an algorithmic sequence task")
    return task


def per_example_loss(logits: torch.Tensor, targets: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over each row's selected targets, and each row's number of selected targets.

    logits (batch, length, vocab), targets and mask (batch, length). Unselected targets may hold any id
    (PAD, out-of-range placeholders): they are replaced before the gather, so they cannot raise."""
    mask = mask.to(logits.device)
    safe_targets = torch.where(mask, targets.to(logits.device), 0)
    nll = F.cross_entropy(logits.float().flatten(0, 1), safe_targets.flatten(), reduction="none")
    nll = nll.view(mask.shape) * mask
    counts = mask.sum(1)
    return nll.sum(1) / counts.clamp(min=1), counts


def accuracies(totals: dict) -> dict[str, float]:
    """The three accuracies of seed 003 (Appendix J.4, J.1.5) from pooled counts."""
    return {"final_state_accuracy": totals["final"] / totals["rows"],
            "prefix_token_accuracy": totals["tokens"] / max(1, totals["scored"]),
            "sequence_accuracy": totals["whole"] / totals["rows"]}


def score_rows(model, task: AlgorithmicTask, rows: SequenceBatch, *, batch_size: int, max_batches: int = 0,
               device=torch.device("cpu"), autocast_dtype=None) -> dict:
    """Counts over `rows` in batches: summed example loss, rows, right final states, right scored tokens,
    scored tokens, rows right everywhere. Teacher-forced (the paper's protocol for every task)."""
    totals = dict(loss=0.0, rows=0, final=0, tokens=0, scored=0, whole=0)
    n_batches = math.ceil(len(rows) / batch_size)
    if max_batches:
        n_batches = min(n_batches, max_batches)
    for i in range(n_batches):
        batch = rows.select(list(range(i * batch_size, min(len(rows), (i + 1) * batch_size)))).trim().to(device)
        with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            logits = model(batch.tokens)
        per_row, _ = per_example_loss(logits, batch.targets, batch.loss_mask)
        score = task.score(batch, logits.argmax(-1))
        n = len(batch)
        totals["loss"] += float(per_row.sum())
        totals["rows"] += n
        totals["final"] += round(score["final_state_accuracy"] * n)
        totals["tokens"] += round(score["prefix_token_accuracy"] * score["scored_tokens"])
        totals["scored"] += int(score["scored_tokens"])
        totals["whole"] += round(score["sequence_accuracy"] * n)
    return totals


__all__ = ["accuracies", "algorithmic_task", "per_example_loss", "score_rows"]
