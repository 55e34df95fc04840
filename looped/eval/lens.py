"""The per-round lens (issue 30 §3): what a model would predict after each round, and how its state moves.

    record = lm_lens(model, sources)                        # LM rows: per round (looped) or per layer (transformer)
    record = reasoning_lens(model, test_rows, steps=8)      # reasoning models: per step (or per layer)
    plot_lens(record, "lens.png")

Built on `model.trace` (models/trace.py), which returns every round's state and the model's own readout of it
(the final norm and head, or a core's readout), so nothing is stored on the model. For each round: the score of
that readout (bits per byte, or accuracy by difficulty), the relative distance the state moved from the
previous round, ||h_r - h_{r-1}|| / ||h_{r-1}|| per position (from round 2 on), and the model's own per-round
statistics (adaptive_exit: the readout's weight on the round's exit; drt: the gate z; ut_act: the halting
probability and the share of positions still running). LM rows report each of them also by target position,
in the doubling buckets of `looped eval --by-position` (1, 2-3, 4-7, ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data import heldout_batches
from ..io import atomic_save_figure
from .depth import Source, parameter_count, source_title
from .progress import progress_bar


def relative_movement(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """||new - old|| / ||old|| over the last dimension: how far a round moved each position's state."""
    return (new - old).float().norm(dim=-1) / old.float().norm(dim=-1).clamp_min(1e-12)


def position_bucket_edges(length: int) -> list[tuple[int, int]]:
    """(first, last) 1-based target positions of the doubling buckets [1], [2, 3], [4, 7], ...; the last bucket
    absorbs a remainder shorter than itself (the rule of eval.lm.position_buckets)."""
    edges, start = [], 1
    while start <= length:
        end = min(2 * start - 1, length)
        if length - end < start:
            end = length
        edges.append((start, end))
        start = end + 1
    return edges


def padded_sum(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """old + new, the shorter padded with zeros at the end (a file's tail block is shorter than the others)."""
    if old is None:
        return new
    n = max(len(old), len(new))
    return F.pad(old, (0, n - len(old))) + F.pad(new, (0, n - len(new)))


class RoundSums:
    """Per-round, per-position sums of one quantity and how many targets each sum holds."""

    def __init__(self):
        self.sums: dict[int, torch.Tensor] = {}
        self.counts: dict[int, torch.Tensor] = {}

    def add(self, depth: int, values: torch.Tensor) -> None:
        """values (batch, length): summed over the batch into round `depth`'s per-position totals."""
        total = values.double().sum(0)
        self.sums[depth] = padded_sum(self.sums.get(depth), total)
        self.counts[depth] = padded_sum(self.counts.get(depth), torch.full_like(total, values.shape[0]))

    def mean(self, depth: int, first: int = 1, last: int | None = None) -> float | None:
        if depth not in self.sums:
            return None
        window = slice(first - 1, last)
        count = self.counts[depth][window].sum().item()
        return self.sums[depth][window].sum().item() / count if count else None


# ============================================================================ LM rows


@torch.inference_mode()
def lm_lens(model, sources: Sequence[Source], *, rounds: int | None = None, batch_size: int = 16,
            max_batches: int = 0, progress: bool = False) -> dict:
    """Per round (looped rows; per layer for the transformer) and source: bits per unit of the readout, the
    state's movement and the model's statistics, overall and by target position."""
    was_training = model.training
    model.eval()
    entries, depth = [], 0
    try:
        for label, parts, unit in sources:
            nll, movement, stats, scored = RoundSums(), RoundSums(), {}, 0
            batches = [b for blocks in parts for b in heldout_batches(blocks, batch_size, max_batches)]
            for batch in progress_bar(batches, total=len(batches), disable=not progress, desc="lens", unit="batch",
                                      leave=False):
                batch = batch.to(torch.long)
                inputs, targets = batch[:, :-1], batch[:, 1:]
                scored += targets.numel()
                previous = None
                for entry in model.trace(inputs, rounds=rounds):
                    depth = max(depth, entry.depth)
                    nll.add(entry.depth, F.cross_entropy(entry.logits.float().transpose(1, 2), targets,
                                                         reduction="none"))
                    if previous is not None:
                        movement.add(entry.depth, relative_movement(entry.state, previous))
                    for name, values in entry.stats.items():
                        stats.setdefault(name, RoundSums()).add(entry.depth, values)
                    previous = entry.state
            entries.append({**label, "unit": unit, "targets": scored,
                            "rounds": lm_round_rows(nll, movement, stats, depth, unit)})
    finally:
        model.train(was_training)
    return {"kind": "lm", "arch": model.arch_name, "parameters": parameter_count(model),
            "depth_name": "round" if model.default_rounds is not None else "layer", "depth": depth,
            "trained_depth": model.default_rounds or depth, "sources": entries}


def lm_round_rows(nll: RoundSums, movement: RoundSums, stats: dict[str, RoundSums], depth: int,
                  unit: str) -> list[dict]:
    def bits(value):
        return None if value is None else value / math.log(2)

    length = len(nll.sums[1])
    rows = []
    for r in range(1, depth + 1):
        buckets = [{"first": a, "last": b, f"bits_per_{unit}": bits(nll.mean(r, a, b)),
                    "movement": movement.mean(r, a, b), **{name: s.mean(r, a, b) for name, s in stats.items()}}
                   for a, b in position_bucket_edges(length)]
        rows.append({"depth": r, f"bits_per_{unit}": bits(nll.mean(r)), "movement": movement.mean(r),
                     "stats": {name: s.mean(r) for name, s in stats.items()}, "by_position": buckets})
    return rows


# ============================================================================ reasoning models


@torch.no_grad()
def reasoning_lens(model, test, *, steps: int, batch_size: int = 256, label: dict | None = None) -> dict:
    """Per step (per layer for fixed-depth models): accuracy of the readout overall and by difficulty, the
    state's movement and the model's statistics, averaged over real (non-padding) positions. ACT stops once
    every position has halted, as its forward does: later steps keep the last readout."""
    from ..data.tasks.reasoning import row_hits
    from .reasoning import chunks

    was_training = model.training
    model.eval()
    difficulties = sorted(set(test.difficulty.tolist()))
    hits: dict[int, np.ndarray] = {}
    movement, stats = RoundSums(), {}
    depth = 0
    try:
        for chunk in chunks(test, batch_size):
            real = (~chunk.padding).double()
            column = np.array([difficulties.index(int(d)) for d in chunk.difficulty.tolist()])
            previous, last_hit, last_depth = None, None, 0
            for entry in model.trace(chunk, steps):
                depth, last_depth = max(depth, entry.depth), entry.depth
                last_hit = row_hits(entry.logits, chunk.labels).numpy()
                add_hits(hits, entry.depth, column, last_hit, len(difficulties))
                if previous is not None:
                    movement.add(entry.depth, (relative_movement(entry.state, previous) * real).sum(1, keepdim=True)
                                 / real.sum(1, keepdim=True))
                for name, values in entry.stats.items():
                    per_row = (values.double() * real).sum(1, keepdim=True) / real.sum(1, keepdim=True)
                    stats.setdefault(name, RoundSums()).add(entry.depth, per_row)
                previous = entry.state
            if model.depth_mode == "halting":  # every position halted early: later budgets answer the same
                for later in range(last_depth + 1, steps + 1):
                    add_hits(hits, later, column, last_hit, len(difficulties))
    finally:
        model.train(was_training)
    rows_by_difficulty = np.bincount([difficulties.index(int(d)) for d in test.difficulty.tolist()],
                                     minlength=len(difficulties))
    rounds = []
    for r in sorted(hits):
        by_difficulty = {str(d): float(hits[r][j] / rows_by_difficulty[j]) for j, d in enumerate(difficulties)}
        rounds.append({"depth": r, "accuracy": float(np.mean(list(by_difficulty.values()))),
                       "by_difficulty": by_difficulty, "movement": movement.mean(r),
                       "stats": {name: s.mean(r) for name, s in stats.items()}})
    fixed = model.depth_mode == "fixed"
    return {"kind": "reasoning", "arch": model.arch_name, "parameters": parameter_count(model),
            "depth_name": "layer" if fixed else "step", "depth": max(hits), "trained_depth": steps,
            "sources": [{**(label or {}), "rows": len(test), "rounds": rounds}]}


def add_hits(hits: dict, depth: int, column: np.ndarray, hit: np.ndarray, width: int) -> None:
    hits[depth] = hits.get(depth, np.zeros(width)) + np.bincount(column, weights=hit, minlength=width)


# ============================================================================ the plot


def plot_lens(record: dict, path, title_data: str = "") -> None:
    """Score of each round's readout (with the position buckets of an LM), the state's movement and the model's
    per-round statistics, one panel each; rounds on the x axis, the trained depth marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    entry = record["sources"][0]
    rows = entry["rounds"]
    names = sorted({name for row in rows for name in row["stats"]})
    panels = 2 + bool(names)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6))
    depths = [row["depth"] for row in rows]
    score = "accuracy" if record["kind"] == "reasoning" else f"bits_per_{entry['unit']}"
    axes[0].plot(depths, [row[score] for row in rows], marker="o", color="black", label="all")
    if record["kind"] == "lm":
        for i, bucket in enumerate(rows[0]["by_position"]):
            first, last = bucket["first"], bucket["last"]
            axes[0].plot(depths, [row["by_position"][i][score] for row in rows], lw=0.8, alpha=0.7,
                         label=f"position {first}" if first == last else f"positions {first}-{last}")
        axes[0].set_ylabel(f"{score.replace('_per_', '/')} of the round's readout")
    else:
        for difficulty in rows[0]["by_difficulty"]:
            axes[0].plot(depths, [row["by_difficulty"][difficulty] for row in rows], lw=0.8, alpha=0.7,
                         label=f"difficulty {difficulty}")
        axes[0].set_ylabel("accuracy of the step's readout (fraction)")
    moved = [(row["depth"], row["movement"]) for row in rows if row["movement"] is not None]
    axes[1].plot([d for d, _ in moved], [m for _, m in moved], marker="o")
    axes[1].set_ylabel("state movement\n||h_r - h_(r-1)|| / ||h_(r-1)|| (per position)")
    if names:
        for name in names:
            axes[2].plot(depths, [row["stats"].get(name) for row in rows], marker="o", label=name)
        axes[2].set_ylabel("mean per position")
        axes[2].legend(fontsize=7)
    for ax in axes:
        ax.axvline(record["trained_depth"], color="red", ls=":", lw=1)
        ax.set_xlabel(f"{record['depth_name']} r")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    # beside the panel: the buckets' lines fill its whole height, so a legend inside hides one of them
    axes[0].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5), borderaxespad=0)
    data = title_data or source_title(entry)
    fig.suptitle(f"{record['arch']}, {record['parameters']:,} parameters: {data}", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)
