"""The engine pieces the papers' studies share (issue 28: each paper's study code about half): a plan written as
groups, the weight axis, per-run CSVs, the cells every results row records, optional report parts and figures as
data. Each test is the failure a paper would otherwise have to guard against itself."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from looped.data.tasks.base import ReasoningBatch
from looped.experiments.figures import Dots, Figure, Lines, curve_figures, plot, reference_line, with_parameters
from looped.experiments.recipes import Recipe
from looped.experiments.render import (Column, Group, at_cost, fewest, groups, inline, ints, joined_spread, key,
                                       labelled_tables, listed, noting_failures, part, relative_change,
                                       relative_changes, shows_beyond)
from looped.experiments.report import by_difficulty, interval, paper_figure, read_interval
from looped.experiments.results import ResultTable
from looped.experiments.retrain import Reproduction, retrains_note, retrains_table
from looped.experiments.study import Axis, Backfill, RunSummary, StudyBase, grouped_plan, unit_interval

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

    evaluations = ({"step": 20, "val_loss": 1.5, "val_accuracy": 0.75},
                   {"step": 40, "val_loss": 2.0, "val_accuracy": 0.5})
    run = RunSummary(folder=None, seconds=12.34, updates=50, best_step=20, targets=0, evaluations=evaluations,
                     losses=((10, 2.5), (20, 2.0)))
    # the selected checkpoint's validation (step 20), not the last; no scoring clock: no eval_seconds
    assert run.cells(Model()) == {"parameters": 1234, "updates": 50, "best_step": 20, "train_seconds": "12.3",
                                  "seconds_per_update": "0.247", "eval_seconds": "", "val_loss": "1.500000",
                                  "val_accuracy": "0.750000", "status": "ok"}
    scored = dataclasses.replace(run, scoring_since=time.perf_counter() - 2.0).cells(Model())  # as the engine hands it
    assert 2.0 <= float(scored["eval_seconds"]) < 60
    assert RunSummary(None, 0.0, 0, None, 0, ()).cells(Model())["seconds_per_update"] == ""  # resumed finished: unknown
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


def test_columns_over_another_table_list_every_seed_and_note_failed_runs(tmp_path):
    results = [{"task": "p", "row": "a", "seed": "1", "best_step": "40", "status": "ok"},
               {"task": "p", "row": "a", "seed": "2", "best_step": "60", "status": "ok"},
               {"task": "p", "row": "a", "seed": "3", "status": "failed: nan"}]
    lengths = ResultTable(tmp_path / "lengths.csv", ["task", "row", "seed", "length", "accuracy"],
                          ["task", "row", "seed", "length"])
    lengths.add_many([{"task": "p", "row": "a", "seed": s, "length": n, "accuracy": a}
                      for s, n, a in ((1, 8, 0.5), (2, 8, 0.7), (3, 8, 0.0), (1, 16, 0.25))])  # seed 3 failed
    [group] = groups(results, ("row",), task="p")
    # the failed seed's rows of the other table are not averaged in; a length only seed 1 reached says n=1
    assert joined_spread("8", lengths, "accuracy", 1, 100, length=8).cell(group) == "60.0 ± 14.1 (n=2)"
    assert joined_spread("16", lengths, "accuracy", 1, 100, length=16).cell(group) == "25.0 (n=1)"
    assert joined_spread("32", lengths, "accuracy", length=32).cell(group) == "–"
    assert listed("best step", "best_step").cell(group) == "40, 60"
    assert noting_failures(key("row")).cell(group) == "a (1 failed)"
    assert noting_failures(key("row"), counted=False).cell(group) == "a (some runs failed)"
    assert noting_failures(key("row")).align == key("row").align
    clean = Group({"row": "b"}, results[:1], [])
    assert noting_failures(key("row")).cell(clean) == "b" and listed("s", "seed").cell(Group({}, [], [])) == "–"


def test_bucket_columns_sentences_and_the_lines_a_table_keeps():
    runs = [{"row": "a", "seed": s, "first": f, "last": last} for s in (1, 2) for f, last in ((1, 1), (2, 3))]
    assert fewest("n", ints("first", "last")).cell(Group({"row": "a"}, runs[:-1], [])) == "1"  # one bucket lacks seed 2
    assert ints("first", "last")(runs[1]) == (2, 3)
    rows = [Group({"row": "a"}, [{"x": "0.5"}], []), Group({"row": "b"}, [], [])]
    assert inline(rows, lambda g: g["row"].upper(), Column("x", lambda g: g.runs[0]["x"] if g.runs else "–")) == \
        "A 0.5, B –"
    keep = shows_beyond(1)
    assert keep(["a", "–", "1.0"]) and not keep(["a", "–", "–"])
    columns = [key("row"), Column("x", lambda g: "–")]
    assert part("Exit", columns, rows, keep=keep) == ["", "## Exit", "", "| row | x |", "|---|---:|"]
    assert labelled_tables([("enwik8", ["| t |"]), ("empty", []), ("kjv", ["| u |"])]) == \
        ["enwik8:", "", "| t |", "", "kjv:", "", "| u |"]
    ppl = [{"corpus": c, "row": r, "ppl": str(p)} for c, r, p in (("e", "ws", 3), ("e", "plain", 4), ("t", "plain", 2))]
    # a corpus whose reference row has no mean gets no line (t)
    assert relative_changes(ppl, "ppl", "ws", [("ws",), ("plain",)], "corpus", ("e", "t")) == \
        ["- e: vs plain -25.00 %"]


def test_a_papers_figure_beside_ours():
    assert paper_figure((91.16, 6.09), 2) == "91.16 ± 6.09"
    assert paper_figure((9.3, None), 2) == "9.30" and paper_figure(3.8968, 4) == "3.8968"
    assert paper_figure(None) == "–" and paper_figure(None, 2, "not reported") == "not reported"


def test_figures_as_data_draw_nothing_without_rows_and_every_curve_per_panel_and_seed(tmp_path):
    spec = Lines("loss", lambda r: int(r["step"]), ("a",), "update", "loss", touch=reference_line(2, top=1.5))
    Figure("empty", spec).draw(tmp_path, [], {"c": {"corpus": "c"}})
    assert not (tmp_path / "empty.png").exists(), "a figure of a sweep not run yet was drawn"
    curves = [{"corpus": c, "row": "a", "seed": s, "step": n, "loss": str(9 - n)} for c in ("e", "t") for s in (1, 2)
              for n in (1, 2, 3)]
    results = [{"corpus": "e", "row": "a", "seed": 1, "parameters": "10", "status": "ok"}]
    titles = []
    curve_figures(tmp_path, spec, curves, results, "corpus", "{corpus}, seed {seed}",
                  lambda runs: titles.append(len(runs)) or "t")
    assert sorted(p.name for p in tmp_path.glob("curves_*.png")) == \
        ["curves_e_seed1.png", "curves_e_seed2.png", "curves_t_seed1.png", "curves_t_seed2.png"]
    assert titles == [1, 0, 0, 0]  # each figure's title sees the finished runs it shows (its corpus and seed)


def test_a_recipe_header_is_one_comment_line_each():
    recipe = Recipe.commented("cpu/a.yaml", {"model": {}}, "what it is", "looped train configs/x/cpu/a.yaml")
    assert recipe.header == "# what it is\n# looped train configs/x/cpu/a.yaml\n"


def test_a_config_is_built_once_per_run_and_an_error_again_each_time(tmp_path):
    study, built = StudyBase(tmp_path, tmp_path / "runs"), []
    assert study.config_once({"seed": 1}, lambda: built.append(1) or "config") == "config"
    assert study.config_once({"seed": "1"}, lambda: built.append(2) or "other") == "config"  # the CSV's '1' is run 1
    assert built == [1]

    def fails():
        built.append(3)
        raise ValueError("no such pair")

    for _ in range(2):
        with pytest.raises(ValueError):
            study.config_once({"seed": 2}, fails)
    assert built == [1, 3, 3]


def test_the_report_says_what_retrain_owed_did(tmp_path):
    study = StudyBase(tmp_path, tmp_path / "runs")
    study.results = ResultTable(tmp_path / "results.csv", ["row", "seed", "status"], ["row", "seed"])
    study.backfills = (Backfill("by position", study.results, lambda key, last: None),
                       Backfill("early exit", study.results, lambda key, last: None))
    assert retrains_note(study, "x") == []
    retrains_table(study).add_many([
        {"row": "a", "seed": 1, "figure": "bits/byte", "difference": "-0.000002", "tolerance": "0.001",
         "verdict": "reproduces"},
        {"row": "b", "seed": 1, "figure": "bits/byte", "difference": "+0.000005", "tolerance": "0.001",
         "verdict": "reproduces"},
        {"row": "c", "seed": 1, "figure": "bits/byte", "difference": "+0.010000", "tolerance": "0.001",
         "verdict": "does not reproduce"}])
    [blank, note] = retrains_note(study, "x")
    assert blank == "" and note.startswith("Trained again because the run folder was gone and a later score (by "
                                           "position, early exit) was owed (`looped reproduce x --scale cpu "
                                           "--retrain-owed`): ")
    assert "3 run(s), 2 reproducing their row's bits/byte within 0.001 (largest difference 0.000005)" in note


def test_a_run_scored_by_a_later_process_records_the_trainers_clock_not_zero(tmp_path):
    """A run whose evaluation crashed after training is scored by the next call, which trains nothing: its row
    said train_seconds 0.0 and pulled the table's minutes-per-run median down."""
    import json

    from helpers import tiny_run_config, write_text_corpus
    from looped.config import from_dict
    from looped.train import RunConfig, Trainer

    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    config = from_dict(RunConfig, tiny_run_config(corpus, train={"max_steps": 2, "eval_every": 0}))
    Trainer(config, tmp_path / "run", progress=False, log=lambda _: None).run()
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    clock = [e["seconds"] for e in logged if "seconds" in e][-1]
    assert clock > 0 and RunSummary.read(tmp_path / "run").seconds == clock
    assert RunSummary.read(tmp_path / "run", seconds=7.0).seconds == 7.0  # trained in this process: its own time


def test_run_folders_follow_an_explicit_out_unless_it_is_one_of_the_repositorys_results(tmp_path, monkeypatch):
    """A study put in /tmp/mine from an editable install used to train into the checkout's runs/mine, where a
    later `git clean` or another checkout's study of the same name would meet it."""
    from looped.experiments import results

    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    monkeypatch.setattr(results, "repository_root", lambda: repo)
    said = []
    folders = lambda out, runs=None: results.study_folders(out, runs, "drt_cpu", said.append)  # noqa: E731
    assert folders(None) == (repo / "results" / "drt_cpu", repo / "runs" / "drt_cpu")
    assert folders(str(repo / "results" / "mine")) == (repo / "results" / "mine", repo / "runs" / "mine")
    nested = repo / "results" / "compare" / "kjv_90steps"  # as before: runs/<its name>
    assert folders(str(nested)) == (nested, repo / "runs" / "kjv_90steps")
    assert folders(str(tmp_path / "mine")) == (tmp_path / "mine", tmp_path / "mine" / "runs")
    assert folders(str(tmp_path / "mine"), str(tmp_path / "r")) == (tmp_path / "mine", tmp_path / "r")
    assert said[3] == f"looped: results in {tmp_path / 'mine'}, run folders in {tmp_path / 'mine' / 'runs'}"
