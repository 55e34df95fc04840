"""`looped reproduce clw --scale cpu`: all seven rows x two corpus samples x seeds 11/23/37, resumable.

Each run trains a CPU recipe (configs/clw/cpu/<row>.yaml + configs/clw/data/cpu_<corpus>.yaml, written by
looped.experiments.clw), scores the whole held-out tail at the final checkpoint (seed 000 eq. 9), then
scores the looped rows again at test-time rounds 1..8. A finished run is a line in results.csv and is
never trained again; an interrupted run resumes from its last checkpoint. The held-out score is also kept by
target position (positions.csv: doubling buckets 1, 2-3, ..., 128-255, 256-512), which shows whether a row's gain
comes from using more context; finished runs that lack it are scored again from their folder when it exists.
"""

from __future__ import annotations

from pathlib import Path

from ..config import from_dict, merge
from ..data import load_streams, to_blocks
from ..eval import evaluate_lm
from ..io import atomic_save_figure, atomic_write_text
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train.config import one_budget
from . import clw
from .clw_claims import CLAIMS
from ..eval.stats import mean_sd
from .report import cell, spread
from .results import OVERRIDES, ResultTable, overrides_note
from .study import Axis, Flag, Recipe, RunSummary, StudySpec, pending_runs, register_study

COLUMNS = ["corpus", "row", "arch", "seed", "parameters", "targets", "nll", "ppl", "bits_per_byte",
           "heldout_targets", "train_seconds", "updates", "status", "machine"]
ROUND_COLUMNS = ["corpus", "row", "seed", "rounds", "nll", "bits_per_byte"]
EXIT_COLUMNS = ["corpus", "row", "seed", "threshold", "nll", "bits_per_byte", "mean_rounds_used"]
POSITION_COLUMNS = ["corpus", "row", "seed", "first", "last", "nll", "bits_per_byte"]
EXIT_THRESHOLDS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1)
TEST_ROUNDS = tuple(range(1, 9))

# seed 000 Table 3 (small budget, held-out PPL per symbol, mean over seeds) where the seed reports it
PAPER_SMALL_PPL = {("enwik8", "workspace"): 3.8968, ("enwik8", "conditioned_dense"): 3.8431,
                   ("tinystories", "workspace"): 2.1732, ("tinystories", "conditioned_dense"): 2.2225}


def run_config(row: str, corpus: str, seed: int, overrides: dict | None = None, *, scale: str = "cpu",
               budget: str = "small") -> RunConfig:
    """cpu: the CPU recipe on a corpus sample (clw.CPU_DATA); full: the seed's recipe on the official corpus."""
    ffn_dim, _ = clw.solve_budget(budget)[row]
    recipe, data_section = (clw.CPU_RECIPE, clw.CPU_DATA) if scale == "cpu" else (clw.RECIPES[budget], clw.FULL_DATA)
    data = {"model": clw.model_section(budget, row, ffn_dim), **recipe, "data": data_section[corpus]}
    data = merge(data, {"train": {"seed": seed}})
    return from_dict(RunConfig, one_budget(merge(data, overrides or {}), overrides or {}))


def results_table(out: Path) -> ResultTable:
    return ResultTable(Path(out) / "results.csv", COLUMNS, ["corpus", "row", "seed"], extra=(OVERRIDES,))


class ClwStudy:
    """Seed 000's study: every row x corpus x seed, held-out scores by position, test-time rounds and the
    early-exit sweep of the looped rows."""

    trains = True

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 budget: str = "small"):
        self.out, self.runs, self.scale, self.budget, self.overrides = Path(out), Path(runs), scale, budget, overrides
        self.results = results_table(self.out)
        self.by_rounds = ResultTable(self.out / "rounds.csv", ROUND_COLUMNS, ["corpus", "row", "seed", "rounds"])
        self.exits = ResultTable(self.out / "early_exit.csv", EXIT_COLUMNS, ["corpus", "row", "seed", "threshold"])
        self.positions = positions_table(self.out)

    def config(self, key: dict) -> RunConfig:
        return run_config(key["row"], key["corpus"], key["seed"], self.overrides, scale=self.scale,
                          budget=self.budget)

    def folder(self, key: dict) -> Path:
        return run_folder(self.runs, key)

    def failure_key(self, key: dict, config: RunConfig) -> dict:
        return {**key, "arch": config.model.arch}

    def prepare(self, plan: list[dict], log) -> None:
        backfill_positions(plan, self.results, self.positions, self.runs, log)

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        corpus, seed, row = key["corpus"], key["seed"], key["row"]
        model, blocks, unit = heldout_model(run.folder, corpus)
        score = evaluate_lm(model, blocks, batch_size=16, unit=unit, by_position=True)
        record_positions(self.positions, key, score["by_position"])
        counts = model.parameter_counts()
        self.results.add({"corpus": corpus, "row": row, "arch": config.model.arch, "seed": seed,
                          "parameters": counts["total"], "targets": run.targets,
                          "nll": cell(score["nll"]), "ppl": cell(score["ppl"]),
                          "bits_per_byte": cell(score["bits_per_byte"]), "heldout_targets": score["targets"],
                          "train_seconds": f"{run.seconds:.1f}", "updates": run.updates, "status": "ok"})
        if row in clw.LOOPED_ROWS:
            for rounds in TEST_ROUNDS:
                r = evaluate_lm(model, blocks, batch_size=16, unit=unit, rounds=rounds)
                self.by_rounds.add({"corpus": corpus, "row": row, "seed": seed, "rounds": rounds,
                                    "nll": cell(r["nll"]), "bits_per_byte": cell(r["bits_per_byte"])})
            early_exit_sweep(model, blocks, unit, key, self.exits)

    def report(self) -> None:
        write_report(self.out, self.results, self.by_rounds, self.exits, self.positions,
                     scale=self.scale if self.scale == "cpu" else self.budget)


def heldout_model(folder: Path, corpus: str):
    """(model, held-out blocks, unit) of a finished run, from its last checkpoint."""
    model, config = load_model(ckpt.run_checkpoint(folder))
    streams = load_streams(config.data)
    return model, to_blocks(streams.heldout, config.data.block_size, name=f"{corpus} held-out"), streams.unit


def positions_table(out: Path) -> ResultTable:
    return ResultTable(Path(out) / "positions.csv", POSITION_COLUMNS, ["corpus", "row", "seed", "first"])


def run_folder(runs: Path, key: dict) -> Path:
    return runs / key["corpus"] / key["row"] / f"seed{key['seed']}"


def record_positions(table: ResultTable, key: dict, buckets: list[dict]) -> None:
    table.add_many([{**key, "first": b["first"], "last": b["last"], "nll": f"{b['nll']:.6f}",
                     "bits_per_byte": f"{b['bits']:.6f}"} for b in buckets])


def backfill_positions(plan: list[dict], results: ResultTable, positions: ResultTable, runs: Path, log) -> None:
    """Score by position the finished runs that have no positions rows yet (runs finished before the study
    kept them), where the run folder is still on disk; each such run is claimed like a training run."""
    todo = [key for key in plan if results.has(**key, status="ok") and not positions.has(**key)
            and ckpt.find_checkpoint(run_folder(runs, key) / "checkpoints" / "last") is not None]
    for key in pending_runs(todo, positions, log=log):
        log(f"scoring by position: {key['corpus']} / {key['row']} / seed {key['seed']}")
        model, blocks, unit = heldout_model(run_folder(runs, key), key["corpus"])
        record_positions(positions, key, evaluate_lm(model, blocks, batch_size=16, unit=unit,
                                                     by_position=True)["by_position"])


def early_exit_sweep(model, blocks, unit: str, key: dict, table: ResultTable) -> None:
    """Held-out bits/byte and mean rounds used at every early-exit threshold, for one trained looped run.
    Run right after training (like the rounds sweep) because run folders do not outlive a session here."""
    for threshold in EXIT_THRESHOLDS:
        r = evaluate_lm(model, blocks, batch_size=16, unit=unit, exit_threshold=threshold)
        table.add({**key, "threshold": threshold, "nll": f"{r['nll']:.6f}",
                   "bits_per_byte": f"{r['bits_per_byte']:.6f}", "mean_rounds_used": f"{r['mean_rounds_used']:.4f}"})


# --- report -----------------------------------------------------------------------------------------------
def write_report(out: Path, results: ResultTable, by_rounds: ResultTable, exits: ResultTable,
                 positions: ResultTable, scale: str = "cpu") -> None:
    for table in (results, by_rounds, exits, positions):
        table.reload()  # rows other processes of the same study added
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "table.md", table_markdown(results, exits, positions))
    if results.rows:
        plot_nll(results, out / "nll.png")
    if by_rounds.rows:
        plot_rounds(by_rounds, out / "rounds.png")
    if exits.rows:
        plot_early_exit(exits, out / "early_exit.png")
    if positions.rows:
        plot_positions(positions, out / "positions.png")


def _values(results: ResultTable, corpus: str, row: str, column: str) -> list[float]:
    return [float(r[column]) for r in results.rows
            if r["corpus"] == corpus and r["row"] == row and r.get("status", "ok") == "ok"]


def table_markdown(results: ResultTable, exits: ResultTable | None = None,
                   positions: ResultTable | None = None) -> str:
    lines = ["# Seed 000 rows at CPU scale (small budget widths)", "", *overrides_note(results.rows),
             "Held-out bits per byte, mean ± sample SD over seeds (n = seeds finished). PPL = 2^bpb. "
             "Paper: seed 000 Table 3, small budget, full recipe (81.92M targets, not comparable in scale).", "",
             "| row | parameters | " + " | ".join(f"{c} bits/byte | {c} PPL | paper PPL ({c})" for c in clw.CORPORA)
             + " |", "|---|---:|" + "---:|---:|---:|" * len(clw.CORPORA)]
    for row in clw.ROWS:
        params = sorted({r["parameters"] for r in results.rows if r["row"] == row and r["parameters"]})
        cells = [row, ", ".join(f"{int(p):,}" for p in params) or "–"]
        for corpus in clw.CORPORA:
            bpb = _values(results, corpus, row, "bits_per_byte")
            ppl = _values(results, corpus, row, "ppl")
            paper = PAPER_SMALL_PPL.get((corpus, row))
            cells += [spread(bpb, 4), spread(ppl, 3),
                      f"{paper:.4f}" if paper else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Relative change in mean PPL against the workspace row (negative = workspace better):", ""]
    for corpus in clw.CORPORA:
        ws = _values(results, corpus, "workspace", "ppl")
        if not ws:
            continue
        parts = []
        for row in clw.ROWS:
            other = _values(results, corpus, row, "ppl")
            if other and row != "workspace":
                parts.append(f"vs {row} {100 * (mean_sd(ws)[0] / mean_sd(other)[0] - 1):+.2f} %")
        lines.append(f"- {corpus}: " + ", ".join(parts))
    if exits is not None and exits.rows:
        lines += ["", *early_exit_markdown(exits)]
    if positions is not None and positions.rows:
        lines += ["", *positions_markdown(positions)]
    return "\n".join(lines) + "\n"


def position_means(positions: ResultTable, corpus: str, row: str) -> dict[tuple[int, int], tuple[float, int]]:
    """(first, last) bucket -> (mean bits/byte over the seeds scored, number of seeds)."""
    values: dict[tuple[int, int], list[float]] = {}
    for r in positions.rows:
        if r["corpus"] == corpus and r["row"] == row:
            values.setdefault((int(r["first"]), int(r["last"])), []).append(float(r["bits_per_byte"]))
    return {bucket: (mean_sd(v)[0], len(v)) for bucket, v in sorted(values.items())}


def positions_markdown(positions: ResultTable) -> list[str]:
    """Per corpus: held-out bits/byte by target position bucket, one line per row (mean over seeds)."""
    lines = ["## Held-out bits/byte by position in the block", "",
             "Target positions 1..512 of each held-out block in doubling buckets; mean over the seeds scored (n). "
             "A row whose numbers fall from left to right uses the context it has read.", ""]
    for corpus in clw.CORPORA:
        means = {row: position_means(positions, corpus, row) for row in clw.ROWS}
        buckets = sorted({b for m in means.values() for b in m})
        if not buckets:
            continue
        lines += [f"{corpus}:", "", "| row | n | " + " | ".join(f"{a}" if a == z else f"{a}-{z}" for a, z in buckets)
                  + " |", "|---|---:|" + "---:|" * len(buckets)]
        for row, m in means.items():
            if m:
                n = min(count for _, count in m.values())
                lines.append(f"| {row} | {n} | " + " | ".join(f"{m[b][0]:.3f}" if b in m else "–" for b in buckets)
                             + " |")
        lines.append("")
    return lines[:-1]


def early_exit_markdown(exits: ResultTable) -> list[str]:
    """Per corpus and looped row: held-out bits/byte @ mean rounds used at each early-exit threshold."""
    lines = ["## Early exit at inference", "",
             "A position stops refining once successive rounds' next-byte distributions differ by less than the "
             "threshold (total variation) and keeps its state; for the rounds it skips it still offers keys, values and "
             "workspace writes computed from that frozen state, so later positions see a complete cache "
             "(looped.models.loop). Cells: bits/byte @ mean rounds used per position "
             "(trained with R = 4, batch 16 blocks of 512; the exit decision is per position, so the batch size "
             "does not change the result). Mean over the seeds with an early-exit sweep.", "",
             "| corpus | row | " + " | ".join(f"TV < {t:g}" for t in EXIT_THRESHOLDS) + " |",
             "|---|---|" + "---:|" * len(EXIT_THRESHOLDS)]
    for corpus in clw.CORPORA:
        for row in clw.LOOPED_ROWS:
            cells = []
            for threshold in EXIT_THRESHOLDS:
                hits = [r for r in exits.rows if r["corpus"] == corpus and r["row"] == row
                        and float(r["threshold"]) == threshold]
                if not hits:
                    cells.append("–")
                    continue
                bpb = mean_sd([float(r["bits_per_byte"]) for r in hits])[0]
                used = mean_sd([float(r["mean_rounds_used"]) for r in hits])[0]
                cells.append(f"{bpb:.4f} @ {used:.2f} (n={len(hits)})")
            if any(c != "–" for c in cells):
                lines.append(f"| {corpus} | {row} | " + " | ".join(cells) + " |")
    return lines


def per_corpus_figure(path: Path, draw) -> None:
    """One panel per corpus, side by side; `draw(ax, corpus)` fills a panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(clw.CORPORA), figsize=(5.5 * len(clw.CORPORA), 4), squeeze=False)
    for ax, corpus in zip(axes[0], clw.CORPORA):
        draw(ax, corpus)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def plot_nll(results: ResultTable, path: Path) -> None:
    """Seed 000 Fig. 3 style: held-out bits/byte per row, every seed as a grey dot, mean ± SD in colour."""
    def draw(ax, corpus):
        params = set()
        for i, row in enumerate(clw.ROWS):
            values = _values(results, corpus, row, "bits_per_byte")
            params |= {int(p) for p in _values(results, corpus, row, "parameters")}
            if values:
                ax.scatter([i] * len(values), values, s=14, color="0.5", zorder=2, label="one seed" if i == 0 else None)
                ax.errorbar([i], [mean_sd(values)[0]], yerr=[mean_sd(values)[1] or 0], fmt="o", color="C0",
                            capsize=4, zorder=3, label="mean ± SD" if i == 0 else None)
        ax.set_xticks(range(len(clw.ROWS)), list(clw.ROWS), rotation=35, ha="right")
        ax.set_ylabel("held-out bits/byte (lower is better)")
        span = f", {min(params):,}–{max(params):,} parameters" if params else ""
        ax.set_title(f"{corpus} sample{span}", fontsize=10)
    per_corpus_figure(path, draw)


def plot_rounds(by_rounds: ResultTable, path: Path) -> None:
    """Held-out bits/byte against test-time rounds R' for every looped row (mean over seeds)."""
    def draw(ax, corpus):
        for i, row in enumerate(clw.LOOPED_ROWS):
            points: dict[int, list[float]] = {}
            for r in by_rounds.rows:
                if r["corpus"] == corpus and r["row"] == row:
                    points.setdefault(int(r["rounds"]), []).append(float(r["bits_per_byte"]))
            if points:
                xs = sorted(points)
                ax.plot(xs, [mean_sd(points[x])[0] for x in xs], marker="o", label=row, color=f"C{i}")
        ax.axvline(4, color="0.6", ls="--", lw=1)
        ax.set_xlabel("test-time rounds R' (trained with R = 4)")
        ax.set_ylabel("held-out bits/byte")
        ax.set_title(corpus)
        ax.set_ylim(top=min(ax.get_ylim()[1], 8.5))
    per_corpus_figure(path, draw)


def plot_positions(positions: ResultTable, path: Path) -> None:
    """Held-out bits/byte against target position (doubling buckets, log axis), one line per row."""
    def draw(ax, corpus):
        for i, row in enumerate(clw.ROWS):
            m = position_means(positions, corpus, row)
            if m:
                xs = [(a * z) ** 0.5 for a, z in m]  # geometric middle of each bucket
                ax.plot(xs, [v for v, _ in m.values()], marker="o", ms=3, label=row, color=f"C{i}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("target position in the 512-byte block")
        ax.set_ylabel("held-out bits/byte")
        ax.set_title(corpus)
    per_corpus_figure(path, draw)


def plot_early_exit(table: ResultTable, path: Path) -> None:
    """Held-out bits/byte against mean rounds used per position, one point per early-exit threshold."""
    def draw(ax, corpus):
        for i, row in enumerate(clw.LOOPED_ROWS):
            points: dict[float, list[tuple[float, float]]] = {}
            for r in table.rows:
                if r["corpus"] == corpus and r["row"] == row:
                    points.setdefault(float(r["threshold"]), []).append(
                        (float(r["mean_rounds_used"]), float(r["bits_per_byte"])))
            if points:
                ts = sorted(points)
                xs = [mean_sd([p[0] for p in points[t]])[0] for t in ts]
                ys = [mean_sd([p[1] for p in points[t]])[0] for t in ts]
                ax.plot(xs, ys, marker="o", label=row, color=f"C{i}")
        ax.set_xlabel("mean rounds used per position (early exit, thresholds 0 ... 0.1 TV)")
        ax.set_ylabel("held-out bits/byte")
        ax.set_title(corpus)
    per_corpus_figure(path, draw)


# --- the spec ------------------------------------------------------------------------------------------------
def recipes():
    """configs/clw/full/{small,medium}/<row>.yaml (the seed's recipe with solved widths), configs/clw/cpu/<row>.yaml
    (small widths, a 2.05M-target budget) and the data sections under configs/clw/data/."""
    for budget in clw.BUDGETS:
        solved = clw.solve_budget(budget)
        ws_total = solved["workspace"][1]
        for row, (ffn_dim, total) in solved.items():
            header = (f"# seed 000 {budget} budget, row {row}: {total:,} parameters "
                      f"({total - ws_total:+,} vs workspace). Generated by `looped reproduce clw --write-recipes`.\n"
                      f"# Add a data file: looped train configs/clw/full/{budget}/{row}.yaml configs/clw/data/enwik8.yaml\n")
            yield Recipe(f"full/{budget}/{row}.yaml", header, {"model": clw.model_section(budget, row, ffn_dim),
                                                               **clw.RECIPES[budget]})
    for row, (ffn_dim, total) in clw.solve_budget("small").items():
        header = (f"# CPU-scale seed 000 row {row} ({total:,} parameters): 500 updates x 8 x 512 targets.\n"
                  f"# looped train configs/clw/cpu/{row}.yaml configs/clw/data/cpu_enwik8.yaml\n")
        yield Recipe(f"cpu/{row}.yaml", header, {"model": clw.model_section("small", row, ffn_dim), **clw.CPU_RECIPE})
    for name, data in [*(("cpu_" + k, v) for k, v in clw.CPU_DATA.items()), *clw.FULL_DATA.items()]:
        yield Recipe(f"data/{name}.yaml", f"# data section for seed 000 runs ({name}); combine with a row config.\n",
                     {"data": data})


def _toy(tmp: Path) -> dict:
    """Two rows on a generated text in seconds (the shared study drivers)."""
    text = tmp / "toy_corpus.txt"
    text.write_text("".join(f"line {i}: the quick brown fox {i % 7} jumps over the lazy dog.\n" for i in range(600)))
    return {"select": {"corpus": ("enwik8",), "seed": (11,), "row": ("plain", "workspace")},
            "overrides": {"model": {"dim": 32, "heads": 4, "ffn_dim": 32},
                          "data": {"corpus": "raw", "path": str(text), "heldout_fraction": 0.2},
                          "train": {"max_targets": 2 * 8 * 512, "threads": 1}},
            "options": {}}


register_study(StudySpec(
    name="clw", help="seed 000: the seven rows x corpora x seeds, held-out scores, rounds and early exit",
    axes=(Axis("corpus", "corpora", lambda scale: clw.CORPORA if scale == "cpu" else tuple(clw.FULL_DATA),
               lambda scale: clw.CORPORA if scale == "cpu" else tuple(clw.FULL_DATA),
               help="the corpus samples (cpu) or the official corpora (full)"),
          Axis("seed", "seeds", clw.SEEDS, cell=int),
          Axis("row", "rows", tuple(clw.ROWS), tuple(clw.ROWS))),
    build=ClwStudy, recipes=recipes, toy=_toy, claims=CLAIMS,
    flags=(Flag("budget", "full scale only: the seed's small or medium budget", ("small", "medium"), "small"),),
    results_name=lambda scale, flags: f"clw_{scale}" if scale == "cpu" else f"clw_{flags['budget']}"))
