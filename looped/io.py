"""Writing outputs safely: every file this package writes goes through here (bottom floor, imports nothing of
looped).

    with atomic_path(path) as tmp: ...        # write tmp; it replaces `path` in one rename when the block ends
    atomic_write_text(path, text)              # text, fsynced
    write_json(path, data)                     # indented JSON, NaN refused
    atomic_save_figure(fig, path)              # a matplotlib figure, then closed
    read_metrics(run / "metrics.jsonl", warn)  # the one reader of a run's metrics log (trainer, plots, studies)

A reader never sees a half-written file, and a failed or killed write leaves the previous file in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: Path):
    """Yields a temporary path beside `path` to write; when the block ends normally it replaces `path` in one
    rename (a reader never sees a half-written file, a failed write leaves the old one), otherwise it is removed.
    The file gets the permissions a plain open() would give it (mkstemp's are private)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # the temporary file (or the folder) is ours: the message names the user's path
        raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from None
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~umask())
        try:
            yield tmp
            os.replace(tmp, path)
        except OSError as err:  # disk full, read-only folder ...: name the user's file, not the temporary one
            raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def umask() -> int:
    """The process's umask (files get 0o666 & ~umask, as a plain open() gives them)."""
    mask = os.umask(0)  # reading the umask means setting it: set it straight back
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """Write `data` as indented JSON atomically: a reader never sees a half-written file."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, allow_nan=False)
        handle.write("\n")
    return path


def atomic_save_figure(fig, path: Path, dpi: int = 120) -> None:
    """Save a matplotlib figure like every other output (the old file stays until the new one is complete; the
    folder is created) and close it. The format comes from the suffix of `path` (the temporary file has none)."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)


class MetricsError(ValueError):
    """A run's metrics.jsonl cannot be read, or holds a damaged line before its end (one line, naming it)."""


def read_metrics(path: Path, warn=None) -> list[dict]:
    """The events of a metrics.jsonl. A torn last line (the process died mid-write: disk full, power loss) is
    dropped, with a warning through `warn`; a damaged line before the end is an error naming file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise MetricsError(f"{path}: cannot read ({err.strerror or err})") from None
    events = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or not isinstance(event.get("step"), int):
                raise ValueError("not a metrics event")
        except ValueError:
            if number == len(lines):
                if warn is not None:
                    warn(f"{path}: dropped a torn last line (line {number}: {line[:40]!r})")
                break
            raise MetricsError(f"{path}: line {number} is not a metrics event ({line[:40]!r})") from None
        events.append(event)
    return events
