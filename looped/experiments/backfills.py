"""Backfills: scores a study added after some of its runs had finished, taken again from the run folders of the
finished runs that lack them, and the record of runs trained again because their folder was gone (a retrain is
scored only once it is shown to reproduce its committed row; looped/experiments/retrain.py trains them).

Split from study.py, which plans, claims and trains; a study declares its `backfills` and, to allow retrains,
`reproduces` (see study.Study)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..train import checkpoint as ckpt
from .report import finished
from .results import ResultTable, exclusive_lock, run_label

Study = Any  # a study.Study (the protocol lives with the engine, which imports this module)


@dataclass(frozen=True)
class Backfill:
    """A score a study added after some of its runs had finished (a results column, a CSV of its own), taken
    again from the run folders of the finished runs that lack it (see `backfill`)."""

    what: str  # for the log: "scoring <what>: <run>"
    table: ResultTable  # where the score lands
    score: Callable[[dict, Path], None]  # score(key, checkpoint): score the run and add its rows to `table`
    # owed(key): the finished run of `key` lacks the score in `table` (None: `table` has no row of the key)
    owed: Callable[[dict], bool] | None = None

    def owes(self, key: dict) -> bool:
        return self.owed(key) if self.owed is not None else not self.table.has(**key)


def claim_path(table: ResultTable, key: dict, what: str = "") -> Path:
    """The lock file a process holds while it trains (or, with `what`, backfills) the run of `key`."""
    parts = [what] if what else []
    name = re.sub(r"[^A-Za-z0-9_.=-]", "-", "_".join([*parts, *(f"{k}={v}" for k, v in key.items())]))
    return table.path.parent / ".claims" / f"{name}.lock"


def backfill(study: Study, log, keys: list[dict] | None = None) -> None:
    """Every Backfill of the study, for each finished run (of `keys`, default all) that lacks it and whose run
    folder holds a last checkpoint it may score (`backfill_checkpoint`; the others keep empty cells). Each is
    claimed like a training run, so two processes of one study never score the same run twice."""
    if keys is None:
        keys = [{name: row[name] for name in study.results.key} for row in finished(study.results.rows)]
    for fill in getattr(study, "backfills", ()):
        for key in keys:
            if not fill.owes(key) or (last := backfill_checkpoint(study.folder(key))) is None:
                continue
            with exclusive_lock(claim_path(fill.table, key, fill.what), wait=False) as mine:
                fill.table.reload()  # scored by another process meanwhile?
                if mine and fill.owes(key):
                    log(f"scoring {fill.what}: {run_label(key)}")
                    fill.score(key, last)


# A run folder trained again because its committed row's folder was gone holds RETRAINED: "retraining" until the
# retrained run is checked against the row, then "reproduces ..." or "does not reproduce: <both numbers>", or
# (`--retrain-owed --replace-differing`) "replaced its row: <both numbers>": the row is the retrain's since.
RETRAINED = "retrained.txt"
RETRAINING, REPRODUCES, DIFFERS, REPLACED = "retraining", "reproduces", "does not reproduce", "replaced its row"
SCORABLE = (REPRODUCES, REPLACED)  # a retrained folder whose checkpoints stand for its row


def retrain_verdict(folder: Path) -> str | None:
    """The first line of a run folder's RETRAINED file; None for a folder that was never retrained."""
    path = Path(folder) / RETRAINED
    return path.read_text().splitlines()[0] if path.exists() else None


def backfill_checkpoint(folder: Path) -> Path | None:
    """The last checkpoint a Backfill may score: None when there is none, and when the folder was retrained and
    neither reproduces its row nor replaced it (a retrain half-way, unchecked, or off the row's figure)."""
    verdict = retrain_verdict(folder)
    if verdict is not None and not verdict.startswith(SCORABLE):
        return None
    return ckpt.find_checkpoint(Path(folder) / "checkpoints" / "last")


def owed_retrains(study: Study, plan: list[dict]) -> list[dict]:
    """The runs of `plan` that finished (a row in results.csv), owe a Backfill, and have no checkpoint to score
    it from: their folder is gone (only the row was kept), or a retrain of it has not finished and been checked."""
    def owed(key: dict) -> bool:
        row = study.results.find(**key)
        if row is None or not finished([row]) or not any(fill.owes(key) for fill in getattr(study, "backfills", ())):
            return False
        folder = study.folder(key)
        verdict = retrain_verdict(folder)
        if verdict is None:
            return ckpt.find_checkpoint(folder / "checkpoints" / "last") is None
        return verdict.startswith(RETRAINING)

    return [key for key in plan if owed(key)]


def retrain_status(study: Study, plan: list[dict]) -> str:
    """--status's lines on retrains: how many runs owe one, how many retrained runs did not reproduce their row
    (nothing when there are none)."""
    owed = len(owed_retrains(study, plan))
    verdicts = [retrain_verdict(study.folder(key)) or "" for key in plan]
    differ, replaced = sum(v.startswith(DIFFERS) for v in verdicts), sum(v.startswith(REPLACED) for v in verdicts)
    if owed and getattr(study, "reproduces", None) is None:
        lines = [f"owed: {owed} run(s) owe a backfill and have no run folder, but this study cannot check a retrain "
                 "against its row (no `reproduces`), so --retrain-owed cannot fill them"]
    else:
        lines = [f"owed: {owed} run{'s need' if owed != 1 else ' needs'} --retrain-owed (finished, owe a backfill, "
                 "no run folder to take it from)"] if owed else []
    if differ:
        lines.append(f"not reproduced: {differ} retrained run(s) differ from their rows ({RETRAINED} in the run "
                     "folder says by how much; --replace-differing makes a retrain the row)")
    if replaced:
        lines.append(f"replaced: {replaced} row(s) are their retrain's (it differed from the old row; both figures in "
                     "retrains.csv)")
    return "".join(f"{line}\n" for line in lines)


__all__ = ["Backfill", "DIFFERS", "REPLACED", "REPRODUCES", "RETRAINED", "RETRAINING", "backfill", "backfill_checkpoint", "claim_path", "owed_retrains", "retrain_status", "retrain_verdict"]
