"""Shared drivers for every registered study (looped.experiments.study), like lm_drivers for architectures.

Each driver takes a study name (and pytest's tmp_path / monkeypatch / capsys where it needs them); test_studies.py
runs them over the registry, so a study added by registering (a plugin included) gets them all:

  - a toy run of the study trains, is killed half-way, resumes, and is never trained twice;
  - `--status` lists every planned run as to do, then as done;
  - the shipped recipes under configs/<name>/ are what the spec generates;
  - the committed report (table.md, claims.md) regenerates byte-identically from the committed CSVs;
  - merging the committed results folder into an empty one (`--merge-from`) rebuilds it: every table row, every
    run's files, the report; merging it again takes nothing.
"""

from __future__ import annotations

import copy
import csv
import shutil
from pathlib import Path

from looped.experiments import study as engine
from looped.train import Trainer

REPO = Path(__file__).resolve().parents[1]


def toy(name: str, tmp_path: Path) -> dict:
    spec = engine.get_study(name)
    assert spec.toy is not None, f"study {name} declares no toy setting for the shared drivers"
    # a dict, or a function that writes its toy data under tmp_path first; a fresh copy either way (callers edit it)
    return spec.toy(tmp_path) if callable(spec.toy) else copy.deepcopy(spec.toy)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_toy_run_resumes_and_never_trains_twice(name: str, tmp_path: Path, monkeypatch) -> None:
    setting = toy(name, tmp_path)
    out, runs = tmp_path / "results", tmp_path / "runs"
    spec = engine.get_study(name)
    study = engine.build(spec, out, runs, overrides=setting["overrides"], **setting["options"])
    plan = engine.plan_keys(spec, "cpu", setting["select"])
    assert plan, f"{name}: the toy selection plans no run"
    first = plan[0]
    # the first run is killed after one update: the study must resume it, not start it again
    Trainer(study.config(first), study.folder(first), progress=False, log=lambda m: None).run(stop_after=1)
    messages = []
    engine.run_study(name, out, runs, select=setting["select"], overrides=setting["overrides"], progress=False,
                     log=messages.append, **setting["options"])
    assert any(m.startswith(f"resumed {study.folder(first)} at update 1/") for m in messages), messages
    rows = _rows(out / "results.csv")
    keys = [{k: str(v) for k, v in key.items()} for key in plan]
    assert [{k: r[k] for k in keys[0]} for r in rows] == keys, "one row per planned run, in plan order"
    assert all(r["status"] == "ok" for r in rows), [r["status"] for r in rows]
    assert (out / "table.md").exists()
    before = {p.name: p.read_bytes() for p in out.glob("*.csv")}

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(engine, "Trainer", no_training)
    engine.run_study(name, out, runs, select=setting["select"], overrides=setting["overrides"], progress=False,
                     log=lambda m: None, **setting["options"])
    assert {p.name: p.read_bytes() for p in out.glob("*.csv")} == before, "a second call changed the results"


def check_status_lists_every_planned_run(name: str, tmp_path: Path, capsys) -> None:
    from looped.cli import main

    setting = toy(name, tmp_path)
    spec = engine.get_study(name)
    select = {axis.option: [str(v) for v in setting["select"][axis.name]] for axis in spec.axes
              if axis.name in setting["select"]}
    argv = ["reproduce", name, "--status", "--out", str(tmp_path / "results"), "--runs", str(tmp_path / "runs")]
    for option, values in select.items():
        argv += [f"--{option}", *values]
    assert main(argv) == 0
    text = capsys.readouterr().out
    planned = len(engine.plan_keys(spec, "cpu", setting["select"]))
    assert text.startswith(f"{name} cpu: 0 done, 0 failed, {planned} to do"), text
    assert text.count("\n  to do  ") == planned
    assert not (tmp_path / "runs").exists(), "--status trained something"


def check_shipped_recipes_are_generated(name: str, tmp_path: Path) -> None:
    written = engine.write_recipes(name, tmp_path)
    root = REPO / "configs" / name
    generated = {p.relative_to(tmp_path) for p in written}
    assert generated == {p.relative_to(root) for p in root.rglob("*.yaml")}, \
        f"configs/{name} is not what the spec writes: `looped reproduce {name} --write-recipes`"
    for path in generated:
        assert (root / path).read_text() == (tmp_path / path).read_text(), \
            f"configs/{name}/{path} is stale: `looped reproduce {name} --write-recipes`"


REPORT_FILES = ("table.md", "claims.md")


def check_committed_report_regenerates(name: str, tmp_path: Path) -> bool:
    """False when the study has no committed results here (the caller skips)."""
    spec = engine.get_study(name)
    committed = REPO / "results" / spec.folder_name("cpu", {flag.name: flag.default for flag in spec.flags})
    if not (committed / "results.csv").exists():
        return False
    copy = tmp_path / committed.name
    shutil.copytree(committed, copy, ignore=shutil.ignore_patterns("*.png", *REPORT_FILES))
    engine.write_report(spec, engine.build(name, copy, tmp_path / "runs"))
    for file in REPORT_FILES:
        if (committed / file).exists():
            assert (copy / file).read_text() == (committed / file).read_text(), \
                f"results/{committed.name}/{file} is stale: `looped reproduce {name} --report`"
    return True


def _cells(path: Path) -> list[str]:
    """A table's rows without their empty cells, sorted: a column older files lack reads as empty."""
    return sorted(str({k: v for k, v in row.items() if v}) for row in _rows(path))


def check_merge_into_an_empty_folder_rebuilds_the_committed_one(name: str, tmp_path: Path) -> bool:
    """False when the study has no committed results here (the caller skips)."""
    from looped.experiments import merge

    spec = engine.get_study(name)
    committed = REPO / "results" / spec.folder_name("cpu", {flag.name: flag.default for flag in spec.flags})
    if not (committed / "results.csv").exists():
        return False
    source = tmp_path / "source"
    shutil.copytree(committed, source, ignore=shutil.ignore_patterns("*.png", "archive"))
    out, runs = tmp_path / "merged", tmp_path / "runs"
    done = merge.merge_study(name, out, runs, source, log=lambda m: None)
    assert len(done.new) == len(_rows(committed / "results.csv")) and not done.conflicts
    study = engine.build(name, out, runs)
    for file in [*(t.path.name for t in merge.tables(study).values()), "retrains.csv"]:
        if (committed / file).exists():
            assert _cells(out / file) == _cells(committed / file), file
    for key in (dict((k, r[k]) for k in study.results.key) for r in study.results.rows):
        for file in study.run_files(key):
            assert (out / file).exists() == (committed / file).exists(), file
            assert not (committed / file).exists() or (out / file).read_bytes() == (committed / file).read_bytes()
    for file in REPORT_FILES:
        if (committed / file).exists():
            assert (out / file).read_text() == (committed / file).read_text(), file
    again = merge.merge_study(name, out, runs, source, log=lambda m: None)
    assert not again.taken and again.same == len(done.new)
    return True
