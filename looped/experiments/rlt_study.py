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

from collections.abc import Callable
from pathlib import Path

from ..eval.lengths import METRICS, evaluate_lengths, plot_length_rows
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train.config import recipe_config
from . import rlt
from .recipes import Recipe
from .render import (Column, bullets, groups, heading, inline, joined_spread, left, listed, markdown, matching,
                     minutes_per_run, noting_failures, over_budget, panels, parameters, percent_of, spread_of, table,
                     write_table)
from .report import MISSING, cell, paper_figure
from .results import ResultTable, study_results
from .rlt_claims import CLAIMS
from .retrain import Reproduction, retrains_note
from .study import Axis, Backfill, RunSummary, StudyBase, StudySpec, register_study

# |retrained - row| of the best checkpoint's ID validation loss for a retrain to reproduce its row: the recipes are
# seeded and run on one thread, so the machine that trained the row gives the same 6 decimals (another may not)
REPRODUCE_TOLERANCE = 1e-5
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
        # feedback rows trained before the shuffled-feedback ablation (addition) are scored again from their folder
        self.backfills = (Backfill("shuffled feedback", self.lengths, lambda key, _: self.score_lengths(key),
                                   owed=self.owes_shuffled),)

    def config(self, key: dict) -> RunConfig:
        """The recipe of one (task, row, seed) at the study's scale, with its overrides merged on top."""
        return self.config_once(key, lambda: recipe_config(
            rlt.run_config_dict(key["task"], key["row"], self.scale, key["seed"]), self.overrides))

    def owes_shuffled(self, key: dict) -> bool:
        """A feedback row's finished run whose length rows lack the shuffled-feedback score."""
        model = self.config({**key, "seed": int(key["seed"])}).model  # a key read from results.csv holds text
        return (model.arch == "rlt" and bool(model.feedback)
                and any(not r["shuffled_feedback_accuracy"] for r in matching(self.lengths.rows, **key)))

    def reproduces(self, key: dict, run: RunSummary) -> Reproduction:
        """A retrained run against its results.csv row: the best checkpoint's ID validation loss."""
        return Reproduction("ID validation loss", float(self.results.find(**key)["val_loss"]),
                            run.best_validation.get("val_loss", float("nan")), REPRODUCE_TOLERANCE)

    def score_lengths(self, key: dict, folder: Path | None = None, log=None):
        """lengths.csv's rows of one run: its best checkpoint over the task's test grid (and, rows with a feedback
        register, with shuffled feedback); returns the model and its config."""
        model, config = load_model(ckpt.run_checkpoint(folder or self.folder(key), "best"))
        has_feedback = config.model.arch == "rlt" and config.model.feedback  # the ablation needs a register
        records = evaluate_lengths(model, config.task.name, variant=config.task.variant,
                                   lengths=(self.test_lengths or {}).get(key["task"]), n=self.test_size,
                                   batch_size=self.batch_size, cache=self.test_cache, log=log,
                                   shuffled_metric=rlt.primary_metric(key["task"]) if has_feedback else None)
        self.lengths.add_many([{**key, **{k: cell(v) for k, v in record.items()}} for record in records])
        return model, config

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        model, config = self.score_lengths(key, run.folder, log)
        self.results.add({**key, **run.cells(model), "arch": config.model.arch})  # with the best checkpoint's val_*

    def report(self) -> None:
        """table.md, then <task>.png (one panel per metric for S5: Fig. 13's prefix-token, final-state and
        whole-sequence) and feedback.png (Fig. 8: every task's headline accuracy across its test grid)."""
        lengths, scale = self.lengths, self.scale
        write_table(self.out, (self.results, lengths),
                    lambda: table_markdown(self.results, lengths, scale, retrains_note(self, "rlt")))
        labels = {row: rlt.row_label(row, scale) for row in (*rlt.ROWS, *rlt.CPU_ONLY_ROWS)}

        def curves(ax, task: str, metric: str, title: str) -> None:  # a task's rows (mean ± SD over seeds)
            plot_length_rows(ax, matching(lengths.rows, task=task), rlt.TASKS[task]["name"], metric=metric,
                             title=title, labels=labels, colors=ROW_COLORS, variant=rlt.TASKS[task].get("variant"))

        tasks = plan_order((r["task"] for r in lengths.rows), rlt.TASKS)
        for task in tasks:
            metrics = METRICS if task.startswith("s5") else (rlt.primary_metric(task),)
            panels(self.out / f"{task}.png", metrics,
                   lambda ax, metric: curves(ax, task, metric, f"{task}: {metric.replace('_', ' ')}"),
                   size=(5.2, 3.8), title=f"{task}: {SUBTITLE}")
        if tasks:
            panels(self.out / "feedback.png", tasks, lambda ax, task: curves(ax, task, rlt.primary_metric(task), task),
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
    metric, shown = rlt.primary_metric(task), rlt.TABLE_LENGTHS.get(task, ())
    ablated = shown[0] if shown else None  # the shortest test length: inside (or at) the trained range
    paper = lambda n: lambda g: paper_figure(rlt.PAPER.get((task, g["row"], n, metric)), 2,  # noqa: E731
                                             rlt.PAPER_NOTES.get((task, g["row"], n), MISSING))
    return [noting_failures(left("row", lambda g: rlt.row_label(g["row"], scale))), parameters(),
            spread_of("s/update (incl. validation)", "seconds_per_update", 2), minutes_per_run(),
            listed("best step", "best_step"), percent_of("ID validation", f"val_{metric}", 2),
            *(c for n in shown for c in (joined_spread(str(n), lengths, metric, 2, 100, length=n),
                                         Column(f"paper {n}", paper(n)))),
            joined_spread(f"{ablated}, shuffled feedback", lengths, "shuffled_feedback_accuracy", 2, 100,
                          length=ablated)]


def plan_order(names, known) -> list[str]:
    """names (rows or tasks) in the order `known` lists them (the plan's: RLT-1 before its ablations and baselines,
    the paper's tasks before the added ones), names it does not know after them: not the order runs finished in."""
    known = list(known)
    return sorted(dict.fromkeys(names), key=lambda name: known.index(name) if name in known else len(known))


def table_markdown(results: ResultTable, lengths: ResultTable, scale: str, notes: list[str] = ()) -> str:
    rows = [(row,) for row in plan_order((r["row"] for r in results.rows), (*rlt.PLAN_ROWS, *rlt.ROWS))]
    title = "CPU scale" if scale == "cpu" else "the paper's recipe"
    changes = ["Changes to the paper's recipe, identical for every row:", bullets(rlt.CPU_CHANGES)]
    lines = heading(f"Seed 003 (Recurrent Looped Transformer) at {title}", results.rows,
                    *(changes if scale == "cpu" else ()), CAPTION)
    for task in plan_order((r["task"] for r in results.rows), rlt.TASKS):
        task_rows = groups(results.rows, ("row",), order=rows, task=task)
        lines += [f"## {task} ({rlt.primary_metric(task).replace('_', ' ')})", "",
                  *table(task_columns(task, lengths, scale), task_rows),
                  *over_budget(task_rows)]
        if task.startswith("s5"):  # the paper also reports prefix-token accuracy at 512 operations
            at_512 = joined_spread("", lengths, "prefix_token_accuracy", 2, 100, length=512)
            every_row = groups(results.rows, ("row",), order=rows, keep_empty=True, task=task)
            lines += ["", S5_PREFIX + inline(every_row, lambda g: rlt.row_label(g["row"], scale), at_512)]
        lines.append("")
    return markdown([*lines, *notes])


# one colour per row in every panel and figure, in the plan's order
ROW_COLORS = {row: f"C{i}" for i, row in enumerate(dict.fromkeys((*rlt.PLAN_ROWS, *rlt.ROWS)))}
SUBTITLE = "accuracy against test length, mean ± SD over seeds, best-validation checkpoint, teacher-forced"


# --- the spec ------------------------------------------------------------------------------------------------
WHERE = {"full": "the paper's recipe (GPU)", "cpu": "CPU recipe (scaled; see looped/experiments/rlt.py)"}
KEEP = lambda key, scale="cpu": key["row"] not in rlt.DEPTH_ROWS or key["task"] in rlt.DEPTH_TASKS  # noqa: E731


def recipes():
    """configs/rlt/full/<task>_<row>.yaml for every row, configs/rlt/cpu/<task>_<row>.yaml for the study's."""
    for scale, rows in (("full", rlt.FULL_ROWS), ("cpu", rlt.PLAN_ROWS)):
        for task, row in ((task, row) for task in rlt.TASKS for row in rows if KEEP({"task": task, "row": row})):
            config = rlt.run_config_dict(task, row, scale)
            yield Recipe.commented(f"{scale}/{task}_{row}.yaml", config,
                                   f"seed 003 {task}, {rlt.row_label(row, scale)} ({row}): {WHERE[scale]}; "
                                   f"{config['train']['max_steps']} updates x {config['train']['batch_size']} rows.",
                                   "Generated by `looped reproduce rlt --write-recipes`. "
                                   "Seeds 43/44: --set train.seed=43")


TOY = {"select": {"task": ("parity",), "row": ("rlt1", "baseline"), "seed": (42,)},  # two rows on parity in seconds
       "overrides": {"model": {"dim": 16, "heads": 2, "ffn_dim": 16}, "task": {"validation_size": 8},
                     "train": {"max_steps": 2, "eval_every": 1, "batch_size": 8, "log_every": 1}},
       "options": {"test_size": 6, "test_lengths": {"parity": [32, 64]}}}


register_study(StudySpec(
    name="rlt", help="seed 003: RLT rows on the algorithmic tasks, accuracy over the test-length grids",
    axes=(Axis("task", "tasks", rlt.STUDY_TASKS, tuple(rlt.TASKS), aliases={"s5": "s5_standard"}),
          Axis("seed", "seeds", rlt.SEEDS, cell=int),
          Axis("row", "rows", rlt.PLAN_ROWS, (*rlt.ROWS, *rlt.CPU_ONLY_ROWS),
               help=f"{', '.join(rlt.DEPTH_ROWS)} run on {', '.join(rlt.DEPTH_TASKS)} only")),
    build=RltStudy, recipes=recipes, toy=TOY, claims=CLAIMS,
    keep=KEEP))


__all__ = ["RltStudy", "recipes", "table_markdown"]
