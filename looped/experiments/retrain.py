"""`looped reproduce NAME --retrain-owed`: train again the finished runs whose folders are gone, so the scores a
study added later (its `Backfill`s) can be taken from them, but only once each retrain is shown to reproduce its
committed row.

A finished run is a row of results.csv; its run folder may not outlive the session that trained it. When a
Backfill is added later, such a run can only be scored by training it again with the same config into its run
folder (the recipes are seeded and run on one thread). The retrain is resumable like any run and claimed like
one. Before any Backfill uses it, the study's `reproduces(key, run)` compares its headline figure with the
row's; a run that does not reproduce is logged with both numbers and never backfilled (its cells stay empty).
The verdict is kept in the run folder (study.RETRAINED), so a later call neither scores a half-trained or
unchecked retrain nor retrains a refused one. Each retrain's figure beside its row's goes to retrains.csv in the
study's results folder (committed with the rows: the run folders are not), also for a folder retrained before
that record existed.

results.csv is not written, except with `replace_differing` (`--replace-differing`): a retrain that does not
reproduce its row then *becomes* the row. It is a whole run of the row's recipe and seed, trained by today's
code (a row trained by older code may no longer be reproducible bit for bit: a changed kernel, a changed random
stream), so its row and every score are taken from it, as for a run trained now, and the old figure stays in
retrains.csv beside the new one (verdict "replaced its row"). A folder retrained earlier and refused is
replaced the same way without training again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..io import atomic_write_text
from ..train import TrainingError
from ..train.trainer import TrainingInterrupted
from . import study as engine
from .results import OVERRIDES, ResultTable, check_same_settings, exclusive_lock, overrides_text, run_label

RETRAINS = "retrains.csv"
TRAINING_FAILED = "training failed"


@dataclass(frozen=True)
class Reproduction:
    """A retrained run's headline figure beside its committed row's: it reproduces the row when the two lie within
    `tolerance` (absolute; the study's bound, e.g. clw_study.REPRODUCE_TOLERANCE)."""

    figure: str  # what was compared, e.g. "held-out bits/byte"
    committed: float  # the results.csv row's
    retrained: float
    tolerance: float

    @property
    def reason(self) -> str | None:
        """None when the retrain reproduces its row, else the one-line reason with both numbers."""
        if abs(self.retrained - self.committed) <= self.tolerance:
            return None
        return (f"{self.figure} {self.retrained:.6f} retrained vs {self.committed:.6f} in results.csv "
                f"(tolerance {self.tolerance:g})")


def retrains_table(study: engine.Study) -> ResultTable:
    """retrains.csv of the study: per retrained run (the study's key), the figure compared, both values, the
    tolerance and the verdict."""
    key = study.results.key
    # no machine column: a folder retrained before the record existed is recorded by another process than trained it
    columns = [*key, "figure", "committed", "retrained", "difference", "tolerance", "verdict"]
    return ResultTable(Path(study.out) / RETRAINS, columns, key)


def record(study: engine.Study, key: dict, check: Reproduction | None, verdict: str) -> None:
    """One retrains.csv row (`check` None: the retrain failed to train, nothing was compared)."""
    numbers = {} if check is None else {
        "figure": check.figure, "committed": f"{check.committed:.6f}", "retrained": f"{check.retrained:.6f}",
        "difference": f"{check.retrained - check.committed:+.6f}", "tolerance": f"{check.tolerance:g}"}
    retrains_table(study).add({**key, **numbers, "verdict": verdict})


def retrains_note(study: engine.Study, name: str) -> list[str]:
    """The report's account of `looped reproduce <name> --retrain-owed` (a blank line, then a paragraph; nothing
    when retrains.csv is empty): how many runs were trained again for the scores their folders owed (the study's
    Backfills), how many reproduced their row and were scored, how many replaced it, the largest difference of
    each."""
    command = f"looped reproduce {name} --scale {study.scale} --retrain-owed"
    retrains = retrains_table(study).rows
    if not retrains:
        return []

    def counted(verdict: str) -> tuple[int, float | None]:
        rows = [r for r in retrains if r["verdict"] == verdict]
        return len(rows), max((abs(float(r["difference"])) for r in rows), default=None)

    (held, held_largest), (replaced, replaced_largest) = counted(engine.REPRODUCES), counted(engine.REPLACED)
    compared = next((f"{r['figure']} within {r['tolerance']}" for r in retrains if r.get("figure")), "figure")
    owed = ", ".join(fill.what for fill in study.backfills)
    reproducing = f" (largest difference {held_largest:.6f})" if held_largest is not None else ""
    replacing = (f", {replaced} replacing their row (trained by today's code, `--replace-differing`; differing by up "
                 f"to {replaced_largest:.6f}, the old figure kept)") if replaced else ""
    others = len(retrains) - held - replaced
    return ["", f"Trained again because the run folder was gone and a later score ({owed}) was owed (`{command}`): "
                f"{len(retrains)} run(s), {held} reproducing their row's {compared}{reproducing} and scored from "
                f"the retrain{replacing}" + (f", {others} not scored" if others else "") + "; each pair in "
                "retrains.csv."]


def retrain_study(spec: engine.StudySpec | str, out: Path, runs: Path, *, scale: str = "cpu",
                  select: Mapping | None = None, only: Sequence[dict] = (), overrides: dict | None = None,
                  progress: bool = True, stop_after: float | None = None, finish_within: float | None = None,
                  replace_differing: bool = False, log=print, **options) -> list[dict]:
    """Retrain, check and backfill the owed runs of a study's plan, then rewrite its report; the keys retrained
    (or replaced). Refused (ValueError) when --set differs from the settings the rows were trained with: a
    retrain must run the row's own config."""
    spec = engine.get_study(spec) if isinstance(spec, str) else spec
    study = engine.build(spec, out, runs, scale=scale, overrides=overrides, **options)
    check_same_settings(study.results, overrides_text(overrides))
    plan = engine.runnable(study, engine.plan_keys(spec, scale, select, only), log, named=bool(only))
    done = retrain_owed(study, plan, progress=progress, stop_after=stop_after, finish_within=finish_within,
                        replace_differing=replace_differing, log=log)
    engine.write_report(spec, study, scale)
    return done


def retrain_owed(study: engine.Study, plan: list[dict], *, progress: bool = True, stop_after: float | None = None,
                 finish_within: float | None = None, replace_differing: bool = False, log=print) -> list[dict]:
    """Each owed run of `plan` (engine.owed_retrains) in plan order, claimed so two processes never retrain the
    same run, as far as the booking allows (engine.Booking: --stop-after, --finish-within). With
    `replace_differing`, also the runs retrained earlier that did not reproduce their row (they replace it). The
    keys retrained."""
    def wanted(key: dict) -> bool:  # asked again under the claim: another process may have done it meanwhile
        return bool(engine.owed_retrains(study, [key])) or (replace_differing and refused(study.folder(key)))

    owed = [key for key in plan if wanted(key)]
    if owed and getattr(study, "reproduces", None) is None:
        log(f"{len(owed)} run(s) owe a backfill, but this study cannot check a retrained run against its row "
            "(no `reproduces`): nothing retrained")
        return []
    record_earlier_retrains(study, plan, log)
    booking, done = engine.Booking(stop_after, finish_within), []
    for i, key in enumerate(owed):
        if (reason := booking.closed()) is not None:
            log(f"stopping: {reason}, {len(owed) - i} owed run(s) left to retrain")
            break
        if (reason := booking.overruns(study.results, key)) is not None:
            log(f"skipping the retrain of {run_label(key)}: {reason}")
            continue
        with exclusive_lock(engine.claim_path(study.results, key, "retrain"), wait=False) as mine:
            if not mine:
                log(f"skipping {run_label(key)}: another process is retraining it")
            elif wanted(key):
                retrain_one(study, key, progress, log, replace_differing)
                done.append(key)
    return done


def refused(folder: Path) -> bool:
    """The folder holds a finished retrain that did not reproduce its row (one that failed to train does not
    count: there is nothing to put in the row)."""
    verdict = engine.retrain_verdict(folder) or ""
    return verdict.startswith(engine.DIFFERS) and not verdict.startswith(f"{engine.DIFFERS}: {TRAINING_FAILED}")


def retrain_one(study: engine.Study, key: dict, progress: bool, log, replace_differing: bool = False) -> None:
    """Train (or resume) the run of `key` into its folder, check it against its row, then backfill it if it
    reproduces, or (`replace_differing`) score it as the row if it does not. The folder's verdict file is written
    before training (a kill leaves "retraining": resumed next time, never scored) and replaced by the check's
    verdict."""
    folder = study.folder(key)
    if refused(folder):
        log(f"== replacing the row of {run_label(key)} by its earlier retrain, which differs from it")
    else:
        log(f"== retraining {run_label(key)}: finished, owes a backfill, its run folder is gone")
    verdict = folder / engine.RETRAINED
    if engine.retrain_verdict(folder) is None:
        atomic_write_text(verdict, f"{engine.RETRAINING}: its results.csv row is the reference; not checked yet\n")
    config = study.config(key)
    try:
        run = engine.train_run(config, folder, progress, log)
    except TrainingInterrupted:  # Ctrl-C / SIGTERM: checkpointed, still "retraining"; the call stops here
        raise
    except TrainingError as err:  # no failed row: the committed row stands; the retrain is what failed
        check, reason = None, f"{TRAINING_FAILED}: {str(err).splitlines()[0]}"
    else:
        check = study.reproduces(key, run)
        reason = check.reason
    if reason is not None and check is not None and replace_differing:
        replace_row(study, key, config, run, check, log)
        return
    if reason is not None:
        atomic_write_text(verdict, f"{engine.DIFFERS}: {reason}\n")
        record(study, key, check, TRAINING_FAILED if check is None else engine.DIFFERS)
        log(f"retrained {run_label(key)} does not reproduce its row, not backfilled: {reason}")
        return
    atomic_write_text(verdict, f"{engine.REPRODUCES} its results.csv row ({check.figure} {check.retrained:.6f}, "
                               f"row {check.committed:.6f})\n")
    log(f"retrained {run_label(key)} reproduces its row ({check.figure} {check.retrained:.6f} vs "
        f"{check.committed:.6f})")
    engine.backfill(study, log, [key])
    # recorded last: --merge-from takes a retrained run for its record, so a record before the scores let a merge
    # take the run half-scored and call it "already here" ever after (CLW early exit rows were lost that way)
    record(study, key, check, engine.REPRODUCES)


def replace_row(study: engine.Study, key: dict, config, run: engine.RunSummary, check: Reproduction, log) -> None:
    """Make the retrained run of `key` its row: scored as a run trained now (its results.csv row and every score,
    each replacing the old run's), the old figure beside the new in retrains.csv, then any score still owed."""
    study.results.execution = engine.execution(config)
    # the row keeps its --set settings (the retrain ran the row's own config: retrain_study checked they agree)
    study.results.stamp = {OVERRIDES: study.results.find(**key).get(OVERRIDES, "")}
    engine.score_run(study, key, config, run, log)
    atomic_write_text(study.folder(key) / engine.RETRAINED, f"{engine.REPLACED}: {check.reason}\n")
    log(f"retrained {run_label(key)} replaces its row: {check.reason}")
    engine.backfill(study, log, [key])
    record(study, key, check, engine.REPLACED)  # last, as for a run that reproduces (retrain_one)


def record_earlier_retrains(study: engine.Study, plan: list[dict], log) -> None:
    """Check again, and record, the finished retrains of `plan` that retrains.csv lacks (retrained before the
    record existed; their folder's verdict stands: a figure that now differs is logged, not acted on)."""
    if getattr(study, "reproduces", None) is None:
        return
    table = retrains_table(study)
    for key in plan:
        folder = study.folder(key)
        verdict = engine.retrain_verdict(folder)
        if verdict is None or verdict.startswith(engine.RETRAINING) or table.has(**key) or \
                verdict.startswith(f"{engine.DIFFERS}: {TRAINING_FAILED}"):
            continue
        check = study.reproduces(key, engine.RunSummary.read(folder))
        record(study, key, check, engine.REPRODUCES if verdict.startswith(engine.REPRODUCES) else engine.DIFFERS)
        log(f"recorded the earlier retrain of {run_label(key)}: {check.figure} {check.retrained:.6f} vs "
            f"{check.committed:.6f} in results.csv")


__all__ = ["RETRAINS", "Reproduction", "retrain_owed", "retrain_one", "retrain_study", "retrains_note",
           "retrains_table"]
