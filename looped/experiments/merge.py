"""`looped reproduce NAME --merge-from FOLDER`: take into this results folder the runs another results folder of
the same study finished (another machine, another checkout, a git worktree pinned at an older commit).

A run is taken whole: its rows in every per-run table of the study (keyed by the run's key and more: DRT's gates,
CLW's rounds ...), its files (`Study.run_files`: DRT's test grids), its retrains.csv record, and last its
results.csv row (a row there marks a run done, so a merge killed half-way leaves the run to be taken again). It
replaces whatever this folder holds for the run. A run is taken when

- this folder lacks it, or holds it only as failed and the other folder finished it;
- the other folder retrained it (`--retrain-owed`: a retrains.csv record, for a score filled in or a row
  replaced) and this folder has no other retrain of it; also when the retrain reproduced the row, so the
  results.csv rows are the same in both and only the scores it owed differ.

A run both folders hold, with different rows and no such record, is a conflict: it is named and left as it is
here (which one is right is not the merge's to guess). Study-wide tables (DRT's shortcut baselines) gain the
rows this folder lacks. The rows taken must come from the --set settings of this folder's rows (one table
averages one recipe). The report is rewritten after a merge that took anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..io import atomic_path
from . import study as engine
from .report import finished
from .results import OVERRIDES, ResultTable, matches, run_label
from .retrain import retrains_table


@dataclass
class Merge:
    """What a merge did: the runs taken (new here, or retrained there), already the same here, in conflict."""

    source: Path
    new: list[dict] = field(default_factory=list)
    retrained: list[dict] = field(default_factory=list)
    same: int = 0
    conflicts: list[dict] = field(default_factory=list)
    study_wide_rows: int = 0

    @property
    def taken(self) -> list[dict]:
        return [*self.new, *self.retrained]

    def summary(self) -> str:
        conflicts = (f"; {len(self.conflicts)} finished differently in both, kept as they are here: "
                     + ", ".join(run_label(key) for key in self.conflicts)) if self.conflicts else ""
        wide = f"; {self.study_wide_rows} study-wide row(s) added" if self.study_wide_rows else ""
        return (f"merged {self.source}: {len(self.new)} new run(s), {len(self.retrained)} retrained there, "
                f"{self.same} already here{wide}{conflicts}")


def merge_study(spec: engine.StudySpec | str, out: Path, runs: Path, source: Path, *, scale: str = "cpu",
                log=print, **options) -> Merge:
    """Take the runs finished in results folder `source` into `out` (both of study `spec` at `scale`); ValueError
    for a folder that holds no results of the study, the same folder, or rows of other --set settings."""
    spec = engine.get_study(spec) if isinstance(spec, str) else spec
    source = Path(source)
    if not (source / "results.csv").is_file():
        raise ValueError(f"--merge-from {source}: no results.csv there (give a results folder of study {spec.name}, "
                         f"e.g. another checkout's results/{spec.folder_name(scale, {})})")
    if source.resolve() == Path(out).resolve():
        raise ValueError(f"--merge-from {source}: that is this study's own results folder")
    here = engine.build(spec, out, runs, scale=scale, **options)
    there = engine.build(spec, source, runs, scale=scale, **options)
    merge = Merge(source)
    retrained = retrains_table(here), retrains_table(there)  # read once: one record per run key
    chosen = []
    for row in there.results.rows:
        key = {k: row[k] for k in here.results.key}
        verdict = _verdict(here.results.find(**key), row, *(table.find(**key) for table in retrained))
        if verdict == "same":
            merge.same += 1
        elif verdict == "conflict":
            merge.conflicts.append(key)
        else:
            chosen.append((key, verdict))
    _check_settings(here, there, [key for key, _ in chosen], source)  # before anything is written
    for key, verdict in chosen:
        take_run(here, there, key, source, retrained)
        (merge.new if verdict == "new" else merge.retrained).append(key)
        log(f"took {run_label(key)} ({verdict})")
    merge.study_wide_rows = _add_study_wide_rows(here, there)
    if merge.taken or merge.study_wide_rows:
        engine.write_report(spec, here, scale)
    log(merge.summary())
    return merge


def _check_settings(here: engine.Study, there: engine.Study, keys: list[dict], source: Path) -> None:
    """ValueError when a run to take was trained with other --set settings than this folder's runs (one table
    averages one recipe), or when the runs to take disagree among themselves."""
    settings = {row.get(OVERRIDES) or "" for row in here.results.rows}
    for key in keys:
        theirs = there.results.find(**key).get(OVERRIDES) or ""
        if settings and theirs not in settings:
            ours = next(iter(settings))
            raise ValueError(f"--merge-from {source}: {run_label(key)} was trained with "
                             f"{theirs or 'the recipe as it is'} (--set), the runs here with "
                             f"{ours or 'the recipe as it is'}; one table cannot average both: nothing merged")
        settings.add(theirs)


def _verdict(mine: dict | None, row: dict, ours: dict | None, theirs: dict | None) -> str:
    """'same', 'new', 'retrained' (both taken) or 'conflict' for a run: its results.csv row here (`mine`) and in
    the other folder (`row`), its retrains.csv record here (`ours`) and there (`theirs`)."""
    if mine is not None and _same(mine, row):
        # a retrain there that reproduced its row leaves the row as it was but adds the scores it owed (CLW's
        # by-position and early-exit tables): the record says so; once taken, the records are the same here
        return "retrained" if theirs is not None and ours is None else "same"
    if mine is None or (not finished([mine]) and finished([row])):
        return "new"
    # ours == theirs: a merge that copied the record and was stopped before the row
    if theirs is not None and (ours is None or _same(ours, theirs)):
        return "retrained"
    return "conflict"


def take_run(here: engine.Study, there: engine.Study, key: dict, source: Path,
             retrained: tuple[ResultTable, ResultTable]) -> None:
    """Copy the run of `key` from `there` into `here`: per-run tables, files, retrains.csv (`retrained`: here's
    and there's), results.csv last."""
    theirs = run_tables(there)
    for name, table in run_tables(here).items():
        table.replace_run(key, [r for r in theirs[name].rows if matches(r, key)])
    for relative in here.run_files(key):
        if (source / relative).is_file():
            with atomic_path(Path(here.out) / relative) as tmp:
                Path(tmp).write_bytes((source / relative).read_bytes())
    ours_record, their_record = (table.find(**key) for table in retrained)
    if their_record is not None and their_record != ours_record:
        retrained[0].replace_run(key, [their_record])
    here.results.replace_run(key, [there.results.find(**key)])


def tables(study: engine.Study) -> dict[str, ResultTable]:
    """Every table a study holds as an attribute, by attribute name (results, per-run and study-wide tables)."""
    return {name: value for name, value in vars(study).items() if isinstance(value, ResultTable)}


def run_tables(study: engine.Study) -> dict[str, ResultTable]:
    """The per-run tables besides results.csv: keyed by the run's key and more (several rows per run)."""
    key = study.results.key
    return {name: table for name, table in tables(study).items()
            if table is not study.results and table.key[:len(key)] == key and len(table.key) > len(key)}


def _add_study_wide_rows(here: engine.Study, there: engine.Study) -> int:
    """Rows of the study-wide tables (keyed otherwise than by run) that this folder lacks; how many were added."""
    per_run = run_tables(here)
    added = 0
    for name, table in tables(here).items():
        if table is here.results or name in per_run:  # taken run by run
            continue
        missing = [row for row in tables(there)[name].rows if not table.has(**{k: row[k] for k in table.key})]
        table.add_many(missing)
        added += len(missing)
    return added


def _same(a: dict, b: dict) -> bool:
    return all((a.get(c) or "") == (b.get(c) or "") for c in {*a, *b})


__all__ = ["Merge", "merge_study", "run_tables", "take_run", "tables"]
