"""The depth-schedule study's report (looped.experiments.depth_study): table.md and depth_schedules.png.

Every figure is over seeds: at each test-time depth the mean ± SD of the runs' held-out bits/byte per schedule,
and the paired difference random − fixed (the two schedules of one seed share their data order and
initialisation, so the difference per seed is the schedule's effect and its SD over seeds its uncertainty).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from .render import Column, groups, heading, key, markdown, panels, parameters, section, spread_of, table, write_table
from .report import each, finished, spread
from .results import ResultTable

SCHEDULES = {"fixed": "fixed depth 4", "random": "random depth, mean 4"}
PLOT = "depth_schedules.png"


def curves(results: ResultTable, depths: ResultTable) -> dict[str, dict[int, dict[int, float]]]:
    """{schedule: {seed: {depth: bits/byte}}} of the finished runs (a failed or unfinished run has no curve)."""
    done = {(str(r["seed"]), r["schedule"]) for r in finished(results.rows)}
    found: dict[str, dict[int, dict[int, float]]] = {s: {} for s in SCHEDULES}
    for row in depths.rows:
        if (str(row["seed"]), row["schedule"]) in done and row["schedule"] in found:
            found[row["schedule"]].setdefault(int(row["seed"]), {})[int(row["depth"])] = float(row["bits_per_byte"])
    return found


def differences(by_seed: dict[str, dict[int, dict[int, float]]], depth: int) -> list[float]:
    """random − fixed at one depth, one value per seed that finished both schedules."""
    fixed, random = by_seed["fixed"], by_seed["random"]
    return [random[s][depth] - fixed[s][depth] for s in sorted(set(fixed) & set(random))
            if depth in fixed[s] and depth in random[s]]


def mean_sd(values: list[float]) -> tuple[float, float]:
    """(mean, sample SD; 0 for one value): a point of a curve and the half-width of its band."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def mean_curve(per_seed: dict[int, dict[int, float]]) -> dict[int, tuple[float, float]]:
    """{depth: (mean, sample SD)} over the seeds of one schedule."""
    depths = sorted({d for curve in per_seed.values() for d in curve})
    return {d: mean_sd([curve[d] for curve in per_seed.values() if d in curve]) for d in depths}


def by_depth_table(by_seed, trained: int | None) -> list[str]:
    depths = sorted({d for runs in by_seed.values() for curve in runs.values() for d in curve})
    columns = [Column("rounds", lambda d: f"{d}" + (" (trained)" if d == trained else "")),
               *(Column(label, lambda d, s=s: spread([c[d] for c in by_seed[s].values() if d in c], 4))
                 for s, label in SCHEDULES.items()),
               Column("random − fixed, same seed", lambda d: spread(differences(by_seed, d), 4))]
    return table(columns, depths)


def best_of_mean(per_seed: dict[int, dict[int, float]]) -> str:
    """The depth where the schedule's mean curve is lowest (ties: the smallest) and that mean."""
    points = mean_curve(per_seed)
    if not points:
        return "–"
    depth = min(points, key=lambda d: (points[d][0], d))
    return f"{depth} ({points[depth][0]:.4f})"


def in_seed_order(rows: list[dict], column: str) -> list:
    """One column of the rows, by ascending seed (two processes may have added them in either order)."""
    return [r[column] for r in sorted(rows, key=lambda r: int(r["seed"]))]


def summary_table(results: ResultTable, by_seed) -> list[str]:
    columns = [key("schedule"), parameters(),
               Column("best depth of the mean curve (bits/byte)", lambda g: best_of_mean(by_seed[g["schedule"]])),
               Column("best depth, each seed", lambda g: each(in_seed_order(g.runs, "best_depth"), 0)),
               spread_of("slope past the trained depth, bits/byte per round", "slope_past_trained", 4),
               spread_of("training GFLOP (ledger)", "training_flops", 1, 1e-9)]
    return table(columns, groups(results.rows, ("schedule",), order=[(s,) for s in SCHEDULES]))


def what_was_scored(rows: list[dict], heldout_batches: int) -> str:
    sizes = sorted({int(r["scored_bytes"]) for r in finished(rows) if r.get("scored_bytes")})
    scored = " / ".join(f"{n:,}" for n in sizes) or "–"
    where = ("the whole held-out stream" if heldout_batches == 0 else
             f"the first {heldout_batches} batches of 16 blocks of the held-out stream (the same prefix for every run)")
    return f"{where}, {scored} bytes scored per run"


def write_report(out: Path, results: ResultTable, depths: ResultTable, heldout_batches: int = 0) -> None:
    """table.md (per-depth means and the per-schedule summary) and the plot, from the two CSVs."""
    write_table(out, (results, depths), lambda: markdown(document(results, depths, heldout_batches)))
    by_seed = curves(results, depths)
    if any(by_seed.values()):
        plot(Path(out) / PLOT, results.rows, by_seed, heldout_batches)


def document(results: ResultTable, depths: ResultTable, heldout_batches: int) -> list[str]:
    by_seed = curves(results, depths)
    trained = next((int(r["trained_depth"]) for r in finished(results.rows) if r.get("trained_depth")), None)
    intro = (f"Held-out bits/byte of each run's best checkpoint at every test-time depth (`looped depth RUN "
             f"--max-factor 4` on {what_was_scored(results.rows, heldout_batches)}). Each cell is mean ± SD "
             f"(n = seeds) over seeds; the last column is the difference of the two schedules at the same seed.")
    return [*heading("Fixed against random training depth, swept over test-time depth", results.rows, intro),
            *section("Held-out bits/byte by test-time depth", by_depth_table(by_seed, trained)), "",
            *section("Each schedule", summary_table(results, by_seed),
                     "Best depth: of the mean curve, and of each seed's own curve (in ascending seed order). "
                     "Slope: least squares over the depths past the trained one, per seed. Training FLOPs: the "
                     "compute ledger's count of the run's updates (the random schedule at its expected depth).")]


def plot(path: Path, rows: list[dict], by_seed, heldout_batches: int) -> None:
    """Both schedules' mean curves with a ±SD band, and their per-seed difference with its ±SD band."""
    from matplotlib.ticker import MaxNLocator

    ok = finished(rows)
    arch, params = ok[0]["arch"], int(ok[0]["parameters"])
    seeds = {s: len(runs) for s, runs in by_seed.items()}
    trained = int(ok[0]["trained_depth"])

    def draw(ax, panel):
        if panel == "curves":
            for schedule, label in SCHEDULES.items():
                band(ax, mean_curve(by_seed[schedule]), f"{label} (n={seeds[schedule]})")
            ax.set_ylabel("held-out bits/byte")
        else:
            depths = sorted({d for runs in by_seed.values() for c in runs.values() for d in c})
            diffs = {d: differences(by_seed, d) for d in depths}
            points = {d: mean_sd(v) for d, v in diffs.items() if v}
            band(ax, points, f"random − fixed, same seed (n={min(map(len, diffs.values()), default=0)})")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_ylabel("difference in held-out bits/byte")
        ax.axvline(trained, color="red", ls=":", lw=1.2, label=f"trained depth {trained}")
        ax.set_xlabel("test-time rounds (depth budget)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)

    title = (f"{arch}, {params:,} parameters, kjv ({what_was_scored(rows, heldout_batches)}), "
             f"{ok[0]['updates']} updates; mean ± SD over seeds")
    panels(path, ("curves", "difference"), draw, size=(5.2, 4.0), title=title)


def band(ax, points: dict[int, tuple[float, float]], label: str) -> None:
    depths = sorted(points)
    means = [points[d][0] for d in depths]
    sds = [points[d][1] for d in depths]
    line, = ax.plot(depths, means, marker="o", ms=3, label=label)
    ax.fill_between(depths, [m - s for m, s in zip(means, sds)], [m + s for m, s in zip(means, sds)],
                    color=line.get_color(), alpha=0.2)


__all__ = ["PLOT", "curves", "differences", "document", "mean_curve", "write_report"]
