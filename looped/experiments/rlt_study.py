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
from pathlib import Path

from ..config import from_dict, merge
from ..eval.lengths import METRICS, aggregate_over_seeds, evaluate_lengths, plot_length_curves
from ..io import atomic_save_figure, atomic_write_text
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train.config import one_budget
from . import report, rlt
from .report import cell
from .results import OVERRIDES, ResultTable, overrides_note
from .rlt_claims import CLAIMS
from .study import Axis, Recipe, RunSummary, StudySpec, register_study

COLUMNS = ["task", "row", "arch", "seed", "parameters", "updates", "best_step", "val_loss",
           "val_final_state_accuracy", "val_prefix_token_accuracy", "train_seconds", "seconds_per_update",
           "eval_seconds", "status", "machine"]
LENGTH_COLUMNS = ["task", "row", "seed", "length", "sequences", *METRICS, "loss", "shuffled_feedback_accuracy"]


def run_config(task: str, row: str, seed: int, overrides: dict | None = None, *, scale: str = "cpu") -> RunConfig:
    """The recipe of one (task, row, seed) at a scale, with `overrides` merged on top (same for every row)."""
    return from_dict(RunConfig, one_budget(merge(rlt.run_config_dict(task, row, scale, seed), overrides or {}),
                                            overrides or {}))


def results_table(out: Path) -> ResultTable:
    return ResultTable(Path(out) / "results.csv", COLUMNS, ["task", "row", "seed"], extra=(OVERRIDES,))


class RltStudy:
    """Seed 003's study: every (task, seed, row), each scored over its task's test-length grid from the best
    checkpoint (and with shuffled feedback where it has a register).

    test_size: rows per test length (None: the paper's 1,024, addition 256); test_lengths: {task: lengths}
    to shorten a grid (None: the full grid)."""

    trains = True

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 test_size: int | None = None, test_lengths: dict[str, list[int]] | None = None,
                 eval_batch_size: int = 256):
        self.out, self.runs, self.scale, self.overrides = Path(out), Path(runs), scale, overrides
        self.test_size, self.test_lengths, self.batch_size = test_size, test_lengths, eval_batch_size
        self.results = results_table(self.out)
        self.lengths = ResultTable(self.out / "lengths.csv", LENGTH_COLUMNS, ["task", "row", "seed", "length"])
        self.test_cache: dict = {}  # test rows are shared by every row and seed: generate each set once

    def config(self, key: dict) -> RunConfig:
        return run_config(key["task"], key["row"], key["seed"], self.overrides, scale=self.scale)

    def folder(self, key: dict) -> Path:
        return self.runs / key["task"] / key["row"] / f"seed{key['seed']}"

    def failure_key(self, key: dict, config: RunConfig) -> dict:
        return {**key, "arch": config.model.arch}

    def prepare(self, plan: list[dict], log) -> None:
        pass  # every score of a run is taken right after it trains

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        task, seed, row = key["task"], key["seed"], key["row"]
        start = time.perf_counter()
        model, config = load_model(ckpt.run_checkpoint(run.folder, "best"))
        has_feedback = config.model.arch == "rlt" and config.model.feedback  # the ablation needs a register
        records = evaluate_lengths(model, config.task.name, variant=config.task.variant,
                                   lengths=(self.test_lengths or {}).get(task), n=self.test_size,
                                   batch_size=self.batch_size, cache=self.test_cache, log=log,
                                   shuffled_metric=primary_metric(task) if has_feedback else None)
        for record in records:
            self.lengths.add({"task": task, "row": row, "seed": seed, **{k: cell(v) for k, v in record.items()}})
        best, seconds, updates = run.best_validation, run.seconds, run.updates
        self.results.add({"task": task, "row": row, "arch": config.model.arch, "seed": seed,
                          "parameters": model.parameter_counts()["total"], "updates": updates,
                          "best_step": run.best_step, "val_loss": cell(best.get("val_loss")),
                          "val_final_state_accuracy": cell(best.get("val_final_state_accuracy")),
                          "val_prefix_token_accuracy": cell(best.get("val_prefix_token_accuracy")),
                          "train_seconds": f"{seconds:.1f}",
                          "seconds_per_update": f"{seconds / updates:.3f}" if seconds and updates else "",
                          "eval_seconds": f"{time.perf_counter() - start:.1f}", "status": "ok"})

    def report(self) -> None:
        write_report(self.out, self.results, self.lengths, self.scale)


def primary_metric(task: str) -> str:
    """The headline metric of a task (Appendix J.4): answer tokens for addition, the final state otherwise."""
    return rlt.PRIMARY_METRIC.get(task, "final_state_accuracy")


# --- report -------------------------------------------------------------------------------------------------
def table_markdown(results: ResultTable, lengths: ResultTable, scale: str) -> str:
    finished = report.finished(results.rows)
    tasks = list(dict.fromkeys(r["task"] for r in results.rows))
    rows = list(dict.fromkeys(r["row"] for r in results.rows))
    title = "CPU scale" if scale == "cpu" else "the paper's recipe"
    lines = [f"# Seed 003 (Recurrent Looped Transformer) at {title}", "", *overrides_note(results.rows)]
    if scale == "cpu":
        lines += ["Changes to the paper's recipe, identical for every row:", ""]
        lines += [f"- {change}" for change in rlt.CPU_CHANGES] + [""]
    lines += ["Accuracy (%) of the checkpoint with minimum ID validation loss (earliest on ties), mean ± sample SD "
              "over seeds (n = seeds finished), teacher-forced, on the shared test rows (1,024 per length; "
              "addition 256). *Paper*: seed 003, 4+4 rows and Transformer 8 at the full recipe, 3 seeds; "
              "CPU-scale models are 2+2 / 4 layers, so compare the ordering of rows, not the values. "
              "*Shuffled feedback*: the same metric at the shortest test length with each row's feedback register "
              "replaced by its neighbour's in the batch (rows with feedback only): a row that learned the "
              "recurrence falls to chance, one that answers from the encoder memory keeps its accuracy.", ""]
    for task in tasks:
        metric = primary_metric(task)
        shown = rlt.TABLE_LENGTHS.get(task, ())
        ablated = shown[0] if shown else None  # the shortest test length: inside (or at) the trained range
        lines += [f"## {task} ({metric.replace('_', ' ')})", "",
                  "| row | parameters | s/update (incl. validation) | minutes per run (median) | best step | "
                  "ID validation | " + " | ".join(f"{n} | paper {n}" for n in shown) + f" | {ablated}, shuffled feedback |",
                  "|---|---:|---:|---:|---:|---:|" + "---:|---:|" * len(shown) + "---:|"]
        for row in rows:
            runs = [r for r in finished if r["task"] == task and r["row"] == row]
            failed = [r for r in results.rows if r["task"] == task and r["row"] == row and r not in runs]
            label = rlt.row_label(row, scale)
            if not runs and not failed:
                continue
            val_column = f"val_{metric}"
            cells = [label + (f" ({len(failed)} failed)" if failed else ""),
                     ", ".join(sorted({f"{int(r['parameters']):,}" for r in runs})) or "–",
                     report.spread([r["seconds_per_update"] for r in runs], 2),
                     report.median_minutes(r["train_seconds"] for r in runs),
                     ", ".join(str(r["best_step"]) for r in runs) or "–",
                     report.percent([r[val_column] for r in runs], 2)]
            for n in shown:
                values = [r[metric] for r in lengths.rows if r["task"] == task and r["row"] == row
                          and int(r["length"]) == n and any(str(x["seed"]) == str(r["seed"]) for x in runs)]
                cells += [report.percent(values, 2), _paper(task, row, n, metric)]
            shuffled = [r.get("shuffled_feedback_accuracy") for r in lengths.rows if r["task"] == task
                        and r["row"] == row and int(r["length"]) == ablated
                        and any(str(x["seed"]) == str(r["seed"]) for x in runs)]
            cells.append(report.percent(shuffled, 2))
            lines.append("| " + " | ".join(cells) + " |")
        if task.startswith("s5"):  # the paper also reports prefix-token accuracy at 512 operations
            prefix = {row: report.percent([r["prefix_token_accuracy"] for r in lengths.rows
                                         if r["task"] == task and r["row"] == row and int(r["length"]) == 512], 2)
                      for row in rows}
            lines += ["", "Prefix-token accuracy at 512 (paper: RLT-1 4+4 91.16 ± 6.09, Transformer 8 9.33 ± 0.11): "
                      + ", ".join(f"{rlt.row_label(row, scale)} {value}" for row, value in prefix.items())]
        lines.append("")
    return "\n".join(lines) + "\n"


def _paper(task: str, row: str, length: int, metric: str) -> str:
    if (task, row, length, metric) in rlt.PAPER:
        mean, sd = rlt.PAPER[(task, row, length, metric)]
        return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")
    return rlt.PAPER_NOTES.get((task, row, length), "–")


def write_report(out: Path, results: ResultTable, lengths: ResultTable, scale: str = "cpu") -> None:
    for table in (results, lengths):
        table.reload()  # rows other processes of the same study added
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "table.md", table_markdown(results, lengths, scale))
    tasks = list(dict.fromkeys(r["task"] for r in lengths.rows))
    labels = {row: rlt.row_label(row, scale) for row in (*rlt.ROWS, *rlt.CPU_ONLY_ROWS)}
    for task in tasks:
        plot_task(lengths, task, out / f"{task}.png", labels)
    if tasks:
        plot_feedback(lengths, tasks, out / "feedback.png", labels)


def _aggregate(lengths: ResultTable, task: str) -> list[dict]:
    records = [{**r, "length": int(r["length"]), **{m: float(r[m]) for m in METRICS}}
               for r in lengths.rows if r["task"] == task]
    return aggregate_over_seeds(records)


# one colour per row in every panel and figure, in the plan's order
ROW_COLORS = {row: f"C{i}" for i, row in enumerate(dict.fromkeys((*rlt.PLAN_ROWS, *rlt.ROWS)))}
SUBTITLE = "accuracy against test length, mean ± SD over seeds, best-validation checkpoint, teacher-forced"


def _row_order(table: list[dict]) -> list[str]:
    present = {r["row"] for r in table}
    return [row for row in ROW_COLORS if row in present] + sorted(present - set(ROW_COLORS))


def plot_task(lengths: ResultTable, task: str, path: Path, labels: dict[str, str]) -> None:
    """One panel per metric for S5 (Fig. 13: prefix-token, final-state, whole-sequence), else the headline."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = METRICS if task.startswith("s5") else (rlt.PRIMARY_METRIC.get(task, "final_state_accuracy"),)
    table = _aggregate(lengths, task)
    spec = rlt.TASKS[task]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        plot_length_curves(table, spec["name"], path, metric=metric, labels=labels, variant=spec.get("variant"),
                           title=f"{task}: {metric.replace('_', ' ')}", ax=ax, rows=_row_order(table),
                           colors=ROW_COLORS)
    fig.suptitle(f"{task}: {SUBTITLE}", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def plot_feedback(lengths: ResultTable, tasks: list[str], path: Path, labels: dict[str, str]) -> None:
    """Fig. 8 style: the headline accuracy of every row across each task's test grid, one panel per task."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(5.0 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        spec = rlt.TASKS[task]
        table = _aggregate(lengths, task)
        plot_length_curves(table, spec["name"], path, labels=labels, ax=ax, rows=_row_order(table),
                           metric=rlt.PRIMARY_METRIC.get(task, "final_state_accuracy"),
                           variant=spec.get("variant"), title=task, colors=ROW_COLORS)
    fig.suptitle(f"Feedback rows on every task: {SUBTITLE}", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)


# --- the spec ------------------------------------------------------------------------------------------------
def recipes():
    """configs/rlt/full/<task>_<row>.yaml for every row, configs/rlt/cpu/<task>_<row>.yaml for the study's."""
    for scale, rows in (("full", rlt.FULL_ROWS), ("cpu", rlt.STUDY_ROWS)):
        for task in rlt.TASKS:
            for row in (*rows, *(rlt.DEPTH_ROWS if scale == "cpu" and task in rlt.DEPTH_TASKS else ())):
                config = rlt.run_config_dict(task, row, scale)
                steps, batch = config["train"]["max_steps"], config["train"]["batch_size"]
                where = ("the paper's recipe (GPU)" if scale == "full" else
                         "CPU recipe (scaled; see looped/experiments/rlt.py)")
                header = (f"# seed 003 {task}, {rlt.row_label(row, scale)} ({row}): {where}; "
                          f"{steps} updates x {batch} rows.\n"
                          f"# Generated by `looped reproduce rlt --write-recipes`. Seeds 43/44: --set train.seed=43\n")
                yield Recipe(f"{scale}/{task}_{row}.yaml", header, config)


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


__all__ = ["RltStudy", "recipes", "run_config", "table_markdown", "write_report"]
