"""`looped reproduce clw --scale cpu`: all seven rows x two corpus samples x seeds 11/23/37, resumable.

Each run trains a CPU recipe (configs/clw/cpu/<row>.yaml + configs/clw/data/cpu_<corpus>.yaml, written by
looped.experiments.clw), scores the whole held-out tail at the final checkpoint (seed 000 eq. 9), then
scores the looped rows again at test-time rounds 1..8. A finished run is a line in results.csv and is
never trained again; an interrupted run resumes from its last checkpoint. The held-out score is also kept by
target position (positions.csv: doubling buckets 1, 2-3, ..., 128-255, 256-512), which shows whether a row's gain
comes from using more context; finished runs that lack it (or, looped rows, the early-exit sweep) are scored again
from their folder when it exists (a `Backfill` of the engine), or from a retrain that reproduces their row when it
is gone (`looped reproduce clw --retrain-owed`).
"""

from __future__ import annotations

from pathlib import Path

from ..config import merge
from ..data import load_heldout
from ..eval import evaluate_lm
from ..eval.stats import mean_sd
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train.run_folder import read_metrics
from ..train.config import recipe_config
from . import clw
from .clw_claims import CLAIMS
from .render import (Column, Group, buckets, groups, heading, key, markdown, matching, mean, mean_of, panels,
                     parameters, section, spread_of, table, write_table)
from .report import MISSING, cell, column, figure, finished
from .results import ResultTable, study_results
from .study import Axis, Backfill, Flag, Recipe, RunSummary, StudyBase, StudySpec, register_study

COLUMNS = ["corpus", "row", "arch", "seed", "parameters", "targets", "nll", "ppl", "bits_per_byte",
           "heldout_targets", "train_seconds", "updates", "status", "machine"]
ROUND_COLUMNS = ["corpus", "row", "seed", "rounds", "nll", "bits_per_byte"]
EXIT_COLUMNS = ["corpus", "row", "seed", "threshold", "nll", "bits_per_byte", "mean_rounds_used"]
POSITION_COLUMNS = ["corpus", "row", "seed", "first", "last", "nll", "bits_per_byte"]
CURVE_COLUMNS = ["corpus", "row", "seed", "step", "loss"]  # the training loss (nats/byte) at every logged update
EXIT_THRESHOLDS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1)
TEST_ROUNDS = tuple(range(1, 9))
# A retrained run reproduces its row when its held-out bits/byte is within this of the row's (absolute). The
# recipes are seeded and run on one thread: a rerun on the machine that trained the row matched to ~1e-6; this is
# ~1000 times that, and under a third of the smallest spread between seeds of a row (SD 0.0036, table.md), so a
# retrain on other kernels that moves a run by a seed's worth is refused rather than scored as the committed run.
REPRODUCE_TOLERANCE = 1e-3

# seed 000 Table 3 (small budget, held-out PPL per symbol, mean over seeds) where the seed reports it
PAPER_SMALL_PPL = {("enwik8", "workspace"): 3.8968, ("enwik8", "conditioned_dense"): 3.8431,
                   ("tinystories", "workspace"): 2.1732, ("tinystories", "conditioned_dense"): 2.2225}


def run_config(row: str, corpus: str, seed: int, overrides: dict | None = None, *, scale: str = "cpu",
               budget: str = "small") -> RunConfig:
    """cpu: the CPU recipe on a corpus sample (clw.CPU_DATA); full: the seed's recipe on the official corpus."""
    ffn_dim, _ = clw.solve_budget(budget)[row]
    recipe, data_section = (clw.CPU_RECIPE, clw.CPU_DATA) if scale == "cpu" else (clw.RECIPES[budget], clw.FULL_DATA)
    data = {"model": clw.model_section(budget, row, ffn_dim), **recipe, "data": data_section[corpus]}
    return recipe_config(merge(data, {"train": {"seed": seed}}), overrides)


def results_table(out: Path) -> ResultTable:
    return study_results(out, COLUMNS, ["corpus", "row", "seed"])


class ClwStudy(StudyBase):
    """Seed 000's study: every row x corpus x seed, held-out scores by position, test-time rounds and the
    early-exit sweep of the looped rows."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 budget: str = "small"):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.budget = budget
        self.results = results_table(self.out)
        self.by_rounds = ResultTable(self.out / "rounds.csv", ROUND_COLUMNS, ["corpus", "row", "seed", "rounds"])
        self.exits = ResultTable(self.out / "early_exit.csv", EXIT_COLUMNS, ["corpus", "row", "seed", "threshold"])
        self.positions = positions_table(self.out)
        self.curves = ResultTable(self.out / "curves.csv", CURVE_COLUMNS, ["corpus", "row", "seed", "step"])
        # runs finished before the study kept positions.csv (or, looped rows, early_exit.csv) are scored from
        # their folder
        self.backfills = (Backfill("by position", self.positions, lambda key: not self.positions.has(**key),
                                   self.score_positions),
                          Backfill("early exit", self.exits, self.exits_owed,
                                   lambda key, checkpoint: self.exits.add_many(
                                       exit_rows(key, heldout_scorer(checkpoint)[2]))),
                          Backfill("training curve", self.curves, lambda key: not self.curves.has(**key),
                                   lambda key, checkpoint: record_curve(self.curves, key, self.folder(key))))

    def config(self, key: dict) -> RunConfig:
        return run_config(key["row"], key["corpus"], key["seed"], self.overrides, scale=self.scale,
                          budget=self.budget)

    def reproduces(self, key: dict, run: RunSummary) -> str | None:
        """A retrained run against its results.csv row: the held-out bits/byte `evaluate` computes."""
        committed = float(self.results.find(**key)["bits_per_byte"])
        retrained = heldout_scorer(ckpt.run_checkpoint(run.folder))[2]()["bits_per_byte"]
        if abs(retrained - committed) <= REPRODUCE_TOLERANCE:
            return None
        return (f"held-out bits/byte {retrained:.6f} retrained vs {committed:.6f} in results.csv "
                f"(tolerance {REPRODUCE_TOLERANCE:g})")

    def exits_owed(self, key: dict) -> bool:
        return key["row"] in clw.LOOPED_ROWS and not self.exits.has(**key)

    def score_positions(self, key: dict, checkpoint: Path) -> None:
        record_positions(self.positions, key, heldout_scorer(checkpoint)[2](by_position=True)["by_position"])

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        """The whole held-out tail by position, then (looped rows) at every test-time rounds and early-exit
        threshold, right after training because run folders do not outlive a session here; results.csv last."""
        model, config, score = heldout_scorer(ckpt.run_checkpoint(run.folder))
        whole = score(by_position=True)
        record_positions(self.positions, key, whole["by_position"])
        record_curve(self.curves, key, run.folder)
        if key["row"] in clw.LOOPED_ROWS:
            self.by_rounds.add_many([{**key, "rounds": n, **scores(score(rounds=n))} for n in TEST_ROUNDS])
            self.exits.add_many(exit_rows(key, score))
        self.results.add({**key, "arch": config.model.arch, "parameters": model.parameter_counts()["total"],
                          "targets": run.targets, **scores(whole), "ppl": cell(whole["ppl"]),
                          "heldout_targets": whole["targets"], "train_seconds": f"{run.seconds:.1f}",
                          "updates": run.updates, "status": "ok"})

    def report(self) -> None:
        tables = (self.results, self.by_rounds, self.exits, self.positions)
        write_table(self.out, tables, lambda: table_markdown(self.results, self.exits, self.positions))
        for name, table, draw in zip(("nll", "rounds", "early_exit", "positions"), tables,
                                     (_nll_panel, _rounds_panel, _early_exit_panel, _positions_panel)):
            if table.rows:
                panels(self.out / f"{name}.png", clw.CORPORA, lambda ax, corpus: draw(ax, table.rows, corpus),
                       size=(5.5, 4), finish=_grid_and_legend)
        for corpus, seed in sorted({(r["corpus"], int(r["seed"])) for r in self.curves.rows}):
            panels(self.out / f"curves_{corpus}_seed{seed}.png", (corpus,),
                   lambda ax, c: _curves_panel(ax, self.curves.rows, self.results.rows, c, seed), size=(6.5, 4.2),
                   finish=_grid_and_legend)


def heldout_scorer(checkpoint: Path):
    """(model, config, score) of a finished run: score(**setting) scores the run's held-out blocks (evaluate_lm)."""
    model, config = load_model(checkpoint)
    blocks, unit = load_heldout(config.data)
    return model, config, lambda **setting: evaluate_lm(model, blocks, batch_size=16, unit=unit, **setting)


def exit_rows(key: dict, score) -> list[dict]:
    """early_exit.csv's rows of a looped run: held-out scores at every early-exit threshold."""
    return [{**key, "threshold": t, **scores(score(exit_threshold=t))} for t in EXIT_THRESHOLDS]


def scores(r: dict) -> dict:
    """A held-out score's CSV cells (a table keeps the columns it has)."""
    return {"nll": cell(r["nll"]), "bits_per_byte": cell(r["bits_per_byte"]),
            "mean_rounds_used": cell(r.get("mean_rounds_used"), 4)}


def record_curve(table: ResultTable, key: dict, folder: Path) -> None:
    """curves.csv's rows of a run: its training loss at every logged update of run/metrics.jsonl (a resumed run
    logs some updates twice: the last line of an update wins)."""
    losses = {e["step"]: e["loss"] for e in read_metrics(Path(folder) / "metrics.jsonl") if "loss" in e}
    table.add_many([{**key, "step": step, "loss": f"{loss:.6f}"} for step, loss in sorted(losses.items())])


def positions_table(out: Path) -> ResultTable:
    return ResultTable(Path(out) / "positions.csv", POSITION_COLUMNS, ["corpus", "row", "seed", "first"])


def record_positions(table: ResultTable, key: dict, buckets: list[dict]) -> None:
    table.add_many([{**key, "first": b["first"], "last": b["last"], "nll": f"{b['nll']:.6f}",
                     "bits_per_byte": f"{b['bits']:.6f}"} for b in buckets])


# --- report -----------------------------------------------------------------------------------------------
CAPTION = ("Held-out bits per byte, mean ± sample SD over seeds (n = seeds finished). PPL = 2^bpb. Paper: seed 000 "
           "Table 3, small budget, full recipe (81.92M targets, not comparable in scale).")
EXIT_CAPTION = ("A position stops refining once successive rounds' next-byte distributions differ by less than the "
                "threshold (total variation) and keeps its state; for the rounds it skips it still offers keys, values "
                "and workspace writes computed from that frozen state, so later positions see a complete cache "
                "(looped.models.loop). Cells: bits/byte @ mean rounds used per position (trained with R = 4, batch 16 "
                "blocks of 512; the exit decision is per position, so the batch size does not change the result). "
                "Mean over the seeds with an early-exit sweep.")
ROW_KEYS = [(row,) for row in clw.ROWS]  # the table lines in the paper's order
POSITION_CAPTION = ("Target positions 1..512 of each held-out block in doubling buckets; mean over the seeds scored "
                    "(n). A row whose numbers fall from left to right uses the context it has read.")


def row_columns() -> list[Column]:
    """The main table: per corpus, bits/byte and PPL over seeds beside the paper's PPL."""
    def paper(corpus: str) -> Column:
        return Column(f"paper PPL ({corpus})", lambda g: figure(PAPER_SMALL_PPL.get((corpus, g["row"])), 4))

    return [key("row"), parameters(), *(c for corpus in clw.CORPORA for c in (
        spread_of(f"{corpus} bits/byte", "bits_per_byte", 4, corpus=corpus),
        spread_of(f"{corpus} PPL", "ppl", 3, corpus=corpus), paper(corpus)))]


def table_markdown(results: ResultTable, exits: ResultTable | None = None,
                   positions: ResultTable | None = None) -> str:
    lines = [*heading("Seed 000 rows at CPU scale (small budget widths)", results.rows, CAPTION),
             *table(row_columns(), groups(results.rows, ("row",), order=ROW_KEYS, keep_empty=True)),
             "", "Relative change in mean PPL against the workspace row (negative = workspace better):", ""]
    for corpus in clw.CORPORA:
        ppl = {g["row"]: mean(g.runs, "ppl") for g in groups(results.rows, ("row",), order=ROW_KEYS,
                                                                       corpus=corpus)}
        if ppl.get("workspace") is not None:
            lines.append(f"- {corpus}: " + ", ".join(f"vs {row} {100 * (ppl['workspace'] / value - 1):+.2f} %"
                                                    for row, value in ppl.items() if row != "workspace" and value))
    if exits is not None and exits.rows:
        lines += ["", *section("Early exit at inference", early_exit_table(exits), EXIT_CAPTION)]
    if positions is not None and positions.rows:
        lines += ["", *section("Held-out bits/byte by position in the block", positions_tables(positions),
                               POSITION_CAPTION)]
    return markdown(lines)


def positions_tables(positions: ResultTable) -> list[str]:
    """Per corpus: held-out bits/byte by target position bucket, one line per row (mean over seeds)."""
    lines = []
    for corpus in clw.CORPORA:
        spans = sorted({(int(r["first"]), int(r["last"])) for r in matching(positions.rows, corpus=corpus)})
        columns = [key("row"), Column("n", lambda g: str(min(len(b) for b in buckets(g.runs, _span).values()))),
                   *(mean_of(f"{a}" if a == z else f"{a}-{z}", "bits_per_byte", 3, first=a, last=z) for a, z in spans)]
        rows = groups(positions.rows, ("row",), order=ROW_KEYS, corpus=corpus)
        lines += [f"{corpus}:", "", *table(columns, rows), ""] if spans else []
    return lines[:-1]


def early_exit_table(exits: ResultTable) -> list[str]:
    """Per corpus and looped row: held-out bits/byte @ mean rounds used at each early-exit threshold."""
    def at(threshold: float) -> Column:
        def cell_text(g: Group) -> str:
            hits = [r for r in g.runs if float(r["threshold"]) == threshold]
            return f"{mean(hits, 'bits_per_byte'):.4f} @ {mean(hits, 'mean_rounds_used'):.2f} (n={len(hits)})" \
                if hits else MISSING
        return Column(f"TV < {threshold:g}", cell_text)

    rows = groups(exits.rows, ("corpus", "row"), order=[(c, r) for c in clw.CORPORA for r in clw.LOOPED_ROWS])
    return table([key("corpus"), key("row"), *map(at, EXIT_THRESHOLDS)], rows,
                 keep=lambda cells: any(c != MISSING for c in cells[2:]))


def _span(r: dict) -> tuple[int, int]:
    return int(r["first"]), int(r["last"])


def _grid_and_legend(ax) -> None:
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _nll_panel(ax, rows: list[dict], corpus: str) -> None:
    """Seed 000 Fig. 3 style: held-out bits/byte per row, every seed as a grey dot, mean ± SD in colour."""
    ok = finished(rows, corpus=corpus)
    for i, row in enumerate(clw.ROWS):
        values = [float(v) for v in column(matching(ok, row=row), "bits_per_byte")]
        if values:
            ax.scatter([i] * len(values), values, s=14, color="0.5", zorder=2, label="one seed" if i == 0 else None)
            ax.errorbar([i], [mean_sd(values)[0]], yerr=[mean_sd(values)[1] or 0], fmt="o", color="C0",
                        capsize=4, zorder=3, label="mean ± SD" if i == 0 else None)
    params = [int(r["parameters"]) for r in ok if r["row"] in clw.ROWS]
    ax.set_xticks(range(len(clw.ROWS)), list(clw.ROWS), rotation=35, ha="right")
    ax.set_ylabel("held-out bits/byte (lower is better)")
    span = f", {min(params):,}–{max(params):,} parameters" if params else ""
    ax.set_title(f"{corpus} sample{span}", fontsize=10)


def _lines(ax, rows: list[dict], corpus: str, names: tuple[str, ...], x, place=None, **style) -> None:
    """One line per row of `names`: held-out bits/byte at each x(run row), mean over seeds; place(x, rows at x)
    puts a point on the axis (default: at x)."""
    for i, row in enumerate(names):
        if points := buckets(rows, x, corpus=corpus, row=row):
            xs = [place(k, v) for k, v in points.items()] if place else list(points)
            ax.plot(xs, [mean(v, "bits_per_byte") for v in points.values()], marker="o", label=row, color=f"C{i}",
                    **style)
    ax.set_ylabel("held-out bits/byte")
    ax.set_title(corpus)


def _rounds_panel(ax, rows: list[dict], corpus: str) -> None:
    """Held-out bits/byte against test-time rounds R' for every looped row."""
    _lines(ax, rows, corpus, clw.LOOPED_ROWS, lambda r: int(r["rounds"]))
    ax.axvline(4, color="0.6", ls="--", lw=1)
    ax.set_xlabel("test-time rounds R' (trained with R = 4)")
    ax.set_ylim(top=min(ax.get_ylim()[1], 8.5))


def _positions_panel(ax, rows: list[dict], corpus: str) -> None:
    """Held-out bits/byte against target position (doubling buckets at their geometric middle, log axis)."""
    _lines(ax, rows, corpus, clw.ROWS, _span, lambda span, _: (span[0] * span[1]) ** 0.5, ms=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("target position in the 512-byte block")


def _curves_panel(ax, curves: list[dict], results: list[dict], corpus: str, seed: int) -> None:
    """One seed's training loss against updates, a line per row (the rows share the data order)."""
    for i, row in enumerate(clw.ROWS):
        points = matching(curves, corpus=corpus, seed=seed, row=row)
        if points:
            ax.plot([int(r["step"]) for r in points], [float(r["loss"]) for r in points], color=f"C{i}", lw=1.2,
                    label=row)
    params = [int(r["parameters"]) for r in finished(results, corpus=corpus, seed=seed)]
    span = f", {min(params):,}–{max(params):,} parameters" if params else ""
    ax.set_xlabel("update")
    ax.set_ylabel("training loss (nats/byte)")
    ax.set_title(f"{corpus} sample, seed {seed}: training loss of every row (CPU recipe{span})", fontsize=9)


def _early_exit_panel(ax, rows: list[dict], corpus: str) -> None:
    """Held-out bits/byte against mean rounds used per position, one point per early-exit threshold."""
    _lines(ax, rows, corpus, clw.LOOPED_ROWS, lambda r: float(r["threshold"]),
           lambda _, hits: mean(hits, "mean_rounds_used"))
    ax.set_xlabel("mean rounds used per position (early exit, thresholds 0 ... 0.1 TV)")


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
                      f"# Add a data file: looped train configs/clw/full/{budget}/{row}.yaml "
                      "configs/clw/data/enwik8.yaml\n")
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
