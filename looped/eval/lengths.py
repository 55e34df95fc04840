"""Length generalisation on the test grids of seed 003 (Appendix J.6), aggregation over seeds, and plots in
the style of its Figs. 6 and 8.

    records = evaluate_lengths(model, "parity")                  # one dict per test length
    table = aggregate_over_seeds(rows)                           # mean and sample SD per (row, length)
    plot_length_curves(table, "parity", "parity.png")            # accuracy vs test length, one line per row

Grids (the tasks' `test_lengths`): parity and bracketed mod-5 32, 40, 48, 64, 96, 128, 192, 256; flat mod-5
31, 39, 47, 63, 95, 127, 191, 255; S5 32, 48, 64, 96, 128, 192, 256, 512; addition 9, 10, 11, 12, 14, 16, 32
digits. Each length uses the shared test rows of seed 20260916 (`task.test_sets`): 1,024 per formal-task length
and 256 addition pairs by default; every model and seed sees the same rows.

Metrics, all teacher-forced (Appendix J.4): final_state_accuracy (the last scored position of each row: the
parity bit, the mod-5 value, the last S5 state, addition's EOS-predicting position), prefix_token_accuracy
(every scored position pooled; the headline for addition), sequence_accuracy (every scored position of a row
right). Scores come from integer counts, so pooling batches is exact.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from ..data.tasks.algorithmic import AlgorithmicTask
from ..io import atomic_save_figure
from .sequence import accuracies, algorithmic_task, score_rows
from .stats import mean_sd

METRICS = ("final_state_accuracy", "prefix_token_accuracy", "sequence_accuracy")


def resolve_task(task: AlgorithmicTask | str, variant: str | None = None) -> AlgorithmicTask:
    if isinstance(task, AlgorithmicTask):
        return task
    return algorithmic_task(task, variant)


def length_grid(task: AlgorithmicTask | str, variant: str | None = None) -> tuple[int, ...]:
    """The paper's test lengths for a task."""
    return tuple(resolve_task(task, variant).test_lengths)


def test_rows(task: AlgorithmicTask, length: int, n: int | None = None):
    """The shared test rows of one length (seed 20260916, duplicate-free, disjoint from validation)."""
    return task.test_sets([length], n)[length]


test_rows.__test__ = False  # not a pytest test despite its name


def check_sizes(**sizes: int | None) -> None:
    """Rows per length and batch size are counts >= 1 (None = the default); a one-line error otherwise (a batch
    size of 0 used to end in a ZeroDivisionError, 0 rows in a silent table of nothing)."""
    for name, value in sizes.items():
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


@torch.no_grad()
def evaluate_lengths(model, task: AlgorithmicTask | str, *, lengths: Iterable[int] | None = None,
                     n: int | None = None, batch_size: int = 32, device="cpu", variant: str | None = None,
                     cache: dict | None = None, shuffled_metric: str | None = None, log=None) -> list[dict]:
    """Accuracies of `model` at every test length, one dict per length (counts included).

    `cache` (optional dict) keeps the generated test rows between calls, so a study builds each set once.
    `shuffled_metric` (RLT rows with feedback): score every length a second time with each row's feedback
    register replaced by its neighbour's in the batch, and report that metric as shuffled_feedback_accuracy.
    A model whose answer lives in the recurrence falls to chance; one that answers from the encoder memory
    does not (see RLT.forward)."""
    task = resolve_task(task, variant)
    check_sizes(n=n, batch_size=batch_size)
    device = torch.device(device)
    was_training = model.training
    model.eval()
    records = []
    for length in (length_grid(task) if lengths is None else lengths):
        key = (task.data_key, int(length), n)
        rows = cache.get(key) if cache is not None else None
        if rows is None:
            rows = test_rows(task, int(length), n)
            if cache is not None:
                cache[key] = rows
        totals = score_rows(model, task, rows, batch_size=batch_size, device=device)
        record = {"length": int(length), "sequences": totals["rows"], "scored_tokens": totals["scored"],
                  "loss": totals["loss"] / totals["rows"], **accuracies(totals)}
        if shuffled_metric:
            shuffled = functools.partial(model, shuffle_feedback=True)
            totals = score_rows(shuffled, task, rows, batch_size=batch_size, device=device)
            record["shuffled_feedback_accuracy"] = accuracies(totals)[shuffled_metric]
        records.append(record)
        if log:
            log(f"  length {length}: " + ", ".join(f"{m} {record[m]:.4f}" for m in METRICS)
                + (f", shuffled feedback {record['shuffled_feedback_accuracy']:.4f}" if shuffled_metric else ""))
    model.train(was_training)
    return records


def length_average(records: Sequence[dict], metric: str) -> float:
    """`metric` averaged over the test lengths with equal weight: the Chomsky-hierarchy suite's score (the paper
    averages the per-length accuracy over every length in 41..500; this is that mean over our grid)."""
    if not records:
        raise ValueError("no length records to average")
    return sum(float(r[metric]) for r in records) / len(records)


def widest_row(task: AlgorithmicTask, lengths: Iterable[int], probe_rows: int = 64) -> tuple[int, int]:
    """(length, positions) of the widest of `probe_rows` sampled rows per length: a quick check that a grid fits
    a model's context before any test set is built (rows of variable width can still come out a little wider)."""
    best = (0, 0)
    for n in lengths:
        positions = int(task.sample(np.random.default_rng(0), probe_rows, int(n)).lengths.max())
        best = max(best, (positions, int(n)))
    return best[1], best[0]


def aggregate_over_seeds(records: Iterable[dict], *, keys: Sequence[str] = ("row", "length"),
                         metrics: Sequence[str] = METRICS) -> list[dict]:
    """Group per-seed records by `keys`; each group gives n, and mean and SD of every metric."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(tuple(record[k] for k in keys), []).append(record)
    out = []
    for key, members in groups.items():
        entry = dict(zip(keys, key), n=len(members))
        for metric in metrics:
            values = [float(m[metric]) for m in members if m.get(metric) not in (None, "")]
            if values:
                entry[metric], sd = mean_sd(values)
                entry[f"{metric}_sd"] = math.nan if sd is None else sd  # NaN: plotted without an error bar
        out.append(entry)
    return out


def plot_length_rows(ax, rows: Iterable[dict], task: AlgorithmicTask | str, *, metric: str, title: str,
                     labels: dict[str, str], colors: dict[str, str], variant: str | None = None) -> None:
    """One panel of plot_length_curves from per-seed rows read back from a CSV (text cells, as a study's
    lengths.csv keeps evaluate_lengths' records): the mean ± SD over seeds of each row, the rows in `colors`
    order (then any other, by name), so a row keeps its colour in every panel."""
    points = aggregate_over_seeds({**r, "length": int(r["length"])} for r in rows)
    present = {r["row"] for r in points}
    order = [row for row in colors if row in present] + sorted(present - set(colors))
    plot_length_curves(points, task, None, metric=metric, labels=labels, title=title, ax=ax, variant=variant,
                       rows=order, colors=colors)


def plot_length_curves(table: Sequence[dict], task: AlgorithmicTask | str, path: str | Path, *,
                       metric: str = "final_state_accuracy", rows: Sequence[str] | None = None,
                       labels: dict[str, str] | None = None, title: str | None = None,
                       train_range: tuple[int, int] | None = None, variant: str | None = None, ax=None,
                       colors: dict[str, str] | None = None) -> Path | None:
    """Accuracy (%) against test length, one line per row with sample-SD error bars (not clipped), the
    trained lengths shaded grey and uniform-prediction accuracy dotted, as in seed 003 Figs. 6 and 8.

    table: aggregate_over_seeds output (keys row, length). With `ax` the panel is drawn there and nothing is
    saved (for multi-panel figures); `colors` {row: colour} keeps a row's colour the same across panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task = resolve_task(task, variant)
    own_figure = ax is None
    if own_figure:
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
    rows = rows or list(dict.fromkeys(r["row"] for r in table))
    lo, hi = train_range or (min(task.train_lengths), max(task.train_lengths))
    if lo == hi:  # S5 trains on one length: a thin band keeps it visible on the log axis
        lo, hi = lo * 0.97, hi * 1.03
    ax.axvspan(lo, hi, color="0.88", zorder=0, label="trained lengths")
    ax.axhline(100 * task.chance_accuracy, color="0.4", ls=":", lw=1, label="uniform prediction")
    for i, row in enumerate(rows):
        points = sorted((r for r in table if r["row"] == row and metric in r), key=lambda r: r["length"])
        if not points:
            continue
        xs = [r["length"] for r in points]
        ys = [100 * r[metric] for r in points]
        sds = [0.0 if math.isnan(r.get(f"{metric}_sd", math.nan)) else 100 * r[f"{metric}_sd"] for r in points]
        ax.errorbar(xs, ys, yerr=sds, marker="o", ms=3.5, capsize=3, lw=1.3, color=(colors or {}).get(row, f"C{i}"),
                    label=(labels or {}).get(row, row))
    # the task's grid plus any length scored outside it (`looped lengths --lengths 16 ...`), so every point shows
    grid = sorted(set(length_grid(task)) | {int(r["length"]) for r in table})
    ax.set_xscale("log", base=2)
    # the view spans the test grid and the top of the training range (addition trains below its grid)
    ax.set_xlim(min(min(grid), hi) * 0.85, max(grid) * 1.15)
    ax.set_xticks(grid, [str(g) for g in grid], rotation=45, fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("test length" if task.name != "addition" else "digits per operand")
    ax.set_ylabel(f"{metric.replace('_', ' ')} (%)")
    ax.set_ylim(-3, 103)
    ax.set_title(title or task.data_key)
    ax.grid(alpha=0.3)
    # beside the panel, not on it: error bars span the whole 0-100 range, so no corner is free of data
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), borderaxespad=0)
    if not own_figure:
        return None
    path = Path(path)
    fig.tight_layout()
    atomic_save_figure(fig, path)
    return path


__all__ = ["METRICS", "aggregate_over_seeds", "evaluate_lengths", "length_average", "length_grid", "widest_row",
           "mean_sd", "plot_length_curves", "plot_length_rows", "test_rows"]
