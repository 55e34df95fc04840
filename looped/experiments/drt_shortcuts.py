"""Shortcut baselines of the DRT study's family recipes: results/drt_<scale>/shortcuts.csv and their table rows.

For every family recipe the study runs (family, family_decued), the three shortcut baselines of
looped.eval.shortcuts are fitted on the recipe's training rows and scored on its test buckets, the same
rows the models are trained and tested on. No model is involved, so the rows cost seconds, are computed
once per recipe (a recipe with rows in shortcuts.csv is skipped) and are a pure function of the data
config (data_seed, sizes, difficulties): rerunning gives the same numbers.
"""

from __future__ import annotations

from pathlib import Path

from ..eval.shortcuts import FAMILY_CUES, family_shortcuts
from ..train import reasoning as rtask
from . import drt
from .reasoning_scores import difficulty_columns
from .render import Group, key, line, part
from .report import MISSING, by_difficulty, cell, figure, interval, read_interval
from .results import ResultTable

COLUMNS = ["task", "baseline", "trained_difficulties", "id_accuracy", "ood_accuracy", "by_difficulty", "train_rows",
           "test_rows"]
KEY = ["task", "baseline"]
FILE = "shortcuts.csv"


def table(out: Path) -> ResultTable:
    return ResultTable(Path(out) / FILE, COLUMNS, KEY)


def record(shortcuts: ResultTable, plan, test_rows, log=print) -> None:
    """Add the baselines of every family recipe in `plan` ([(key, RunConfig)]) that `shortcuts` lacks.

    `test_rows(task_config)` gives the recipe's test buckets (the study's cached TestSets.get).
    """
    for task, config in {key["task"]: config for key, config in plan}.items():
        if drt.TASKS[task] != "family" or all(shortcuts.has(task=task, baseline=b) for b in FAMILY_CUES):
            continue
        log(f"== drt: shortcut baselines of {task}")
        data_task, train, _ = rtask.training_data(config.task)
        trained = rtask.trained_difficulties(config.task)
        scores = family_shortcuts(train, test_rows(config.task), (min(trained), max(trained)), data_task.vocab)
        shortcuts.add_many([{"task": task, "baseline": name, "id_accuracy": cell(s["id"], 4),
                             "trained_difficulties": interval(trained),
                             "ood_accuracy": cell(s["ood"], 4), "train_rows": s["train_rows"],
                             "test_rows": s["test_rows"],
                             "by_difficulty": " ".join(f"{d}:{a:.4f}" for d, a in s["by_difficulty"].items())}
                            for name, s in scores.items()])


def shared(shortcuts: ResultTable) -> dict[int, list[str]]:
    """The recipes of each baseline row, by the row's index: recipes on the same data (family_decued_2x only
    trains longer than family_decued) have equal rows, shown once under the first recipe, labelled with all."""
    first: dict[tuple, int] = {}
    recipes: dict[int, list[str]] = {}
    for i, row in enumerate(shortcuts.rows):
        same = first.setdefault(tuple(v for k, v in row.items() if k != "task"), i)
        recipes.setdefault(same, []).append(row["task"])
    return recipes


def main_table_rows(shortcuts: ResultTable, columns: int) -> list[str]:
    """One row per baseline and data in the study's main table (recipes | "shortcut: <cue>" | – | ID | OOD | – ...)."""
    rows = shortcuts.rows
    return [line([", ".join(tasks), f"shortcut: {rows[i]['baseline']}", MISSING, figure(rows[i]["id_accuracy"], 1, 100),
                  figure(rows[i]["ood_accuracy"], 1, 100), *[MISSING] * (columns - 5)])
            for i, tasks in shared(shortcuts).items()]


CAPTION = ("A shortcut baseline predicts the label from one surface cue with a lookup table fitted on the recipe's "
           "training rows (cue value -> majority label; a value never seen in training -> the training majority, "
           "i.e. chance on the 50/50 test buckets) and is scored on the recipe's test buckets; no model is "
           "trained (looped.eval.shortcuts). Cues: the queried relation word with the chain depth; the word "
           "alone; the queried offset minus the sum of every stated fact's offset (the paper's generator writes "
           "chain facts in one direction, so they add up to the answer). family_decued: negatives ask another "
           "chain's answer and facts are written in a random direction (looped.data.tasks.family). Models: best "
           "accuracy over sufficient step budgets, mean over seeds. In %; * marks depths outside the trained "
           "range.")


def model_label(g: Group) -> str:
    """A family model group as a predictor: its architecture, its alpha where not 0, its seeds."""
    return g["arch"] + (f" (alpha {g['alpha']})" if float(g["alpha"]) else "") + f" (n={len(g.runs)})"


def by_depth_section(shortcuts: ResultTable, models: list[Group]) -> list[str]:
    """Accuracy by chain depth of every baseline beside every family model group (task, arch, alpha)."""
    if not shortcuts.rows:
        return []
    depths = sorted({d for r in shortcuts.rows for d in by_difficulty(r["by_difficulty"])})
    trained = read_interval(shortcuts.rows[0]["trained_difficulties"])  # one range for all recipes
    predictors = []  # per recipe: each baseline (one row, under the first recipe on its data), then each model group
    baselines = shared(shortcuts)
    for recipe in dict.fromkeys(r["task"] for r in shortcuts.rows):
        predictors += [Group({"task": ", ".join(tasks), "predictor": f"shortcut: {shortcuts.rows[i]['baseline']}"},
                             [shortcuts.rows[i]], []) for i, tasks in baselines.items() if tasks[0] == recipe]
        predictors += [Group({"task": recipe, "predictor": model_label(g)}, g.runs, []) for g in models
                       if g["task"] == recipe and g.runs]
    # a baseline's cell is by_difficulty, a model run's best_by_difficulty
    scores = lambda r: by_difficulty(r.get("by_difficulty", r.get("best_by_difficulty", "")))  # noqa: E731
    columns = [key("task", "recipe"), key("predictor"), *difficulty_columns(depths, trained, scores)]
    return part("Family: shortcut baselines by chain depth", columns, predictors, CAPTION)
