"""A new study in one file: does feedback (RLT-1) beat a plain Transformer past the training length on parity?

A study is a `StudySpec` registered with the engine (looped.experiments.study): its axes, the `Study` that
builds each run's config and scores it (a `StudyBase` subclass: the engine's defaults fill in the rest), its
recipes. Planning, claiming, training, resuming, --status,
--stop-after, --set and the `looped reproduce` sub-command come from the engine:

    export LOOPED_PLUGINS=examples/study_plugin.py
    looped reproduce feedback_parity --status
    looped reproduce feedback_parity --seeds 1 --set train.max_steps=200 --out runs/feedback_parity
    looped reproduce feedback_parity --write-recipes        # configs/feedback_parity/<row>.yaml

tests/test_example_study.py runs it end to end at toy size with the shared study drivers.
"""

from __future__ import annotations

from pathlib import Path

from looped.config import merge
from looped.eval.lengths import evaluate_lengths
from looped.experiments.render import groups, heading, key, markdown, percent_of, table, write_table
from looped.experiments.report import cell
from looped.experiments.results import study_results
from looped.experiments.recipes import Recipe
from looped.experiments.study import Axis, RunSummary, StudyBase, StudySpec, register_study
from looped.train import RunConfig, load_model
from looped.train import checkpoint as ckpt
from looped.train.config import recipe_config

ROWS = {  # row -> model section: the same width and total depth 2
    "plain": {"arch": "rlt_baseline", "dim": 32, "heads": 4, "ffn_dim": 64, "layers": 2},
    "rlt1": {"arch": "rlt", "dim": 32, "heads": 4, "ffn_dim": 64, "encoder_layers": 1, "decoder_layers": 1,
             "feedback_interval": 1},
}
TEST_LENGTHS = [16, 64]  # inside and beyond the trained lengths (2-16)
RECIPE = {
    "task": {"kind": "sequence", "name": "parity", "train_lengths": [2, 16], "curriculum_start": 2,
             "curriculum_fraction": 0.5, "same_length_batches": True},
    "optim": {"lr": 1.0e-3, "warmup_steps": 20},
    "train": {"batch_size": 32, "max_steps": 600, "eval_every": 100, "select": "best", "threads": 1,
              "device": "cpu"},
}
COLUMNS = ["row", "seed", "parameters", "updates", *(f"accuracy_{n}" for n in TEST_LENGTHS), "train_seconds",
           "status", "machine"]


def recipe(row: str) -> dict:
    return {"model": dict(ROWS[row]), **RECIPE}


class FeedbackParity(StudyBase):
    """Each (row, seed): train the recipe, score final-state accuracy at every test length."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 test_size: int = 256):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.test_size = test_size
        self.results = study_results(self.out, COLUMNS, ["row", "seed"])

    def config(self, key: dict) -> RunConfig:
        return recipe_config(merge(recipe(key["row"]), {"train": {"seed": key["seed"]}}), self.overrides)

    def evaluate(self, key: dict, config, run: RunSummary, log) -> None:
        model, _ = load_model(ckpt.run_checkpoint(run.folder, "best"))
        scores = evaluate_lengths(model, "parity", lengths=TEST_LENGTHS, n=self.test_size, batch_size=64)
        self.results.add({**key, **run.cells(model),  # parameters, updates, train_seconds, status (those it has)
                          **{f"accuracy_{s['length']}": cell(s["final_state_accuracy"]) for s in scores}})

    def report(self) -> None:
        """table.md: one line per row, final-state accuracy at each test length over the finished seeds."""
        columns = [key("row"), *(percent_of(f"{n} bits, %", f"accuracy_{n}") for n in TEST_LENGTHS)]
        write_table(self.out, (self.results,), lambda: markdown([
            *heading("Feedback vs plain on parity (trained on 2-16 bits)", self.results.rows),
            *table(columns, groups(self.results.rows, ("row",), order=[(row,) for row in ROWS]))]))


def recipes():
    for row in ROWS:
        yield Recipe(f"{row}.yaml", f"# feedback_parity row {row} (examples/study_plugin.py)\n", recipe(row))


def toy(tmp: Path) -> dict:
    return {"select": {"seed": (1,)}, "overrides": {"train": {"max_steps": 2, "eval_every": 1}},
            "options": {"test_size": 8}}


register_study(StudySpec(
    name="feedback_parity", help="example plugin: RLT-1 vs a plain Transformer on parity past 16 bits",
    axes=(Axis("row", "rows", tuple(ROWS), tuple(ROWS)), Axis("seed", "seeds", (1, 2, 3), cell=int)),
    build=FeedbackParity, recipes=recipes, toy=toy, scales=("cpu",)))
