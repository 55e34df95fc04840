"""The one number formatter of every study: how a value is stored in a CSV cell and how a table shows it.

    cell(0.98765)              '0.987650'        a CSV cell (None -> '')
    cell(0.98765, 4)           '0.9877'
    figure('0.5123', 1, 100)   '51.2'            one number in a table ('' / None -> '–')
    spread(['0.5', '0.6'], 1, 100)  '55.0 ± 7.1 (n=2)'   mean ± sample SD over seeds ('–' when none)
    average(['0.5', '0.6'], 1, 100) '55.0'                the mean alone
    each([1.0, 0.848], 1, 100)      '100.0 / 84.8'        every seed's figure, in the order given
    paper_figure((91.16, 6.09), 2)  '91.16 ± 6.09'        a paper's figure (a number, or mean and SD)
    span([0.013, 0.009], 1, 100)    '0.9–1.3'             lowest to highest
    span([2000, 1500], text=lambda v: f'{v:,.0f}')  '1,500–2,000'
    interval([8, 1, 4]) '1-8'   read_interval('1-8') (1, 8)   by_difficulty('2:0.83 3:0.78') {2: 0.83, 3: 0.78}
    finished(rows, task='graph')                 the rows that trained and were scored (status ok)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from ..eval.stats import format_mean_sd

MISSING = "–"  # a table cell with nothing to show


def cell(value, digits: int = 6) -> str:
    """A value as a CSV cell: floats to `digits` decimals, None as '', anything else as its text."""
    if value is None:
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _numbers(values: Iterable, scale: float) -> list[float]:
    return [scale * float(v) for v in values if v not in ("", None)]


def figure(value, digits: int = 1, scale: float = 1.0) -> str:
    """One number of a table (a cell's text or a float), times `scale`; MISSING when empty."""
    numbers = _numbers([value], scale)
    return f"{numbers[0]:.{digits}f}" if numbers else MISSING


def spread(values: Iterable, digits: int = 1, scale: float = 1.0) -> str:
    """'mean ± SD (n=k)' of the non-empty values times `scale` (no SD for one value); MISSING when none."""
    numbers = _numbers(values, scale)
    return format_mean_sd(numbers, digits) if numbers else MISSING


def average(values: Iterable, digits: int = 1, scale: float = 1.0) -> str:
    """The mean of the non-empty values times `scale`, without SD or n (a cell beside a stated n); MISSING when none."""
    numbers = _numbers(values, 1.0)
    return figure(statistics.fmean(numbers), digits, scale) if numbers else MISSING


def each(values: Iterable, digits: int = 1, scale: float = 1.0) -> str:
    """Every non-empty value's figure, ' / ' between them (one per seed where a spread would hide a bad seed)."""
    return " / ".join(figure(v, digits, scale) for v in _numbers(values, 1.0)) or MISSING


def span(values: Iterable, digits: int = 1, scale: float = 1.0, text: Callable[[float], str] | None = None) -> str:
    """'lowest–highest' of the non-empty values times `scale` (one figure when they agree); MISSING when none.
    `text` writes an end instead of figure() (parameter counts with thousands separators ...)."""
    numbers = _numbers(values, 1.0)
    if not numbers:
        return MISSING
    show = text or (lambda v: figure(v, digits, scale))
    low, high = show(min(numbers)), show(max(numbers))
    return low if low == high else f"{low}–{high}"


def paper_figure(value, digits: int = 1, missing: str = MISSING) -> str:
    """A paper's figure as a table shows it beside ours: a number, or a (mean, SD) pair as 'mean ± SD' (SD None:
    the mean alone); `missing` where the paper gives none (a note on why, or MISSING)."""
    if value is None:
        return missing
    mean, sd = value if isinstance(value, tuple) else (value, None)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")


def percent(values: Iterable, digits: int = 1) -> str:
    """spread() of fractions, in %."""
    return spread(values, digits, 100.0)


def median_minutes(seconds: Iterable) -> str:
    """Median wall time in minutes of the runs' training seconds (a resumed run counts its last process only)."""
    minutes = [m / 60 for m in _numbers(seconds, 1.0) if m > 0]
    return f"{statistics.median(minutes):.1f}" if minutes else MISSING


def cpu_of(ran_on: str | None) -> str:
    """The device part of a row's machine column ("AMD EPYC; 1 thread; torch 2.13..." -> "AMD EPYC"); "" for rows
    that predate the column."""
    return (ran_on or "").split(";", 1)[0].strip()


def cpu_name(ran_on: str | None) -> str:
    """cpu_of as a short name for a table cell: "Intel(R) Xeon(R) Processor; 1 thread; ..." -> "Xeon",
    "AMD EPYC; ..." -> "EPYC"; "" for rows that predate the column."""
    device = cpu_of(ran_on).split("@", 1)[0]
    words = [w for w in device.replace("(R)", " ").replace("(TM)", " ").split()
             if w not in ("Intel", "AMD", "Processor", "CPU")]
    return words[-1] if words else device.strip()


def minutes_per_cpu(runs: Iterable[dict]) -> dict[str, list[float]]:
    """The runs' training minutes (train_seconds > 0) by short CPU name ("" = not recorded), sorted by name; a CPU
    whose runs have no clock keeps an empty list."""
    by_cpu: dict[str, list[float]] = {}
    for run in runs:
        by_cpu.setdefault(cpu_name(run.get("machine")), []).extend(
            m / 60 for m in _numbers([run.get("train_seconds", "")], 1.0) if m > 0)
    return dict(sorted(by_cpu.items()))


def minutes_by_cpu(runs: Iterable[dict]) -> str:
    """The median training minutes of the runs, one median per CPU they ran on where there are several
    ("29.5 unrecorded · 50.3 EPYC"): the same recipe took 1.7x as long on one of this project's machines as on
    another, so a median across both describes neither."""
    text = lambda minutes: f"{statistics.median(minutes):.1f}" if minutes else MISSING  # noqa: E731
    by_cpu = minutes_per_cpu(runs)
    if len(by_cpu) <= 1:
        return text(next(iter(by_cpu.values()), []))
    return " · ".join(f"{text(minutes)} {name or 'unrecorded'}" for name, minutes in by_cpu.items())


def interval(values: Iterable[int]) -> str:
    """A range of integers as one cell: '1-8' from its lowest and highest value (trained difficulties ...)."""
    values = list(values)
    return f"{min(values)}-{max(values)}"


def read_interval(text: str) -> tuple[int, int]:
    """The cell '1-8' as (1, 8)."""
    lo, hi = text.split("-")
    return int(lo), int(hi)


def by_difficulty(text: str) -> dict[int, float]:
    """The cell "2:0.8312 3:0.7750" as {2: 0.8312, 3: 0.775}; "1:1.0000@1 ..." (a score @ the step budget that
    gave it) likewise."""
    return {int(d): float(a.split("@")[0]) for d, a in (part.split(":") for part in text.split())}


def column(rows: Iterable[dict], name: str) -> list:
    """The cells of one column ('' where a row lacks it), for spread() / percent()."""
    return [r.get(name, "") for r in rows]


def finished(rows: Iterable[dict], **match) -> list[dict]:
    """The rows that trained and were scored (status ok; rows without a status column count) whose columns
    equal `match` (compared as text)."""
    return [r for r in rows if r.get("status", "ok") in ("ok", "")
            and all(str(r.get(k)) == str(v) for k, v in match.items())]


__all__ = ["MISSING", "average", "by_difficulty", "cell", "column", "cpu_name", "cpu_of", "each", "figure",
           "finished", "interval", "median_minutes", "minutes_by_cpu", "minutes_per_cpu", "paper_figure", "percent",
           "read_interval", "span", "spread"]
