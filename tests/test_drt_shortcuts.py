"""The DRT study's family recipes: the de-cued recipe end to end at a tiny size, and the shortcut-baseline rows
(results/drt_<scale>/shortcuts.csv and table.md) the study writes for every family recipe."""

from __future__ import annotations

import csv

import pytest

from looped.config import from_dict
from looped.experiments import drt
from looped.experiments.study import run_study
from looped.train import RunConfig

TINY = {"model": {"dim": 16, "heads": 2, "ffn_dim": 32, "steps_range": [1, 2]},
        "task": {"train_size": 96, "val_size": 16, "test_per_bucket": 8, "test_difficulties": [2, 3, 7],
                 "eval_steps": [1, 2]},
        "train": {"max_targets": 64, "eval_every": 0}}


def read(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_decued_recipe_is_the_family_recipe_on_the_decued_generator():
    decued, paper = drt.run_config("family_decued", "cpu"), drt.run_config("family", "cpu")
    assert decued.task.decued and not paper.task.decued
    assert decued.model == paper.model and decued.train == paper.train and decued.optim == paper.optim
    with pytest.raises(ValueError, match="decued applies to the family task only"):
        from_dict(RunConfig, drt.recipe("graph", "cpu") | {"task": {"kind": "reasoning", "name": "graph",
                                                                     "decued": True}})


def test_study_trains_the_decued_recipe_and_reports_shortcut_rows(tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    run_study("drt", out, runs, select={"task": ("family_decued",), "seed": (42,)}, overrides=TINY, progress=False,
              log=lambda m: None, diagnostic_per_bucket=4)
    [row] = read(out / "results.csv")
    assert (row["task"], row["status"], row["updates"]) == ("family_decued", "ok", "1")
    shortcuts = read(out / "shortcuts.csv")
    assert [(r["task"], r["baseline"]) for r in shortcuts] == [
        ("family_decued", "relation word + depth"), ("family_decued", "relation word"), ("family_decued", "offset sum")]
    assert all(r["train_rows"] == "96" and r["test_rows"] == "24" and r["trained_difficulties"] == "2-5"
               for r in shortcuts)
    assert all(sorted(int(p.split(":")[0]) for p in r["by_difficulty"].split()) == [2, 3, 7] for r in shortcuts)
    table = (out / "table.md").read_text()
    assert "| family_decued | drt | 0.0 |" in table
    assert "| family_decued | shortcut: offset sum | – |" in table
    assert "## Family: shortcut baselines by chain depth" in table and "| recipe | predictor | 2 | 3 | 7* |" in table
    assert "| family_decued | drt (n=1) |" in table
    # the rows are a function of the data config: recomputed from scratch they are the same
    first = (out / "shortcuts.csv").read_text()
    (out / "shortcuts.csv").unlink()
    run_study("drt", out, runs, select={"task": ("family_decued",), "seed": (42,)}, overrides=TINY, progress=False,
              log=lambda m: None, shortcuts_only=True)
    assert (out / "shortcuts.csv").read_text() == first
    assert (out / "table.md").read_text() == table


def test_reproduce_shortcuts_only_trains_nothing(tmp_path, capsys):
    from looped.cli import main

    out = tmp_path / "results"
    argv = ["reproduce", "drt", "--tasks", "family", "graph", "--shortcuts-only", "--out", str(out), "--runs",
            str(tmp_path / "runs"), "--no-progress"]
    for override in ("task.train_size=200", "task.test_per_bucket=10", "task.val_size=16"):
        argv += ["--set", override]
    assert main(argv) == 0
    assert not (out / "results.csv").exists() and not (tmp_path / "runs").exists()
    rows = {r["baseline"]: r for r in read(out / "shortcuts.csv")}
    assert set(rows) == {"relation word + depth", "relation word", "offset sum"}  # family only, not graph
    # the paper's generator: depth 2 always asks "sibling" when positive, so word + depth is perfect there,
    # and nothing seen in training (depths 2-5) helps beyond them
    by_depth = dict(p.split(":") for p in rows["relation word + depth"]["by_difficulty"].split())
    assert float(by_depth["2"]) == 1.0 and float(rows["relation word + depth"]["ood_accuracy"]) == 0.5
    assert "| family | shortcut: relation word + depth | – | " in capsys.readouterr().out


def test_data_show_prints_decued_family_rows():
    from looped.cli.data import show_examples

    paper, decued = show_examples("family", 40, 6), show_examples("family", 40, 6, decued=True)
    # the option reaches the generator: the same seed draws other rows
    assert all("chain depth 6" in text for text in decued) and decued != paper
    with pytest.raises(ValueError, match="--decued applies to the family task only"):
        show_examples("graph", 1, decued=True)



def test_recipes_on_the_same_data_show_their_shortcut_baselines_once(tmp_path):
    """family_decued_2x trains longer on family_decued's data: its baselines are the same numbers, and the tables
    printed them twice as if they were two results."""
    from looped.experiments import drt_shortcuts
    from looped.experiments.render import markdown

    table = drt_shortcuts.table(tmp_path)
    row = {"baseline": "offset sum", "trained_difficulties": "2-5", "id_accuracy": "0.4946", "ood_accuracy": "0.4992",
           "by_difficulty": "2:0.4875 6:0.5000", "train_rows": "60000", "test_rows": "16000"}
    table.add_many([{**row, "task": "family_decued"}, {**row, "task": "family_decued_2x"},
                    {**row, "task": "family", "id_accuracy": "0.8322"}])
    assert drt_shortcuts.main_table_rows(table, columns=5) == [
        "| family_decued, family_decued_2x | shortcut: offset sum | – | 49.5 | 49.9 |",
        "| family | shortcut: offset sum | – | 83.2 | 49.9 |"]
    section = markdown(drt_shortcuts.by_depth_section(table, []))
    assert section.count("shortcut: offset sum") == 2 and "| family_decued, family_decued_2x | shortcut:" in section
