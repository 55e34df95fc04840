"""`looped reproduce rlt --scale cpu`: the feedback-interval comparison of seed 003 (Fig. 8) on its tasks.

Rows RLT-1, RLT-2 chunk4, RLT-0 and the decoder-only Transformer, seeds 42/43/44, tasks parity and swaps-S5
first, then flat and bracketed mod-5 and addition. Each run trains its recipe (looped.experiments.rlt; cpu:
configs/rlt/cpu, full: configs/rlt/full), then evaluates its best ID-validation-loss checkpoint on the task's
whole test grid (1,024 shared rows per length, addition 256). Resumable run by run: a finished run is a line in
results.csv and its lengths in lengths.csv and is never trained or evaluated again; an interrupted run resumes
from its last checkpoint.

Writes <out>/results.csv, lengths.csv, table.md (our numbers beside the paper's, with every change to the
paper's recipe in the header) and <task>.png / feedback.png (accuracy vs test length, Figs. 6, 8 and 13).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..eval.lengths import METRICS, aggregate_over_seeds, evaluate_lengths, plot_length_curves
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train.config import recipe_config
from . import report, rlt
from .render import (Column, Group, bullets, groups, heading, left, markdown, matching, minutes_per_run, panels,
                     parameters, percent_of, spread_of, table, write_table)
from .report import MISSING, cell, column
from .results import ResultTable, study_results
from .rlt_claims import CLAIMS
from .study import Axis, Recipe, RunSummary, StudyBase, StudySpec, register_study

COLUMNS = ["task", "row", "arch", "seed", "parameters", "updates", "best_step", "val_loss",
           "val_final_state_accuracy", "val_prefix_token_accuracy", "train_seconds", "seconds_per_update",
           "eval_seconds", "status", "machine"]


class RltStudy(StudyBase):
    """Seed 003's study: every (task, seed, row), each scored over its task's test-length grid from the best
    checkpoint (and with shuffled feedback where it has a register).

    test_size: rows per test length (None: the paper's 1,024, addition 256); test_lengths: {task: lengths}
    to shorten a grid (None: the full grid)."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 test_size: int | None = None, test_lengths: dict[str, list[int]] | None = None,
                 eval_batch_size: int = 256):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.test_size, self.test_lengths, self.batch_size = test_size, test_lengths, eval_batch_size
        self.results = study_results(self.out, COLUMNS, ["task", "row", "seed"])
        self.lengths = self.per_run("lengths.csv", "length", ["sequences", *METRICS, "loss",
                                                              "shuffled_feedback_accuracy"])
        self.test_cache: dict = {}  # test rows are shared by every row and seed: generate each set once

    def config(self, key: dict) -> RunConfig:
        """The recipe of one (task, row, seed) at the study's scale, with its overrides merged on top."""
        return recipe_config(rlt.run_config_dict(key["task"], key["row"], self.scale, key["seed"]), self.overrides)

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        task = key["task"]
        start = time.perf_counter()
        model, config = load_model(ckpt.run_checkpoint(run.folder, "best"))
        has_feedback = config.model.arch == "rlt" and config.model.feedback  # the ablation needs a register
        records = evaluate_lengths(model, config.task.name, variant=config.task.variant,
                                   lengths=(self.test_lengths or {}).get(task), n=self.test_size,
                                   batch_size=self.batch_size, cache=self.test_cache, log=log,
                                   shuffled_metric=rlt.primary_metric(task) if has_feedback else None)
        self.lengths.add_many([{**key, **{k: cell(v) for k, v in record.items()}} for record in records])
        best, seconds, updates = run.best_validation, run.seconds, run.updates
        self.results.add({**key, **run.cells(model), "arch": config.model.arch,
                          **{name: cell(best.get(name)) for name in ("val_loss", "val_final_state_accuracy",
                                                                     "val_prefix_token_accuracy")},
                          "seconds_per_update": f"{seconds / updates:.3f}" if seconds and updates else "",
                          "eval_seconds": f"{time.perf_counter() - start:.1f}"})

    def report(self) -> None:
        """table.md, then <task>.png (one panel per metric for S5: Fig. 13's prefix-token, final-state and
        whole-sequence) and feedback.png (Fig. 8: every task's headline accuracy across its test grid)."""
        lengths, scale = self.lengths, self.scale
        write_table(self.out, (self.results, lengths), lambda: table_markdown(self.results, lengths, scale))
        tasks = list(dict.fromkeys(r["task"] for r in lengths.rows))
        labels = {row: rlt.row_label(row, scale) for row in (*rlt.ROWS, *rlt.CPU_ONLY_ROWS)}
        for task in tasks:
            metrics = METRICS if task.startswith("s5") else (rlt.primary_metric(task),)
            panels(self.out / f"{task}.png", metrics,
                   lambda ax, metric: _curves(ax, lengths, task, metric, labels, f"{task}: {metric.replace('_', ' ')}"),
                   size=(5.2, 3.8), title=f"{task}: {SUBTITLE}")
        if tasks:
            panels(self.out / "feedback.png", tasks,
                   lambda ax, task: _curves(ax, lengths, task, rlt.primary_metric(task), labels, task),
                   size=(5.0, 3.8), title=f"Feedback rows on every task: {SUBTITLE}")


# --- report -------------------------------------------------------------------------------------------------
CAPTION = ("Accuracy (%) of the checkpoint with minimum ID validation loss (earliest on ties), mean ± sample SD over "
           "seeds (n = seeds finished), teacher-forced, on the shared test rows (1,024 per length; addition 256). "
           "*Paper*: seed 003, 4+4 rows and Transformer 8 at the full recipe, 3 seeds; CPU-scale models are 2+2 / 4 "
           "layers, so compare the ordering of rows, not the values. *Shuffled feedback*: the same metric at the "
           "shortest test length with each row's feedback register replaced by its neighbour's in the batch (rows "
           "with feedback only): a row that learned the recurrence falls to chance, one that answers from the "
           "encoder memory keeps its accuracy.")
S5_PREFIX = "Prefix-token accuracy at 512 (paper: RLT-1 4+4 91.16 ± 6.09, Transformer 8 9.33 ± 0.11): "


def task_columns(task: str, lengths: ResultTable, scale: str) -> list[Column]:
    """A task's table: cost, the validation score, each shown test length beside the paper's, and the ablation."""
    metric = rlt.primary_metric(task)
    shown = rlt.TABLE_LENGTHS.get(task, ())
    ablated = shown[0] if shown else None  # the shortest test length: inside (or at) the trained range

    def at_length(n, name: str) -> Callable[[Group], str]:  # the finished seeds' scores at test length n
        return lambda g: report.percent(column(g.joined(lengths.rows, length=n), name), 2)

    def paper(n) -> Callable[[Group], str]:
        return lambda g: _paper(task, g["row"], n, metric)

    def label(g: Group) -> str:
        return rlt.row_label(g["row"], scale) + (f" ({len(g.failed)} failed)" if g.failed else "")

    by_length = [c for n in shown for c in (Column(str(n), at_length(n, metric)), Column(f"paper {n}", paper(n)))]
    return [left("row", label), parameters(), spread_of("s/update (incl. validation)", "seconds_per_update", 2),
            minutes_per_run(),
            Column("best step", lambda g: ", ".join(g.values("best_step")) or MISSING),
            percent_of("ID validation", f"val_{metric}", 2), *by_length,
            Column(f"{ablated}, shuffled feedback", at_length(ablated, "shuffled_feedback_accuracy"))]


def table_markdown(results: ResultTable, lengths: ResultTable, scale: str) -> str:
    rows = [(row,) for row in dict.fromkeys(r["row"] for r in results.rows)]
    title = "CPU scale" if scale == "cpu" else "the paper's recipe"
    changes = ["Changes to the paper's recipe, identical for every row:", bullets(rlt.CPU_CHANGES)]
    lines = heading(f"Seed 003 (Recurrent Looped Transformer) at {title}", results.rows,
                    *(changes if scale == "cpu" else ()), CAPTION)
    for task in dict.fromkeys(r["task"] for r in results.rows):
        lines += [f"## {task} ({rlt.primary_metric(task).replace('_', ' ')})", "",
                  *table(task_columns(task, lengths, scale), groups(results.rows, ("row",), order=rows, task=task))]
        if task.startswith("s5"):  # the paper also reports prefix-token accuracy at 512 operations
            at_512 = lambda row: column(matching(lengths.rows, task=task, row=row, length=512),  # noqa: E731
                                        "prefix_token_accuracy")
            prefix = [f"{rlt.row_label(row, scale)} {report.percent(at_512(row), 2)}" for (row,) in rows]
            lines += ["", S5_PREFIX + ", ".join(prefix)]
        lines.append("")
    return markdown(lines)


def _paper(task: str, row: str, length: int, metric: str) -> str:
    if (task, row, length, metric) in rlt.PAPER:
        mean, sd = rlt.PAPER[(task, row, length, metric)]
        return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")
    return rlt.PAPER_NOTES.get((task, row, length), MISSING)


# one colour per row in every panel and figure, in the plan's order
ROW_COLORS = {row: f"C{i}" for i, row in enumerate(dict.fromkeys((*rlt.PLAN_ROWS, *rlt.ROWS)))}
SUBTITLE = "accuracy against test length, mean ± SD over seeds, best-validation checkpoint, teacher-forced"


def _curves(ax, lengths: ResultTable, task: str, metric: str, labels: dict[str, str], title: str) -> None:
    """One panel: a task's rows (mean ± SD over seeds) against test length."""
    points = aggregate_over_seeds([{**r, "length": int(r["length"]), **{m: float(r[m]) for m in METRICS}}
                                  for r in matching(lengths.rows, task=task)])
    present = {r["row"] for r in points}
    order = [row for row in ROW_COLORS if row in present] + sorted(present - set(ROW_COLORS))
    plot_length_curves(points, rlt.TASKS[task]["name"], None, metric=metric, labels=labels, title=title, ax=ax,
                       variant=rlt.TASKS[task].get("variant"), rows=order, colors=ROW_COLORS)


# --- the spec ------------------------------------------------------------------------------------------------
WHERE = {"full": "the paper's recipe (GPU)", "cpu": "CPU recipe (scaled; see looped/experiments/rlt.py)"}


def recipes():
    """configs/rlt/full/<task>_<row>.yaml for every row, configs/rlt/cpu/<task>_<row>.yaml for the study's."""
    for scale, rows in (("full", rlt.FULL_ROWS), ("cpu", rlt.STUDY_ROWS)):
        for task in rlt.TASKS:
            for row in (*rows, *(rlt.DEPTH_ROWS if scale == "cpu" and task in rlt.DEPTH_TASKS else ())):
                config, where = rlt.run_config_dict(task, row, scale), WHERE[scale]
                yield Recipe(f"{scale}/{task}_{row}.yaml",
                             f"# seed 003 {task}, {rlt.row_label(row, scale)} ({row}): {where}; "
                             f"{config['train']['max_steps']} updates x {config['train']['batch_size']} rows.\n"
                             f"# Generated by `looped reproduce rlt --write-recipes`. "
                             f"Seeds 43/44: --set train.seed=43\n", config)


def _toy(tmp: Path) -> dict:
    """Two rows on parity in seconds (the shared study drivers)."""
    return {"select": {"task": ("parity",), "row": ("rlt1", "baseline"), "seed": (42,)},
            "overrides": {"model": {"dim": 16, "heads": 2, "ffn_dim": 16}, "task": {"validation_size": 8},
                          "train": {"max_steps": 2, "eval_every": 1, "batch_size": 8, "log_every": 1}},
            "options": {"test_size": 6, "test_lengths": {"parity": [32, 64]}}}


register_study(StudySpec(
    name="rlt", help="seed 003: RLT rows on the algorithmic tasks, accuracy over the test-length grids",
    axes=(Axis("task", "tasks", rlt.STUDY_TASKS, tuple(rlt.TASKS), aliases={"s5": "s5_standard"}),
          Axis("seed", "seeds", rlt.SEEDS, cell=int),
          Axis("row", "rows", rlt.PLAN_ROWS, (*rlt.ROWS, *rlt.CPU_ONLY_ROWS),
               help=f"{', '.join(rlt.DEPTH_ROWS)} run on {', '.join(rlt.DEPTH_TASKS)} only")),
    build=RltStudy, recipes=recipes, toy=_toy, claims=CLAIMS,
    keep=lambda key, scale: key["row"] not in rlt.DEPTH_ROWS or key["task"] in rlt.DEPTH_TASKS))


__all__ = ["RltStudy", "recipes", "table_markdown"]
