"""The depth-schedule study's report: every figure of table.md is over seeds (fake rows, written in tmp only).

The study's training and resuming are checked by the shared drivers (tests/test_studies.py)."""

from __future__ import annotations

import statistics

import pytest

from looped.eval.stats import format_mean_sd
from looped.experiments.depth_report import write_report
from looped.experiments.depth_study import COLUMNS, DEPTH_COLUMNS, KEY, recipe
from looped.experiments.results import ResultTable

# seed -> schedule -> bits/byte at depths 1-3; seeds differ so a figure from one seed cannot pass for the mean
CURVES = {11: {"fixed": [3.9, 3.2, 3.3], "random": [3.4, 3.25, 3.26]},
          23: {"fixed": [4.1, 3.0, 3.5], "random": [3.6, 3.05, 3.07]},
          37: {"fixed": [3.8, 3.4, 3.1], "random": [3.3, 3.5, 3.45]}}


def fake_study(out, failed_seed: int | None = None) -> tuple[ResultTable, ResultTable]:
    results = ResultTable(out / "results.csv", COLUMNS, KEY)
    depths = ResultTable(out / "depth.csv", DEPTH_COLUMNS, [*KEY, "depth"])
    for seed, schedules in CURVES.items():
        for schedule, curve in schedules.items():
            depths.add_many([{"seed": seed, "schedule": schedule, "depth": d, "bits_per_byte": f"{v:.6f}"}
                             for d, v in enumerate(curve, start=1)])
            status = "failed: non-finite loss" if seed == failed_seed and schedule == "random" else "ok"
            results.add({"seed": seed, "schedule": schedule, "arch": "anchored_loop", "parameters": 1000,
                         "updates": 300, "training_flops": 1e9 * seed, "trained_depth": 2, "scored_bytes": 4096,
                         "best_depth": curve.index(min(curve)) + 1, "slope_past_trained": f"{0.01 * seed:.6f}",
                         "status": status})
    return results, depths


def table_line(text: str, first_cell: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_each_depth_is_the_mean_and_sd_over_seeds_and_the_difference_is_paired_by_seed(tmp_path):
    results, depths = fake_study(tmp_path)
    write_report(tmp_path, results, depths)
    text = (tmp_path / "table.md").read_text()
    for depth in (1, 2, 3):
        fixed = [CURVES[s]["fixed"][depth - 1] for s in CURVES]
        random = [CURVES[s]["random"][depth - 1] for s in CURVES]
        label = f"{depth} (trained)" if depth == 2 else str(depth)
        assert table_line(text, label)[1:] == [format_mean_sd(fixed, 4), format_mean_sd(random, 4),
                                               format_mean_sd([r - f for r, f in zip(random, fixed)], 4)], text
    # the summary: slope and FLOPs over the three seeds, the best depth of the mean curve
    fixed = table_line(text, "fixed")
    assert fixed[4] == format_mean_sd([0.11, 0.23, 0.37], 4)
    assert fixed[5] == format_mean_sd([11.0, 23.0, 37.0], 1)
    means = [statistics.fmean(CURVES[s]["fixed"][d] for s in CURVES) for d in range(3)]
    assert fixed[2] == f"{means.index(min(means)) + 1} ({min(means):.4f})"
    assert (tmp_path / "depth_schedules.png").stat().st_size > 0


def test_a_failed_run_leaves_its_seed_out_of_the_means_and_the_pairs(tmp_path):
    results, depths = fake_study(tmp_path, failed_seed=37)
    write_report(tmp_path, results, depths)
    text = (tmp_path / "table.md").read_text()
    random = [CURVES[s]["random"][0] for s in (11, 23)]
    pairs = [CURVES[s]["random"][0] - CURVES[s]["fixed"][0] for s in (11, 23)]
    assert table_line(text, "1")[2:] == [format_mean_sd(random, 4), format_mean_sd(pairs, 4)]


def test_an_unknown_schedule_is_named():
    with pytest.raises(ValueError, match="unknown schedule 'progressive'"):
        recipe("progressive")


def test_the_readme_block_states_paired_differences_over_seeds_and_their_reading(tmp_path):
    from looped.experiments.depth_front import FOLDER, depth_block, outcome

    fake_study(tmp_path / FOLDER)
    block = depth_block(tmp_path)
    at_1 = table_line(block, "held-out bits/byte at depth 1")
    assert at_1[3] == format_mean_sd([-0.5, -0.5, -0.5], 4)
    assert at_1[4].startswith("lower for random depth beyond 2 standard errors (lower in 3 of 3 seeds)")
    at_3 = table_line(block, "held-out bits/byte at depth 3")  # -0.04, -0.43, +0.35: the seeds disagree
    assert at_3[4].startswith("no clear difference"), at_3
    assert outcome([0.2]) == "one seed only (1 pair)"


def test_a_count_without_spread_is_not_called_beyond_two_standard_errors():
    from looped.experiments.depth_front import outcome
    assert outcome([-75.9, -75.9, -75.9]) == "lower for random depth in every seed (a count)"
    assert "beyond 2 standard errors" in outcome([-0.3, -0.2, -0.25])
