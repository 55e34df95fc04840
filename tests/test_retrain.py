"""`looped reproduce NAME --retrain-owed` (looped/experiments/retrain.py) on CLW's toy setting: a finished run whose
folder is gone and that owes a Backfill (CLW's scores by position) is trained again, checked against its committed
row, and scored only when it reproduces it; results.csv is never written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import study_drivers
from looped.experiments import clw, clw_study, retrain
from looped.experiments.results import exclusive_lock
from looped.experiments import study as engine
from looped.train import Trainer

STUDY = "clw"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The toy plan of CLW trained and scored once (two runs); each test works on a copy."""
    root = tmp_path_factory.mktemp("clw_toy")
    setting = study_drivers.toy(STUDY, root)
    engine.run_study(STUDY, root / "results", root / "runs", select=setting["select"],
                     overrides=setting["overrides"], progress=False, log=lambda m: None, **setting["options"])
    return root


class Toy:
    """A copy of the trained toy study, with a looped run's folder and its position and early-exit scores removed
    (as for the committed runs whose folders are gone)."""

    def __init__(self, trained: Path, tmp_path: Path):
        shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
        self.setting = study_drivers.toy(STUDY, trained)  # the corpus stays in the template
        self.out, self.runs = tmp_path / "results", tmp_path / "runs"
        self.study = self.build()
        self.plan = engine.plan_keys(engine.get_study(STUDY), "cpu", self.setting["select"])
        self.key = next(key for key in self.plan if key["row"] in clw.LOOPED_ROWS)
        self.scored = self.rows_of(self.key)  # what the original run scored
        assert self.scored["positions"] and self.scored["exits"], "the toy run was not scored"
        ours = self.scored["positions"] + self.scored["exits"]
        for table in (self.study.positions, self.study.exits):
            table.rows = [r for r in table.rows if r not in ours]
            table.save()
        shutil.rmtree(self.study.folder(self.key))
        self.results_bytes = (self.out / "results.csv").read_bytes()
        self.log: list[str] = []

    def build(self):
        return engine.build(STUDY, self.out, self.runs, overrides=self.setting["overrides"], **self.setting["options"])

    def rows_of(self, key: dict) -> dict[str, list[dict]]:
        """The run's rows of positions.csv and early_exit.csv (the toy's two Backfills)."""
        study = self.build()
        return {name: [r for r in table.rows if all(r[k] == str(v) for k, v in key.items())]
                for name, table in (("positions", study.positions), ("exits", study.exits))}

    def unscored(self) -> bool:
        return self.rows_of(self.key) == {"positions": [], "exits": []}

    def retrain(self, **options) -> list[dict]:
        return retrain.retrain_study(STUDY, self.out, self.runs, select=self.setting["select"],
                                     overrides=self.setting["overrides"], progress=False, log=self.log.append,
                                     **{**self.setting["options"], **options})

    def status(self) -> str:
        return engine.status(STUDY, self.out, self.runs, select=self.setting["select"], **self.setting["options"])


@pytest.fixture
def toy(trained, tmp_path) -> Toy:
    return Toy(trained, tmp_path)


def test_a_run_whose_folder_is_gone_is_retrained_checked_and_backfilled(toy):
    assert "owed: 1 run needs --retrain-owed" in toy.status()
    assert toy.retrain() == [toy.key]
    label = engine.run_label(toy.key)
    assert any(m.startswith(f"retrained {label} reproduces its row (held-out bits/byte ") for m in toy.log), toy.log
    # the comparison is committed with the rows (the run folder is not): both figures, their difference, the verdict
    [recorded] = retrain.retrains_table(toy.build()).rows
    committed = float(toy.study.results.find(**toy.key)["bits_per_byte"])
    assert float(recorded["committed"]) == pytest.approx(committed, abs=1e-6)
    assert abs(float(recorded["difference"])) <= 1e-3 and recorded["verdict"] == engine.REPRODUCES
    assert "Trained again because the run folder was gone" in (toy.out / "table.md").read_text(), "the report hides that a run was retrained"
    assert f"scoring by position: {label}" in toy.log and f"scoring early exit: {label}" in toy.log
    # seeded, one thread: the retrained run scores exactly what the deleted one did
    assert toy.rows_of(toy.key) == toy.scored
    assert (toy.out / "results.csv").read_bytes() == toy.results_bytes, "a retrain rewrote results.csv"
    assert "owed:" not in toy.status()
    toy.log.clear()
    assert toy.retrain() == [] and not any("retrain" in m for m in toy.log), "a reproduced run was retrained again"


def test_the_retrain_record_is_written_only_after_every_score_it_owed(toy, monkeypatch):
    """--merge-from takes a retrained run for its retrains.csv record: written before the scores, a merge between
    the two took the run with its by-position rows but no early-exit rows, and every later merge called it
    "already here" (enwik8 workspace_retention seed 11 lost its early-exit sweep that way)."""
    real, seen = engine.backfill, []

    def backfill(study, log, keys=None):
        seen.append(retrain.retrains_table(study).find(**toy.key))
        return real(study, log, keys)

    monkeypatch.setattr(engine, "backfill", backfill)
    assert toy.retrain() == [toy.key]
    assert seen and all(record is None for record in seen), "the record came before the scores"
    assert retrain.retrains_table(toy.build()).find(**toy.key)["verdict"] == engine.REPRODUCES


def test_a_retrain_off_its_row_is_not_backfilled_and_the_log_says_why(toy, monkeypatch):
    real = clw_study.heldout_scorer

    def drifted(checkpoint):  # the retrained run scores 0.01 bits/byte worse than its row
        model, config, score = real(checkpoint)
        return model, config, lambda **setting: {**(r := score(**setting)), "bits_per_byte": r["bits_per_byte"] + 0.01}

    monkeypatch.setattr(clw_study, "heldout_scorer", drifted)
    assert toy.retrain() == [toy.key]
    committed = float(toy.study.results.find(**toy.key)["bits_per_byte"])
    refusals = [m for m in toy.log if "does not reproduce" in m]
    assert len(refusals) == 1, toy.log
    numbers = re.search(r"bits/byte (\d+\.\d{6}) retrained vs (\d+\.\d{6}) in results.csv", refusals[0])
    assert numbers and float(numbers[2]) == pytest.approx(committed, abs=1e-6)
    assert float(numbers[1]) == pytest.approx(committed + 0.01, abs=2e-6)
    assert toy.unscored(), "a run that does not reproduce its row was backfilled"
    [recorded] = retrain.retrains_table(toy.build()).rows
    assert recorded["verdict"] == engine.DIFFERS and float(recorded["difference"]) == pytest.approx(0.01, abs=2e-6)
    assert (toy.out / "results.csv").read_bytes() == toy.results_bytes
    # the verdict stays with the folder: a later study call neither scores it nor retrains it
    monkeypatch.setattr(clw_study, "heldout_scorer", real)
    engine.run_study(STUDY, toy.out, toy.runs, select=toy.setting["select"], overrides=toy.setting["overrides"],
                     progress=False, log=toy.log.append, **toy.setting["options"])
    assert toy.unscored()
    assert toy.retrain() == []
    assert "not reproduced: 1 retrained run(s)" in toy.status() and "owed:" not in toy.status()


def drift(monkeypatch, by: float = 0.01) -> None:
    """Make every held-out score of the toy `by` bits/byte worse (a retrain by code that no longer reproduces)."""
    real = clw_study.heldout_scorer

    def drifted(checkpoint):
        model, config, score = real(checkpoint)
        return model, config, lambda **setting: {**(r := score(**setting)), "bits_per_byte": r["bits_per_byte"] + by}

    monkeypatch.setattr(clw_study, "heldout_scorer", drifted)


def test_replace_differing_makes_a_retrain_that_differs_the_row_and_scores_it(toy, monkeypatch):
    """Rows trained by older code may not reproduce bit for bit; without a way to adopt the retrain, their owed
    scores (by position, early exit) could never be filled."""
    committed = float(toy.study.results.find(**toy.key)["bits_per_byte"])
    drift(monkeypatch)
    assert toy.retrain(replace_differing=True) == [toy.key]
    label = engine.run_label(toy.key)
    assert any(m.startswith(f"retrained {label} replaces its row: held-out bits/byte ") for m in toy.log), toy.log
    row = toy.build().results.find(**toy.key)
    assert float(row["bits_per_byte"]) == pytest.approx(committed + 0.01, abs=2e-6), "the row is not the retrain's"
    assert row["status"] == "ok" and float(row["train_seconds"]) > 0
    assert not toy.unscored(), "the replaced row's owed scores were not filled"
    [recorded] = retrain.retrains_table(toy.build()).rows
    assert recorded["verdict"] == engine.REPLACED
    assert float(recorded["committed"]) == pytest.approx(committed, abs=1e-6)
    assert float(recorded["difference"]) == pytest.approx(0.01, abs=2e-6)
    assert "1 replacing their row" in (toy.out / "table.md").read_text()
    status = toy.status()
    assert "replaced: 1 row(s)" in status and "owed:" not in status and "not reproduced" not in status
    toy.log.clear()
    assert toy.retrain(replace_differing=True) == [], "a replaced row was retrained again"


def test_replace_differing_adopts_an_earlier_refused_retrain_without_training_it_again(toy, monkeypatch):
    drift(monkeypatch)
    assert toy.retrain() == [toy.key] and toy.unscored()  # refused: the row stands
    metrics = toy.study.folder(toy.key) / "metrics.jsonl"
    trained = metrics.stat().st_mtime_ns
    toy.log.clear()
    assert toy.retrain(replace_differing=True) == [toy.key]
    assert f"== replacing the row of {engine.run_label(toy.key)} by its earlier retrain, which differs from it" \
        in toy.log
    assert metrics.stat().st_mtime_ns == trained, "the refused retrain was trained again"
    assert [r["verdict"] for r in retrain.retrains_table(toy.build()).rows] == [engine.REPLACED]
    assert not toy.unscored()


def test_replace_differing_without_retrain_owed_is_refused_in_one_line(toy, capsys):
    from looped.cli import main

    argv = ["reproduce", STUDY, "--replace-differing", "--out", str(toy.out), "--runs", str(toy.runs)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--replace-differing goes with --retrain-owed" in err and len(err.splitlines()) == 1


def test_a_killed_retrain_resumes_and_is_never_scored_half_way(toy):
    folder = toy.study.folder(toy.key)
    (folder / engine.RETRAINED).parent.mkdir(parents=True)
    (folder / engine.RETRAINED).write_text(f"{engine.RETRAINING}\n")
    Trainer(toy.study.config(toy.key), folder, progress=False, log=lambda m: None).run(stop_after=1)
    engine.run_study(STUDY, toy.out, toy.runs, select=toy.setting["select"], overrides=toy.setting["overrides"],
                     progress=False, log=toy.log.append, **toy.setting["options"])  # backfills what it may
    assert toy.unscored(), "a half-trained retrain was scored"
    assert "owed: 1 run needs --retrain-owed" in toy.status()
    assert toy.retrain() == [toy.key]
    assert any(m.startswith(f"resumed {folder} at update 1/") for m in toy.log), toy.log
    assert toy.rows_of(toy.key) == toy.scored


def test_stop_after_zero_a_claimed_run_or_a_study_without_a_check_retrains_nothing(toy):
    study = toy.build()
    with exclusive_lock(engine.claim_path(study.results, toy.key, "retrain"), wait=False) as held:
        assert held  # as another process retraining the run would hold it
        assert retrain.retrain_owed(study, toy.plan, progress=False, log=toy.log.append) == []
    assert toy.log == [f"skipping {engine.run_label(toy.key)}: another process is retraining it"]
    toy.log.clear()
    assert retrain.retrain_owed(study, toy.plan, progress=False, stop_after=0, log=toy.log.append) == []
    assert toy.log == ["stopping: --stop-after 0 minutes reached, 1 owed run(s) left to retrain"]
    study.reproduces = None
    assert retrain.retrain_owed(study, toy.plan, progress=False, log=toy.log.append) == []
    assert "cannot check a retrained run against its row" in toy.log[-1]
    assert "cannot check a retrain against its row" in engine.retrain_status(study, toy.plan)
    assert not toy.study.folder(toy.key).exists(), "a run was retrained"


def test_the_command_line_option_retrains_the_selected_runs(toy, monkeypatch, capsys):
    from looped.cli import main

    called = {}

    def fake(spec, out, runs, **options):
        called.update(options, out=out)
        (out / "table.md").write_text("the table\n")

    monkeypatch.setattr(retrain, "retrain_study", fake)
    argv = ["reproduce", STUDY, "--retrain-owed", "--out", str(toy.out), "--runs", str(toy.runs), "--seeds", "11",
            "--stop-after", "5", "--no-progress"]
    assert main(argv) == 0
    assert called["out"] == toy.out and called["select"] == {"seed": (11,)} and called["stop_after"] == 5
    assert called["replace_differing"] is False
    assert main([*argv, "--replace-differing"]) == 0 and called["replace_differing"] is True
    assert capsys.readouterr().out.startswith("the table")


def test_a_retrain_from_before_the_record_is_checked_and_recorded_once(toy):
    assert toy.retrain() == [toy.key]
    (toy.out / retrain.RETRAINS).unlink()  # as a folder retrained by a version that kept no record
    toy.log.clear()
    assert toy.retrain() == [], "a recorded-less but reproduced run was retrained again"
    [recorded] = retrain.retrains_table(toy.build()).rows
    assert recorded["verdict"] == engine.REPRODUCES and abs(float(recorded["difference"])) <= 1e-3
    assert sum(m.startswith("recorded the earlier retrain") for m in toy.log) == 1, toy.log
    toy.log.clear()
    toy.retrain()
    assert not any(m.startswith("recorded the earlier retrain") for m in toy.log), "recorded twice"


# --- RLT: the shuffled-feedback ablation, added after the addition runs had finished ----------------------------
def test_rlt_feedback_rows_owe_the_shuffled_ablation_and_a_reproducing_retrain_fills_it(tmp_path):
    """The addition rows of RLT-1 / chunk 4 were trained before lengths.csv had the shuffled-feedback score and
    their folders are gone: a retrain that reproduces the row's ID validation loss must fill exactly the cells
    the original run would have, and a row without a feedback register owes nothing."""
    setting = study_drivers.toy("rlt", tmp_path)
    out, runs = tmp_path / "results", tmp_path / "runs"
    options = dict(select=setting["select"], overrides=setting["overrides"], **setting["options"])
    engine.run_study("rlt", out, runs, progress=False, log=lambda m: None, **options)
    study = engine.build("rlt", out, runs, overrides=setting["overrides"], **setting["options"])
    key = {"task": "parity", "row": "rlt1", "seed": 42}
    scored = {r["length"]: r["shuffled_feedback_accuracy"] for r in study.lengths.rows if r["row"] == "rlt1"}
    assert scored and all(scored.values())
    for row in study.lengths.rows:  # as in the lengths.csv of a run from before the ablation
        row["shuffled_feedback_accuracy"] = ""
    study.lengths.save()
    shutil.rmtree(study.folder(key))
    status = engine.status("rlt", out, runs, **options)
    assert "owed: 1 run needs --retrain-owed" in status, status  # rlt1 only: the baseline has no register
    log: list[str] = []
    assert retrain.retrain_study("rlt", out, runs, progress=False, log=log.append, **options) == [key]
    assert any(m.startswith("retrained parity / 42 / rlt1 reproduces its row (ID validation loss ") for m in log), log
    again = engine.build("rlt", out, runs, overrides=setting["overrides"], **setting["options"])
    assert {r["length"]: r["shuffled_feedback_accuracy"] for r in again.lengths.rows if r["row"] == "rlt1"} == scored
    assert "owed:" not in engine.status("rlt", out, runs, **options)


# --- DRT: the other negative generator, added after some graph runs had finished ---------------------------------
class DrtGraphRun:
    """One toy DRT graph run, finished and committed, its row then changed as `lost` says and its folder deleted."""

    def __init__(self, tmp_path, **lost):
        setting = study_drivers.toy("drt", tmp_path)
        self.out, self.runs, self.setting = tmp_path / "results", tmp_path / "runs", setting
        self.options = dict(select=setting["select"], overrides=setting["overrides"], **setting["options"])
        engine.run_study("drt", self.out, self.runs, progress=False, log=lambda m: None, **self.options)
        study = self.build()
        [self.row] = study.results.rows
        self.key = {k: self.row[k] for k in study.results.key}
        study.results.add({**self.row, **lost})
        shutil.rmtree(study.folder(self.key))

    def build(self):
        return engine.build("drt", self.out, self.runs, overrides=self.setting["overrides"], **self.setting["options"])

    def retrain(self, log, **options) -> list[dict]:
        return retrain.retrain_study("drt", self.out, self.runs, progress=False, log=log.append, **options,
                                     **self.options)

    def status(self) -> str:
        return engine.status("drt", self.out, self.runs, **self.options)


UNSCORED_CROSS = {"cross_id_accuracy": "", "cross_ood_accuracy": ""}  # as a run from before that score


def test_drt_graph_runs_owe_the_cross_generator_score_and_a_reproducing_retrain_fills_it(tmp_path):
    """Two committed graph runs lack the cross-generator cells and their folders are gone; DRT could not check a
    retrain (no `reproduces`), so nothing could ever fill them. A retrain reproduces the row's OOD accuracy."""
    run = DrtGraphRun(tmp_path, **UNSCORED_CROSS)
    scored = {k: run.row[k] for k in UNSCORED_CROSS}
    assert all(scored.values()), scored
    assert "owed: 1 run needs --retrain-owed" in run.status()
    log: list[str] = []
    assert len(run.retrain(log)) == 1
    assert any(" reproduces its row (OOD accuracy " in m for m in log), log
    again = run.build().results.find(**run.key)
    assert {k: again[k] for k in scored} == scored
    assert "owed:" not in run.status()


def test_a_drt_retrain_that_replaces_its_row_scores_its_test_grid_once(tmp_path, monkeypatch):
    """`reproduces` and then `evaluate` each scored the whole test grid of a replacing retrain: minutes twice on a
    CPU for the same numbers."""
    from looped.experiments import drt_study

    run = DrtGraphRun(tmp_path, ood_accuracy="0.1234", **UNSCORED_CROSS)
    calls = []
    counted = drt_study.score_grid
    monkeypatch.setattr(drt_study, "score_grid", lambda *a, **k: calls.append(1) or counted(*a, **k))
    log: list[str] = []
    assert len(run.retrain(log, replace_differing=True)) == 1
    assert any(" replaces its row: OOD accuracy " in m for m in log), log
    assert len(calls) == 1
    again = run.build().results.find(**run.key)
    assert again["ood_accuracy"] == run.row["ood_accuracy"] and again["cross_id_accuracy"]


def test_a_retrain_stopped_by_a_signal_stops_the_call_and_stays_resumable(toy, monkeypatch):
    """SIGTERM / Ctrl-C during a retrain checkpoints it: recording that as "training failed" made the folder
    final (never resumed, never scored) and the call went on to the next run."""
    from looped.train.trainer import TrainingInterrupted

    def stopped(*args, **kwargs):
        raise TrainingInterrupted("stopped by SIGTERM at update 1/2, checkpoint saved")

    monkeypatch.setattr(engine, "train_run", stopped)
    with pytest.raises(TrainingInterrupted):
        toy.retrain()
    assert engine.retrain_verdict(toy.study.folder(toy.key)).startswith(engine.RETRAINING)
    assert retrain.retrains_table(toy.build()).rows == []
    monkeypatch.undo()
    assert toy.retrain() == [toy.key] and toy.rows_of(toy.key) == toy.scored
