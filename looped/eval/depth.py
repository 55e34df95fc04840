"""Depth sweeps (issue 30 §2.1): a model's score at every test-time depth, fixed and with early exit.

    record = lm_depth_sweep(model, sources, max_depth=16, thresholds=[0.01])     # looped LM rows: bits/byte
    record = reasoning_depth_sweep(model, test_rows, max_depth=32, trained_steps=(5, 8))   # cores: accuracy
    summary = curve_summary(depths, scores, trained_depth=4, lower_is_better=True)
    plot_depth_sweep(record, "depth.png")

A record is plain JSON: the model (arch, parameters, trained depth), then one entry per scored source, each
with its curve at fixed depth ("fixed": one point per depth), the early-exit curves ("early_exit": one per
threshold, at each depth budget, with the mean rounds a target used) and the curve's summary (best depth, the
slope past the trained depth, the first depth that scores worse than depth 1).

Fixed depth costs one pass at the largest depth: every round of a looped row is the forward at that depth
(models/trace.py), so one trace scores them all. Early exit cannot be read off that pass (a position that
exits freezes the state later positions read), so it runs one evaluation per threshold and depth.
`looped depth` (cli/depth.py) is the command; `looped compare` calls these functions too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data import heldout_batches
from ..io import atomic_save_figure
from ..models.base import MAX_ROUNDS_FACTOR
from .lm import evaluate_lm, merge_scores
from .progress import progress_bar

# a source to score: (label naming it, e.g. {"file": path}, the block tensors, the unit: "byte" or "symbol")
Source = tuple[dict, list[torch.Tensor], str]


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ============================================================================ the summary of a curve


def curve_summary(depths: Sequence[int], scores: Sequence[float], trained_depth: int, *,
                  lower_is_better: bool) -> dict:
    """Best depth (ties: the smallest), the score at the trained depth, the least-squares slope over the depths
    past the trained one (score per extra round / step; None with fewer than two such depths) and the first
    depth that scores worse than depth 1 (None when none does, or when depth 1 was not scored)."""
    pairs = sorted(zip(depths, scores))
    sign = 1 if lower_is_better else -1
    best_depth, best_score = min(pairs, key=lambda p: (sign * p[1], p[0]))
    past = [(d, s) for d, s in pairs if d > trained_depth]
    slope = None
    if len(past) >= 2:
        x = np.array([d for d, _ in past], dtype=float)
        y = np.array([s for _, s in past], dtype=float)
        slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    first = dict(pairs).get(1)
    worse = None if first is None else next((d for d, s in pairs if d > 1 and sign * (s - first) > 0), None)
    return {"best_depth": best_depth, "best_score": best_score,
            "score_at_trained_depth": dict(pairs).get(trained_depth),
            "slope_past_trained": slope, "slope_depths": [d for d, _ in past] if slope is not None else [],
            "first_worse_than_depth_1": worse}


# ============================================================================ LM rows


def trained_rounds(model) -> int:
    """The depth a looped LM was trained at; one line for a model with a fixed depth."""
    rounds = model.default_rounds
    if rounds is None:
        raise ValueError(f"{model.arch_name or type(model).__name__} has a fixed depth: no rounds to sweep "
                         f"(`looped depth` sweeps the looped rows: shared_loop, adaptive_exit, anchored_loop, "
                         f"conditioned_dense, workspace, workspace_retention)")
    return rounds


MAX_FACTOR = MAX_ROUNDS_FACTOR  # a sweep to 100 x the trained depth is already hours; 1e30 would overflow


def check_sweep_options(max_factor: float, thresholds: Sequence[float]) -> None:
    if not (math.isfinite(max_factor) and 0 < max_factor <= MAX_FACTOR):
        raise ValueError(f"--max-factor must be a positive number up to {MAX_FACTOR}, got {max_factor}")
    for threshold in thresholds:
        if not threshold >= 0:
            raise ValueError(f"--exit-threshold must be >= 0, got {threshold}")


def max_depth_for(trained_depth: int, max_factor: float) -> int:
    """Depths 1 .. max_factor x the trained depth (at least 1)."""
    return max(1, int(math.floor(max_factor * trained_depth + 1e-9)))


@torch.inference_mode()
def fixed_depth_nll(model, parts: Sequence[torch.Tensor], max_depth: int, *, batch_size: int = 16,
                    max_batches: int = 0, progress: bool = False) -> tuple[list[float], int]:
    """(summed NLL in nats at each depth 1 .. max_depth, targets scored) from one trace per batch."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(max_depth, dtype=torch.float64)
    targets = 0
    batches = [b for blocks in parts for b in heldout_batches(blocks, batch_size, max_batches)]
    try:
        for batch in progress_bar(batches, total=len(batches), disable=not progress,
                                  desc=f"depths 1-{max_depth}", unit="batch", leave=False):
            batch = batch.to(torch.long)
            inputs, batch_targets = batch[:, :-1], batch[:, 1:]
            for entry in model.trace(inputs, rounds=max_depth):
                nll = F.cross_entropy(entry.logits.float().transpose(1, 2), batch_targets, reduction="none")
                sums[entry.depth - 1] += nll.sum(0).double().sum()
            targets += batch_targets.numel()
    finally:
        model.train(was_training)
    if targets == 0:
        raise ValueError("the depth sweep scored no targets (empty held-out set)")
    return sums.tolist(), targets


def early_exit_curve(model, parts: Sequence[torch.Tensor], depths: Sequence[int], threshold: float, unit: str, *,
                     batch_size: int, max_batches: int, bar) -> list[dict]:
    """bits per unit and mean rounds used at each depth budget under the early-exit rule."""
    points = []
    for depth in depths:
        result = merge_scores([evaluate_lm(model, blocks, batch_size=batch_size, max_batches=max_batches,
                                           rounds=depth, unit=unit, exit_threshold=threshold) for blocks in parts])
        points.append({"depth": depth, f"bits_per_{unit}": result[f"bits_per_{unit}"], "nll": result["nll"],
                       "mean_rounds_used": result["mean_rounds_used"]})
        bar.update(1)
    return points


def lm_depth_sweep(model, sources: Sequence[Source], *, max_factor: float = 4, thresholds: Sequence[float] = (),
                   batch_size: int = 16, max_batches: int = 0, progress: bool = False) -> dict:
    """A looped LM's bits per byte (or symbol) at depths 1 .. max_factor x its trained rounds, per source."""
    check_sweep_options(max_factor, thresholds)
    trained = trained_rounds(model)
    max_depth = max_depth_for(trained, max_factor)
    depths = list(range(1, max_depth + 1))
    entries = []
    for label, parts, unit in sources:
        sums, targets = fixed_depth_nll(model, parts, max_depth, batch_size=batch_size, max_batches=max_batches,
                                        progress=progress)
        key = f"bits_per_{unit}"
        fixed = [{"depth": d, key: s / targets / math.log(2), "nll": s / targets} for d, s in zip(depths, sums)]
        exits = []
        bar = progress_bar(total=len(thresholds) * len(depths), disable=not progress or not thresholds,
                           desc="early exit", unit="eval", leave=False)
        for threshold in thresholds:
            curve = early_exit_curve(model, parts, depths, threshold, unit, batch_size=batch_size,
                                     max_batches=max_batches, bar=bar)
            exits.append({"threshold": threshold, "points": curve})
        bar.close()
        summary = curve_summary(depths, [p[key] for p in fixed], trained, lower_is_better=True)
        entries.append({**label, "unit": unit, "targets": targets, "fixed": fixed, "early_exit": exits,
                        "summary": summary})
    return {"kind": "lm", "arch": model.arch_name, "parameters": parameter_count(model), "depth_name": "rounds",
            "trained_depth": trained, "max_factor": max_factor, "depths": depths, "score": "bits_per_" +
            sources[0][2], "lower_is_better": True, "sources": entries}


# ============================================================================ reasoning cores


def reasoning_max_steps(model) -> int | None:
    """The largest budget a reasoning model accepts (its depth table or halting budget), None if unbounded."""
    config = model.config
    if model.depth_mode == "halting":
        return config.max_steps
    if getattr(config, "beyond_table", "clamp") == "error":
        return config.depth_rows
    return None


def reasoning_depth_sweep(model, test, *, trained_steps: tuple[int, int], max_factor: float = 4,
                          batch_size: int = 256, progress: bool = False, label: dict | None = None) -> dict:
    """A reasoning core's accuracy by difficulty at every step budget 1 .. max_factor x the top of its trained
    range, capped at the largest budget the model accepts (the record says so under "capped_at")."""
    from .reasoning import evaluate_grid

    check_sweep_options(max_factor, ())
    if model.depth_mode == "fixed":
        raise ValueError(f"{model.arch_name or type(model).__name__} has a fixed depth: the step budget changes "
                         f"nothing (`looped depth` sweeps drt, drt_tied and ut_act)")
    trained = trained_steps[1]
    max_depth = max_depth_for(trained, max_factor)
    cap = reasoning_max_steps(model)
    capped = cap is not None and max_depth > cap
    depths = list(range(1, (cap if capped else max_depth) + 1))
    # a per-step core scores every budget in one pass; ACT's budget changes the whole computation
    calls = [depths] if model.depth_mode == "per_step" else [[d] for d in depths]
    grids = [evaluate_grid(model, test, budgets, batch_size=batch_size)
             for budgets in progress_bar(calls, total=len(calls), disable=not progress, desc="budgets",
                                         unit="call", leave=False)]
    fixed = []
    for grid in grids:
        for i, depth in enumerate(grid.budgets):
            by_difficulty = {str(d): float(grid.accuracy[i, j]) for j, d in enumerate(grid.difficulties)}
            fixed.append({"depth": depth, "accuracy": float(np.mean(list(by_difficulty.values()))),
                          "by_difficulty": by_difficulty})
    summary = curve_summary(depths, [p["accuracy"] for p in fixed], trained, lower_is_better=False)
    entry = {**(label or {}), "rows": len(test), "rows_by_difficulty": {str(d): int(n) for d, n in
                                                                        zip(grids[0].difficulties, grids[0].rows)},
             "fixed": fixed, "early_exit": [], "summary": summary}
    return {"kind": "reasoning", "arch": model.arch_name, "parameters": parameter_count(model), "depth_name": "steps",
            "trained_depth": trained, "trained_steps": list(trained_steps), "max_factor": max_factor,
            "capped_at": cap if capped else None, "depths": depths, "score": "accuracy", "lower_is_better": False,
            "sources": [entry]}


# ============================================================================ the plot

SCORE_LABELS = {"bits_per_byte": "bits/byte", "bits_per_symbol": "bits/symbol",
                "accuracy": "accuracy (fraction, mean over difficulties)"}


def source_name(entry: dict) -> str:
    if "label" in entry:  # a source of a combined record (`combined_record`): the run it came from
        return entry["label"]
    if "corpus" in entry:
        return f"{entry['corpus']} held-out"
    return entry.get("file") or entry.get("task") or "scored data"


def source_title(entry: dict) -> str:
    """The source and how much of it was scored, for a plot's title."""
    size = f"{entry['targets']:,} bytes" if "targets" in entry else f"{entry.get('rows', 0):,} test rows"
    return f"{source_name(entry)} ({size} scored)"


EXIT_STYLES = ("--", ":", "-.")


def combined_record(records: dict[str, dict]) -> dict:
    """One record of several LM sweeps of the same architecture and trained depth (a study's rows: fixed against
    random training depth), each one's first source labelled by its key, for `plot_depth_sweep` to draw on one axis."""
    first = next(iter(records.values()))
    for label, record in records.items():
        if (record["kind"], record["arch"], record["trained_depth"]) != ("lm", first["arch"], first["trained_depth"]):
            raise ValueError(f"{label}: a {record['kind']} {record['arch']} sweep trained at depth "
                             f"{record['trained_depth']} does not share an axis with {first['arch']} at "
                             f"{first['trained_depth']}")
    sources = [{**record["sources"][0], "label": label} for label, record in records.items()]
    return {**first, "sources": sources}


def plot_depth_sweep(record: dict, path, title_data: str = "") -> None:
    """Score against test-time depth: one solid line per source at fixed depth, dashed early-exit lines at each
    depth budget, the trained depth marked; units on both axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for entry in record["sources"]:
        name = source_name(entry)
        depths = [p["depth"] for p in entry["fixed"]]
        line, = ax.plot(depths, [p[record["score"]] for p in entry["fixed"]], marker="o", ms=3,
                        label=f"{name}: fixed depth")
        for i, curve in enumerate(entry["early_exit"]):
            points = curve["points"]
            ax.plot([p["depth"] for p in points], [p[record["score"]] for p in points],
                    ls=EXIT_STYLES[i % len(EXIT_STYLES)], marker="x^s+"[i % 4], ms=4,
                    color=line.get_color(), alpha=0.7, label=f"{name}: early exit, TV < {curve['threshold']:g}")
        if record["kind"] == "reasoning" and entry["fixed"]:
            for difficulty in entry["fixed"][0]["by_difficulty"]:
                ax.plot(depths, [p["by_difficulty"][difficulty] for p in entry["fixed"]], lw=0.8, alpha=0.5,
                        label=f"difficulty {difficulty}")
    ax.axvline(record["trained_depth"], color="red", ls=":", lw=1.2, label=f"trained depth {record['trained_depth']}")
    unit = "test-time rounds" if record["depth_name"] == "rounds" else "thinking steps T"
    ax.set_xlabel(f"{unit} (depth budget)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(("held-out " if record["kind"] == "lm" else "test ") + SCORE_LABELS.get(record["score"],
                                                                                         record["score"]))
    data = title_data or ", ".join(source_title(e) for e in record["sources"])
    ax.set_title(f"{record['arch']}, {record['parameters']:,} parameters\n{data}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    atomic_save_figure(fig, path)
