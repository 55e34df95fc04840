"""Seed 002's claims (depth-recurrent reasoning core), judged from results/drt_<scale>/results.csv and grids/.

A grid is one run's test accuracy per (step budget T, difficulty). "Sufficient budgets" are T >= difficulty
(the largest budget alone where none reaches it), as in the study's table; each claim names its selection.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..eval.reasoning import AccuracyGrid
from ..eval.stats import mean_sd
from .claims import (
    Claim, ClaimSet, Evidence, ahead, at_least, at_most, halfway, read_rows, values,
)
from .drt import run_name


def _grid(out: Path, task: str, arch: str, seed: str, alpha: float = 0.0) -> dict[tuple[int, int], float]:
    """{(steps, difficulty): accuracy %} of one run's grid CSV ({} when absent)."""
    path = Path(out) / "grids" / f"{run_name(task, arch, alpha, int(seed))}.csv"
    if not path.exists():
        return {}
    grid = AccuracyGrid.read_csv(path)
    cells = ((t, d, grid.at(t, d)) for t in grid.budgets for d in grid.difficulties)
    return {(t, d): 100 * a for t, d, a in cells if not math.isnan(a)}  # NaN: a cell the run did not score


def grid_by_seed(out: Path, rows: list[dict], task: str, arch: str, select) -> dict[str, float]:
    """{seed: select(grid)} for every finished (task, arch, alpha 0) run that has a grid, in row order."""
    seeds = [r["seed"] for r in rows if r["task"] == task and r["arch"] == arch and float(r["alpha"]) == 0.0]
    found = {s: select(g) for s in seeds if (g := _grid(out, task, arch, s))}
    return {s: x for s, x in found.items() if x is not None}


def grid_values(out: Path, rows: list[dict], task: str, arch: str, select) -> list[float]:
    """select(grid) for every finished (task, arch, alpha 0) run that has a grid, in row order."""
    return list(grid_by_seed(out, rows, task, arch, select).values())


def worst_over(difficulty: int, min_steps: int):
    """The lowest accuracy at `difficulty` over every budget T >= min_steps (the paper: "with >= 10 steps")."""
    return lambda g: min((a for (t, d), a in g.items() if d == difficulty and t >= min_steps), default=None)


def best_sufficient(difficulties: tuple[int, ...]):
    """Mean over `difficulties` of the best accuracy over budgets T >= difficulty (largest budget if none)."""
    def select(g):
        per = []
        for d in difficulties:
            budgets = sorted(t for (t, dd) in g if dd == d)
            if not budgets:
                return None
            enough = [t for t in budgets if t >= d] or budgets[-1:]
            per.append(max(g[(t, d)] for t in enough))
        return sum(per) / len(per)
    return select


def hops(rows: list[dict], h: int, arch: str = "drt") -> tuple[list[float], list[str]]:
    """Best accuracy over sufficient budgets at `h` hops per graph run, and the budget that reached it."""
    accs, budgets = [], []
    for row in rows:
        if row["task"] == "graph" and row["arch"] == arch and float(row["alpha"]) == 0.0:
            cells = dict(cell.split(":") for cell in row["best_by_difficulty"].split())
            if str(h) in cells:
                acc, steps = cells[str(h)].split("@")
                accs.append(100 * float(acc))
                budgets.append(steps)
    return accs, budgets


def less_spread(a: tuple[str, list[float]], b: tuple[str, list[float]]) -> Evidence:
    """Row a's seed-to-seed SD is below row b's (the stability claim): yes with >= 5 seeds each, partly with
    >= 3; an SD needs 2 seeds."""
    (na, xs), (nb, ys) = a, b
    if len(xs) < 2 or len(ys) < 2:
        short = na if len(xs) < 2 else nb
        return Evidence(f"{short}: {len(xs) if short == na else len(ys)} seed(s), an SD needs 2", "not run")
    sa, sb = mean_sd(xs)[1], mean_sd(ys)[1]
    n = min(len(xs), len(ys))
    verdict = "no" if sa >= sb else ("yes" if n >= 5 else "partly")
    return Evidence(f"SD of {na} {sa:.1f} (n={len(xs)}) vs {nb} {sb:.1f} (n={len(ys)})", verdict,
                    f"SD difference {sb - sa:+.1f} points")


def drt_claims(out: Path) -> list[Claim]:
    rows = read_rows(Path(out) / "results.csv")

    def ood(task: str, arch: str, alpha: float = 0.0) -> tuple[str, list[float]]:
        xs = [x for r in rows if r["task"] == task and r["arch"] == arch and float(r["alpha"]) == alpha
              for x in values([r], "ood_accuracy", 100.0)]
        return f"{arch} OOD" + (f" (α {alpha:g})" if alpha else ""), xs

    def step1(alpha: float) -> tuple[str, list[float]]:
        return (f"α {alpha:g} step-1 12-hop",
                [100 * float(r["step1_12hop"]) for r in rows if r["task"] == "graph" and r["arch"] == "drt"
                 and float(r["alpha"]) == alpha and r["step1_12hop"]])

    eight, eight_budgets = hops(rows, 8)
    logic14 = grid_values(out, rows, "logic", "drt", worst_over(14, 10))
    logic14_longer = grid_values(out, rows, "logic_1.5x", "drt", worst_over(14, 10))
    family67 = grid_values(out, rows, "family", "drt", best_sufficient((6, 7)))
    decued67 = grid_values(out, rows, "family_decued", "drt", best_sufficient((6, 7)))
    decued67_longer = grid_values(out, rows, "family_decued_2x", "drt", best_sufficient((6, 7)))
    sufficient = "best over sufficient budgets (T ≥ difficulty)"
    return [
        Claim("Graph: the core extrapolates to unseen path lengths (trained 1–5 hops)", "ID / OOD 100 / 75",
              f"OOD = mean over 6–12 hops, {sufficient}; bar 62.5 (halfway 50 → 75)",
              lambda: [at_least(*ood("graph", "drt"), halfway(50, 75))]),
        Claim("Graph frontier: enough steps solve 8-hop paths", "≈ 100 % at 8 hops with T ≥ 8 (seed 42)",
              f"8 hops, {sufficient}; ours reached it at T = {', '.join(eight_budgets) or '–'}; bar 75",
              lambda: [at_least("8-hop", eight, halfway(50, 100))]),
        Claim("Fixed-depth baselines do not extrapolate on graph", "OOD: core 75; Transformer 57, GNN 51, UT+ACT 62",
              f"graph OOD, {sufficient}; core ahead of each",
              lambda: [ahead(ood("graph", "drt"), ood("graph", a)) for a in ("fixed_transformer", "gnn", "ut_act")]),
        Claim("Silent thinking does not learn the step-1 shortcut; per-step supervision does",
              "12-hop at T = 1: ≈ 50 (α = 0) vs 64–69 (α > 0)",
              "12-hop queries at one step; bar 58.25 (halfway 50 → 66.5)",
              lambda: [at_most(*step1(0.0), halfway(50, 66.5)),
                       *(at_least(*step1(a), halfway(50, 66.5)) for a in (0.1, 0.5, 1.0))]),
        Claim("The stability recipe (gate + LayerScale) lowers seed variance on graph",
              "OOD: core 75 vs no LayerScale / no gate 71 ± 6", "graph OOD, sample SD over seeds",
              lambda: [less_spread(ood("graph", "drt"), ood("graph", "drt_tied"))]),
        Claim("Logic: ≥ 90 % at depth 14 with T ≥ 10", "≥ 0.90 at depth 14 for every T ≥ 10 (ID / OOD ≈ 100 / ≈ 96)",
              "depth 14, the lowest accuracy over T = 10–24 per seed (every budget the claim covers); bar 90 "
              "(the paper's own)", lambda: [at_least("depth 14", logic14, 90.0)]),
        # Our CPU schedule is shorter than the paper's and a seed was still rising when it ended: the same claim
        # under 1.5x the updates tells a budget shortfall from a recipe that cannot get there.
        Claim("Logic, 1.5× our CPU updates: ≥ 90 % at depth 14 with T ≥ 10", "≥ 0.90 at depth 14 for every T ≥ 10",
              "recipe logic_1.5x (the CPU logic recipe, schedule 1.5× longer); selection and bar as above",
              lambda: [at_least("depth 14, 1.5× updates", logic14_longer, 90.0)]),
        Claim("Family: above chance beyond the trained depths (2–5)", "depths 6–7 ≈ 66",
              f"mean of depths 6 and 7, {sufficient}; bar 58 (halfway 50 → 66); the paper's generator, "
              "then the de-cued one", lambda: [at_least("family 6–7", family67, halfway(50, 66)),
                                               at_least("de-cued 6–7", decued67, halfway(50, 66))]),
        Claim("Family (de-cued), 2× our CPU updates: above chance at depths 6–7", "depths 6–7 ≈ 66",
              "recipe family_decued_2x (one seed: a budget probe); selection and bar as above",
              lambda: [at_least("de-cued 6–7, 2× updates", decued67_longer, halfway(50, 66))]),
        Claim("Untrained depth-embedding rows do not matter (graph)", "≤ 0.5 points change beyond the trained range",
              "largest change of OOD accuracy when untrained rows are zeroed / copied / re-drawn; bar 0.5 points",
              lambda: [at_most("max change", [x for r in rows if r["task"] == "graph" and r["arch"] == "drt"
                                              and float(r["alpha"]) == 0.0
                                              for x in values([r], "diagnostic_max_change", 100.0)], 0.5)]),
    ]


TITLE = "Seed 002 (depth-recurrent reasoning core): claims at {scale} scale"
INTRO = ("Each claim of the paper that this study can test, its figure, and ours from `results.csv` and `grids/` "
         "(regenerate: `looped reproduce drt --scale {scale} --report`). Accuracies in %, chance 50 %.")


CLAIMS = ClaimSet(TITLE, INTRO, drt_claims)


__all__ = ["CLAIMS", "drt_claims"]
