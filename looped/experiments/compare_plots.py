"""`looped compare`, the plots (all with units):

  curves.png  held-out bits/byte against training FLOPs, one curve per row (mean over seeds at each evaluation);
  depth.png   held-out bits/byte against test-time rounds for the looped rows, fixed-depth rows as lines;
  pareto.png  held-out bits/byte against inference FLOPs per token (the looped rows at every test-time depth),
              with the Pareto front (no point both cheaper and better) drawn through it.
The compressors' rates on the same held-out bytes are drawn as the floor where they fit the axis.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..eval.plot_labels import data_name
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
    """The compressors' rates as grey lines named in the legend (two rates 0.1 bits apart would print their
    names over each other on the axis)."""
    for style, (name, bits) in zip((":", "-.", "--"), floor.get("rates", {}).items()):
        if bits <= top:
            ax.axhline(bits, color="0.5", ls=style, lw=1, label=f"{name} ({bits:.2f})")


def _title(ax, what: str, plan: dict, summary: list[dict]) -> None:
    """What the panel shows, then on what data, at what size and over how many seeds."""
    options = plan["options"]
    data = data_name({"data": options["data"]}) if isinstance(options.get("data"), dict) else "your data"
    counts = [int(s["parameters"]) for s in summary if s.get("parameters") not in (None, "")]
    size = f"{min(counts):,}–{max(counts):,} parameters" if counts else "parameters unknown"
    ax.set_title(f"{what}\n{data}, {size}, mean over {options['seeds']} seed(s)", fontsize=10)


def _readable_flops(axis, log: bool = False) -> None:
    """FLOP counts as '400 G', '1.2 T' rather than an offset '1e13' in the corner. A log axis spanning less than a
    decade shows mostly minor ticks: those at 2, 3 and 5 x a power of ten are named, the rest left blank so the
    names do not run into each other."""
    import math

    from matplotlib.ticker import EngFormatter, FuncFormatter

    name = EngFormatter(sep=" ")
    axis.set_major_formatter(name)
    if log:
        axis.set_minor_formatter(FuncFormatter(
            lambda x, pos: name(x, pos) if x > 0 and round(x / 10 ** math.floor(math.log10(x))) in (2, 3, 5) else ""))


def plot_curves(path: Path, rows: list[str], curves: list[dict], floor: dict, plan: dict, summary: list[dict]
                ) -> None:
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
    _title(ax, "held-out curve against training compute", plan, summary)
    _readable_flops(ax.xaxis)
    _floor_lines(ax, floor, ax.get_ylim()[1])
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def plot_depth(path: Path, plan: dict, rows: list[str], depths: list[dict], summary: list[dict]) -> None:
    fig, ax = _figure()
    rounds = plan["options"]["rounds"]
    scores = {s["row"]: s["bits_per_byte_mean"] for s in summary}
    for i, row in enumerate(rows):
        points = _mean_by(depths, row, "rounds")
        if points:
            ax.plot(list(points), list(points.values()), marker="o", color=f"C{i}", label=row)
        elif row in scores:  # a fixed-depth row (the plain rows, RLT-1): its score as a line
            name = f"{row} ({rounds} layers)" if row in (PLAIN, FLOPS_ROW) else f"{row} (fixed depth)"
            ax.axhline(scores[row], ls="--", lw=1, color=f"C{i}", label=name)
    ax.axvline(rounds, color="0.6", ls=":", lw=1)
    ax.set_xlabel(f"test-time rounds (trained with {rounds})")
    ax.set_ylabel("held-out bits/byte (mean over seeds)")
    _title(ax, "held-out score against test-time depth (best checkpoints)", plan, summary)
    ax.legend(fontsize=8)
    fig.tight_layout()
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
    _title(ax, "held-out score against inference compute", plan, summary)
    _readable_flops(ax.xaxis, log=True)
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def plot_all(out: Path, plan: dict, summary: list[dict], curves: list[dict], depths: list[dict], floor: dict) -> None:
    rows = CompareOptions(**plan["options"]).rows
    plot_curves(out / "curves.png", rows, curves, floor, plan, summary)
    plot_depth(out / "depth.png", plan, rows, depths, summary)
    plot_pareto(out / "pareto.png", plan, rows, summary, depths)
