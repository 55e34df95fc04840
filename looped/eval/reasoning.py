"""Evaluation of family-"reasoning" models (seed 002): accuracy over step budgets x difficulty, and its analyses.

    grid = evaluate_grid(model, test_rows, budgets=[1, 2, 4, 8])    # AccuracyGrid (budgets x difficulties)
    grid.write_csv(path); plot_heatmap(grid, path, trained_difficulties=(1, 5), trained_steps=(5, 8))
    summary = id_ood(grid, trained_difficulties=(1, 5))            # best accuracy over *sufficient* budgets
    step1 = shortcut_accuracy(grid, difficulty=12)                  # accuracy after one step on 12-hop graphs
    diag = depth_embedding_diagnostic(model, test_rows, budgets, trained_steps=8)

"Sufficient" step budgets (the paper's Table 3/4 "best over sufficient step budgets"): for a row of
difficulty d (hops, nesting depth, chain depth) the budgets T >= d. On the graph task this is exact, since
the adjacency mask moves information one hop per step, so fewer than d steps cannot see the whole path. On the
sequence tasks it is the same rule applied as a convention (seed 002: "budgets >= the difficulty where that
applies"). When no evaluated budget reaches d, the rule cannot apply and the largest budget alone counts.
Fixed-depth models ignore the budget, so every budget gives the same accuracy and the rule changes nothing.
ID difficulties are the test difficulties inside the trained range [lo, hi]; OOD ones are all others.

The depth-embedding diagnostic (seed 002 §5.2) replaces the rows of E that training never reached
(steps beyond the trained T range: rows hi .. T_max-1, 0-based) by zeros, by the last trained row (clamp), or by
fresh N(0, 1) draws (three seeds), and re-evaluates budgets beyond the trained range.
"""

from __future__ import annotations

import copy
import csv
import io
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..data.tasks.base import ReasoningBatch
from ..data.tasks.reasoning import row_hits
from ..io import atomic_save_figure, atomic_write_text

DIAGNOSTIC_VARIANTS = ("baseline", "zeros", "clamp", "reinit0", "reinit1", "reinit2")


# ============================================================================ batching


def chunks(batch: ReasoningBatch, size: int) -> Iterator[ReasoningBatch]:
    """Consecutive row slices of at most `size` rows, each trimmed of unused padding columns."""
    for start in range(0, len(batch), size):
        yield batch.select(slice(start, start + size)).trim()


def unwrap(model):
    """The model inside a DistributedDataParallel wrapper (or the model itself)."""
    return getattr(model, "module", model)


def is_step_recurrent(model) -> bool:
    """Models whose step-t state does not depend on the total budget T (depth_mode "per_step": the core).

    For them one pass with return_all=True at the largest budget yields every smaller budget's logits.
    ACT's halting budget changes the whole computation, and fixed-depth models ignore T: those run per budget.
    """
    return unwrap(model).depth_mode == "per_step"


# ============================================================================ the grid


@dataclass
class AccuracyGrid:
    """Test accuracy for each step budget (rows) and difficulty (columns), with the bucket sizes."""

    budgets: list[int]
    difficulties: list[int]
    accuracy: np.ndarray  # (len(budgets), len(difficulties)) in [0, 1]
    rows: np.ndarray  # (len(difficulties),) test rows per difficulty
    gate_means: list[float] | None = None  # mean gate z at step 1 .. max(budgets), None without a gate
    ponder_steps: dict[int, float] = field(default_factory=dict)  # ACT: mean ponder steps per difficulty

    def at(self, steps: int, difficulty: int) -> float:
        return float(self.accuracy[self.budgets.index(steps), self.difficulties.index(difficulty)])

    def to_csv_text(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["steps", "difficulty", "accuracy", "rows"])
        for i, steps in enumerate(self.budgets):
            for j, difficulty in enumerate(self.difficulties):
                writer.writerow([steps, difficulty, f"{self.accuracy[i, j]:.6f}", int(self.rows[j])])
        return buffer.getvalue()

    def write_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, self.to_csv_text())
        return path

    @classmethod
    def from_records(cls, records: Sequence[dict]) -> AccuracyGrid:
        """From rows with keys steps, difficulty, accuracy, rows (a grid CSV read by csv.DictReader)."""
        budgets = sorted({int(r["steps"]) for r in records})
        difficulties = sorted({int(r["difficulty"]) for r in records})
        accuracy = np.full((len(budgets), len(difficulties)), np.nan)
        rows = np.zeros(len(difficulties), dtype=np.int64)
        for r in records:
            j = difficulties.index(int(r["difficulty"]))
            accuracy[budgets.index(int(r["steps"])), j] = float(r["accuracy"])
            rows[j] = int(r.get("rows") or 0)
        return cls(budgets, difficulties, accuracy, rows)

    @classmethod
    def read_csv(cls, path: str | Path) -> AccuracyGrid:
        with open(path, newline="") as f:
            return cls.from_records(list(csv.DictReader(f)))

    @classmethod
    def mean(cls, grids: Sequence[AccuracyGrid]) -> AccuracyGrid:
        """Cell-wise mean of grids over the same budgets and difficulties (e.g. over seeds)."""
        first = grids[0]
        for g in grids[1:]:
            if g.budgets != first.budgets or g.difficulties != first.difficulties:
                raise ValueError("grids to average must share budgets and difficulties")
        return cls(list(first.budgets), list(first.difficulties), np.mean([g.accuracy for g in grids], axis=0),
                   first.rows.copy())


def is_fixed_depth(model) -> bool:
    """Models that ignore the step budget (fixed-depth Transformer, GNN): one pass serves every budget."""
    return unwrap(model).depth_mode == "fixed"


def logits_by_budget(model, batch: ReasoningBatch, budgets: Sequence[int]) -> dict[int, torch.Tensor]:
    """Final-step logits (n,) of `batch` at every budget in `budgets`."""
    return logits_and_trace(model, batch, budgets)[0]


def logits_and_trace(model, batch: ReasoningBatch, budgets: Sequence[int]):
    """({budget: final-step logits (n,)}, the trace of the pass at the largest budget)."""
    budgets = sorted(set(int(b) for b in budgets))
    if is_step_recurrent(model):
        every_step, trace = model(batch, budgets[-1], return_all=True, return_trace=True)  # (max budget, n)
        return {t: every_step[t - 1] for t in budgets}, trace
    if is_fixed_depth(model):
        logits, trace = model(batch, budgets[-1], return_trace=True)
        return {t: logits for t in budgets}, trace
    by_budget = {}
    for t in budgets:
        by_budget[t], trace = model(batch, t, return_trace=True)
    return by_budget, trace


@torch.no_grad()
def evaluate_grid(model, test: ReasoningBatch, budgets: Sequence[int], *, batch_size: int = 256,
                  device: torch.device | str = "cpu") -> AccuracyGrid:
    """Accuracy (prediction = logit > 0) per budget and test difficulty; records gate means and ACT ponder steps."""
    budgets = sorted(set(int(b) for b in budgets))
    if not budgets or budgets[0] < 1:
        raise ValueError(f"step budgets must be >= 1, got {budgets}")
    if len(test) == 0:
        raise ValueError("evaluate_grid: empty test set")
    was_training = model.training
    model.eval()
    difficulties = sorted(set(test.difficulty.tolist()))
    column = {d: j for j, d in enumerate(difficulties)}
    correct = np.zeros((len(budgets), len(difficulties)))
    rows = np.zeros(len(difficulties), dtype=np.int64)
    gate_sum, gate_rows, ponder_sum = None, 0, np.zeros(len(difficulties))
    try:
        for chunk in chunks(test, batch_size):
            chunk = chunk.to(device)
            cols = torch.tensor([column[int(d)] for d in chunk.difficulty.tolist()])
            rows += np.bincount(cols.numpy(), minlength=len(difficulties))
            by_budget, trace = logits_and_trace(model, chunk, budgets)  # trace: the pass at the largest budget
            for i, (t, logits) in enumerate(by_budget.items()):
                hit = row_hits(logits, chunk.labels)
                correct[i] += np.bincount(cols.numpy(), weights=hit.numpy(), minlength=len(difficulties))
            if trace.ponder is not None:
                per_row = _ponder_per_row(trace.ponder)
                ponder_sum += np.bincount(cols.numpy(), weights=per_row.numpy(), minlength=len(difficulties))
            gates = trace.gate_means
            if gates is not None and is_step_recurrent(model):
                weighted = gates.double().cpu() * len(chunk)
                gate_sum = weighted if gate_sum is None else gate_sum + weighted
                gate_rows += len(chunk)
    finally:
        model.train(was_training)
    grid = AccuracyGrid(budgets, difficulties, correct / rows[None, :], rows)
    if gate_sum is not None:
        grid.gate_means = (gate_sum / gate_rows).tolist()
    if ponder_sum.any():
        grid.ponder_steps = {d: float(ponder_sum[j] / rows[j]) for d, j in column.items()}
    return grid


def _ponder_per_row(stats) -> torch.Tensor:
    """Mean ACT steps over each row's real positions (n,)."""
    real = stats.real.to(stats.steps.dtype)
    return ((stats.steps * real).sum(1) / real.sum(1).clamp_min(1)).double().cpu()


@torch.no_grad()
def validation_metrics(model, rows: ReasoningBatch, steps: int, *, batch_size: int, max_batches: int = 0,
                       device: torch.device | str = "cpu") -> dict:
    """Final-step BCE and accuracy at budget `steps` (the Trainer's validation; "loss" picks the best checkpoint).

    The loss is the plain BCE of the final step: ACT's ponder cost is a training penalty, not a validation score.
    """
    was_training = model.training
    model.eval()
    total_loss, total_correct, seen = 0.0, 0.0, 0
    try:
        for i, chunk in enumerate(chunks(rows, batch_size)):
            if max_batches and i >= max_batches:
                break
            chunk = chunk.to(device)
            logits = model(chunk, steps).float()
            total_loss += F.binary_cross_entropy_with_logits(logits, chunk.labels.float(), reduction="sum").item()
            total_correct += row_hits(logits, chunk.labels).sum().item()
            seen += len(chunk)
    finally:
        model.train(was_training)
    if seen == 0:
        raise ValueError("validation scored no rows (empty validation set)")
    return {"loss": total_loss / seen, "accuracy": total_correct / seen, "steps": steps, "rows": seen}


# ============================================================================ analyses


def sufficient_budgets(difficulty: int, budgets: Sequence[int]) -> list[int]:
    """Budgets T >= difficulty; the largest budget alone when none reaches it (see the module docstring)."""
    enough = [t for t in budgets if t >= difficulty]
    return enough or [max(budgets)]


def id_ood(grid: AccuracyGrid, trained_difficulties: tuple[int, int]) -> dict:
    """Best accuracy over sufficient budgets per difficulty; ID / OOD means over the difficulties in / out of range.

    Returns {"id", "ood" (None when no such difficulty), "best": {difficulty: accuracy},
    "best_steps": {difficulty: budget}, "id_difficulties", "ood_difficulties"}.
    """
    lo, hi = trained_difficulties
    best, best_steps = {}, {}
    for j, d in enumerate(grid.difficulties):
        candidates = sufficient_budgets(d, grid.budgets)
        scores = [(float(grid.accuracy[grid.budgets.index(t), j]), -t) for t in candidates]
        accuracy, neg_steps = max(scores)  # ties: the smallest budget
        best[d], best_steps[d] = accuracy, -neg_steps
    inside = [d for d in grid.difficulties if lo <= d <= hi]
    outside = [d for d in grid.difficulties if not lo <= d <= hi]
    return {
        "id": statistics.fmean(best[d] for d in inside) if inside else None,
        "ood": statistics.fmean(best[d] for d in outside) if outside else None,
        "best": best, "best_steps": best_steps, "id_difficulties": inside, "ood_difficulties": outside,
    }


def shortcut_accuracy(grid: AccuracyGrid, difficulty: int = 12, steps: int = 1) -> float | None:
    """Accuracy after `steps` step(s) on rows of `difficulty` (graph: 12 hops, where an honest model is at chance).

    None when the grid lacks that cell.
    """
    if steps not in grid.budgets or difficulty not in grid.difficulties:
        return None
    return grid.at(steps, difficulty)


def depth_embedding_variant(model, variant: str, trained_steps: int):
    """A copy of a depth-recurrent core whose untrained depth-embedding rows (t >= trained_steps, 0-based) are
    replaced: "zeros"; "clamp" (= row trained_steps - 1, the last trained one); "reinitK" (fresh N(0, 1) rows from
    seed K, like nn.Embedding's own initialisation); "baseline" leaves them as they are."""
    if variant not in DIAGNOSTIC_VARIANTS and not (variant.startswith("reinit") and variant[6:].isdigit()):
        raise ValueError(f"unknown depth-embedding variant {variant!r} (known: {', '.join(DIAGNOSTIC_VARIANTS)})")
    if not is_step_recurrent(model):  # the diagnostic resumes a per-step core after its trained steps
        raise ValueError(f"{type(unwrap(model)).__name__} is not a per-step core (depth_mode "
                         f"{unwrap(model).depth_mode!r}): no depth-embedding diagnostic")
    rows = unwrap(model).depth_embedding.weight.shape[0]
    if not 1 <= trained_steps <= rows:
        raise ValueError(f"trained_steps must be in 1..{rows}, got {trained_steps}")
    copy_ = copy.deepcopy(unwrap(model))
    weight = copy_.depth_embedding.weight
    untrained = slice(trained_steps, rows)
    with torch.no_grad():
        if variant == "zeros":
            weight[untrained] = 0
        elif variant == "clamp":
            weight[untrained] = weight[trained_steps - 1]
        elif variant.startswith("reinit"):
            generator = torch.Generator().manual_seed(int(variant[6:]))
            fresh = torch.randn(rows - trained_steps, weight.shape[1], generator=generator, dtype=weight.dtype)
            weight[untrained] = fresh.to(weight.device)
    return copy_


@torch.no_grad()
def beyond_range_grids(model, test: ReasoningBatch, budgets: Sequence[int], trained_steps: int,
                       variants: Sequence[str], *, batch_size: int = 256,
                       device: torch.device | str = "cpu") -> dict[str, AccuracyGrid]:
    """Accuracy grids over `budgets` (all > trained_steps) for each depth-embedding variant of a core.

    The variants differ only in rows >= trained_steps, so the state after the trained steps is computed once
    per batch and only the steps beyond it run per variant: the same numbers as evaluate_grid on each variant
    (the core's own perception / step / readout, in the order its forward uses them), at a fraction of the cost.
    """
    budgets = sorted(set(int(b) for b in budgets))
    if not budgets or budgets[0] <= trained_steps:
        raise ValueError(f"beyond-range budgets must all exceed trained_steps {trained_steps}, got {budgets}")
    core = unwrap(model)
    core.check_steps(budgets[-1])
    copies = {name: depth_embedding_variant(core, name, trained_steps).to(device).eval() for name in variants}
    was_training = core.training
    core.eval()
    difficulties = sorted(set(test.difficulty.tolist()))
    column = {d: j for j, d in enumerate(difficulties)}
    correct = {name: np.zeros((len(budgets), len(difficulties))) for name in variants}
    rows = np.zeros(len(difficulties), dtype=np.int64)
    try:
        for chunk in chunks(test, batch_size):
            chunk = chunk.to(device)
            cols = np.array([column[int(d)] for d in chunk.difficulty.tolist()])
            rows += np.bincount(cols, minlength=len(difficulties))
            shared, mask = core.perceive(chunk)
            shared = core.run_steps(shared, mask, 0, trained_steps)  # rows 0 .. trained_steps-1: in every variant
            for name, variant in copies.items():
                h = shared
                for t in range(trained_steps, budgets[-1]):
                    h = variant.run_steps(h, mask, t, t + 1)
                    if t + 1 in budgets:
                        hit = row_hits(variant.readout(h, chunk), chunk.labels).numpy()
                        correct[name][budgets.index(t + 1)] += np.bincount(cols, weights=hit,
                                                                          minlength=len(difficulties))
    finally:
        core.train(was_training)
    return {name: AccuracyGrid(budgets, difficulties, correct[name] / rows[None, :], rows.copy())
            for name in variants}


def depth_embedding_diagnostic(model, test: ReasoningBatch, budgets: Sequence[int], trained_steps: int, *,
                               variants: Sequence[str] = DIAGNOSTIC_VARIANTS, batch_size: int = 256,
                               device: torch.device | str = "cpu") -> dict:
    """Accuracy over the beyond-range grid (budgets > trained_steps that the table covers) for each variant.

    Returns {"budgets": [...], "variants": {name: {"accuracy": mean over the grid's cells, "change":
    accuracy - baseline's, in points of [0, 1]}}, "max_abs_change": over the non-baseline variants}; empty
    budgets (and no variants) when no evaluated budget lies beyond the trained range.
    """
    rows = unwrap(model).depth_embedding.weight.shape[0]
    beyond = sorted(t for t in set(budgets) if trained_steps < t <= rows)
    result: dict = {"budgets": beyond, "trained_steps": trained_steps, "variants": {}, "max_abs_change": None}
    if not beyond:
        return result
    grids = beyond_range_grids(model, test, beyond, trained_steps, variants, batch_size=batch_size, device=device)
    for variant, grid in grids.items():
        result["variants"][variant] = {"accuracy": float(grid.accuracy.mean())}
    base = result["variants"].get("baseline", {}).get("accuracy")
    if base is not None:
        for entry in result["variants"].values():
            entry["change"] = entry["accuracy"] - base
        changes = [abs(v["change"]) for k, v in result["variants"].items() if k != "baseline"]
        result["max_abs_change"] = max(changes) if changes else 0.0
    return result


# ============================================================================ plots


def _boundary_positions(values: Sequence[int], lo: int, hi: int) -> list[float]:
    """Cell edges (in index units) where membership in [lo, hi] changes along a categorical axis."""
    inside = [lo <= v <= hi for v in values]
    return [i + 0.5 for i in range(len(values) - 1) if inside[i] != inside[i + 1]]


def plot_heatmap(grid: AccuracyGrid, path: str | Path, *, trained_difficulties: tuple[int, int] | None = None,
                 trained_steps: tuple[int, int] | None = None, title: str = "", difficulty_name: str = "difficulty",
                 annotate: bool = True, fixed_depth: str | None = None, chance: float | None = 0.5) -> Path:
    """Accuracy heatmap, budgets up the y axis and difficulty along x, with the training boundaries dashed
    (seed 002 Figs. 2-4): vertical lines bound the trained difficulty range, horizontal ones the trained T range.
    `fixed_depth` (a label such as "6 layers") draws one row for a model that ignores T. Colours span the whole
    0-1 accuracy range with `chance` (balanced yes/no labels: 0.5) marked on the colour bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if fixed_depth is not None:  # every budget's row is the same pass: show it once, without a T range
        grid = AccuracyGrid(grid.budgets[:1], grid.difficulties, grid.accuracy[:1], grid.rows)
        trained_steps = None
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * len(grid.difficulties), 1.2 + 0.42 * max(len(grid.budgets), 3)))
    image = ax.imshow(grid.accuracy, origin="lower", cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(grid.difficulties)), [str(d) for d in grid.difficulties])
    ax.set_yticks(range(len(grid.budgets)), [fixed_depth] if fixed_depth else [str(t) for t in grid.budgets])
    ax.set_xlabel(difficulty_name)
    ax.set_ylabel("fixed depth (T ignored)" if fixed_depth else "thinking steps T")
    if annotate:
        for i in range(len(grid.budgets)):
            for j in range(len(grid.difficulties)):
                value = grid.accuracy[i, j]
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if value > 0.6 else "white")  # viridis turns light above 0.6
    if trained_difficulties is not None:
        for x in _boundary_positions(grid.difficulties, *trained_difficulties):
            ax.axvline(x, color="red", ls="--", lw=1.2)
    if trained_steps is not None:
        for y in _boundary_positions(grid.budgets, *trained_steps):
            ax.axhline(y, color="red", ls="--", lw=1.2)
    bar = fig.colorbar(image, ax=ax, label="accuracy")
    if chance is not None:  # where a guess lands: a cell at this colour learned nothing
        bar.ax.axhline(chance, color="red", lw=1.5)
        ticks = sorted({0.0, 0.25, 0.5, 0.75, 1.0, chance})  # a quarter apart: readable on a one-row bar
        bar.set_ticks(ticks, labels=[f"{t:g} chance" if t == chance else f"{t:g}" for t in ticks])
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)
    return path


def plot_gate_means(panels: dict[str, dict[str, Sequence[float]]], path: str | Path,
                    trained_steps: dict[str, int] | None = None, size: str = "") -> Path:
    """Mean update-gate value z (0 = keep the state, 1 = replace it) per thinking step, one panel per task and one
    line per run (seed 002 §5.2: no jump at the trained-range boundary, marked red where `trained_steps` gives
    the largest trained budget). `size` ("65,089–205,441 parameters") goes into the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.6 * max(len(panels), 1), 3.6), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels.items()):
        for name, values in series.items():
            ax.plot(range(1, len(values) + 1), values, marker=".", label=name)
        if trained_steps and title in trained_steps:
            ax.axvline(trained_steps[title] + 0.5, color="red", ls="--", lw=1, label="largest trained T")
        ax.set(xlabel="thinking step t", ylabel="mean gate z (0 = keep, 1 = replace)", title=title, ylim=(0, 1))
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    core = f"Depth-recurrent core ({size})" if size else "Depth-recurrent core"
    fig.suptitle(f"{core}: mean gate per step on the test set (one line per run)", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)
    return path
