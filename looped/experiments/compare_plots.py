"""`looped compare`, the plots (all with units):

  curves.png  held-out bits/byte against training FLOPs, one curve per row (mean over seeds at each evaluation);
  depth.png   held-out bits/byte against test-time rounds for the looped rows, the plain rows as lines;
  pareto.png  held-out bits/byte against inference FLOPs per token (the looped rows at every test-time depth),
              with the Pareto front (no point both cheaper and better) drawn through it.
The compressors' rates on the same held-out bytes are drawn as the floor where they fit the axis.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..eval.stats import mean_sd
from ..io import atomic_save_figure
from ..models import build_model, get_arch
from ..models.ledger import model_ledger
from .compare_plan import FLOPS_ROW, PLAIN, CompareOptions, model_section


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 4.5))


def _mean_by(rows: list[dict], row: str, x: str) -> dict[float, float]:
    """{x: mean bits/byte over seeds} of one row."""
    points: dict[float, list[float]] = {}
    for r in rows:
        if r["row"] == row:
            points.setdefault(float(r[x]), []).append(float(r["bits_per_byte"]))
    return {k: mean_sd(v)[0] for k, v in sorted(points.items())}


def _floor_lines(ax, floor: dict, top: float) -> None:
    for i, (name, bits) in enumerate(floor.get("rates", {}).items()):
        if bits <= top:
            ax.axhline(bits, color="0.5", ls=":", lw=1)
            ax.text(ax.get_xlim()[0], bits, f" {name}", va="bottom", fontsize=7, color="0.4")


def plot_curves(path: Path, rows: list[str], curves: list[dict], floor: dict) -> None:
    fig, ax = _figure()
    for i, row in enumerate(rows):
        by_step: dict[int, list[dict]] = {}
        for r in curves:
            if r["row"] == row:
                by_step.setdefault(int(r["step"]), []).append(r)
        if by_step:
            xs = [float(v[0]["flops"]) for _, v in sorted(by_step.items())]
            ys = [mean_sd([float(r["bits_per_byte"]) for r in v])[0] for _, v in sorted(by_step.items())]
            ax.plot(xs, ys, marker=".", ms=3, color=f"C{i}", label=row)
    ax.set_xlabel("training FLOPs (compute ledger: 3 x forward)")
    ax.set_ylabel("held-out bits/byte (mean over seeds)")
    ax.set_title("held-out curve against training compute")
    _floor_lines(ax, floor, ax.get_ylim()[1])
    ax.legend(fontsize=8)
    atomic_save_figure(fig, path)


def plot_depth(path: Path, rows: list[str], depths: list[dict], summary: list[dict], rounds: int) -> None:
    fig, ax = _figure()
    for i, row in enumerate(rows):
        points = _mean_by(depths, row, "rounds")
        if points:
            ax.plot(list(points), list(points.values()), marker="o", color=f"C{i}", label=row)
    for s in summary:
        if s["row"] in (PLAIN, FLOPS_ROW):
            ax.axhline(s["bits_per_byte_mean"], ls="--", lw=1, color=f"C{rows.index(s['row'])}",
                       label=f"{s['row']} ({rounds} layers)")
    ax.axvline(rounds, color="0.6", ls=":", lw=1)
    ax.set_xlabel(f"test-time rounds (trained with {rounds})")
    ax.set_ylabel("held-out bits/byte (mean over seeds)")
    ax.set_title("held-out score against test-time depth (best checkpoints)")
    ax.legend(fontsize=8)
    atomic_save_figure(fig, path)


def depth_flops(plan: dict, row: str, rounds: int) -> float:
    """Inference FLOPs per token of a row at `rounds` test-time rounds (the ledger, on the meta device)."""
    options = CompareOptions(**plan["options"])
    fields = model_section(plan["widths"], row)
    with torch.device("meta"):
        model = build_model(get_arch(fields.pop("arch")).config(**fields))
    return model_ledger(model, options.context, rounds).per_token


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both cost (x) and bits/byte (y), by increasing cost."""
    front, best = [], float("inf")
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front


def plot_pareto(path: Path, plan: dict, rows: list[str], summary: list[dict], depths: list[dict]) -> None:
    fig, ax = _figure()
    everything = []
    for i, row in enumerate(rows):
        by_rounds = _mean_by(depths, row, "rounds")
        if by_rounds:
            points = [(depth_flops(plan, row, int(r)), bits) for r, bits in by_rounds.items()]
        else:
            points = [(s["inference_flops_per_token"], s["bits_per_byte_mean"]) for s in summary if s["row"] == row]
        if points:
            ax.plot(*zip(*points), marker="o", ls="-" if len(points) > 1 else "", color=f"C{i}", label=row)
            everything += points
    front = pareto_front(everything)
    if front:
        ax.step(*zip(*front), where="post", color="k", lw=1, alpha=0.6, label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel(f"inference FLOPs per token (context {plan['options']['context']}; looped rows at 1 .. 2 x depth)")
    ax.set_ylabel("held-out bits/byte (mean over seeds)")
    ax.set_title("score against inference compute")
    ax.legend(fontsize=8)
    atomic_save_figure(fig, path)


def plot_all(out: Path, plan: dict, summary: list[dict], curves: list[dict], depths: list[dict], floor: dict) -> None:
    rows = CompareOptions(**plan["options"]).rows
    plot_curves(out / "curves.png", rows, curves, floor)
    plot_depth(out / "depth.png", rows, depths, summary, plan["options"]["rounds"])
    plot_pareto(out / "pareto.png", plan, rows, summary, depths)
