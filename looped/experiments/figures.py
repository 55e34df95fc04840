"""Figures declared as data: what a panel shows over a study's CSV rows, drawn once per panel of a figure.

Every study figure so far is one of two kinds, each drawn per corpus or task (a panel) from a CSV's rows:

  Lines  one line per row of the study (colour C<i> in the paper's order): the mean over seeds of a column at each
         value of x (test-time rounds, a position bucket, an update ...), markers at the points
  Dots   one column of dots per row: every seed in grey, the mean ± sample SD over seeds in colour

    ROUNDS = Lines("bits_per_byte", lambda r: int(r["rounds"]), ROWS, xlabel="test-time rounds", ylabel="bits/byte")
    plot(out / "rounds.png", ROUNDS, rounds.rows, {"enwik8": {"corpus": "enwik8"}}, size=(5.5, 4))
    Figure("rounds", ROUNDS, title="...").draw(out, rounds.rows, {"enwik8": {"corpus": "enwik8"}})  # the same

`plot` titles each panel with its key, and every panel gets a light grid and, when a line has a label, a legend.
A study that keeps its runs' training loss (StudyBase.keep_curves) draws it with `curve_figures`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..eval.stats import mean_sd
from .render import buckets, matching, mean, panels
from .report import column, finished


class Panel(Protocol):
    def draw(self, ax, rows: list[dict], **match) -> None:
        """Fill one panel from the rows whose columns equal `match` (one corpus, one seed ...)."""


@dataclass(frozen=True)
class Lines:
    """One line per value of column `by` (in `names` order): the mean of column `y` over the rows sharing x(row).

    `place(x, rows at x)` puts a point elsewhere on the axis than x (a bucket at its middle, a threshold at the
    mean rounds it used); `touch(ax)` adds what else the panel shows (a reference line, a log axis, a y limit)."""

    y: str
    x: Callable[[dict], Any]
    names: Sequence[str]
    xlabel: str
    ylabel: str
    by: str = "row"
    place: Callable[[Any, list[dict]], float] | None = None
    style: Mapping[str, Any] = field(default_factory=lambda: {"marker": "o"})  # matplotlib's plot() keywords
    touch: Callable[[Any], None] | None = None

    def draw(self, ax, rows: list[dict], **match) -> None:
        for i, name in enumerate(self.names):
            if points := buckets(rows, self.x, **match, **{self.by: name}):
                xs = [self.place(x, hits) for x, hits in points.items()] if self.place else list(points)
                ax.plot(xs, [mean(hits, self.y) for hits in points.values()], label=name, color=f"C{i}",
                        **self.style)
        ax.set_xlabel(self.xlabel)
        ax.set_ylabel(self.ylabel)
        if self.touch is not None:
            self.touch(ax)


@dataclass(frozen=True)
class Dots:
    """Column `y` of the finished runs, one column of dots per value of `by` (in `names` order, named below the
    axis): every seed as a grey dot, the mean ± sample SD over seeds in colour (honest about n, unlike a bar)."""

    y: str
    names: Sequence[str]
    ylabel: str
    by: str = "row"

    def draw(self, ax, rows: list[dict], **match) -> None:
        done = finished(rows, **match)
        for i, name in enumerate(self.names):
            values = [float(v) for v in column(matching(done, **{self.by: name}), self.y)]
            if values:
                ax.scatter([i] * len(values), values, s=14, color="0.5", zorder=2, label="one seed" if i == 0 else None)
                ax.errorbar([i], [mean_sd(values)[0]], yerr=[mean_sd(values)[1] or 0], fmt="o", color="C0",
                            capsize=4, zorder=3, label="mean ± SD" if i == 0 else None)
        ax.set_xticks(range(len(self.names)), list(self.names), rotation=35, ha="right")
        ax.set_ylabel(self.ylabel)


def plot(path: Path, spec: Panel, rows: list[dict], panel_rows: Mapping[str, Mapping[str, Any]], *,
         size: tuple[float, float], title_size: float | None = None, title: str | None = None) -> None:
    """A figure of `spec` drawn once per panel, side by side: `panel_rows` maps each panel's title to the columns
    its rows match ({"enwik8 sample": {"corpus": "enwik8"}, ...}); `size` is one panel's inches."""
    def draw(ax, name: str) -> None:
        spec.draw(ax, rows, **panel_rows[name])
        ax.set_title(name, **({"fontsize": title_size} if title_size else {}))

    panels(path, list(panel_rows), draw, size=size, title=title, finish=grid_and_legend)


@dataclass(frozen=True)
class Figure:
    """<name>.png of a study's report declared as data: `spec` drawn once per panel over one CSV's rows, at
    `size` inches a panel, under `title`; nothing is drawn while the CSV has no rows (a sweep not run yet)."""

    name: str
    spec: Panel
    title: str | None = None
    size: tuple[float, float] = (5.5, 4)
    title_size: float | None = None  # the panel titles' font size (None: matplotlib's)

    def draw(self, out: Path, rows: list[dict], panel_rows: Mapping[str, Mapping[str, Any]]) -> None:
        if rows:
            plot(Path(out) / f"{self.name}.png", self.spec, rows, panel_rows, size=self.size,
                 title_size=self.title_size, title=self.title)


def reference_line(x: float, top: float | None = None) -> Callable[[Any], None]:
    """A Lines `touch`: a grey dashed vertical line at x (the trained depth ...), the y axis capped at `top` so
    one diverging point does not flatten the others."""
    def touch(ax) -> None:
        ax.axvline(x, color="0.6", ls="--", lw=1)
        if top is not None:
            ax.set_ylim(top=min(ax.get_ylim()[1], top))
    return touch


def training_curves(names: Sequence[str], ylabel: str = "training loss") -> Lines:
    """curves.csv (StudyBase.keep_curves) as a panel: the training loss against updates, a line per row."""
    return Lines("loss", lambda r: int(r["step"]), tuple(names), "update", ylabel, style={"lw": 1.2})


def curve_figures(out: Path, spec: Lines, curves: list[dict], results: list[dict], by: str, panel: str,
                  title: Callable[[list[dict]], str]) -> None:
    """curves_<value>_seed<S>.png: one figure per value of column `by` and seed in curves.csv, its rows on one
    panel (they share the data order of that seed). `panel` formats the panel's title from `by` and "seed";
    title(finished results rows of the figure) is the figure's (with their parameter counts, say)."""
    for value, seed in sorted({(r[by], int(r["seed"])) for r in curves}):
        match = {by: value, "seed": seed}
        plot(Path(out) / f"curves_{value}_seed{seed}.png", spec, curves, {panel.format(**match): match},
             size=(6.5, 4.2), title=title(finished(results, **match)))


def grid_and_legend(ax) -> None:
    """The touches every study panel shares: a light grid, and a legend once a line has a label."""
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def with_parameters(title: str, rows: list[dict]) -> str:
    """A panel title with the rows' parameter counts: 'enwik8 sample, 918,383–918,857 parameters' (the title
    alone when no row has one)."""
    counts = [int(r["parameters"]) for r in rows if r.get("parameters") not in ("", None)]
    return f"{title}, {min(counts):,}–{max(counts):,} parameters" if counts else title


__all__ = ["Dots", "Figure", "Lines", "Panel", "curve_figures", "grid_and_legend", "plot", "reference_line",
           "training_curves", "with_parameters"]
