"""The leaderboard's report: table.md (family x suite, the budget of every cell, the depth sweeps, the published
Chomsky figures beside ours, the reason for every cell that cannot run) and board.png (a heatmap of the same
table). Written from results.csv alone, so a committed report regenerates byte-identically."""

from __future__ import annotations

from pathlib import Path

from ..eval.stats import mean_sd
from ..io import atomic_save_figure, atomic_write_text
from . import board, chomsky
from .report import MISSING, finished, spread
from .results import ResultTable, overrides_note

PUBLISHED_ROWS = {"transformer": "Transformer, published", "lstm": "LSTM, published"}


def display(kind: str, values: list) -> str:
    """mean ± SD (n) of a suite's scores: bits/byte to 3 decimals, accuracies in % to 1."""
    return spread(values, 3) if kind == "lm" else spread(values, 1, 100.0)


NOT_RUN = "not run"  # a runnable cell with no row yet


def table_suites(rows: list[dict], scale: str) -> list[str]:
    """The columns: the scale's planned suites and any other suite with a row (`--tasks`), in board.SUITES order,
    so a partial results.csv still shows every planned column."""
    shown = {*(board.CPU_SUITES if scale == "cpu" else board.SUITES), *(r["task"] for r in rows)}
    return [s for s in board.SUITES if s in shown]


def suites_present(results: ResultTable) -> list[str]:
    """The suites with at least one row (the heatmap's columns)."""
    present = {r["task"] for r in results.rows}
    return [s for s in board.SUITES if s in present]


def published_cells(family: str, suites: list[str]) -> list[str]:
    """Delétang et al.'s figure (%) for `family` ("transformer" / "lstm") in each Chomsky column; "" elsewhere."""
    cells = []
    for suite in suites:
        chomsky_suite = board.suite_kind(suite) == "chomsky"
        figure = (chomsky.published_row(suite) or {}).get(family) if chomsky_suite else None
        cells.append(f"{figure:.1f}" if figure is not None else ("not found" if chomsky_suite else ""))
    return cells


def header(scale: str, results: ResultTable) -> list[str]:
    lm, tasks = board.LM_BUDGET[scale], board.TASK_BUDGET[scale]
    rest = [s for s in board.SUITES if s not in board.CPU_SUITES]
    tolerance = round(board.PARAM_TOLERANCE * board.TARGET[scale])
    plan = (f"The CPU plan runs {', '.join(board.CPU_SUITES)} for every family that can, seeds "
            f"{', '.join(map(str, board.SEEDS))}; the other suites ({', '.join(rest)}) run with `--tasks`."
            if scale == "cpu" else "Every suite, seeds " + ", ".join(map(str, board.SEEDS)) + ".")
    return [f"# Leaderboard at {'CPU scale' if scale == 'cpu' else 'full scale'}", "", *overrides_note(results.rows),
            plan, "",
            f"**Budget, the same for every row.** Parameters: {board.TARGET[scale]:,} ± {tolerance:,} per cell "
            f"(embeddings and learned position tables included; FFN widths solved per family and suite, "
            f"looped/experiments/board.py). Byte-LM suites: {lm['max_flops']:.3g} training FLOPs per run "
            f"(compute ledger), {lm['batch_size']} blocks of {lm['context']} bytes per update, so a row that "
            f"computes more per update takes fewer updates. Task suites: the same updates and data stream for every "
            f"row (Chomsky {tasks['chomsky'][1]:,} x {tasks['chomsky'][0]} rows, seed 003 {tasks['sequence'][1]:,} x "
            f"{tasks['sequence'][0]}, seed 002 {tasks['reasoning'][1]:,} x {tasks['reasoning'][0]}); their training "
            "FLOPs, counted by the ledger over the batches trained, are stated per cell.", "",
            "**Scores** (mean ± sample SD over seeds, n = seeds finished): " + "; ".join(
                f"{kind}: {what} ({unit}, {'higher' if up else 'lower'} is better)"
                for kind, (what, unit, up) in board.METRICS.items()) + ". *Published*: " + chomsky.CITATION
            + " (their budget: 1,000,000 steps, best of 10 seeds x 3 learning rates).", ""]


def family_cell(results: ResultTable, family: str, suite: str, notes: dict[str, str]) -> str:
    """One table cell: the seeds' mean ± SD, 'failed', or why the family cannot run the suite (a footnote)."""
    rows = finished(results.rows, task=suite, family=family)
    if rows:
        return display(board.suite_kind(suite), [r["score"] for r in rows])
    if any(r["task"] == suite and r["family"] == family for r in results.rows):
        return "failed"
    reason = board.cannot_run(family, suite)
    if reason is None:
        return NOT_RUN
    mark = notes.setdefault(reason, "abcdefghij"[len(notes)])
    return f"n/a ({mark})"


def span(values: list[float], text) -> str:
    if not values:
        return MISSING
    low, high = min(values), max(values)
    return text(low) if low == high else f"{text(low)}–{text(high)}"


def score_table(results: ResultTable, suites: list[str]) -> list[str]:
    notes: dict[str, str] = {}
    lines = ["| family | parameters | training FLOPs | " + " | ".join(suites) + " |",
             "|---|---:|---:|" + "---:|" * len(suites)]
    for family in board.FAMILIES:
        rows = finished(results.rows, family=family)
        cells = [family_cell(results, family, suite, notes) for suite in suites]
        params = span([int(r["parameters"]) for r in rows], lambda v: f"{v:,}")
        flops = span([float(r["training_flops"]) for r in rows], lambda v: f"{v:.2g}")
        lines.append(f"| {board.LABELS[family]} | {params} | {flops} | " + " | ".join(cells) + " |")
    for family, label in PUBLISHED_ROWS.items():
        lines.append(f"| {label} | | 1,000,000 steps | " + " | ".join(published_cells(family, suites)) + " |")
    lines += ["", *(f"- ({mark}) {reason}" for reason, mark in notes.items())]
    return lines


def budget_table(results: ResultTable, suites: list[str]) -> list[str]:
    """Per cell: parameters, model width and training FLOPs (mean over the seeds) and updates."""
    lines = ["## Budget of every cell", "",
             "Parameters (model width) / training FLOPs / updates, mean over the seeds finished.", "",
             "| family | " + " | ".join(suites) + " |", "|---|" + "---|" * len(suites)]
    for family in board.FAMILIES:
        cells = []
        for suite in suites:
            rows = finished(results.rows, task=suite, family=family)
            if not rows:
                cells.append(MISSING)
                continue
            flops = mean_sd([float(r["training_flops"]) for r in rows])[0]
            updates = mean_sd([int(r["updates"]) for r in rows])[0]
            cells.append(f"{int(rows[0]['parameters']):,} (d {rows[0]['dim']}) / {flops:.2g} / {updates:,.0f}")
        if any(c != MISSING for c in cells):
            lines.append(f"| {board.LABELS[family]} | " + " | ".join(cells) + " |")
    return lines


def depth_table(results: ResultTable, suites: list[str]) -> list[str]:
    """Rows with a test-time depth: the suite's score at 1x / 2x / 4x the trained depth."""
    lines = ["## Test-time depth", "",
             "The same score at 1x / 2x / 4x the trained depth (rounds, recursions or thinking steps; mean over "
             "seeds). Sequence suites: half the test rows per length. Reasoning: mean OOD accuracy at exactly that "
             "step budget.", "",
             "| family | trained depth | " + " | ".join(suites) + " |", "|---|---:|" + "---|" * len(suites)]
    for family in board.FAMILIES:
        rows = [r for r in finished(results.rows, family=family) if r.get("trained_depth")]
        if not rows:
            continue
        cells = []
        for suite in suites:
            here = [r for r in rows if r["task"] == suite]
            kind = board.suite_kind(suite)
            parts = [depth_value(kind, [r[f"depth_{k}x"] for r in here]) for k in board.DEPTH_FACTORS]
            cells.append(" / ".join(parts) if here else MISSING)
        depths = span([int(r["trained_depth"]) for r in rows], str)
        lines.append(f"| {board.LABELS[family]} | {depths} | " + " | ".join(cells) + " |")
    return lines


def depth_value(kind: str, values: list) -> str:
    numbers = [float(v) for v in values if v not in ("", None)]
    if not numbers:
        return MISSING
    mean = mean_sd(numbers)[0]
    return f"{mean:.3f}" if kind == "lm" else f"{100 * mean:.1f}"


def table_markdown(results: ResultTable, scale: str) -> str:
    suites = table_suites(results.rows, scale)
    lines = [*header(scale, results), *score_table(results, suites), "", *budget_table(results, suites), "",
             *depth_table(results, suites)]
    return "\n".join(lines) + "\n"


def normalised(results: ResultTable, suites: list[str]) -> dict[tuple[str, str], tuple[float, float]]:
    """(family, suite) -> (mean score, 0..1 within the suite's column, 1 = best): one colour scale for suites
    whose units differ."""
    means = {(f, s): mean_sd([float(r["score"]) for r in finished(results.rows, task=s, family=f)])[0]
             for f in board.FAMILIES for s in suites if finished(results.rows, task=s, family=f)}
    out = {}
    for suite in suites:
        column = {f: v for (f, s), v in means.items() if s == suite}
        if not column:  # only failed rows so far: nothing to colour
            continue
        low, high = min(column.values()), max(column.values())
        higher_better = board.METRICS[board.suite_kind(suite)][2]
        for family, value in column.items():
            fraction = 0.5 if high == low else (value - low) / (high - low)
            out[(family, suite)] = (value, fraction if higher_better else 1 - fraction)
    return out


def plot_board(results: ResultTable, path: Path) -> None:
    """A heatmap of the table: colour = rank within each suite's column (1 = best), text = the mean score."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    suites = suites_present(results)
    families = list(board.FAMILIES)
    cells = normalised(results, suites)
    grid = np.full((len(families), len(suites)), np.nan)
    fig, ax = plt.subplots(figsize=(1.2 * len(suites) + 3, 0.45 * len(families) + 1.5))
    for i, family in enumerate(families):
        for j, suite in enumerate(suites):
            colour = "black"
            if (family, suite) in cells:
                value, grid[i, j] = cells[(family, suite)]
                text = f"{value:.2f}" if board.suite_kind(suite) == "lm" else f"{100 * value:.0f}"
                colour = "white" if grid[i, j] < 0.45 else "black"  # readable on viridis' dark end
            else:
                text = "n/a" if board.cannot_run(family, suite) else ""
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_facecolor("0.85")
    ax.set_xticks(range(len(suites)), suites, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(len(families)), [board.LABELS[f] for f in families], fontsize=8)
    fig.colorbar(image, ax=ax, label="within the suite: 0 = worst row, 1 = best")
    ax.set_title("Leaderboard: bits/byte (LM suites) or accuracy % (task suites), mean over seeds\n"
                 "grey: not run yet, or n/a (the family cannot run the suite)", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def write_report(out: Path, results: ResultTable, scale: str = "cpu") -> None:
    results.reload()  # rows other processes of the same study added
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "table.md", table_markdown(results, scale))
    if finished(results.rows):
        plot_board(results, out / "board.png")


__all__ = ["NOT_RUN", "PUBLISHED_ROWS", "plot_board", "published_cells", "table_markdown", "table_suites",
           "write_report"]
