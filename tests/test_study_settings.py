"""A study table averages its rows over seeds under the recipe's header, so rows of other settings (--set) must
not join it silently (issue 29, faults 3): overrides are recorded per row, a table of other settings is refused,
and older CSVs without the column still load and stay as they were."""

from __future__ import annotations

import csv

import pytest

from looped.experiments.study import run_study, status
from looped.experiments.results import OVERRIDES, ResultTable, check_same_settings, overrides_text

TINY = {"model": {"dim": 16, "heads": 2, "ffn_dim": 16}, "task": {"validation_size": 8},
        "train": {"max_steps": 2, "eval_every": 0, "batch_size": 8, "log_every": 1}}


def study(out, runs, seed: int, max_steps: int):
    overrides = {**TINY, "train": {**TINY["train"], "max_steps": max_steps}}
    return run_study("rlt", out, runs, select={"task": ("parity",), "row": ("baseline",), "seed": (seed,)},
                     overrides=overrides, test_size=4, test_lengths={"parity": [32]}, progress=False,
                     log=lambda m: None)


def test_a_second_budget_is_refused_and_the_first_is_recorded_and_reported(tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    study(out, runs, seed=42, max_steps=2)
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r[OVERRIDES] for r in rows] == [overrides_text({**TINY})] and "train.max_steps=2" in rows[0][OVERRIDES]
    assert "Not the recipe" in (out / "table.md").read_text()
    with pytest.raises(ValueError, match="train.max_steps=2.*train.max_steps=3"):
        study(out, runs, seed=43, max_steps=3)  # would average a 2-update and a 3-update run as n = 2
    assert len(list(csv.DictReader(open(out / "results.csv")))) == 1
    # --status with the same --set says the run would be refused, not just "to do"
    select = {"task": ("parity",), "row": ("baseline",), "seed": (42, 43)}
    other = status("rlt", out, runs, select=select, overrides={**TINY, "train": {**TINY["train"], "max_steps": 3}},
                   test_size=4, test_lengths={"parity": [32]})
    assert "to do  parity / 43 / baseline" in other and "refused: " in other and "train.max_steps=3" in other
    same = status("rlt", out, runs, select=select, overrides=TINY, test_size=4, test_lengths={"parity": [32]})
    assert "refused" not in same


def test_older_tables_without_the_column_load_and_keep_their_format(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("task,row,seed,status\nparity,rlt1,42,ok\n")
    table = ResultTable(path, ["task", "row", "seed", "status"], ["task", "row", "seed"], extra=(OVERRIDES,))
    check_same_settings(table, "")  # recipe runs join a recipe table
    with pytest.raises(ValueError, match="the recipe as it is"):
        check_same_settings(table, "train.max_steps=3")
    table.add({"task": "parity", "row": "rlt1", "seed": 43, "status": "ok"})
    assert path.read_text() == "task,row,seed,status\nparity,rlt1,42,ok\nparity,rlt1,43,ok\n"  # no new column


def test_overrides_that_change_nothing_computed_do_not_split_a_table():
    assert overrides_text({"train": {"threads": 2, "log_every": 5}}) == ""
    assert overrides_text({"train": {"threads": 2, "max_steps": 3}, "optim": {"lr": 0.01}}) == \
        "optim.lr=0.01; train.max_steps=3"


def test_compiled_runs_join_the_recipes_table_and_their_machine_cell_says_compiled(tmp_path):
    """Compilation changes the wall time, not what a run computes: it must not split a table (refusing a compiled
    seed beside eager ones), but a reader of the minutes column must see which rows ran compiled."""
    assert overrides_text({"train": {"compile": True}}) == ""
    table = ResultTable(tmp_path / "results.csv", ["task", "seed", "machine"], ["task", "seed"])
    table.add({"task": "parity", "seed": 42})
    table.execution = "compiled"
    table.add({"task": "parity", "seed": 43})
    eager, compiled = (row["machine"] for row in csv.DictReader(open(tmp_path / "results.csv")))
    assert compiled == f"{eager}; compiled" and "compiled" not in eager
