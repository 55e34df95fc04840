"""Claims tables (issue 27): the verdict rules and the README summary (every committed table regenerating
byte-identically is a shared study driver, tests/study_drivers.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from looped.experiments.claims import Claim, ahead, at_least, at_most, claims_markdown, machines_line
from looped.experiments.results import ResultTable, machine

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


# --- the rules -------------------------------------------------------------------------------------------------
def test_a_lower_bound_is_yes_only_when_mean_minus_sd_clears_it_over_three_seeds():
    assert at_least("x", [90.0, 92.0, 94.0], 80.0).verdict == "yes"
    assert at_least("x", [100.0, 100.0, 51.5], 75.0).verdict == "partly"  # mean 83.8 clears, mean - SD does not
    assert at_least("x", [95.0, 96.0], 80.0).verdict == "partly"  # two seeds are not enough for "yes"
    assert at_least("x", [60.0, 61.0, 62.0], 80.0).verdict == "no"
    assert at_least("x", [], 80.0).verdict == "not run"


def test_an_upper_bound_uses_mean_plus_sd():
    assert at_most("x", [50.0, 51.0, 49.0], 60.0).verdict == "yes"
    assert at_most("x", [50.0, 51.0, 79.0], 60.0).verdict == "partly"
    assert at_most("x", [70.0, 71.0, 72.0], 60.0).verdict == "no"


def test_ahead_needs_non_overlapping_intervals_and_respects_direction():
    low, high = ("a", [1.0, 1.1, 0.9]), ("b", [2.0, 2.1, 1.9])
    assert ahead(high, low).verdict == "yes"
    assert ahead(low, high).verdict == "no"
    assert ahead(low, high, higher_is_better=False).verdict == "yes"  # bits/byte: lower wins
    assert ahead(("a", [1.0, 3.0, 2.0]), ("b", [1.5, 1.6, 1.4])).verdict == "partly"  # means in order, overlap
    assert ahead(("a", []), high).verdict == "not run"


def test_a_claim_takes_its_worst_condition_and_the_table_counts_verdicts():
    claim = Claim("s", "p", "sel", lambda: [at_least("x", [90.0, 91.0, 92.0], 80.0),
                                            at_most("y", [70.0, 71.0, 72.0], 60.0)])
    assert claim.evidence()[1] == "no"
    text = claims_markdown("T", "intro", [claim])
    assert "| s | p | x 91.0 ± 1.0 (n=3); y 71.0 ± 1.0 (n=3) | **no** |" in text
    assert "Summary: 0 yes, 0 partly, 1 no, 0 not run." in text


def test_a_rerun_moving_one_seed_by_a_point_does_not_flip_a_yes_with_margin():
    """The knife-edge requirement: parity's RLT-1 at 64 bits is 100/100/100 here; another machine gave 98.7."""
    assert at_least("x", [100.0, 100.0, 100.0], 75.0).verdict == at_least("x", [98.7, 100.0, 100.0], 75.0).verdict


def test_new_result_rows_record_the_machine_and_old_rows_load(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("task,seed,status\nparity,42,ok\n")  # a CSV written before the machine column
    table = ResultTable(path, ["task", "seed", "status", "machine"], ["task", "seed"])
    table.add({"task": "parity", "seed": 43, "status": "ok"})
    rows = list(csv.DictReader(open(path)))
    assert [r["machine"] for r in rows] == ["", machine()]
    assert "torch " in machine() and "thread" in machine()
    assert machines_line(rows).startswith("Rows ran on: not recorded (1 rows)")


def test_report_option_rewrites_tables_and_claims_without_training(tmp_path, capsys):
    from looped.cli import main

    folder = RESULTS / "rlt_cpu"
    if not (folder / "results.csv").exists():
        pytest.skip(f"no committed {folder}")
    out = tmp_path / "rlt"
    out.mkdir()
    for name in ("results.csv", "lengths.csv"):  # parity only: a small report
        with open(folder / name, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["task"] == "parity"]
        with open(out / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    assert main(["reproduce", "rlt", "--report", "--out", str(out), "--runs", str(tmp_path / "runs")]) == 0
    assert "Parity: RLT-1 generalizes" in capsys.readouterr().out
    assert (out / "table.md").exists() and (out / "parity.png").exists()
    assert "| Parity to 256 bits" in (out / "claims.md").read_text()
    assert not (tmp_path / "runs").exists()  # nothing trained


def test_a_rows_figure_is_named_once_when_another_condition_quotes_it():
    """Flat mod-5 read 'RLT-1 36.5 (n=3); RLT-1 36.5 (n=3) vs Transformer 19.4': the first text is inside the second."""
    rlt, plain = ("RLT-1", [30.0, 35.0, 44.0]), ("Transformer", [19.0, 20.0, 19.5])
    claim = Claim("s", "p", "sel", lambda: [at_least(*rlt, 35.0), ahead(rlt, plain)])
    ours = claim.evidence()[0]
    assert ours.count("RLT-1 36.3") == 1 and "vs Transformer" in ours, ours


def test_a_budget_variant_claim_reads_the_variants_grids_not_the_base_recipes(tmp_path):
    """The logic claim under 1.5x updates must judge the logic_1.5x runs: reading the base recipe's grids (at
    80 %) would call a reached bar a miss."""
    import numpy as np

    from looped.eval.reasoning import AccuracyGrid
    from looped.experiments.drt import run_name
    from looped.experiments.drt_claims import drt_claims

    rows = [("logic", 42, 0.80), ("logic_1.5x", 42, 0.95), ("logic_1.5x", 43, 0.96), ("logic_1.5x", 44, 0.97)]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "arch", "alpha", "seed", "status"])
        for task, seed, _ in rows:
            writer.writerow([task, "drt", "0.0", seed, "ok"])
    for task, seed, accuracy in rows:  # depth 14 at T = 10 and 24: the claim takes the lowest
        grid = AccuracyGrid([10, 24], [14], np.array([[accuracy], [accuracy + 0.01]]), np.array([100]))
        grid.write_csv(tmp_path / "grids" / f"{run_name(task, 'drt', 0.0, seed)}.csv")
    found = {c.statement.split(":")[0]: c.evidence() for c in drt_claims(tmp_path)}
    assert found["Logic"][:2] == ("depth 14 80.0 (n=1)", "no")
    assert found["Logic, 1.5× our CPU updates"][:2] == ("depth 14, 1.5× updates 96.0 ± 1.0 (n=3)", "yes")
