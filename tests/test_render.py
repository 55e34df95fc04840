"""The one report renderer (looped/experiments/render.py): column specs over groups of runs, and figure panels."""

from __future__ import annotations

import pytest

from looped.experiments import render
from looped.experiments.render import Column, groups, key, parameters, percent_of, table
from looped.experiments.report import average, span

RUNS = [{"task": "parity", "row": "rlt1", "seed": "42", "parameters": "98000", "acc": "0.5", "status": "ok"},
        {"task": "parity", "row": "base", "seed": "42", "parameters": "100000", "acc": "0.25", "status": "ok"},
        {"task": "parity", "row": "rlt1", "seed": "43", "parameters": "100000", "acc": "0.7", "status": "ok"},
        {"task": "parity", "row": "rlt1", "seed": "44", "parameters": "", "acc": "", "status": "failed: nan"},
        {"task": "s5", "row": "rlt1", "seed": "42", "parameters": "98000", "acc": "0.9", "status": "ok"}]


def test_a_table_is_its_columns_header_alignment_and_one_line_per_group():
    columns = [key("row"), parameters(), percent_of("acc %", "acc")]
    assert table(columns, groups(RUNS, ("row",), task="parity")) == [
        "| row | parameters | acc % |", "|---|---:|---:|",
        "| rlt1 | 98,000, 100,000 | 60.0 ± 14.1 (n=2) |",  # numeric order, not text order ('100,000' < '98,000')
        "| base | 100,000 | 25.0 (n=1) |"]


def test_a_group_splits_finished_runs_from_failed_ones_and_matches_keys_as_text():
    (rlt1,) = groups(RUNS, ("row",), task="parity", row="rlt1")
    assert [r["seed"] for r in rlt1.runs] == ["42", "43"] and [r["seed"] for r in rlt1.failed] == ["44"]
    assert rlt1.key == {"task": "parity", "row": "rlt1"}
    assert len(groups(RUNS, ("task", "row"), seed=42)) == 3  # an int key matches the CSV's '42'


def test_a_given_order_is_kept_and_a_key_without_rows_shows_only_when_asked():
    order = [("base",), ("absent",), ("rlt1",)]
    assert [g["row"] for g in groups(RUNS, ("row",), order=order)] == ["base", "rlt1"]
    shown = groups(RUNS, ("row",), order=order, keep_empty=True)
    assert [g["row"] for g in shown] == ["base", "absent", "rlt1"]
    assert table([key("row"), percent_of("acc", "acc")], shown)[3] == "| absent | – |"


def test_joined_rows_belong_to_the_groups_finished_seeds_only():
    """A failed seed's per-length scores must not reach the cell of its row."""
    lengths = [{"task": "parity", "row": "rlt1", "seed": s, "length": "64", "acc": a}
               for s, a in (("42", "1.0"), ("43", "0.5"), ("44", "0.0"))] + \
              [{"task": "parity", "row": "rlt1", "seed": "42", "length": "128", "acc": "0.1"},
               {"task": "s5", "row": "rlt1", "seed": "42", "length": "64", "acc": "0.3"}]
    (rlt1,) = groups(RUNS, ("row",), task="parity", row="rlt1")
    assert [r["acc"] for r in rlt1.joined(lengths, length=64)] == ["1.0", "0.5"]


def test_keep_drops_a_line_whose_cells_say_nothing():
    columns = [key("row"), Column("acc", lambda g: average(g.values("acc"), 2))]
    lines = table(columns, groups(RUNS, ("row",)), keep=lambda cells: cells[1] != "–")
    assert lines[2:] == ["| rlt1 | 0.70 |", "| base | 0.25 |"]
    lines = table(columns, groups(RUNS, ("row",), order=[("absent",)], keep_empty=True),
                  keep=lambda cells: cells[1] != "–")
    assert lines[2:] == []


def test_the_mean_and_span_figures():
    assert render.mean([{"x": "1"}, {"x": ""}, {"x": "2"}], "x") == 1.5  # an empty cell is not a zero
    assert render.mean([{"x": ""}], "x") is None
    assert average(["0.5", "", "0.6"], 1, 100) == "55.0" and average([]) == "–"
    assert span([2000, 1500, ""], text=lambda v: f"{v:,.0f}") == "1,500–2,000"
    assert span([4, 4], text=lambda v: f"{v:.0f}") == "4"


def test_panels_draws_one_panel_per_key_side_by_side(tmp_path, monkeypatch):
    drawn, saved = [], {}

    def keep(fig, path):
        saved.update(path=path, size=tuple(fig.get_size_inches()), axes=len(fig.axes), title=fig._suptitle.get_text())

    monkeypatch.setattr(render, "atomic_save_figure", keep)
    render.panels(tmp_path / "f.png", ("enwik8", "tinystories", "kjv"), lambda ax, k: drawn.append(k),
                  size=(5.0, 4.0), title="three corpora", finish=lambda ax: ax.set_title("done"))
    assert drawn == ["enwik8", "tinystories", "kjv"]
    assert saved == {"path": tmp_path / "f.png", "size": pytest.approx((15.0, 4.0)), "axes": 3,
                     "title": "three corpora"}


def test_a_long_study_title_is_wrapped_inside_a_one_panel_figure(tmp_path, monkeypatch):
    # rlt_cpu/parity.png lost both ends of its subtitle: a 110-character title over a 5-inch panel
    title = "parity: accuracy against test length, mean ± SD over seeds, best-validation checkpoint, teacher-forced"
    kept = {}

    def keep(fig, path):
        renderer = fig.canvas.get_renderer()
        kept.update(title=fig._suptitle.get_text(), extent=fig._suptitle.get_window_extent(renderer),
                    figure=fig.bbox)

    monkeypatch.setattr(render, "atomic_save_figure", keep)
    render.panels(tmp_path / "f.png", ["parity"], lambda ax, k: ax.plot([1, 2]), size=(5.2, 3.8), title=title)
    extent, figure = kept["extent"], kept["figure"]
    assert figure.x0 <= extent.x0 and extent.x1 <= figure.x1  # neither end cut off
    assert extent.y1 <= figure.y1
    assert kept["title"].replace("\n", " ") == title  # wrapped, not shortened


def test_a_length_panel_keeps_its_legend_off_the_data_and_inside_the_figure(tmp_path, monkeypatch):
    # rlt_cpu/parity.png's legend sat on the error bars of the trained lengths: error bars span 0-100, no corner
    # of the panel is free of data
    from looped.eval.lengths import plot_length_curves

    table = [{"row": row, "length": n, "final_state_accuracy": acc, "final_state_accuracy_sd": 0.3}
             for row, acc in (("a", 0.5), ("b", 0.9)) for n in (32, 40, 48, 256)]
    kept = {}

    def keep(fig, path):
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        kept.update(legend=ax.get_legend().get_window_extent(renderer), axes=ax.bbox, figure=fig.bbox)

    monkeypatch.setattr(render, "atomic_save_figure", keep)
    render.panels(tmp_path / "f.png", ["parity"], lambda ax, k: plot_length_curves(table, "parity", None, ax=ax),
                  size=(5.2, 3.8), title="parity")
    legend, axes, figure = kept["legend"], kept["axes"], kept["figure"]
    assert legend.x0 >= axes.x1  # beside the plotting area, over none of its points
    assert figure.x0 <= legend.x0 and legend.x1 <= figure.x1 and figure.y0 <= legend.y0 <= legend.y1 <= figure.y1


XEON, EPYC = "Intel(R) Xeon(R) Processor; 1 thread; torch 2.13.0+cpu", "AMD EPYC; 1 thread; torch 2.13.0+cpu"
TIMED = [{"task": "graph", "seed": "42", "train_seconds": "1800", "machine": XEON, "status": "ok"},
         {"task": "graph", "seed": "43", "train_seconds": "2400", "machine": XEON, "status": "ok"},
         {"task": "graph", "seed": "44", "train_seconds": "5100", "machine": EPYC, "status": "ok"},
         {"task": "logic", "seed": "42", "train_seconds": "1500", "machine": "", "status": "ok"}]


def test_minutes_per_run_gives_one_median_per_cpu_not_one_across_machines_of_different_speed():
    # one median over all three graph runs (40 min) would describe neither machine
    cells = [render.minutes_per_run().cell(g) for g in groups(TIMED, ("task",))]
    assert cells == ["85.0 EPYC · 35.0 Xeon", "25.0"]


def test_a_recipe_over_the_run_budget_on_some_cpu_is_named_under_its_table_and_none_otherwise():
    (note,) = [line for line in render.over_budget(groups(TIMED, ("task",)), why="Why.") if line]
    assert "graph: 85 min on EPYC (n=1)" in note and "Xeon" not in note and "logic" not in note
    assert note.endswith("Why.")
    assert render.over_budget(groups(TIMED, ("task",), task="logic")) == []
