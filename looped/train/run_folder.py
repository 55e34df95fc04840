"""A run folder's guards: one trainer at a time, no silent restart over a run, a readable metrics log.

    lock = RunLock.acquire(out)          # exclusive flock on out/.run.lock, held for the process's life
    what = existing_run(out)             # "config.yaml" / "metrics.jsonl" / "a checkpoint" / None
    events = read_metrics(out / "metrics.jsonl", warn)   # a torn last line is dropped with a warning

The lock is an advisory `fcntl.flock` on a hidden file: the operating system releases it when the process
ends, however it ends (kill -9, power loss), so a stale lock never blocks a later run. The file holds the
holder's pid, only to name it in the refusal.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..io import read_metrics  # noqa: F401  (one reader of metrics.jsonl, for the trainer and the plots)

LOCK_NAME = ".run.lock"


class RunFolderError(RuntimeError):
    """The run folder is in use or holds another run (a damaged metrics log is io.MetricsError)."""


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
