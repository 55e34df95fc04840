"""`looped reproduce NAME --retrain-owed`: train again the finished runs whose folders are gone, so the scores a
study added later (its `Backfill`s) can be taken from them, but only once each retrain is shown to reproduce its
committed row.

A finished run is a row of results.csv; its run folder may not outlive the session that trained it. When a
Backfill is added later, such a run can only be scored by training it again with the same config into its run
folder (the recipes are seeded and run on one thread). The retrain is resumable like any run and claimed like
one. Before any Backfill uses it, the study's `reproduces(key, run)` compares its headline figure with the
row's; a run that does not reproduce is logged with both numbers and never backfilled (its cells stay empty).
The verdict is kept in the run folder (study.RETRAINED), so a later call neither scores a half-trained or
unchecked retrain nor retrains a refused one. results.csv is never written here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from ..io import atomic_write_text
from ..train import TrainingError
from . import study as engine
from .results import check_same_settings, exclusive_lock, overrides_text, run_label


def retrain_study(spec: engine.StudySpec | str, out: Path, runs: Path, *, scale: str = "cpu",
                  select: Mapping | None = None, overrides: dict | None = None, progress: bool = True,
                  stop_after: float | None = None, log=print, **options) -> list[dict]:
    """Retrain, check and backfill the owed runs of a study's plan, then rewrite its report; the keys retrained.
    Refused (ValueError) when --set differs from the settings the rows were trained with: a retrain must run the
    row's own config."""
    spec = engine.get_study(spec) if isinstance(spec, str) else spec
    study = engine.build(spec, out, runs, scale=scale, overrides=overrides, **options)
    check_same_settings(study.results, overrides_text(overrides))
    plan = engine.runnable(study, engine.plan_keys(spec, scale, select), log)
    done = retrain_owed(study, plan, progress=progress, stop_after=stop_after, log=log)
    engine.write_report(spec, study, scale)
    return done


def retrain_owed(study: engine.Study, plan: list[dict], *, progress: bool = True, stop_after: float | None = None,
                 log=print) -> list[dict]:
    """Each owed run of `plan` (engine.owed_retrains) in plan order, claimed so two processes never retrain the
    same run; no new retrain starts once `stop_after` minutes have passed (0: none starts). The keys retrained."""
    owed = engine.owed_retrains(study, plan)
    if owed and getattr(study, "reproduces", None) is None:
        log(f"{len(owed)} run(s) owe a backfill, but this study cannot check a retrained run against its row "
            "(no `reproduces`): nothing retrained")
        return []
    deadline = None if stop_after is None else time.monotonic() + 60 * stop_after
    done = []
    for i, key in enumerate(owed):
        if deadline is not None and time.monotonic() >= deadline:
            log(f"stopping: --stop-after {stop_after:g} minutes reached, {len(owed) - i} owed run(s) left to retrain")
            break
        with exclusive_lock(engine.claim_path(study.results, key, "retrain"), wait=False) as mine:
            if not mine:
                log(f"skipping {run_label(key)}: another process is retraining it")
            elif engine.owed_retrains(study, [key]):  # not retrained by another process meanwhile
                retrain_one(study, key, progress, log)
                done.append(key)
    return done


def retrain_one(study: engine.Study, key: dict, progress: bool, log) -> None:
    """Train (or resume) the run of `key` into its folder, check it against its row, then backfill it if it
    reproduces. The folder's verdict file is written before training (a kill leaves "retraining": resumed next
    time, never scored) and replaced by the check's verdict."""
    folder = study.folder(key)
    log(f"== retraining {run_label(key)}: finished, owes a backfill, its run folder is gone")
    verdict = folder / engine.RETRAINED
    if engine.retrain_verdict(folder) is None:
        atomic_write_text(verdict, f"{engine.RETRAINING}: its results.csv row is the reference; not checked yet\n")
    try:
        run = engine.train_run(study.config(key), folder, progress, log)
    except TrainingError as err:  # no failed row: the committed row stands; the retrain is what failed
        reason = f"training failed: {str(err).splitlines()[0]}"
    else:
        reason = study.reproduces(key, run)
    if reason is not None:
        atomic_write_text(verdict, f"{engine.DIFFERS}: {reason}\n")
        log(f"retrained {run_label(key)} does not reproduce its row, not backfilled: {reason}")
        return
    atomic_write_text(verdict, f"{engine.REPRODUCES} its results.csv row\n")
    log(f"retrained {run_label(key)} reproduces its row")
    engine.backfill(study, log, [key])


__all__ = ["retrain_owed", "retrain_one", "retrain_study"]
