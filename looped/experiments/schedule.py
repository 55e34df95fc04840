"""When a study's runs may start and how long they take: the machine's booking (--stop-after, --finish-within),
the runs still to do in plan order, and `--status` (each run to do with its expected minutes, from this CPU's own
finished seeds or other CPUs' scaled by its measured speed; a run whose setting has none, from the setting its
study says it is timed like)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ..train.run_folder import read_metrics
from .backfills import claim_path
from .report import cpu_of, finished
from .results import ResultTable, exclusive_lock, machine, run_label

# A study's `timed_like(key)`: for a run whose setting has no finished seed yet, (the key of a setting it takes
# about as long as, times this factor), e.g. a variant of a recipe trained 1.5x longer; None: no such setting.
TimedLike = Callable[[dict], "tuple[dict, float] | None"]


class Booking:
    """When a study may start its next run, for a machine booked for a while: none once `stop_after` minutes have
    passed (the run in progress finishes); with `finish_within`, only a run expected (`expected_seconds`, as
    --status estimates it) to end within that many minutes of the start: a longer one is skipped, and a shorter
    one later in the plan may still start. A run with no estimate starts while time is left."""

    def __init__(self, stop_after: float | None = None, finish_within: float | None = None,
                 timed_like: TimedLike | None = None):
        self.stop_after, self.finish_within, self.timed_like = stop_after, finish_within, timed_like
        self.started = time.monotonic()
        self._factor: tuple[int, float] | None = None  # (rows it was measured on, speed_factor)

    def closed(self) -> str | None:
        """Why no run may start any more (None: runs may start)."""
        if self.stop_after is None and self.finish_within is None:
            return None
        elapsed = time.monotonic() - self.started
        for option, minutes in (("--stop-after", self.stop_after), ("--finish-within", self.finish_within)):
            if minutes is not None and elapsed >= 60 * minutes:  # >=: 0 starts nothing
                return f"{option} {minutes:g} minutes reached"
        return None

    def overruns(self, results: ResultTable, key: dict) -> str | None:
        """Why the run of `key` would end after --finish-within (None: it fits, or no limit or estimate)."""
        if self.finish_within is None:
            return None
        here = cpu_of(machine())
        if self._factor is None or self._factor[0] != len(results.rows):  # measured again once a run has landed
            self._factor = (len(results.rows), speed_factor(results, here))
        if (expected := expected_seconds(results, key, here, self._factor[1], self.timed_like)) is None:
            return None
        left = self.started + 60 * self.finish_within - time.monotonic()
        if expected <= left:
            return None
        return f"expected ~{expected / 60:.0f} min, {left / 60:.0f} left of --finish-within {self.finish_within:g}"


def pending_runs(plan, results: ResultTable, *, stop_after: float | None = None,
                 finish_within: float | None = None, timed_like: TimedLike | None = None, log=print):
    """The planned runs not yet in `results`, in plan order, as far as the machine's booking allows (`Booking`:
    --stop-after, --finish-within), so a study fits a booking without losing a run half-way. Each run is
    claimed (a lock held until the caller asks for the next one): a run another process has claimed is skipped,
    not trained twice."""
    booking = Booking(stop_after, finish_within, timed_like)
    for key in plan:
        if results.has(**key):
            continue
        if (reason := booking.closed()) is not None:
            results.reload()
            left = sum(not results.has(**k) for k in plan)
            log(f"stopping: {reason}, {left} run(s) left to do")
            return
        if (reason := booking.overruns(results, key)) is not None:
            log(f"skipping {run_label(key)}: {reason}")
            continue
        with exclusive_lock(claim_path(results, key), wait=False) as mine:
            if not mine:
                log(f"skipping {run_label(key)}: another process is running it")
                continue
            results.reload()  # finished by another process while this one worked on earlier runs?
            if results.has(**key):
                continue
            yield key


def status_report(results: ResultTable, plan: list[dict], title: str,
                  folder: Callable[[dict], Path] | None = None, timed_like: TimedLike | None = None) -> str:
    """What `looped reproduce ... --status` prints: every planned run as done, failed or to do, in the
    order the study would run them (a run to do with its expected minutes, `expected_seconds`), the counts, and
    the training time left. A run to do that another process has claimed is marked running, with the last
    update its folder (`folder(key)`) has logged."""
    lines, counts, expected, busy = [], {"done": 0, "failed": 0, "to do": 0}, [], 0
    here = cpu_of(machine())
    factor = speed_factor(results, here)
    for key in plan:
        match = results.find(**key)
        status = match.get("status", "ok") if match else ""
        state = "to do" if match is None else ("done" if status == "ok" else "failed")
        counts[state] += 1
        notes = [status] if state == "failed" else []
        if state == "to do" and running(results, key):
            busy += 1
            logged = last_update(folder(key)) if folder is not None else None
            notes.append("running now" + (f": update {logged} logged" if logged else ""))
        seconds, source = estimate(results, key, here, factor, timed_like) if state == "to do" else (None, "")
        if seconds is not None:
            expected.append(seconds)
            notes.append(f"~{seconds / 60:.0f} min{source}")
        lines.append(f"  {state:6s} {run_label(key)}" + (f"  ({'; '.join(notes)})" if notes else ""))
    head = (f"{title}: {counts['done']} done, {counts['failed']} failed, {counts['to do']} to do"
            + (f" ({busy} running now)" if busy else "") + f" ({results.path})")
    if expected:
        unknown = counts["to do"] - len(expected)
        lines.append(f"left: ~{sum(expected) / 3600:.1f} h of training and scoring, one run after another, at the "
                     "median wall time of the finished runs that differ only by seed"
                     + (f" (those that ran on another CPU x {factor:.2f}, this {here or 'machine'}'s measured speed "
                        "against theirs)" if factor != 1.0 else "")
                     + (f" ({unknown} run(s) have none: not counted)" if unknown else ""))
    return "\n".join([head, *lines]) + "\n"


def running(results: ResultTable, key: dict) -> bool:
    """Another process holds the run's claim: it is training or scoring it now (a claim never taken has no file,
    and --status creates none)."""
    path = claim_path(results, key)
    if not path.exists():
        return False
    with exclusive_lock(path, wait=False) as mine:
        return not mine


def last_update(folder: Path) -> int | None:
    """The last update a run folder's metrics.jsonl has logged (None: nothing logged yet)."""
    try:
        events = read_metrics(Path(folder) / "metrics.jsonl")
    except (OSError, ValueError):  # not started, or a file being written: no number rather than an error
        return None
    return next((int(e["step"]) for e in reversed(events) if "step" in e), None)


def expected_seconds(results: ResultTable, key: dict, here: str | None = None,
                     factor: float | None = None, timed_like: TimedLike | None = None) -> float | None:
    """The median training + scoring seconds of the finished rows of `key`'s setting with another seed (the rows'
    train_seconds and eval_seconds); None without such a row (or a key without a seed). Rows that ran on this
    machine's CPU (`here`, default this process's) count alone where there are any; rows from another CPU are
    scaled by `factor` (default `speed_factor`: a study moved to a slower machine took ~1.6x the minutes its old
    rows said). A setting without rows is timed like the one `timed_like(key)` names, times its factor (a recipe's
    one-seed ablation started unannounced at minute 140 of a 150-minute booking)."""
    return estimate(results, key, here, factor, timed_like)[0]


def estimate(results: ResultTable, key: dict, here: str | None = None, factor: float | None = None,
             timed_like: TimedLike | None = None) -> tuple[float | None, str]:
    """(expected_seconds, where they come from for --status: "" from the setting's own seeds, else ", timed as
    <setting> x F")."""
    if "seed" not in key:
        return None, ""
    own = _setting_seconds(results, key, here, factor)
    if own is not None or timed_like is None or (like := timed_like(key)) is None:
        return own, ""
    other, times = like
    seconds = _setting_seconds(results, {**other, "seed": key["seed"]}, here, factor)
    if seconds is None:
        return None, ""
    label = run_label({k: v for k, v in other.items() if k != "seed"})
    return seconds * times, f", timed as {label}" + (f" x {times:g}" if times != 1 else "")


def _setting_seconds(results: ResultTable, key: dict, here: str | None, factor: float | None) -> float | None:
    here = cpu_of(machine()) if here is None else here
    rows = [row for row in finished(results.rows, **{k: v for k, v in key.items() if k != "seed"})
            if run_seconds(row) is not None]
    local = [run_seconds(row) for row in rows if cpu_of(row.get("machine")) == here]
    if local:
        return statistics.median(local)
    elsewhere = [run_seconds(row) for row in rows]
    if not elsewhere:
        return None
    return statistics.median(elsewhere) * (speed_factor(results, here) if factor is None else factor)


def run_seconds(row: dict) -> float | None:
    """A finished row's training + scoring seconds; None where its training clock is missing (0: a row scored by a
    later process that did not know the training time) or a cell is not a number."""
    try:
        trained, scored = float(row.get("train_seconds") or 0), float(row.get("eval_seconds") or 0)
    except ValueError:  # a table without these columns, or a cell that is not a number
        return None
    return trained + scored if trained > 0 else None


def speed_factor(results: ResultTable, here: str) -> float:
    """How much longer a run takes on `here` than on the other machines the table's rows ran on: the median, over
    the finished rows that ran here, of each row's seconds over the median of its setting's rows from elsewhere
    (other seeds on another CPU, or rows that predate the machine column); 1 where no setting has both."""
    key_columns = [c for c in results.key if c != "seed"]
    ratios = []
    for row in finished(results.rows):
        mine = run_seconds(row)
        if cpu_of(row.get("machine")) != here or mine is None:
            continue
        setting = {c: row[c] for c in key_columns}
        theirs = [seconds for other in finished(results.rows, **setting)
                  if cpu_of(other.get("machine")) != here and (seconds := run_seconds(other)) is not None]
        if theirs:
            ratios.append(mine / statistics.median(theirs))
    return statistics.median(ratios) if ratios else 1.0


__all__ = ["Booking", "TimedLike", "cpu_of", "estimate", "expected_seconds", "last_update", "pending_runs",
           "run_seconds", "running", "speed_factor", "status_report"]
