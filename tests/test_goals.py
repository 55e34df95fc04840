"""Issue 15's learning goals (looped.experiments.goals): the README's table is generated from the committed results,
and each rule can fail (a seed below the bar, a failed run, too few seeds flip the status)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from looped.eval.reasoning import AccuracyGrid
from looped.experiments.goals import (GOALS, STATUSES, judged, logic_goal, most_seeds, parity_goal,
                                      quickstart_goal)
from looped.experiments.report import MISSING, each, span

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def test_every_goal_has_a_status_and_names_where_its_figures_live():
    for goal in GOALS:
        assert goal.finding(RESULTS).status in STATUSES
        committed = [s for s in goal.sources if s.startswith("results/")]
        assert all(list(REPO.glob(s)) for s in committed), goal.statement


# --- the rules -------------------------------------------------------------------------------------------------
def test_each_and_span_write_every_seed_and_the_range_with_the_one_formatter():
    assert each(["1.0", "", 0.848], 1, 100) == "100.0 / 84.8"
    assert span([0.0127, 0.0088, 0.0117], 1, 100) == "0.9–1.3"
    assert span([0.5, 0.5001], 1, 100) == "50.0"  # one figure when the range rounds away
    assert each([]) == span([]) == MISSING


def test_two_of_three_seeds_means_two_thirds_of_at_least_three():
    assert most_seeds([100.0, 100.0, 51.5], 99.0)
    assert not most_seeds([100.0, 51.5, 51.5], 99.0)
    assert not most_seeds([100.0, 100.0, 51.5, 51.5], 99.0)  # 2 of 4 is under two thirds
    assert most_seeds([100.0, 100.0, 100.0, 51.5], 99.0)
    assert most_seeds([100.0, 100.0], 99.0) is None  # two seeds cannot show "2 of 3"


def test_a_failed_condition_decides_before_a_missing_one():
    assert judged([True, True], "").status == "met"
    assert judged([True, None], "").status == "not run"
    assert judged([False, None], "").status == "missed"
    assert judged([], "").status == "not run"


# --- synthetic results: a seed below the bar flips the status --------------------------------------------------
def _copy_rows(source: Path, target: Path, keep, edit=lambda row: row) -> None:
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        rows = [edit(dict(r)) for r in reader if keep(r)]
        fields = reader.fieldnames
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _parity_results(tmp_path: Path, edit=lambda row: row, status=lambda row: row["status"]) -> Path:
    """results/rlt_cpu with the parity rows of three seeds: RLT-1 100 % at 256 bits in 42 and 43, 51.5 in 44."""
    folder = tmp_path / "results" / "rlt_cpu"
    _copy_rows(RESULTS / "rlt_cpu" / "results.csv", folder / "results.csv",
               lambda r: r["task"] == "parity", lambda r: {**r, "status": status(r)})
    _copy_rows(RESULTS / "rlt_cpu" / "lengths.csv", folder / "lengths.csv", lambda r: r["task"] == "parity", edit)
    return tmp_path / "results"


def _set(seed: str, accuracy: str):
    """An edit of lengths.csv: RLT-1's accuracy at 256 bits in `seed`."""
    def edit(row):
        hit = (row["row"], row["seed"], row["length"]) == ("rlt1", seed, "256")
        return {**row, "final_state_accuracy": accuracy} if hit else row
    return edit


@pytest.fixture
def parity_rows_exist():
    if not (RESULTS / "rlt_cpu" / "lengths.csv").exists():
        pytest.skip("no committed results/rlt_cpu")


def test_parity_is_met_by_two_seeds_of_three_and_missed_when_one_drops_below_the_bar(tmp_path, parity_rows_exist):
    results = _parity_results(tmp_path, _set("44", "0.514648"))
    assert parity_goal().finding(results).status == "met"
    dropped = _parity_results(tmp_path, _set("43", "0.980000"))
    found = parity_goal().finding(dropped)
    assert found.status == "missed" and "100.0 / 98.0 / 51.5 %" in found.evidence


def test_a_failed_run_does_not_count_as_a_seed(tmp_path, parity_rows_exist):
    def failed_43(row):
        return "failed" if (row["row"], row["seed"]) == ("rlt1", "43") else row["status"]

    found = parity_goal().finding(_parity_results(tmp_path, status=failed_43))
    assert found.status == "not run" and "(seeds 42 / 44)" in found.evidence


def test_the_statement_states_the_bar_the_rule_applies(tmp_path, parity_rows_exist):
    goal = parity_goal(bar=99.9)
    assert "RLT-1 ≥ 99.9 % at 256 bits" in goal.statement
    assert goal.finding(_parity_results(tmp_path, _set("42", "0.998"))).status == "missed"  # 99.8: only seed 43


def _logic_results(tmp_path: Path, accuracies: dict[int, float]) -> Path:
    """A drt_cpu folder with one logic run per seed whose grid is `accuracy` in every cell."""
    folder = tmp_path / "results" / "drt_cpu"
    folder.mkdir(parents=True)
    lines = ["task,arch,alpha,seed,status"] + [f"logic,drt,0.0,{s},ok" for s in accuracies]
    (folder / "results.csv").write_text("\n".join(lines) + "\n")
    budgets, depths = [1, 10, 12, 16], [12, 14]
    for seed, accuracy in accuracies.items():
        grid = AccuracyGrid(budgets, depths, np.full((len(budgets), len(depths)), accuracy), np.full(2, 500))
        grid.write_csv(folder / "grids" / f"logic_drt_seed{seed}.csv")
    return folder.parent


def test_logic_needs_every_seed_over_the_bar(tmp_path):
    assert logic_goal().finding(_logic_results(tmp_path / "a", {42: 0.95, 43: 0.91})).status == "met"
    found = logic_goal().finding(_logic_results(tmp_path / "b", {42: 0.95, 43: 0.89}))
    assert found.status == "missed" and "95.0 / 89.0 % (seeds 42 / 43)" in found.evidence
    assert logic_goal().finding(tmp_path / "nothing").status == "not run"


def test_quickstart_is_missed_past_its_minutes_and_not_run_without_its_json(tmp_path):
    run = json.loads((RESULTS / "quickstart.json").read_text()) if (RESULTS / "quickstart.json").exists() else {
        "bits_per_byte": 1.8, "minutes": 4.0, "compressors_bits_per_byte": {"gzip -9": 2.5}}
    (tmp_path / "quickstart.json").write_text(json.dumps({**run, "minutes": 4.0}))
    assert quickstart_goal().finding(tmp_path).status == "met"
    (tmp_path / "quickstart.json").write_text(json.dumps({**run, "minutes": 6.5}))
    assert quickstart_goal().finding(tmp_path).status == "missed"
    assert quickstart_goal().finding(tmp_path / "nothing").status == "not run"
