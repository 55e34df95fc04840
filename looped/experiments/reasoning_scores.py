"""A reasoning run's scores as CSV cells and rows, for any study of the reasoning tasks (seed 002's measures):
the ID / OOD summary of its test grid, its best accuracy per difficulty, the ACT ponder steps, the mean update gate
per step, the depth-embedding diagnostic, a graph model's scores on the other negative generator; and for reports,
a table's columns by difficulty, the heatmap of a group of runs' grids (mean over seeds) and the gates' figure.

    grid, summary = score_grid(model, test, config.task, batch_size=256)     # looped.train.reasoning
    results.add({**key, **grid_cells(grid, summary, config)})
    gates.add_many(gate_rows(key, grid))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..eval.reasoning import AccuracyGrid, depth_embedding_diagnostic, plot_gate_means, plot_heatmap
from ..data.tasks.base import task_options
from ..models import get_arch
from ..train import reasoning as rtask
from .render import Column, Group
from .report import average, by_difficulty, cell, column, finished, interval, percent, read_interval


def grid_cells(grid: AccuracyGrid, summary: dict, config) -> dict:
    """The results cells of a scored test grid: the trained ranges, ID / OOD accuracy (best over sufficient
    budgets), the best accuracy per difficulty @ the budget that gave it, and ACT's mean ponder steps out of range."""
    ood = summary["ood_difficulties"]
    ponder = sum(grid.ponder_steps[d] for d in ood) / len(ood) if grid.ponder_steps and ood else None
    return {"trained_difficulties": interval(rtask.trained_difficulties(config.task)),
            "trained_steps": interval(rtask.trained_steps_range(config)),
            "id_accuracy": cell(summary["id"], 4), "ood_accuracy": cell(summary["ood"], 4),
            "best_by_difficulty": " ".join(f"{d}:{a:.4f}@{summary['best_steps'][d]}"
                                           for d, a in summary["best"].items()),
            "mean_ponder_ood": cell(ponder, 3)}


def best_accuracy(run: dict) -> dict[int, float]:
    """A results row's best accuracy per test difficulty ({difficulty: accuracy}, from grid_cells' cell)."""
    return by_difficulty(run.get("best_by_difficulty", ""))


def gate_rows(key: dict, grid: AccuracyGrid) -> list[dict]:
    """The mean update gate at every thinking step ([] for a model without a gate)."""
    gates = grid.gate_means or ()  # None: a fixed-depth baseline, ACT, the tied ablation
    return [{**key, "step": step, "gate_mean": f"{value:.6f}"} for step, value in enumerate(gates, start=1)]


def diagnostic_rows(key: dict, model, rows, budgets: Sequence[int], trained_steps: int, *,
                    batch_size: int) -> tuple[list[dict], float | None]:
    """The depth-embedding diagnostic on test rows `rows`: one row per variant and its max |change| ([] and None
    for a model without per-step depth embeddings to swap: trm, a fixed-depth row)."""
    if model.depth_mode != "per_step" or not hasattr(model, "depth_embedding"):
        return [], None
    found = depth_embedding_diagnostic(model, rows, budgets, trained_steps, batch_size=batch_size)
    return [{**key, "variant": variant, "accuracy": f"{entry['accuracy']:.6f}", "change": f"{entry['change']:.6f}",
             "rows": len(rows), "budgets": " ".join(map(str, found["budgets"]))}
            for variant, entry in found["variants"].items()], found.get("max_abs_change")


def other_generator_cells(model, config, tests, path: Path, *, batch_size: int) -> dict:
    """A graph model scored on the other negative generator's test buckets (hard <-> the paper's; tests: a
    train.reasoning.TestSets), its grid written to `path`: the cross ID / OOD cells (empty for other tasks)."""
    if config.task.name != "graph":
        return {"cross_id_accuracy": "", "cross_ood_accuracy": ""}
    grid, cross = rtask.score_grid(model, tests.get(config.task, other_generator=True), config.task,
                                   batch_size=batch_size)
    grid.write_csv(path)
    return {"cross_id_accuracy": cell(cross["id"], 4), "cross_ood_accuracy": cell(cross["ood"], 4)}


def negatives(task: str) -> str:
    """Which negative generator a graph recipe trains on: 'hard' or the paper's."""
    return "hard" if task_options(task).get("hard_negatives", False) else "paper"


def generator_columns() -> list[Column]:
    """A graph group's ID and OOD % on each generator's test set (the paper's, then hard): its own scores where it
    trained on those negatives, its other_generator_cells otherwise (runs with both scores only)."""
    def text(generator: str, name: str) -> Callable[[Group], str]:
        def cell_text(g: Group) -> str:
            runs = [r for r in g.runs if r.get("cross_id_accuracy")]
            own = negatives(g["task"]) == generator
            return percent(column(runs, f"{'' if own else 'cross_'}{name}_accuracy"))
        return cell_text

    return [Column(f"{generator} negatives {name.upper()}", text(generator, name))
            for generator in ("paper", "hard") for name in ("id", "ood")]


def fixed_depth_label(arch: str, task: str) -> str | None:
    """"6 layers" for an architecture that ignores the step budget (its heatmap has one row), at its paper
    configuration for reasoning task `task`; None for one that thinks for T steps."""
    spec = get_arch(arch)
    if spec.model_cls.depth_mode != "fixed":
        return None
    return f"{spec.config_cls.for_task(task).layers} layers"


def plot_gates(gates: list[dict], results: list[dict], path: Path, name: Callable[[dict], str], core: str) -> None:
    """gates.csv's rows as plot_gate_means' figure: a panel per task, a line per run (name(row) labels it), the
    largest trained T of the task's `core` runs marked; nothing without a gate row."""
    panels: dict[str, dict[str, list[float]]] = {}  # task -> run -> mean gate per step
    for r in gates:
        panels.setdefault(r["task"], {}).setdefault(name(r), []).append(float(r["gate_mean"]))
    if panels:
        trained = {task: read_interval(rows[0]["trained_steps"])[1] for task in panels
                   if (rows := finished(results, task=task, arch=core)) and rows[0].get("trained_steps")}
        counts = [int(r["parameters"]) for r in finished(results, arch=core) if r.get("parameters")]
        size = f"{min(counts):,}–{max(counts):,} parameters" if counts else ""
        plot_gate_means(panels, path, trained, size)


def difficulty_columns(difficulties: list[int], trained: tuple[int, int],
                       scores: Callable[[dict], dict[int, float]]) -> list[Column]:
    """One table column per test difficulty, * where it lies outside the trained range: the mean over a group's
    runs of scores(run)[difficulty], in %."""
    lo, hi = trained
    return [Column(f"{d}{'' if lo <= d <= hi else '*'}",
                   lambda g, d=d: average([scores(r).get(d) for r in g.runs], 1, 100)) for d in difficulties]


def mean_heatmap(grids: Sequence[Path], path: Path, run: dict, label: str, **options) -> None:
    """The mean of a group's grid files (those that exist) as a heatmap, the trained ranges of `run` (a results row
    of the group) dashed; nothing when no grid exists. `options` go to plot_heatmap (difficulty_name ...)."""
    found = [AccuracyGrid.read_csv(p) for p in grids if Path(p).exists()]
    if found:
        plot_heatmap(AccuracyGrid.mean(found), path, trained_difficulties=read_interval(run["trained_difficulties"]),
                     trained_steps=read_interval(run["trained_steps"]),
                     title=f"{label}{parameter_note(run)}\ntest accuracy, mean over {len(found)} seed(s); "
                           "dashed: trained range", **options)


def parameter_note(run: dict) -> str:
    """', 205,441 parameters' from a results row, or nothing when the row has no count."""
    count = run.get("parameters")
    return f", {int(count):,} parameters" if count not in (None, "") else ""


__all__ = ["best_accuracy", "diagnostic_rows", "difficulty_columns", "fixed_depth_label", "gate_rows",
           "generator_columns", "grid_cells", "mean_heatmap", "negatives", "other_generator_cells", "plot_gates"]
