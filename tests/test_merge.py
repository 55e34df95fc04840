"""`looped reproduce NAME --merge-from FOLDER` (looped.experiments.merge): which runs of another results folder are
taken, and what is left alone. On copies of the committed leaderboard folder (its report is written in a
second); every study's whole-folder merge is a shared driver (study_drivers, test_studies.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from looped.experiments import merge, retrain
from looped.experiments import study as engine
from looped.experiments.results import OVERRIDES, ResultTable

from study_drivers import REPO

COMMITTED = REPO / "results" / "board_cpu"
KEY = {"seed": "1", "task": "kjv", "family": "transformer"}


@pytest.fixture
def folders(tmp_path):
    """(here, there, runs): two copies of the committed leaderboard results, tables only."""
    if not (COMMITTED / "results.csv").exists():
        pytest.skip("no committed leaderboard results")
    here, there = tmp_path / "here", tmp_path / "there"
    for folder in (here, there):
        shutil.copytree(COMMITTED, folder, ignore=shutil.ignore_patterns("*.png", "*.md"))
    return here, there, tmp_path / "runs"


def results(folder) -> ResultTable:
    return engine.build("board", folder, folder / "runs").results


def change(folder, **cells) -> dict:
    table = results(folder)
    table.replace_run(KEY, [{**table.find(**KEY), **cells}])
    return table.find(**KEY)


def retrained(folder, figure: str) -> None:
    """A retrains.csv record of the run, as `--retrain-owed` writes it."""
    retrain.retrains_table(engine.build("board", folder, folder / "runs")).add(
        {**KEY, "figure": "score", "committed": "3.213567", "retrained": figure, "verdict": engine.REPLACED})


def merged(here, there, runs):
    return merge.merge_study("board", here, runs, there, log=lambda m: None)


def test_a_run_only_the_other_folder_has_is_taken_and_the_report_rewritten(folders):
    here, there, runs = folders
    theirs = results(there).find(**KEY)
    results(here).replace_run(KEY, [])
    done = merged(here, there, runs)
    assert done.new == [KEY] and done.same == len(results(there).rows) - 1
    assert results(here).find(**KEY) == theirs
    assert (here / "table.md").exists()


def test_a_run_finished_differently_in_both_is_a_conflict_left_as_it_is_here(folders):
    here, there, runs = folders
    change(there, score="9.999999")
    ours = results(here).find(**KEY)
    done = merged(here, there, runs)
    assert done.conflicts == [KEY] and not done.taken
    assert results(here).find(**KEY) == ours
    assert "kept as they are here: 1 / kjv / transformer" in done.summary()


def test_a_run_retrained_there_replaces_the_row_here_with_its_record(folders):
    here, there, runs = folders
    theirs = change(there, score="3.300000")
    retrained(there, "3.300000")
    done = merged(here, there, runs)
    assert done.retrained == [KEY] and not done.conflicts
    assert results(here).find(**KEY) == theirs
    assert retrain.retrains_table(engine.build("board", here, runs)).find(**KEY)["retrained"] == "3.300000"
    assert not merged(here, there, runs).taken  # the second time: already here


def test_a_retrain_there_that_reproduced_its_row_is_taken_for_the_scores_it_owed(folders):
    # a CLW retrain that reproduces its row adds only by-position / early-exit rows: the results.csv rows stay the
    # same, and the merge called the run "already here" and left the new scores behind
    here, there, runs = folders
    ours = results(here).find(**KEY)
    retrain.retrains_table(engine.build("board", there, runs)).add(
        {**KEY, "figure": "score", "committed": ours["score"], "retrained": ours["score"], "verdict": "reproduces"})
    done = merged(here, there, runs)
    assert done.retrained == [KEY] and not done.conflicts
    assert retrain.retrains_table(engine.build("board", here, runs)).find(**KEY)["verdict"] == "reproduces"
    assert results(here).find(**KEY) == ours
    assert not merged(here, there, runs).taken  # the second time: already here


def test_a_merge_stopped_after_the_record_before_the_row_takes_the_run_again(folders):
    here, there, runs = folders
    theirs = change(there, score="3.300000")
    retrained(there, "3.300000")
    retrained(here, "3.300000")  # the record came over, the row did not
    assert merged(here, there, runs).retrained == [KEY]
    assert results(here).find(**KEY) == theirs


def test_runs_retrained_in_both_folders_differently_are_a_conflict(folders):
    here, there, runs = folders
    change(there, score="3.300000")
    retrained(there, "3.300000")
    ours = change(here, score="3.100000")
    retrained(here, "3.100000")
    assert merged(here, there, runs).conflicts == [KEY]
    assert results(here).find(**KEY) == ours


def test_a_failed_run_here_gives_way_to_the_run_finished_there(folders):
    here, there, runs = folders
    theirs = results(there).find(**KEY)
    change(here, status="failed: out of memory", score="")
    assert merged(here, there, runs).new == [KEY]
    assert results(here).find(**KEY) == theirs


def test_rows_of_other_settings_are_refused_before_anything_is_written(folders):
    """Two runs to take: the first of the recipe, a later one trained with --set; neither is taken."""
    here, there, runs = folders
    later = results(there).rows[5]
    later_key = {k: later[k] for k in KEY}
    for key in (KEY, later_key):
        results(here).replace_run(key, [])
    results(there).replace_run(later_key, [{**later, OVERRIDES: "train.max_steps=3"}])
    before = (here / "results.csv").read_bytes()
    with pytest.raises(ValueError, match=" was trained with train.max_steps=3 .*the runs here with the recipe as it "
                                         "is; one table cannot average both: nothing merged"):
        merged(here, there, runs)
    assert (here / "results.csv").read_bytes() == before


def test_a_folder_without_results_and_the_folder_itself_are_refused_in_one_line(folders, tmp_path):
    here, _, runs = folders
    with pytest.raises(ValueError, match=r"--merge-from .*nothing: no results.csv there"):
        merge.merge_study("board", here, runs, tmp_path / "nothing")
    with pytest.raises(ValueError, match="that is this study's own results folder"):
        merge.merge_study("board", here, runs, here)


def test_the_command_merges_several_folders_and_says_what_it_took(folders, tmp_path):
    here, there, runs = folders
    other = tmp_path / "other"
    shutil.copytree(there, other)
    later = results(there).rows[5]
    later_key = {k: later[k] for k in KEY}
    for key in (KEY, later_key):
        results(here).replace_run(key, [])
    results(there).replace_run(later_key, [])  # only the second folder has it
    done = subprocess.run([sys.executable, "-m", "looped", "reproduce", "board", "--scale", "cpu", "--out",
                           str(here), "--runs", str(runs), "--merge-from", str(there), str(other)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "took 1 / kjv / transformer (new)" in done.stdout
    assert f"merged {there}: 1 new run(s), 0 retrained there, " in done.stdout
    assert f"merged {other}: 1 new run(s), 0 retrained there, " in done.stdout
    assert results(here).has(**later_key)
