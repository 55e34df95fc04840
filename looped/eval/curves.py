"""Training curves of one or more runs, side by side: `looped plot RUN [RUN ...]`.

Reads each run's metrics.jsonl (training lines: step, loss, lr, ...; evaluation lines: step, val_*), draws one
panel per metric with one line per run, and returns a text summary (last and best value of every metric per
run) so the comparison is readable in a terminal too. Training loss is drawn raw (faint) and smoothed with an
exponential moving average; evaluation metrics are drawn as they are.

A figure should tell its story without the command line that made it: every y axis names its unit (`held-out
bits/byte`, `loss (nats/target)`), the title names each run's architecture, parameter count and data (from the
run's config.yaml), step axes have thousands separators, accuracy panels span 0-1 with the task's chance level,
and a metric with a single value per run (a run that evaluated once) is a table row, not a lonely dot.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from ..io import atomic_save_figure, read_metrics
from .plot_labels import describe_run, y_label

# Shown when --metrics is not given: the training loss, the held-out loss, and the first headline score present.
HEADLINE = ("val_bits_per_byte", "val_bits_per_symbol", "val_accuracy", "val_final_state_accuracy")
# flops: cumulative training FLOPs (the compute ledger; LM runs); seconds: wall time of training, evaluations
# included, summed over the processes of a resumed run (runs from before the field have none)
X_AXES = ("step", "targets", "flops", "seconds")
X_LABELS = {"step": "optimizer update", "targets": "training targets", "flops": "training FLOPs",
            "seconds": "training wall time (s)"}


class CurveError(ValueError):
    """Bad input to `looped plot` (one line, naming the run or metric)."""


def run_metrics(run: Path) -> list[dict]:
    """The events of run/metrics.jsonl (a run folder, or the file itself), read as the trainer reads them (a torn
    last line, a live run mid-write, is skipped with a note); a missing or empty log is an error naming the run."""
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise CurveError(f"{run}: no metrics.jsonl (not a run folder)")
    lines = read_metrics(path, warn=lambda message: print(f"looped: note: {message}", file=sys.stderr))
    if not lines:
        raise CurveError(f"{path}: empty")
    return lines


def series(lines: list[dict], metric: str, x: str) -> tuple[list[float], list[float]]:
    """(xs, ys) of every line that has both `metric` and the x axis. Evaluation lines carry no `targets` or
    `flops` (cumulative counts of the training lines), so for those axes they take the count of the last
    training line at or before their step."""
    xs, ys, count_at = [], [], {}
    last_count = 0
    for line in lines:
        if x in line and "step" in line:
            last_count = line[x]
            count_at[line["step"]] = last_count
        if metric in line and isinstance(line[metric], (int, float)):
            position = line.get("step") if x == "step" else count_at.get(line.get("step"), last_count)
            if position is not None:
                xs.append(float(position))
                ys.append(float(line[metric]))
    return xs, ys


def default_metrics(runs: dict[str, list[dict]], preferred: tuple[str, ...] = ()) -> list[str]:
    """The losses and one headline score every run logged: the runs' own task's headline first (`preferred`;
    addition: prefix-token accuracy, since its final "state" is the always-right EOS), else HEADLINE's order."""
    present = set.intersection(*(available(lines) for lines in runs.values()))
    chosen = [m for m in ("loss", "val_loss") if m in present]
    chosen += [m for m in (*preferred, *HEADLINE) if m in present][:1]
    return chosen or sorted(present)[:1]


def available(lines: list[dict]) -> set[str]:
    return {k for line in lines for k, v in line.items() if isinstance(v, (int, float)) and k not in ("step",)}


def higher_is_better(metric: str) -> bool:
    return "accuracy" in metric or metric.endswith("tokens_per_s")


def ema(values: list[float], smooth: float) -> list[float]:
    """Debiased exponential moving average: the zero start is divided out, so the first points are not
    dragged towards the first value (which, for a training loss, is far above the rest)."""
    out, average = [], 0.0
    for n, v in enumerate(values, 1):
        average = smooth * average + (1 - smooth) * v
        out.append(average / (1 - smooth ** n))
    return out


def labels_for(runs: list[Path]) -> list[str]:
    """Folder names, or parent/name where two runs share a name (seed11 under two rows, say)."""
    names = [r.name if r.is_dir() else r.parent.name for r in runs]
    if len(set(names)) == len(names):
        return names
    return [f"{r.parent.name}/{r.name}" if r.is_dir() else f"{r.parent.parent.name}/{r.parent.name}" for r in runs]


def plot_runs(runs: list[Path], out: Path, *, metrics: list[str] | None = None, x: str = "step",
              smooth: float = 0.6, labels: list[str] | None = None) -> str:
    """Write the figure to `out` and return the text summary."""
    fig, summary = curves_figure(runs, metrics=metrics, x=x, smooth=smooth, labels=labels)
    atomic_save_figure(fig, out)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return summary


def curves_figure(runs: list[Path], *, metrics: list[str] | None = None, x: str = "step", smooth: float = 0.6,
                  labels: list[str] | None = None):
    """(matplotlib figure, text summary) of the runs' curves; plot_runs saves it."""
    if x not in X_AXES:
        raise CurveError(f"--x must be one of {', '.join(X_AXES)}, got {x!r}")
    if not 0 <= smooth < 1:
        raise CurveError(f"--smooth must be in [0, 1), got {smooth}")
    if labels is not None and len(labels) != len(runs):
        raise CurveError(f"--labels: {len(labels)} labels for {len(runs)} runs")
    data = dict(zip(labels or labels_for(runs), (run_metrics(Path(r)) for r in runs)))
    if len(data) != len(runs):
        raise CurveError("--labels: two runs have the same label")
    described = {label: describe_run(Path(run)) for label, run in zip(data, runs)}
    metrics = metrics or default_metrics(data, tuple(d["headline"] for d in described.values() if d and d["headline"]))
    for label, lines in data.items():
        if not any(x in line for line in lines):  # runs from before the field, or tasks without a fixed count
            raise CurveError(f"{label}: its metrics carry no {x!r} to plot against (--x step works for every run)")
        missing = [m for m in metrics if m not in available(lines)]
        if missing:
            raise CurveError(f"{label}: no metric {missing[0]!r} (it has: {', '.join(sorted(available(lines)))})")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows + 0.4), squeeze=False)
    summary = []
    for ax, metric in zip(axes.flat, metrics):
        curves = {label: series(lines, metric, x) for label, lines in data.items()}
        for label, (xs, ys) in curves.items():
            best = max(ys) if higher_is_better(metric) else min(ys)
            summary.append(f"{label:24s} {metric:28s} last {ys[-1]:.4g} @ {x} {xs[-1]:,.0f}   best {best:.4g}")
        if all(len(ys) == 1 for _, ys in curves.values()):
            draw_table(ax, metric, curves, x)
        else:
            draw_curves(ax, metric, curves, x, smooth)
            chances = {described[label]["chance"] for label in curves if described[label]}
            if "accuracy" in metric:
                draw_accuracy_frame(ax, chances - {None})
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.suptitle(figure_title(described), fontsize=9)
    fig.tight_layout()
    return fig, "\n".join(summary)


def draw_curves(ax, metric: str, curves: dict, x: str, smooth: float) -> None:
    """One line per run; a run with one value in a panel of lines is a marker."""
    from matplotlib.ticker import FuncFormatter

    for i, (label, (xs, ys)) in enumerate(curves.items()):
        color = f"C{i % 10}"
        if metric == "loss" and smooth > 0 and len(ys) > 2:
            ax.plot(xs, ys, color=color, alpha=0.25, lw=0.8)
            ax.plot(xs, ema(ys, smooth), color=color, label=label)
        else:
            ax.plot(xs, ys, color=color, label=label, marker="o" if len(ys) < 30 else None, ms=3)
    ax.set_title(metric, fontsize=9)
    ax.set_ylabel(y_label(metric))
    ax.set_xlabel(X_LABELS[x])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc=legend_corner(metric))


def legend_corner(metric: str) -> str:
    """Where a legend stays clear of the lines: losses fall (lower right is busy), accuracies rise. A fixed corner,
    because matplotlib's "best" scans every point and is slow (it warns) on long runs."""
    return "lower right" if "accuracy" in metric else "upper right"


def draw_accuracy_frame(ax, chances: set[float]) -> None:
    """Accuracy on its whole 0-1 range (a zoomed axis makes 0.51 against 0.49 look like a result), with the
    uniform-prediction level when the task states it."""
    ax.set_ylim(0, 1)
    for chance in sorted(chances):
        ax.axhline(chance, color="0.4", ls=":", lw=1, label=f"chance {chance:.3g}")
    if chances:
        ax.legend(fontsize=7, loc=legend_corner("accuracy"))


def draw_table(ax, metric: str, curves: dict, x: str) -> None:
    """Each run's single value as a table row: one point per run is a number to read, not a curve."""
    ax.axis("off")
    rows = [[label, f"{ys[0]:.4f}", f"{xs[0]:,.0f}"] for label, (xs, ys) in curves.items()]
    table = ax.table(cellText=rows, colLabels=["run", y_label(metric), X_LABELS[x]], loc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    ax.set_title(f"{metric} (one evaluation per run)", fontsize=9)


def figure_title(described: dict) -> str:
    """What the runs are ("transformer, 812,672 parameters, kjv"): one line when they all share it, else one line
    per run led by its legend label (at most four)."""
    known = {label: d["text"] for label, d in described.items() if d}
    if len(set(known.values())) <= 1:
        return next(iter(known.values()), "")
    texts = [f"{label}: {text}" for label, text in known.items()]
    if len(texts) > 4:
        texts = texts[:3] + [f"... and {len(texts) - 3} more"]
    return "\n".join(texts)
