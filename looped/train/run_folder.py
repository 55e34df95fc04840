"""A run folder's guards: one trainer at a time, no silent restart over a run, a readable metrics log.

    lock = RunLock.acquire(out)          # exclusive flock on out/.run.lock, held for the process's life
    what = existing_run(out)             # "config.yaml" / "metrics.jsonl" / "a checkpoint" / None
    events = read_metrics(out / "metrics.jsonl", warn)   # a torn last line is dropped with a warning

The lock is an advisory `fcntl.flock` on a hidden file: the operating system releases it when the process
ends, however it ends (kill -9, power loss), so a stale lock never blocks a later run. The file holds the
holder's pid, only to name it in the refusal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

LOCK_NAME = ".run.lock"


class RunFolderError(RuntimeError):
    """The run folder is in use, holds another run, or its metrics log is damaged."""


class RunLock:
    def __init__(self, handle, path: Path):
        self._handle, self.path = handle, path

    @classmethod
    def acquire(cls, folder: Path) -> "RunLock":
        """Lock `folder` (created if missing) or raise RunFolderError naming the pid that holds it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_NAME
        try:
            import fcntl
        except ImportError:  # no flock on this platform (Windows): run unlocked rather than not at all
            return cls(None, path)
        handle = open(path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise RunFolderError(f"{folder} is in use by another training process (pid {holder}); wait for it to "
                                 f"finish or choose another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return cls(handle, path)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file drops the flock
            self._handle = None


def existing_run(folder: Path) -> str | None:
    """What in `folder` shows a run was started there (None for a missing or fresh folder)."""
    from . import checkpoint as ckpt

    folder = Path(folder)
    for name in ("config.yaml", "metrics.jsonl"):
        if (folder / name).exists():
            return name
    checkpoints = folder / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        found = [p for p in checkpoints.iterdir() if ckpt.is_checkpoint(p)]
        return f"checkpoints/{found[0].name}" if found else "checkpoints/"
    return None


def read_metrics(path: Path, warn=None) -> list[dict]:
    """The events of a metrics.jsonl. A torn last line (the process died mid-write: disk full, power loss) is
    dropped, with a warning through `warn`; a damaged line before the end is an error naming file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise RunFolderError(f"{path}: cannot read ({err.strerror or err})") from None
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
            raise RunFolderError(f"{path}: line {number} is not a metrics event ({line[:40]!r})") from None
        events.append(event)
    return events
