"""What a study's results stand on: an append-only CSV keyed by run (`ResultTable`), file locks, the machine a
row ran on, and the --set overrides every row records (the engine that plans and trains is looped.experiments.study).

Several `looped reproduce` processes may work on one study at once (two GPUs, two terminals): each run is
claimed with an exclusive lock before it starts, so no two processes train the same run, and every CSV
update re-reads the file under a lock, so no process drops rows another one wrote.
"""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: one process per study (no locking)
    fcntl = None

from ..io import atomic_write_text


OVERRIDES = "overrides"  # the column recording a run's --set keys ("" = the recipe as it is)


class ResultTable:
    """Rows of a CSV identified by `key` columns; adding a row replaces one with the same key.

    `extra` columns come after `columns` and are written only once a row has a value in one (or the file already
    has them): a table of recipe runs stays byte-for-byte what older versions wrote and read, and older files
    load (their rows read the extra columns as ""). `stamp` holds values every added row gets (the runner puts
    the study's overrides there)."""

    def __init__(self, path: Path, columns: list[str], key: list[str], extra: tuple[str, ...] = ()):
        self.path, self.columns, self.key, self.extra = Path(path), columns, key, tuple(extra)
        self.rows: list[dict] = []
        self.stamp: dict = {}
        self.execution = ""  # how the next rows ran beyond `machine()` ("compiled"); the runner sets it per run
        self._header: list[str] = []
        self.reload()

    def reload(self) -> None:
        """Read the rows from disk again (other processes may have added some)."""
        if self.path.exists():
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self.rows = [{**dict.fromkeys(self.extra, ""), **row} for row in reader]
                self._header = list(reader.fieldnames or [])

    def fieldnames(self) -> list[str]:
        used = [c for c in self.extra if c in self._header or any(row.get(c) for row in self.rows)]
        return [*self.columns, *used]

    def find(self, **key) -> dict | None:
        """The first row whose columns match `key` (compared as text), or None."""
        return next((row for row in self.rows if matches(row, key)), None)

    def has(self, **key) -> bool:
        return self.find(**key) is not None

    def add(self, row: dict) -> None:
        self.add_many([row])

    def add_many(self, rows: list[dict]) -> None:
        """Add rows (each replacing any row with its key) in one locked read-modify-write of the file; no rows, no
        write. A table with a `machine` column records what each new row ran on (rows written before it existed
        keep "")."""
        if not rows:
            return
        if "machine" in self.columns:
            ran_on = machine() + (f"; {self.execution}" if self.execution else "")
            rows = [{"machine": ran_on, **row} for row in rows]
        keys = {tuple(str(row[k]) for k in self.key) for row in rows}
        with exclusive_lock(self.lock_path):
            self.reload()
            self.rows = [r for r in self.rows if tuple(str(r[k]) for k in self.key) not in keys]
            self.rows += [self._as_text({**self.stamp, **row}) for row in rows]
            self.save()

    def replace_run(self, key: dict, rows: list[dict]) -> None:
        """Drop every row of the run of `key` (a per-run table holds several) and add `rows` as they are (their
        own machine cell, no stamp), in one locked read-modify-write: a run copied from another results folder."""
        with exclusive_lock(self.lock_path):
            self.reload()
            self.rows = [r for r in self.rows if not matches(r, key)] + [self._as_text(row) for row in rows]
            self.save()

    @property
    def lock_path(self) -> Path:
        return self.path.parent / f".{self.path.name}.lock"

    def _as_text(self, row: dict) -> dict:
        # stored as text, exactly as a reload gives it back: a table never mixes 918524 and "918524"
        return {c: "" if row.get(c) is None else str(row[c]) for c in [*self.columns, *self.extra]}

    def save(self) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.fieldnames(), lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(self.path, buffer.getvalue())


def matches(row: dict, key: dict) -> bool:
    """The row's columns equal `key`'s values, compared as text (a row read back holds text only)."""
    return all(str(row.get(k)) == str(v) for k, v in key.items())


def study_results(out: Path, columns: list[str], key: list[str]) -> ResultTable:
    """A study's <out>/results.csv: one row per run (it marks the run done or failed), keyed by the study's axes,
    with the --set overrides column the engine stamps on every row."""
    return ResultTable(Path(out) / "results.csv", columns, key, extra=(OVERRIDES,))


def machine() -> str:
    """What a result row ran on, e.g. "Intel(R) Xeon(R) Processor; 1 thread; torch 2.13.0+cpu": a rerun on
    another machine may differ by a point or two (different kernels and reduction orders)."""
    import platform

    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else _cpu_model() or platform.machine()
    threads = torch.get_num_threads()
    return f"{device}; {threads} thread{'s' if threads != 1 else ''}; torch {torch.__version__}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


@contextlib.contextmanager
def exclusive_lock(path: Path, *, wait: bool = True):
    """flock on `path` (created if missing); yields True when held, False when `wait` is off and another
    process holds it. Released when the block ends or the process dies."""
    if fcntl is None:
        yield True
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_names(option: str, given, known, aliases: dict[str, str] | None = None) -> tuple[str, ...] | None:
    """`given` with aliases replaced (e.g. drt --tasks boolean -> logic); ValueError naming the first unknown
    name. None stays None (the caller's default)."""
    if not given:
        return None
    aliases = aliases or {}
    names = tuple(aliases.get(name, name) for name in given)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"{option}: unknown name {unknown[0]!r} (known: {', '.join(known)})")
    return names


def repository_root() -> Path | None:
    """The checkout this package runs from (an editable install), where results/ lives; None otherwise."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "results").is_dir() else None


RUNS_HELP = "run folders (default runs/<results folder name> of the repository; OUT/runs for an --out elsewhere)"


def study_folders(out: str | None, runs: str | None, default_name: str, log=None) -> tuple[Path, Path]:
    """(results folder, run folders) of a study: --out / --runs as given, else results/<name> and
    runs/<name> of the repository (not of the current directory); says which folders it uses.

    Run folders without --runs stay beside their results: runs/<name> of the repository for a results folder
    anywhere under the repository's results/, else OUT/runs (a study put in /tmp/mine keeps its checkpoints
    there too, not in a checkout it was merely started from)."""
    import sys

    base = repository_root() or Path.cwd()
    results = Path(out) if out else base / "results" / default_name
    if runs:
        run_root = Path(runs)
    elif results.resolve().is_relative_to((base / "results").resolve()):
        run_root = base / "runs" / results.name
    else:
        run_root = results / "runs"
    (log or (lambda m: print(m, file=sys.stderr)))(f"looped: results in {results}, run folders in {run_root}")
    return results, run_root


def run_label(key: dict) -> str:
    """How logs and --status name a run: its key values joined by ' / '."""
    return " / ".join(str(v) for v in key.values())


# --set keys that change how a run is executed or logged, not what it computes: left out of a row's overrides.
# train.compile is one (compiled ≡ eager loss and gradients within 1e-5, `pytest -m compile`); a compiled run's
# machine cell says "compiled", since its wall time is not an eager run's.
NEUTRAL_KEYS = frozenset(f"train.{k}" for k in ("threads", "device", "log_every", "tensorboard", "wandb",
                                                 "eval_batch_size", "checkpoint_every", "parallel", "compile"))


def overrides_text(overrides: dict | None, prefix: str = "") -> str:
    """--set keys as one canonical cell, e.g. "optim.lr=0.01; train.max_steps=3" ("" for none; NEUTRAL_KEYS
    left out)."""
    items = []
    for key, value in sorted((overrides or {}).items()):
        name = f"{prefix}{key}"
        if name in NEUTRAL_KEYS:
            continue
        items.append(overrides_text(value, f"{name}.") if isinstance(value, dict) else f"{name}={value}")
    return "; ".join(item for item in items if item)


def check_same_settings(results: ResultTable, overrides: str) -> None:
    """A study table averages its rows over seeds under a header that states the recipe's budget, so every row
    must come from the same settings: refuse a call whose --set differs from the rows already there (rows of
    older versions, without the column, count as the recipe)."""
    for row in results.rows:
        theirs = row.get(OVERRIDES) or ""
        if theirs != overrides:
            raise ValueError(f"{results.path}: its runs were trained with {theirs or 'the recipe as it is'} "
                             f"(--set), this call with {overrides or 'the recipe as it is'}; one table cannot "
                             f"average both: use another --out (and --runs)")


def overrides_note(rows: list[dict]) -> list[str]:
    """Report lines saying the table's runs are not the recipe (their --set keys), or nothing."""
    used = sorted({row.get(OVERRIDES) or "" for row in rows} - {""})
    return [f"**Not the recipe**: these runs were trained with --set {'; '.join(used)} (the budgets and "
            f"settings stated here are the recipe's).", ""] if used else []
