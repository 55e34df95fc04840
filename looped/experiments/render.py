"""The one report renderer: every study's tables as column specs over groups of runs, and its figures as panels.

A table is a list of `Column`s (a header, an alignment, and how a group of runs becomes the cell's text) shown
over a list of `Group`s (the runs of one task x row, one corpus x row, ...); `table()` writes the markdown
header, the alignment row and one line per group. Every number a cell shows goes through report.py's formatter.

    columns = [key("row"), parameters(), spread_of("bits/byte", "bits_per_byte", 4, corpus="enwik8")]
    lines = table(columns, groups(results.rows, ("row",), order=[("plain",), ("workspace",)]))
    lines += part("Sweep", columns, sweep, caption)   # an optional '## Sweep' section: nothing while `sweep` is empty

    panels(path, ("enwik8", "tinystories"), draw, size=(5.5, 4))   # a panel per corpus; draw(ax, corpus)
    buckets(rows, lambda r: int(r["rounds"]), corpus="enwik8")   # {rounds: the rows at that value}, ascending

The usual panels (a line per row, mean over seeds; every seed beside mean ± SD) are declared as data in figures.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io import atomic_save_figure, atomic_write_text
from .report import MISSING, average, finished, minutes_by_cpu, minutes_per_cpu, spread
from .results import ResultTable, overrides_note

LEFT, RIGHT = "---", "---:"  # a markdown column's alignment: text left, numbers right


def matching(rows: Iterable[dict], **match) -> list[dict]:
    """The rows whose columns equal `match` (compared as text, so 42 matches the CSV's '42')."""
    return [r for r in rows if all(str(r.get(k)) == str(v) for k, v in match.items())]


# --- groups of runs -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Group:
    """The rows of one table line: `key` the columns they share, `runs` the finished ones, `failed` the rest."""

    key: dict
    runs: list[dict]
    failed: list[dict]

    def __getitem__(self, name: str) -> str:
        return self.key[name]

    def where(self, **match) -> Group:
        """The part of the group whose columns also equal `match` (one corpus of a row that spans two)."""
        return Group({**self.key, **match}, matching(self.runs, **match), matching(self.failed, **match))

    def values(self, column: str) -> list:
        """The finished runs' cells of one column, '' where a run lacks it."""
        return [r.get(column, "") for r in self.runs]

    def joined(self, rows: Iterable[dict], **match) -> list[dict]:
        """The rows of another table (per-length scores ...) that belong to this group's finished runs: same key
        columns, a finished run's seed, and `match`."""
        seeds = {str(r["seed"]) for r in self.runs}
        return [r for r in matching(rows, **self.key, **match) if str(r["seed"]) in seeds]


def groups(rows: Iterable[dict], by: Sequence[str], *, order: Iterable[tuple] | None = None,
           keep_empty: bool = False, **match) -> list[Group]:
    """One Group per value of the `by` columns among the rows matching `match`: in first-seen order, or in
    `order` (key tuples). A key without rows is left out unless `keep_empty` (a line of dashes)."""
    chosen = matching(rows, **match)
    value = lambda r: tuple(str(r.get(c)) for c in by)  # noqa: E731
    keys = [tuple(map(str, k)) for k in order] if order is not None else list(dict.fromkeys(map(value, chosen)))
    found = []
    for k in keys:
        mine = [r for r in chosen if value(r) == k]
        runs = finished(mine)
        done = {id(r) for r in runs}
        if mine or keep_empty:
            found.append(Group({**match, **dict(zip(by, k))}, runs, [r for r in mine if id(r) not in done]))
    return found


# --- columns -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One column of a table: its header, how a line's group (or item) becomes its cell, and its alignment."""

    header: str
    cell: Callable[[Any], str]
    align: str = RIGHT


def left(header: str, cell: Callable[[Any], str]) -> Column:
    """A text column (left-aligned)."""
    return Column(header, cell, LEFT)


def key(name: str, header: str | None = None, align: str = LEFT) -> Column:
    """The group's own value of a key column, as text."""
    return Column(header or name, lambda g: g[name], align)


def spread_of(header: str, column: str, digits: int = 1, scale: float = 1.0, **where) -> Column:
    """mean ± SD (n) over the group's finished runs (those matching `where`) of one results column."""
    return Column(header, lambda g: spread(g.where(**where).values(column), digits, scale))


def percent_of(header: str, column: str, digits: int = 1, **where) -> Column:
    """spread_of() of a fraction, in %."""
    return spread_of(header, column, digits, 100.0, **where)


def mean_of(header: str, column: str, digits: int = 1, scale: float = 1.0, **where) -> Column:
    """The mean alone (beside a stated n) over the group's finished runs matching `where` of one column."""
    return Column(header, lambda g: average(g.where(**where).values(column), digits, scale))


def at_cost(header: str, column: str, cost: str, digits: int = 4, cost_digits: int = 2, **where) -> Column:
    """'mean of `column` @ mean of `cost` (n=k)' over the group's finished runs matching `where`: a score beside
    what it cost (bits/byte @ the rounds an early exit used ...); MISSING when there are none."""
    def text(g: Group) -> str:
        runs = g.where(**where).runs
        return f"{mean(runs, column):.{digits}f} @ {mean(runs, cost):.{cost_digits}f} (n={len(runs)})" if runs \
            else MISSING
    return Column(header, text)


def listed(header: str, column: str) -> Column:
    """Every finished run's cell of one column, ', ' between them (the best steps of the seeds ...)."""
    return Column(header, lambda g: ", ".join(g.values(column)) or MISSING)


def joined_spread(header: str, table: ResultTable, column: str, digits: int = 1, scale: float = 1.0,
                  **match) -> Column:
    """mean ± SD (n) of `column` over the rows of another table of the study that belong to the group's finished
    runs and match `match` (each seed's score at one test length in lengths.csv ...)."""
    return Column(header, lambda g: spread([r.get(column, "") for r in g.joined(table.rows, **match)], digits, scale))


def noting_failures(column: Column, counted: bool = True) -> Column:
    """`column` with ' (k failed)' (counted) or ' (some runs failed)' after the cell of a group where runs failed:
    a line of the table stays honest about the seeds it lost."""
    def text(g: Group) -> str:
        note = (f" ({len(g.failed)} failed)" if counted else " (some runs failed)") if g.failed else ""
        return column.cell(g) + note
    return Column(column.header, text, column.align)


def fewest(header: str, x: Callable[[dict], Any]) -> Column:
    """The fewest finished runs of the group at any value of x(row): the n of a line of means over buckets."""
    return Column(header, lambda g: str(min(len(b) for b in buckets(g.runs, x).values())))


def relative_change(groups: Iterable[Group], column: str, reference: str, by: str = "row") -> str | None:
    """'vs plain -16.20 %, vs shared_loop -9.12 %': the reference group's mean `column` against each other group's
    (negative: the reference's is lower); None when the reference group has no value."""
    means = {g[by]: mean(g.runs, column) for g in groups}
    if means.get(reference) is None:
        return None
    return ", ".join(f"vs {name} {100 * (means[reference] / value - 1):+.2f} %" for name, value in means.items()
                     if name != reference and value)


def relative_changes(rows: Iterable[dict], column: str, reference: str, order: Iterable[tuple], within: str,
                     values: Iterable[str]) -> list[str]:
    """'- <value>: vs plain -16.20 %, ...' (relative_change over the row groups in `order`) for each value of the
    column `within` (one line per corpus ...) where the reference row has a mean."""
    order = list(order)
    changes = {v: relative_change(groups(rows, ("row",), order=order, **{within: v}), column, reference)
               for v in values}
    return [f"- {value}: {change}" for value, change in changes.items() if change]


def inline(lines: Iterable[Group], label: Callable[[Group], str], column: Column) -> str:
    """One column of a table as a sentence: 'label cell, label cell, ...' over the groups of its lines."""
    return ", ".join(f"{label(g)} {column.cell(g)}" for g in lines)


def minutes_per_run(header: str = "minutes per run (median)") -> Column:
    """The median training wall time of the group's runs, one median per CPU where they ran on several
    (`minutes_by_cpu`; issue 27: every table states what a run of it costs)."""
    return Column(header, lambda g: minutes_by_cpu(g.runs))


RUN_BUDGET_MINUTES = 60.0  # issue 27: a CPU recipe's run should need no more than ~60 min on one thread


SAME_RECIPE = ("Kept as they are, so that every seed of a recipe runs the same recipe (the minutes column gives the "
               "same recipes on the other CPUs); lanes book each run by its --status estimate (--finish-within), so "
               "a machine that stops loses no run half-way.")


def over_budget(lines: Iterable[Group], why: str = SAME_RECIPE, limit: float = RUN_BUDGET_MINUTES,
                label: Callable[[Group], str] = lambda g: " / ".join(g.key.values())) -> list[str]:
    """A paragraph after a table: the lines whose runs took longer than `limit` minutes (median per CPU) and
    `why` they are kept; nothing when every line is within it. A long run is the one a stopped machine loses,
    so the table says which recipes cost more than the budget, on which CPU."""
    found = [f"{label(group)}: {statistics.median(minutes):.0f} min on {cpu or 'unrecorded CPUs'} (n={len(minutes)})"
             for group in lines for cpu, minutes in minutes_per_cpu(group.runs).items()
             if minutes and statistics.median(minutes) > limit]
    if not found:
        return []
    return ["", f"Over the ~{limit:.0f}-minute budget of a CPU run (median per CPU, unrecorded ones together): "
            + "; ".join(found) + f". {why}"]


def parameters(header: str = "parameters") -> Column:
    """Every distinct parameter count of the group's finished runs (one unless the recipe changed)."""
    return Column(header, lambda g: ", ".join(f"{p:,}" for p in sorted({int(v) for v in g.values("parameters")
                                                                          if v not in ("", None)})) or MISSING)


def table(columns: Sequence[Column], rows: Iterable, keep: Callable[[list[str]], bool] = lambda cells: True
          ) -> list[str]:
    """The markdown lines of a table: header, alignment, one line per group (or any item a column reads: a
    claim ...), left out where keep(its cells) says no."""
    lines = [line(c.header for c in columns), "|" + "".join(f"{c.align}|" for c in columns)]
    for group in rows:
        cells = [c.cell(group) for c in columns]
        if keep(cells):
            lines.append(line(cells))
    return lines


def line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def heading(title: str, rows: list[dict], *paragraphs: str) -> list[str]:
    """A report's first lines: '# title', the note that its runs are not the recipe (when so), each paragraph."""
    return [f"# {title}", "", *overrides_note(rows), *(text for p in paragraphs for text in (p, ""))]


def bullets(items: Iterable[str]) -> str:
    """A markdown list as one paragraph."""
    return "\n".join(f"- {item}" for item in items)


def markdown(lines: list[str]) -> str:
    """The lines as a file's text (one newline at the end)."""
    return "\n".join(lines) + "\n"


def section(title: str, body: list[str], caption: str | None = None) -> list[str]:
    """A '## title' section: its caption paragraph (if any), then the body (a table's lines)."""
    return ["## " + title, "", *([caption, ""] if caption is not None else []), *body]


def labelled_tables(parts: Iterable[tuple[str, list[str]]]) -> list[str]:
    """Several tables of one section (one per corpus ...), each after a 'label:' line; a part with no lines is
    left out."""
    lines = [text for label, body in parts if body for text in (f"{label}:", "", *body, "")]
    return lines[:-1]


def part(title: str, columns: Sequence[Column], rows: Sequence, caption: str | None = None,
         note: str | None = None, keep: Callable[[list[str]], bool] = lambda cells: True) -> list[str]:
    """An optional part of a report: a blank line, then a '## title' section of one table of `rows` (its caption
    before, `note` after, `keep` as table's); nothing while `rows` is empty (a sweep not run yet, a score no run
    has ...)."""
    if not rows:
        return []
    return ["", *section(title, table(columns, rows, keep), caption), *(["", note] if note is not None else [])]


def shows_beyond(keys: int) -> Callable[[list[str]], bool]:
    """A table's `keep`: a line that shows something (not MISSING) past its first `keys` cells (its key columns)."""
    return lambda cells: any(c != MISSING for c in cells[keys:])


# --- numbers behind figures and by-value tables ---------------------------------------------------------------
def buckets(rows: Iterable[dict], x: Callable[[dict], Any], **match) -> dict[Any, list[dict]]:
    """The rows matching `match`, bucketed by x(row), in ascending x (a curve's points before averaging)."""
    found: dict[Any, list[dict]] = {}
    for r in matching(rows, **match):
        found.setdefault(x(r), []).append(r)
    return dict(sorted(found.items()))


def ints(*columns: str) -> Callable[[dict], tuple[int, ...]]:
    """x(row) for `buckets`, `fewest` and figure lines: the row's `columns` as a tuple of ints (a position bucket's
    first and last ...)."""
    return lambda row: tuple(int(row[c]) for c in columns)


def mean(rows: Iterable[dict], column: str) -> float | None:
    """The mean of one numeric column over the rows that have a value there (a bucket's point); None if none do."""
    numbers = [float(r[column]) for r in rows if r.get(column) not in ("", None)]
    return statistics.fmean(numbers) if numbers else None


# --- writing ------------------------------------------------------------------------------------------------
def write_table(out: Path, tables: Iterable[ResultTable], text: Callable[[], str]) -> None:
    """Reload the study's CSVs (rows other processes of the study added), then rewrite out/table.md as text()."""
    for results in tables:
        results.reload()
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out) / "table.md", text())


def panels(path: Path, keys: Sequence, draw: Callable[[Any, Any], None], *, size: tuple[float, float],
           title: str | None = None, finish: Callable[[Any], None] | None = None) -> None:
    """A figure of one panel per key side by side (`size`: one panel's inches); draw(ax, key) fills a panel,
    `finish(ax)` the touches every panel shares; `title` above them all. Saved atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(size[0] * len(keys), size[1]), squeeze=False)
    for ax, k in zip(axes[0], keys):
        draw(ax, k)
        if finish is not None:
            finish(ax)
    if title is not None:
        fit_suptitle(fig, title, fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def fit_suptitle(fig, title: str, fontsize: float = 9) -> None:
    """`fig.suptitle(title)`, wrapped onto more lines until every line fits the figure's width: a one-panel
    figure is narrower than a long study subtitle, and a centred line wider than the figure loses both ends."""
    import textwrap

    text = fig.suptitle(title, fontsize=fontsize)
    renderer = fig.canvas.get_renderer()
    width = len(title)
    while width > 20 and text.get_window_extent(renderer).width > 0.96 * fig.bbox.width:
        width = int(width * 0.85)  # fewer characters a line, until the widest line fits
        text.set_text("\n".join(textwrap.wrap(title, width)))


__all__ = ["Column", "Group", "LEFT", "RIGHT", "at_cost", "buckets", "bullets", "fewest", "fit_suptitle", "groups",
           "heading", "inline", "ints", "joined_spread", "key", "labelled_tables", "left", "line", "listed", "markdown",
           "matching", "mean", "mean_of", "minutes_per_run", "noting_failures", "over_budget", "panels", "parameters",
           "part", "percent_of", "relative_change", "relative_changes", "section", "shows_beyond", "spread_of", "table",
           "write_table"]
