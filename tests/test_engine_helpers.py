"""The engine pieces the papers' studies share (issue 28: each paper's study code about half): a plan written as
groups, the weight axis, per-run CSVs, the cells every results row records, optional report parts and figures as
data. Each test is the failure a paper would otherwise have to guard against itself."""

from __future__ import annotations

import pytest
import torch

from looped.data.tasks.base import ReasoningBatch
from looped.experiments.figures import Dots, Lines, plot, with_parameters
from looped.experiments.render import Column, Group, at_cost, part, relative_change
from looped.experiments.report import by_difficulty, interval, read_interval
from looped.experiments.results import ResultTable
from looped.experiments.retrain import Reproduction
from looped.experiments.study import Axis, RunSummary, StudyBase, grouped_plan, unit_interval

AXES = (Axis("task", "tasks", ("graph",)), Axis("alpha", "alphas", ("0.0",), cell=unit_interval),
        Axis("seed", "seeds", (42,), cell=int))


def test_a_grouped_plan_keys_every_value_as_the_command_line_would():
    keys = grouped_plan(AXES, [("graph", 0.0, (42, 43)), ("graph", 1, (44,))])
    assert keys == [{"task": "graph", "alpha": "0.0", "seed": 42}, {"task": "graph", "alpha": "0.0", "seed": 43},
                    {"task": "graph", "alpha": "1.0", "seed": 44}]  # 1 and "1" key alike: "1.0"


def test_a_weight_outside_zero_to_one_is_refused_naming_the_option():
    with pytest.raises(ValueError, match=r"--alphas: a weight lies in \[0, 1\], got 2"):
        AXES[1].parse(["2"], "cpu")


def test_a_per_run_table_is_keyed_by_the_run_and_what_varies_within_it(tmp_path):
    study = StudyBase(tmp_path, tmp_path / "runs")
    study.results = ResultTable(tmp_path / "results.csv", ["task", "seed", "status"], ["task", "seed"])
    lengths = study.per_run("lengths.csv", "length", ["accuracy"])
    lengths.add_many([{"task": "parity", "seed": 1, "length": n, "accuracy": 0.5} for n in (8, 16)])
    lengths.add({"task": "parity", "seed": 1, "length": 8, "accuracy": 0.75})  # replaces its length's row only
    assert lengths.columns == ["task", "seed", "length", "accuracy"]
    assert [(r["length"], r["accuracy"]) for r in ResultTable(lengths.path, lengths.columns, lengths.key).rows] \
        == [("16", "0.5"), ("8", "0.75")]


def test_adding_no_rows_writes_no_file(tmp_path):
    table = ResultTable(tmp_path / "gates.csv", ["task", "step", "gate_mean"], ["task", "step"])
    table.add_many([])  # a model without a gate: no gates.csv with a header and nothing under it
    assert not table.path.exists()


def test_the_cells_every_results_row_records_and_a_curve_where_the_last_log_of_an_update_wins():
    class Model:
        def parameter_counts(self):
            return {"total": 1234}

    run = RunSummary(folder=None, seconds=12.34, updates=50, best_step=40, targets=0, evaluations=(),
                     losses=((10, 2.5), (20, 2.0)))
    assert run.cells(Model()) == {"parameters": 1234, "updates": 50, "best_step": 40, "train_seconds": "12.3",
                                  "status": "ok"}
    assert run.curve({"row": "plain"}) == [{"row": "plain", "step": 10, "loss": "2.500000"},
                                           {"row": "plain", "step": 20, "loss": "2.000000"}]


def test_a_retrain_off_its_figure_says_both_numbers_and_one_within_says_nothing():
    assert Reproduction("bits/byte", 1.5, 1.5004, 1e-3).reason is None
    assert Reproduction("bits/byte", 1.5, 1.51, 1e-3).reason == "bits/byte 1.510000 retrained vs 1.500000 in " \
                                                                "results.csv (tolerance 0.001)"


def test_the_first_rows_of_every_difficulty_keep_their_order():
    rows = ReasoningBatch(tokens=torch.arange(6).view(6, 1), labels=torch.zeros(6), padding=torch.zeros(6, 1,
                          dtype=torch.bool), difficulty=torch.tensor([1, 2, 1, 1, 2, 3]))
    assert rows.first_per_difficulty(2).tokens.view(-1).tolist() == [0, 1, 2, 4, 5]
    assert rows.first_per_difficulty(None) is rows


def test_interval_and_difficulty_cells_read_back():
    assert interval([8, 1, 4]) == "1-8" and read_interval("1-8") == (1, 8)
    assert by_difficulty("1:1.0000@1 6:0.5660@8") == {1: 1.0, 6: 0.566}


def test_an_optional_part_is_absent_without_rows_and_a_section_with_them():
    columns = [Column("row", lambda g: g["row"])]
    assert part("Sweep", columns, []) == []
    assert part("Sweep", columns, [Group({"row": "a"}, [], [])], "caption", note="note") == \
        ["", "## Sweep", "", "caption", "", "| row |", "|---:|", "| a |", "", "note"]


def test_a_score_at_its_cost_and_the_change_against_a_reference_row():
    runs = [{"row": "w", "threshold": "0.01", "bpb": "1.0", "rounds": "2.0"},
            {"row": "w", "threshold": "0.01", "bpb": "2.0", "rounds": "3.0"}, {"row": "w", "threshold": "0.1"}]
    group = Group({"row": "w"}, runs, [])
    assert at_cost("TV", "bpb", "rounds", threshold=0.01).cell(group) == "1.5000 @ 2.50 (n=2)"
    assert at_cost("TV", "bpb", "rounds", threshold=0.03).cell(group) == "–"
    rows = [Group({"row": "ws"}, [{"ppl": "3.0"}], []), Group({"row": "plain"}, [{"ppl": "4.0"}], [])]
    assert relative_change(rows, "ppl", "ws") == "vs plain -25.00 %"
    assert relative_change(rows[1:], "ppl", "ws") is None


def test_figures_draw_a_line_per_row_and_a_dot_per_seed(tmp_path):
    rows = [{"corpus": "c", "row": r, "seed": s, "rounds": n, "bpb": str(n / 10 + s / 100 + (r == "b")), "status": "ok",
             "parameters": "1000"} for r in ("a", "b") for s in (1, 2) for n in (1, 2, 4)]
    drawn = {}

    def keep(ax) -> None:
        drawn["lines"] = [(line.get_label(), list(line.get_xdata()), [round(y, 6) for y in line.get_ydata()])
                          for line in ax.get_lines()]

    lines = Lines("bpb", lambda r: int(r["rounds"]), ("a", "b"), "rounds", "bits/byte", touch=keep)
    plot(tmp_path / "lines.png", lines, rows, {"c": {"corpus": "c"}}, size=(3, 2))
    assert drawn["lines"] == [("a", [1, 2, 4], [0.115, 0.215, 0.415]), ("b", [1, 2, 4], [1.115, 1.215, 1.415])]
    plot(tmp_path / "dots.png", Dots("bpb", ("a", "b"), "bits/byte"), rows, {"c": {"corpus": "c"}}, size=(3, 2))
    assert (tmp_path / "dots.png").read_bytes()[:4] == b"\x89PNG"
    assert with_parameters("c sample", rows) == "c sample, 1,000–1,000 parameters"
    assert with_parameters("c sample", []) == "c sample"
