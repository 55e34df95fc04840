"""Progress bars that suit where they print.

On a terminal: tqdm's live bar. Anywhere else (a log file, a pipe, CI): one plain line at most every
`interval` seconds and one at the end, instead of tqdm's thousands of carriage-return updates, which a log
file keeps as one enormous line.

    for batch in progress_bar(batches, total=n, desc="eval"): ...
    bar = progress_bar(total=steps, unit="upd"); bar.update(1); bar.set_postfix(loss="2.31"); bar.close()
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from tqdm import tqdm

LINE_INTERVAL_S = 10.0


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, disable: bool = False, stream: TextIO | None = None,
                 interval: float = LINE_INTERVAL_S, leave: bool = True):
    """tqdm on a terminal, LineProgress elsewhere; both iterate, update, set_postfix and close."""
    stream = stream or sys.stderr
    if disable or (hasattr(stream, "isatty") and stream.isatty()):
        return tqdm(iterable, total=total, desc=desc or None, unit=unit, initial=initial, disable=disable,
                    file=stream, dynamic_ncols=True, leave=leave)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial, stream=stream,
                        interval=interval)


class LineProgress:
    """`desc: n/total unit (pct) [elapsed<eta, rate] key=value`, printed as whole lines, rate-limited."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None, desc: str = "", unit: str = "it",
                 initial: int = 0, stream: TextIO, interval: float = LINE_INTERVAL_S, clock=time.monotonic):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n, self.start_n, self.stream, self.interval, self.clock = initial, initial, stream, interval, clock
        self.started = self.last_print = clock()
        self.postfix: dict[str, Any] = {}
        self.closed = False

    def __iter__(self) -> Iterator:
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self.last_print >= self.interval:
            self._print()

    def set_postfix(self, **values: Any) -> None:
        self.postfix = values

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.n > self.start_n:
                self._print()

    def _print(self) -> None:
        now = self.clock()
        self.last_print = now
        elapsed = now - self.started
        rate = (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0
        done = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        percent = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = ""
        if self.total and rate > 0:
            eta = f"<{_clock_text((self.total - self.n) / rate)}"
        extras = "".join(f" {key}={value}" for key, value in self.postfix.items())
        prefix = f"{self.desc}: " if self.desc else ""
        self.stream.write(f"{prefix}{done} {self.unit}{percent} [{_clock_text(elapsed)}{eta}, "
                          f"{rate:.2f} {self.unit}/s]{extras}\n")
        self.stream.flush()


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
