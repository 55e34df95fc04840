"""The CLW study runner: resumable run by run, writes the CSV, table and plots."""

import csv
import json

import pytest

from looped.experiments import clw, clw_study, figures
from looped.experiments import study as engine

from helpers import write_text_corpus


def test_study_is_resumable_and_writes_its_outputs(tmp_path, monkeypatch):
    corpus = write_text_corpus(tmp_path / "text.txt", 30_000)
    monkeypatch.setattr(clw, "CPU_DATA", {"enwik8": {"corpus": "raw", "path": str(corpus), "heldout_fraction": 0.1},
                                          "tinystories": {"corpus": "raw", "path": str(corpus),
                                                          "heldout_fraction": 0.2}})
    tiny = {"model": {"dim": 32, "heads": 4, "ffn_dim": 32},
            "train": {"max_targets": 2 * 8 * 512, "threads": 1}}
    kwargs = dict(select={"seed": (11,), "row": ("plain", "workspace")}, overrides=tiny, progress=False,
                  log=lambda m: None)
    out, runs = tmp_path / "results", tmp_path / "runs"
    drawn, draw = {}, figures.plot  # each figure's panel titles and suptitle, then drawn as usual
    monkeypatch.setattr(figures, "plot", lambda path, spec, rows, panel_rows, **kw: drawn.update(
        {path.name: (list(panel_rows), kw.get("title"))}) or draw(path, spec, rows, panel_rows, **kw))
    engine.run_study("clw", out, runs, **kwargs)
    for name in ("nll.png", "rounds.png", "early_exit.png", "positions.png"):  # what, how large, on what data
        panel_titles, title = drawn[name]
        assert all("sample" in t and "parameters" in t for t in panel_titles), (name, panel_titles)
        assert name == "nll.png" or "bits/byte" in title, name
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert {(r["corpus"], r["row"]) for r in rows} == {(c, r) for c in clw.CORPORA for r in ("plain", "workspace")}
    assert all(r["status"] == "ok" and int(r["targets"]) == 8192 for r in rows)
    for name in ("table.md", "nll.png", "rounds.png", "early_exit.png", "rounds.csv", "early_exit.csv",
                 "positions.csv", "positions.png", "curves.csv", "curves_enwik8_seed11.png"):
        assert (out / name).exists(), name
    positions = list(csv.DictReader(open(out / "positions.csv")))
    buckets = sorted({(int(r["first"]), int(r["last"])) for r in positions})
    assert buckets == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 127), (128, 255), (256, 512)]
    assert len(positions) == 4 * len(buckets)  # 2 rows x 2 corpora, every bucket
    rounds = list(csv.DictReader(open(out / "rounds.csv")))
    assert sorted({int(r["rounds"]) for r in rounds}) == list(range(1, 9))
    assert {r["row"] for r in rounds} == {"workspace"}  # only looped rows have a depth to vary
    before = (out / "results.csv").read_text()
    engine.run_study("clw", out, runs, **kwargs)  # nothing left to do: nothing retrained, nothing changed
    assert (out / "results.csv").read_text() == before
    table = (out / "table.md").read_text()
    assert "| workspace |" in table and "## Early exit at inference" in table and "by position" in table

    # a run finished before the study kept positions (or a looped run before the early-exit sweep): scored again
    # from its folder on the next invocation
    kept = [r for r in positions if not (r["corpus"] == "enwik8" and r["row"] == "plain")]
    table_ = clw_study.ClwStudy(out, runs).positions
    table_.rows = kept
    table_.save()
    exits_before = (out / "early_exit.csv").read_text()
    exits_ = clw_study.ClwStudy(out, runs).exits
    exits_.rows = [r for r in exits_.rows if r["corpus"] != "enwik8"]
    exits_.save()
    curves = list(csv.DictReader(open(out / "curves.csv")))
    metrics = runs / "enwik8" / "plain" / "seed11" / "metrics.jsonl"
    logged = {e["step"]: e["loss"] for e in map(json.loads, open(metrics)) if "loss" in e}
    mine = {int(r["step"]): float(r["loss"]) for r in curves if (r["corpus"], r["row"]) == ("enwik8", "plain")}
    assert mine.keys() == logged.keys() and all(abs(mine[k] - logged[k]) < 1e-6 for k in logged)
    curves_ = clw_study.ClwStudy(out, runs).training_curves
    curves_.rows = [r for r in curves_.rows if (r["corpus"], r["row"]) != ("enwik8", "plain")]
    curves_.save()
    messages = []
    engine.run_study("clw", out, runs, **{**kwargs, "log": messages.append})
    assert messages == ["scoring by position: enwik8 / plain / 11", "scoring early exit: enwik8 / workspace / 11",
                        "scoring training curve: enwik8 / plain / 11"]
    assert len(list(csv.DictReader(open(out / "curves.csv")))) == len(curves)  # put back once, not twice
    assert sorted((out / "early_exit.csv").read_text().splitlines()) == sorted(exits_before.splitlines())
    again = {(r["corpus"], r["row"], r["first"]): r["bits_per_byte"] for r in csv.DictReader(open(out / "positions.csv"))}
    assert again == {(r["corpus"], r["row"], r["first"]): r["bits_per_byte"] for r in positions}
    assert (out / "results.csv").read_text() == before
    exits = list(csv.DictReader(open(out / "early_exit.csv")))
    assert {(r["row"], float(r["threshold"])) for r in exits} == {("workspace", t) for t in clw_study.EXIT_THRESHOLDS}


def test_a_diverged_run_is_recorded_not_hidden(tmp_path, monkeypatch):
    from looped.train import TrainingError

    class Diverges:
        def __init__(self, *args, **kwargs):
            pass

        def run(self):
            raise TrainingError("loss became nan at update 3; stopping (no checkpoint was written)")

    corpus = write_text_corpus(tmp_path / "text.txt", 30_000)
    monkeypatch.setattr(clw, "CPU_DATA", {c: {"corpus": "raw", "path": str(corpus), "heldout_fraction": 0.2}
                                          for c in clw.CORPORA})
    monkeypatch.setattr(engine, "Trainer", Diverges)
    out = tmp_path / "results"
    engine.run_study("clw", out, tmp_path / "runs", select={"seed": (11,), "row": ("plain",), "corpus": ("enwik8",)},
                     progress=False, log=lambda m: None)
    (row,) = list(csv.DictReader(open(out / "results.csv")))
    assert row["status"].startswith("failed: loss became nan at update 3") and row["nll"] == ""
    assert "| plain | – |" in (out / "table.md").read_text()  # a failed run contributes no score


def test_reproduce_status_lists_done_failed_and_to_do_runs(tmp_path, capsys):
    from looped.cli import main

    table = clw_study.results_table(tmp_path / "clw")
    table.add({"corpus": "enwik8", "row": "plain", "arch": "transformer", "seed": 11, "status": "ok"})
    table.add({"corpus": "enwik8", "row": "workspace", "arch": "workspace", "seed": 11, "status": "failed: nan"})
    assert main(["reproduce", "clw", "--status", "--out", str(tmp_path / "clw"), "--seeds", "11",
                 "--rows", "plain", "workspace", "anchored_loop"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("clw cpu: 1 done, 1 failed, 4 to do")  # 3 rows x 2 corpora
    assert "failed enwik8 / 11 / workspace  (failed: nan)" in text and "to do  tinystories / 11 / plain" in text
    assert not (tmp_path / "runs").exists()  # --status trains nothing
    for paper in ("rlt", "drt"):
        assert main(["reproduce", paper, "--status", "--out", str(tmp_path / paper), "--seeds", "42"]) == 0
        assert capsys.readouterr().out.startswith(f"{paper} cpu: 0 done, 0 failed, ")
    assert engine.status_report(table, [], "empty").startswith("empty: 0 done, 0 failed, 0 to do")


def test_status_says_how_long_each_run_to_do_and_the_rest_will_take(tmp_path):
    """Planning a machine booking needs the time left: each run to do is the median of its setting's finished
    seeds (training + scoring); a failed row, or one that lost its training clock (0 s), does not count."""
    table = clw_study.results_table(tmp_path)
    plain = {"corpus": "enwik8", "row": "plain", "arch": "transformer"}
    for seed, trained, scored in ((11, "600.0", "60.0"), (23, "900.0", ""), (37, "1100.0", "100.0"),
                                  (41, "0.0", "5.0")):
        table.add({**plain, "seed": seed, "train_seconds": trained, "eval_seconds": scored, "status": "ok"})
    table.add({**plain, "seed": 43, "train_seconds": "30.0", "status": "failed: nan"})
    plan = [{"corpus": "enwik8", "row": "plain", "seed": 99}, {"corpus": "enwik8", "row": "workspace", "seed": 99}]
    text = engine.status_report(table, plan, "clw cpu")
    assert "  to do  enwik8 / plain / 99  (~15 min)" in text, text  # median of 660, 900, 1200 s
    assert "  to do  enwik8 / workspace / 99\n" in text  # no finished seed of its own: no guess
    assert "left: ~0.2 h of training and scoring" in text and "(1 run(s) have none: not counted)" in text
    assert "left:" not in engine.status_report(table, plan[1:], "clw cpu")


def test_status_scales_times_measured_on_another_cpu_by_this_machines_measured_speed(tmp_path):
    """A study moved to a slower machine: --status promised 29 minutes for a run that took 52, its setting's only
    finished seed having run on the old CPU; a run's own setting measured here wins over any scaled figure."""
    from looped.experiments import schedule
    from looped.experiments.results import machine
    here, table = machine(), clw_study.results_table(tmp_path)
    cells = lambda row, seed, seconds, ran_on: {"corpus": "enwik8", "row": row, "arch": row, "seed": seed,  # noqa: E731
                                                "train_seconds": seconds, "status": "ok", "machine": ran_on}
    table.add_many([cells("plain", 1, "600.0", "Old CPU; 1 thread"), cells("plain", 2, "600.0", ""),
                    cells("plain", 3, "900.0", here), cells("workspace", 1, "1000.0", "Old CPU; 2 threads")])
    assert schedule.speed_factor(table, schedule.cpu_of(here)) == 1.5  # 900 s here against 600 s elsewhere
    plan = [{"corpus": "enwik8", "row": "plain", "seed": 4}, {"corpus": "enwik8", "row": "workspace", "seed": 4}]
    text = engine.status_report(table, plan, "clw cpu")
    assert "  to do  enwik8 / plain / 4  (~15 min)" in text, text  # measured here: 900 s, not scaled
    assert "  to do  enwik8 / workspace / 4  (~25 min)" in text, text  # 1000 s on the old CPU x 1.5
    assert "x 1.50" in text
    assert schedule.expected_seconds(table, plan[1], here="Old CPU") == 1000.0  # measured there: as it was


def test_a_setting_without_a_finished_seed_is_timed_like_the_setting_its_study_names(tmp_path, monkeypatch):
    """DRT's one-seed ablation logic_dropout had no estimate, so --finish-within started it at any minute left (a
    run lost at the end of the booking): the study times a variant like its recipe, times its budget."""
    from looped.experiments import drt_study

    table = drt_study.study_results(tmp_path, drt_study.COLUMNS, drt_study.KEY)
    for seed, seconds in ((42, "3000.0"), (43, "3600.0")):  # the recipe: 50 and 60 minutes, median 55
        table.add({"task": "logic", "arch": "drt", "alpha": "0.0", "seed": seed, "train_seconds": seconds,
                   "status": "ok"})
    study = engine.build("drt", tmp_path, tmp_path / "runs")
    plan = [{"task": "logic_dropout", "arch": "drt", "alpha": 0.0, "seed": 42},  # the recipe's time
            {"task": "logic_1.5x", "arch": "drt", "alpha": 0.0, "seed": 42},  # x 1.5
            {"task": "graph", "arch": "drt", "alpha": 0.0, "seed": 42}]  # no recipe of its own timed: no guess
    text = engine.status_report(table, plan, "drt cpu", timed_like=study.timed_like)
    assert "  to do  logic_dropout / drt / 0.0 / 42  (~55 min, timed as logic / drt / 0.0)" in text, text
    assert "  to do  logic_1.5x / drt / 0.0 / 42  (~82 min, timed as logic / drt / 0.0 x 1.5)" in text, text
    assert "  to do  graph / drt / 0.0 / 42\n" in text and "(1 run(s) have none: not counted)" in text
    assert "~55 min" not in engine.status_report(table, plan, "drt cpu")  # without the study's hint: no guess
    monkeypatch.setattr(engine.time, "monotonic", lambda: 1000.0)  # no time passes: 60 minutes left throughout
    messages = []
    started = list(engine.pending_runs(plan, table, finish_within=60, timed_like=study.timed_like,
                                       log=messages.append))
    assert [k["task"] for k in started] == ["logic_dropout", "graph"]
    assert messages == ["skipping logic_1.5x / drt / 0.0 / 42: expected ~82 min, 60 left of --finish-within 60"]


def test_status_marks_a_run_another_process_holds_as_running_with_its_last_logged_update(tmp_path):
    """Two `looped reproduce` processes share a study: --status listed the run one of them was training as plain
    "to do", so a third process's owner could not tell work in progress from work not started."""
    from looped.experiments.backfills import claim_path
    from looped.experiments.results import exclusive_lock

    table = clw_study.results_table(tmp_path)
    busy, idle = ({"corpus": "enwik8", "row": "plain", "seed": seed} for seed in (11, 23))
    folder = tmp_path / "runs" / "seed11"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text('{"step": 50, "loss": 3.1}\n{"step": 100, "loss": 2.9}\n')
    claims_before = set((tmp_path / ".claims").glob("*")) if (tmp_path / ".claims").exists() else set()
    assert "running" not in engine.status_report(table, [busy, idle], "clw cpu", lambda key: folder)
    assert not (tmp_path / ".claims").exists() or set((tmp_path / ".claims").glob("*")) == claims_before
    with exclusive_lock(claim_path(table, busy)):  # as the training process holds it
        text = engine.status_report(table, [busy, idle], "clw cpu", lambda key: folder)
    assert text.startswith("clw cpu: 0 done, 0 failed, 2 to do (1 running now) ("), text
    assert "  to do  enwik8 / plain / 11  (running now: update 100 logged)\n" in text, text
    assert "  to do  enwik8 / plain / 23\n" in text
    assert "running" not in engine.status_report(table, [busy, idle], "clw cpu")  # released: to do again


def test_result_rows_read_the_same_before_and_after_a_reload(tmp_path):
    """A study adds rows with numbers and reads earlier rows back from the CSV as text; mixing the two once
    crashed the table (sorting 918524 against "918524") after the second seed of a row."""
    table = clw_study.results_table(tmp_path)
    table.add({"corpus": "enwik8", "row": "plain", "seed": 11, "parameters": 918504, "bits_per_byte": None})
    reloaded = clw_study.results_table(tmp_path)
    assert table.rows == reloaded.rows and table.rows[0]["parameters"] == "918504"
    assert table.rows[0]["bits_per_byte"] == ""
    reloaded.add({"corpus": "enwik8", "row": "plain", "seed": 23, "parameters": 918504, "bits_per_byte": 3.66,
                  "ppl": 12.6, "nll": 2.5, "status": "ok"})
    assert "| plain | 918,504 |" in clw_study.table_markdown(reloaded)


def test_pending_runs_skips_done_runs_and_starts_none_after_the_deadline(tmp_path, monkeypatch):
    table = clw_study.results_table(tmp_path)
    table.add({"corpus": "enwik8", "row": "plain", "seed": 11, "status": "ok"})
    plan = engine.plan_keys(engine.get_study("clw"), "cpu", {"seed": (11,), "corpus": ("enwik8",),
                                                             "row": ("plain", "workspace", "anchored_loop")})
    assert [k["row"] for k in engine.pending_runs(plan, table)] == ["workspace", "anchored_loop"]
    clock = iter([0.0, 30.0, 90.0, 200.0])  # minutes 0 (start), 0.5, 1.5, ...
    monkeypatch.setattr(engine.time, "monotonic", lambda: next(clock))
    messages = []
    started = list(engine.pending_runs(plan, table, stop_after=1.0, log=messages.append))
    assert [k["row"] for k in started] == ["workspace"]  # the next run would have started after 1 minute
    assert messages == ["stopping: --stop-after 1 minutes reached, 2 run(s) left to do"]


def test_stop_after_zero_starts_no_run_and_the_command_line_accepts_it(tmp_path, monkeypatch):
    """`--stop-after 0` means "start nothing new" (a script with no time left still rewrites the report); it was
    refused by the command line, and the deadline test (`>`) let a run start when the clock had not moved."""
    table = clw_study.results_table(tmp_path)
    plan = engine.plan_keys(engine.get_study("clw"), "cpu", {"seed": (11,), "corpus": ("enwik8",), "row": ("plain",)})
    monkeypatch.setattr(engine.time, "monotonic", lambda: 100.0)  # a clock that has not moved since the start
    messages = []
    assert list(engine.pending_runs(plan, table, stop_after=0, log=messages.append)) == []
    assert messages == ["stopping: --stop-after 0 minutes reached, 1 run(s) left to do"]

    from looped.cli import main

    called = {}
    monkeypatch.setattr(engine, "run_study", lambda spec, out, runs, **options: called.update(options))
    (tmp_path / "table.md").write_text("the table\n")
    assert main(["reproduce", "clw", "--out", str(tmp_path), "--stop-after", "0", "--no-progress"]) == 0
    assert called["stop_after"] == 0


def test_finish_within_skips_a_run_that_would_outlast_the_booking_for_a_shorter_one(tmp_path, monkeypatch):
    """--stop-after 150 started a 100-minute run at minute 149: the run was lost at the end of the machine's
    booking. --finish-within starts only runs --status expects to end in time, and still starts a shorter one."""
    table = clw_study.results_table(tmp_path)
    for row, seconds in (("workspace", "3000.0"), ("anchored_loop", "600.0")):  # 50 and 10 minutes, seed 23
        table.add({"corpus": "enwik8", "row": row, "arch": row, "seed": 23, "train_seconds": seconds, "status": "ok"})
    plan = engine.plan_keys(engine.get_study("clw"), "cpu", {"seed": (11,), "corpus": ("enwik8",),
                                                             "row": ("workspace", "anchored_loop", "plain")})
    monkeypatch.setattr(engine.time, "monotonic", lambda: 1000.0)  # no time passes: 30 minutes left throughout
    messages = []
    started = list(engine.pending_runs(plan, table, finish_within=30, log=messages.append))
    assert [k["row"] for k in started] == ["anchored_loop", "plain"]  # plain has no estimate: it starts
    assert messages == ["skipping enwik8 / 11 / workspace: expected ~50 min, 30 left of --finish-within 30"]
    assert list(engine.pending_runs(plan, table, finish_within=0, log=messages.append)) == []
    assert messages[-1] == "stopping: --finish-within 0 minutes reached, 3 run(s) left to do"

    from looped.cli import main

    called = {}
    monkeypatch.setattr(engine, "run_study", lambda spec, out, runs, **options: called.update(options))
    (tmp_path / "table.md").write_text("the table\n")
    assert main(["reproduce", "clw", "--out", str(tmp_path), "--finish-within", "140", "--no-progress"]) == 0
    assert called["finish_within"] == 140 and called["stop_after"] is None


def test_only_books_the_named_runs_in_order_and_refuses_a_label_that_names_no_run(tmp_path, monkeypatch,
                                                                                   capsys):
    """A lane's runs (two seeds of one row, one of another) are no product of axis values: without --only a lane
    needed one command per product and a wrapper script to share one deadline between them."""
    spec = engine.get_study("clw")
    keys = engine.parse_runs(spec, ["tinystories / 37 / plain", "enwik8/11/workspace", "enwik8 / 11 / workspace"],
                             "cpu")
    assert keys == [{"corpus": "tinystories", "seed": 37, "row": "plain"},
                    {"corpus": "enwik8", "seed": 11, "row": "workspace"}]  # given order, the repeat once
    assert engine.plan_keys(spec, "cpu", {"seed": (23,)}, keys) == keys
    for label, words in (("enwik8 / 11", "is corpus / seed / row"), ("enwik9 / 11 / plain", "unknown name 'enwik9'"),
                         ("enwik8 / eleven / plain", "'eleven' is not an integer")):
        with pytest.raises(ValueError, match=words):
            engine.parse_runs(spec, [label], "cpu")

    from looped.cli import main

    called = {}
    monkeypatch.setattr(engine, "run_study", lambda spec, out, runs, **options: called.update(options))
    (tmp_path / "table.md").write_text("the table\n")
    assert main(["reproduce", "clw", "--out", str(tmp_path), "--only", "enwik8 / 11 / workspace",
                 "--no-progress"]) == 0
    assert called["only"] == [{"corpus": "enwik8", "seed": 11, "row": "workspace"}] and called["select"] == {}
    # an axis option beside --only: which runs were meant?
    assert main(["reproduce", "clw", "--out", str(tmp_path), "--only", "enwik8 / 11 / plain", "--seeds", "23"]) != 0
    assert capsys.readouterr().err.strip().endswith("--only names whole runs: give it without --seeds")


def test_two_processes_share_a_study_without_losing_rows_or_training_a_run_twice(tmp_path):
    """Two `looped reproduce` processes on one results folder: each ResultTable is loaded before the other
    writes, yet neither drops the other's rows, and a run one of them has claimed is skipped by the other
    (the claim is a flock, held by the generator until its consumer asks for the next run)."""
    first, second = clw_study.results_table(tmp_path), clw_study.results_table(tmp_path)
    first.add({"corpus": "enwik8", "row": "plain", "seed": 11, "status": "ok"})
    second.add({"corpus": "enwik8", "row": "shared_loop", "seed": 11, "status": "ok"})
    assert {r["row"] for r in clw_study.results_table(tmp_path).rows} == {"plain", "shared_loop"}

    plan = engine.plan_keys(engine.get_study("clw"), "cpu", {"seed": (11,), "corpus": ("enwik8",),
                                                             "row": ("plain", "workspace", "anchored_loop")})
    messages = []
    runs_a = engine.pending_runs(plan, first, log=messages.append)
    runs_b = engine.pending_runs(plan, second, log=messages.append)
    assert next(runs_a)["row"] == "workspace"  # a claims workspace and trains it ...
    assert next(runs_b)["row"] == "anchored_loop"  # ... so b skips it
    assert messages == ["skipping enwik8 / 11 / workspace: another process is running it"]
    first.add({"corpus": "enwik8", "row": "workspace", "seed": 11, "status": "ok"})
    second.add({"corpus": "enwik8", "row": "anchored_loop", "seed": 11, "status": "ok"})
    assert list(runs_a) == [] and list(runs_b) == []  # anchored_loop, done by b meanwhile, is not started by a
    assert len(clw_study.results_table(tmp_path).rows) == 4
