"""What every command module of the CLI shares: the `--set` option, JSON results and looped's one-line errors."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # looped/: a warning whose frame is in here is looped's own


class OneLineParser(argparse.ArgumentParser):
    """argparse with looped's one-line errors: a bad option value or a missing argument prints
    `looped: error: looped eval: argument --batch-size: invalid int value: 'x' (see looped eval --help)` instead
    of the usage block (sub-command parsers inherit the class)."""

    def error(self, message: str):
        print(f"looped: error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def stop_after_minutes(text: str) -> float:
    """--stop-after's value: minutes >= 0; 0 starts no new run (a script with no time left rewrites the report
    only). A negative number or NaN is refused: NaN would never stop, a negative number would look like 0."""
    try:
        minutes = float(text)
    except ValueError:
        minutes = math.nan
    if not (minutes >= 0 and math.isfinite(minutes)):
        raise argparse.ArgumentTypeError(f"expected minutes >= 0 (0: start no new run), got {text!r}")
    return minutes


def add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.max_steps=100 (repeatable)")


def names_a_config(target: str) -> bool:
    """`looped params` / `config show` TARGET: a config file (or a folder given by mistake, refused in one line by
    name) rather than an architecture name; a registered architecture wins over a folder of the same name."""
    from ..models import arch_names

    path = Path(target)
    return target.endswith((".yaml", ".yml")) or path.is_file() or (path.is_dir() and target not in arch_names())


def print_json(result: dict, out: str | None = None) -> None:
    """Print a command's JSON result and, with --out, also write it there (atomically)."""
    from ..io import atomic_write_text

    text = json.dumps(result, indent=2)
    print(text)
    if out:
        atomic_write_text(Path(out), text + "\n")


def fail(message: str, code: int = 2) -> int:
    print(f"looped: error: {message}", file=sys.stderr)
    return code


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """While the CLI runs, looped's own FutureWarning / DeprecationWarning (an old config spelling) print as one
    line, `looped: warning: ...`, like its errors, instead of Python's file:line plus the source line. Other
    warnings keep Python's format, and everything is restored on exit, so library use is untouched."""
    with warnings.catch_warnings():  # restores showwarning and the filters when the command ends
        python_format = warnings.showwarning
        warnings.filterwarnings("default", category=DeprecationWarning, module=r"looped(\.|$)")  # hidden otherwise

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, (FutureWarning, DeprecationWarning)) and from_looped(filename):
                print(f"looped: warning: {message}", file=file or sys.stderr)
            else:
                python_format(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def from_looped(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(PACKAGE)


def user_error_types() -> tuple[type, ...]:
    """Exceptions that mean "the input or the environment is wrong", reported in one line: the project's own
    (ConfigError, CheckpointError, DataError, TaskError ... are ValueErrors; training, run-folder and Hub errors)
    and OSError (missing or unwritable path, full disk). Anything else is a bug and keeps its traceback."""
    import torch

    from ..config import MissingExtra
    from ..hub import HubError
    from ..train.run_folder import RunFolderError
    from ..train.tracking import TrackingError
    from ..train.trainer import TrainingError

    return (ValueError, OSError, TrainingError, RunFolderError, HubError, MissingExtra, TrackingError,
            torch.OutOfMemoryError, MemoryError)


def out_of_memory(err: BaseException) -> bool:
    """A request too big for this machine (`data show parity --n 1000000000000`, a huge batch): Python's or numpy's
    MemoryError, or torch's CPU allocator refusing (a RuntimeError that says so)."""
    return isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and "DefaultCPUAllocator" in str(err))


def describe(err: BaseException) -> str:
    """One line naming the problem (an OSError names its file)."""
    if isinstance(err, OSError) and err.strerror:  # without "[Errno N]"; looped's own carry the path inside
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return f"not enough memory for this request ({line}): ask for less" if out_of_memory(err) else line


def check_output(path: Path) -> None:
    """Fail before the work, not after it: an --out whose place cannot be written (`/proc/x.json`, a read-only
    folder, a file where a folder is needed) is a one-line error naming it, before an evaluation or a benchmark
    of minutes ends in it. Probes the nearest existing folder with a temporary file it removes (whoever runs
    as root passes os.access everywhere); creates nothing else."""
    import tempfile

    existing = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    folder = existing.parent if existing == path and not path.is_dir() else existing
    if not folder.is_dir():
        raise OSError(f"cannot write {path}: {folder} is not a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".looped-probe-"):
            pass
    except OSError as err:
        raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from None


def run_command(args: argparse.Namespace) -> int:
    """Call the parsed command: user errors become one stderr line and a non-zero exit (LOOPED_DEBUG=1 shows the
    traceback); a bug keeps its traceback; Ctrl-C outside training ends quietly with status 130."""
    try:
        for name in ("out", "record", "dry_run"):  # every command's outputs: a file or a run / results folder
            if getattr(args, name, None):
                check_output(Path(getattr(args, name)))
        return args.func(args) or 0
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except Exception as err:
        if os.environ.get("LOOPED_DEBUG") or not (isinstance(err, user_error_types()) or out_of_memory(err)):
            raise
        return fail(describe(err), getattr(err, "exit_code", 2))
