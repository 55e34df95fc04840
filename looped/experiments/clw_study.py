"""`looped reproduce clw --scale cpu`: all seven rows x two corpus samples x seeds 11/23/37, resumable.

Each run trains a CPU recipe (configs/clw/cpu/<row>.yaml + configs/clw/data/cpu_<corpus>.yaml), scores the whole
held-out tail at the final checkpoint (seed 000 eq. 9) and by target position (positions.csv: doubling buckets
1, 2-3, ..., 256-512: does a row's gain come from using more context?), then scores the looped rows again at
test-time rounds 1..8 and early-exit thresholds. Finished runs that lack a score are scored from their folder
(a `Backfill`), or from a retrain that reproduces their row when it is gone (`--retrain-owed`).
"""

from __future__ import annotations

from pathlib import Path

from ..config import merge
from ..train import RunConfig
from ..train import checkpoint as ckpt
from ..train.config import recipe_config
from . import clw
from .clw_claims import CLAIMS
from .figures import Dots, Lines, plot, with_parameters
from .lm_scores import heldout_scorer, position_rows, score_cells, sweep_rows
from .render import (Column, at_cost, buckets, groups, heading, key, markdown, matching, mean, mean_of, minutes_per_run,
                     parameters, relative_change, section, spread_of, table, write_table)
from .report import MISSING, cell, figure, finished
from .results import ResultTable, study_results
from .retrain import Reproduction, retrains_table
from .study import REPRODUCES, Axis, Backfill, Flag, Recipe, RunSummary, StudyBase, StudySpec, register_study

COLUMNS = ["corpus", "row", "arch", "seed", "parameters", "targets", "nll", "ppl", "bits_per_byte",
           "heldout_targets", "train_seconds", "updates", "status", "machine"]
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


def results_table(out: Path) -> ResultTable:
    return study_results(out, COLUMNS, ["corpus", "row", "seed"])


def exit_rows(key: dict, score) -> list[dict]:
    """early_exit.csv's rows of a looped run: its held-out scores at every early-exit threshold."""
    return sweep_rows(key, score, "threshold", EXIT_THRESHOLDS, setting="exit_threshold")


class ClwStudy(StudyBase):
    """Seed 000's study: every row x corpus x seed, held-out scores by position, test-time rounds and the
    early-exit sweep of the looped rows."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 budget: str = "small"):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.budget = budget
        self.results = results_table(self.out)
        self.by_rounds = self.per_run("rounds.csv", "rounds", ["nll", "bits_per_byte"])
        self.exits = self.per_run("early_exit.csv", "threshold", ["nll", "bits_per_byte", "mean_rounds_used"])
        self.positions = self.per_run("positions.csv", "first", ["last", "nll", "bits_per_byte"])
        # runs finished before the study kept a score (by position, early exit, curve) are scored from their folder
        self.backfills = (
            Backfill("by position", self.positions, lambda key, last: self.positions.add_many(
                position_rows(key, heldout_scorer(last)[2](by_position=True)["by_position"]))),
            Backfill("early exit", self.exits,
                     lambda key, last: self.exits.add_many(exit_rows(key, heldout_scorer(last)[2])),
                     owed=lambda key: key["row"] in clw.LOOPED_ROWS and not self.exits.has(**key)),
            self.keep_curves())

    def config(self, key: dict) -> RunConfig:
        """cpu: the CPU recipe on a corpus sample (clw.CPU_DATA); full: the seed's recipe on the official corpus."""
        cpu = self.scale == "cpu"
        recipe, data = (clw.CPU_RECIPE, clw.CPU_DATA) if cpu else (clw.RECIPES[self.budget], clw.FULL_DATA)
        model = clw.model_section(self.budget, key["row"], clw.solve_budget(self.budget)[key["row"]][0])
        return recipe_config(merge({"model": model, **recipe, "data": data[key["corpus"]]},
                                   {"train": {"seed": key["seed"]}}), self.overrides)

    def reproduces(self, key: dict, run: RunSummary) -> Reproduction:
        """A retrained run against its results.csv row: the held-out bits/byte `evaluate` computes."""
        retrained = heldout_scorer(ckpt.run_checkpoint(run.folder))[2]()["bits_per_byte"]
        return Reproduction("held-out bits/byte", float(self.results.find(**key)["bits_per_byte"]), retrained,
                            REPRODUCE_TOLERANCE)

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        """The whole held-out tail by position, then (looped rows) at every test-time rounds and early-exit
        threshold, right after training because run folders do not outlive a session here; results.csv last."""
        model, config, score = heldout_scorer(ckpt.run_checkpoint(run.folder))
        whole = score(by_position=True)
        self.positions.add_many(position_rows(key, whole["by_position"]))
        if key["row"] in clw.LOOPED_ROWS:
            self.by_rounds.add_many(sweep_rows(key, score, "rounds", TEST_ROUNDS))
            self.exits.add_many(exit_rows(key, score))
        self.results.add({**key, **run.cells(model), "arch": config.model.arch, "targets": run.targets,
                          **score_cells(whole), "ppl": cell(whole["ppl"]), "heldout_targets": whole["targets"]})

    def report(self) -> None:
        tables = (self.results, self.by_rounds, self.exits, self.positions)
        write_table(self.out, tables, lambda: table_markdown(self.results, self.exits, self.positions,
                                                             retrains_table(self)))
        done = finished(self.results.rows)
        # every panel names its corpus and the parameter counts of the rows it shows
        corpora = {with_parameters(f"{c} sample", finished(done, corpus=c)): {"corpus": c} for c in clw.CORPORA}
        if self.results.rows:
            plot(self.out / "nll.png", NLL, done, corpora, size=(5.5, 4), title_size=10)
        for name, scores in zip(FIGURES, tables[1:]):
            if scores.rows:
                plot(self.out / f"{name}.png", FIGURES[name], scores.rows, corpora, size=(5.5, 4), title_size=10,
                     title=FIGURE_TITLES[name])
        for corpus, seed in sorted({(r["corpus"], int(r["seed"])) for r in self.curves.rows}):
            title = with_parameters("Training loss of every row with a recorded curve (CPU recipe",
                                    finished(done, corpus=corpus, seed=seed)) + ")"
            plot(self.out / f"curves_{corpus}_seed{seed}.png", CURVES, self.curves.rows,
                 {f"{corpus} sample, seed {seed}": {"corpus": corpus, "seed": seed}}, size=(6.5, 4.2), title=title)


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
ROW_COLUMNS = [key("row"), parameters(), minutes_per_run("minutes per run (median, both corpora)"),
               *(c for corpus in clw.CORPORA for c in (  # per corpus, beside the paper
                   spread_of(f"{corpus} bits/byte", "bits_per_byte", 4, corpus=corpus),
                   spread_of(f"{corpus} PPL", "ppl", 3, corpus=corpus),
                   Column(f"paper PPL ({corpus})", lambda g, c=corpus: figure(PAPER_SMALL_PPL.get((c, g["row"])), 4))))]


def table_markdown(results: ResultTable, exits: ResultTable | None = None, positions: ResultTable | None = None,
                   retrains: ResultTable | None = None) -> str:
    lines = [*heading("Seed 000 rows at CPU scale (small budget widths)", results.rows, CAPTION),
             *table(ROW_COLUMNS, groups(results.rows, ("row",), order=ROW_KEYS, keep_empty=True)),
             "", "Relative change in mean PPL against the workspace row (negative = workspace better):", ""]
    for corpus in clw.CORPORA:
        if change := relative_change(groups(results.rows, ("row",), order=ROW_KEYS, corpus=corpus), "ppl", "workspace"):
            lines.append(f"- {corpus}: {change}")
    if exits is not None and exits.rows:
        lines += ["", *section("Early exit at inference", early_exit_table(exits), EXIT_CAPTION)]
    if positions is not None and positions.rows:
        lines += ["", *section("Held-out bits/byte by position in the block", positions_tables(positions),
                               POSITION_CAPTION)]
    return markdown(lines + (retrain_lines(retrains.rows) if retrains is not None else []))


def retrain_lines(retrains: list[dict]) -> list[str]:
    """What `--retrain-owed` did for the scores above: runs trained again (their folders were gone), checked."""
    if not retrains:
        return []
    held = [abs(float(r["difference"])) for r in retrains if r["verdict"] == REPRODUCES]
    largest = f" (largest difference {max(held):.6f})" if held else ""
    return ["", f"Trained again because the run folder was gone and a later score (by position, early exit, training "
                f"curve) was owed (`looped reproduce clw --scale cpu --retrain-owed`): {len(retrains)} run(s), "
                f"{len(held)} reproducing their row's held-out bits/byte within {REPRODUCE_TOLERANCE:g}{largest} and "
                f"scored from the retrain, the others not scored; each pair in retrains.csv."]


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
    columns = [key("corpus"), key("row"), *(at_cost(f"TV < {t:g}", "bits_per_byte", "mean_rounds_used", threshold=t)
                                            for t in EXIT_THRESHOLDS)]
    rows = groups(exits.rows, ("corpus", "row"), order=[(c, r) for c in clw.CORPORA for r in clw.LOOPED_ROWS])
    return table(columns, rows, keep=lambda cells: any(c != MISSING for c in cells[2:]))


def _span(r: dict) -> tuple[int, int]:
    return int(r["first"]), int(r["last"])


# --- figures: a panel per corpus ------------------------------------------------------------------------------
def _trained_rounds(ax) -> None:
    ax.axvline(4, color="0.6", ls="--", lw=1)
    ax.set_ylim(top=min(ax.get_ylim()[1], 8.5))


NLL = Dots("bits_per_byte", tuple(clw.ROWS), "held-out bits/byte (lower is better)")  # seed 000 Fig. 3 style
FIGURES = {  # <name>.png from rounds.csv, early_exit.csv and positions.csv: one line per row, mean over seeds
    "rounds": Lines("bits_per_byte", lambda r: int(r["rounds"]), clw.LOOPED_ROWS,
                    "test-time rounds R' (trained with R = 4)", "held-out bits/byte", touch=_trained_rounds),
    "early_exit": Lines("bits_per_byte", lambda r: float(r["threshold"]), clw.LOOPED_ROWS,  # at the rounds used
                        "mean rounds used per position (early exit, thresholds 0 ... 0.1 TV)", "held-out bits/byte",
                        place=lambda _, hits: mean(hits, "mean_rounds_used")),
    "positions": Lines("bits_per_byte", _span, tuple(clw.ROWS), "target position in the 512-byte block",
                       "held-out bits/byte", place=lambda span, _: (span[0] * span[1]) ** 0.5,  # a bucket's middle
                       style={"marker": "o", "ms": 3}, touch=lambda ax: ax.set_xscale("log", base=2)),
}
FIGURE_TITLES = {
    "rounds": "Held-out bits/byte against test-time rounds, mean over seeds (CPU recipe)",
    "early_exit": "Held-out bits/byte against the rounds early exit uses, mean over seeds (CPU recipe)",
    "positions": "Held-out bits/byte by target position in the block, mean over seeds (CPU recipe)",
}
# one seed's training loss against updates, a line per row (the rows share the data order)
CURVES = Lines("loss", lambda r: int(r["step"]), tuple(clw.ROWS), "update", "training loss (nats/byte)",
               style={"lw": 1.2})


# --- the spec ------------------------------------------------------------------------------------------------
def recipes():
    """configs/clw/full/{small,medium}/<row>.yaml (the seed's recipe with solved widths), configs/clw/cpu/<row>.yaml
    (small widths, a 2.05M-target budget) and the data sections under configs/clw/data/."""
    for budget in clw.BUDGETS:
        solved = clw.solve_budget(budget)
        for row, (ffn_dim, total) in solved.items():
            header = (f"# seed 000 {budget} budget, row {row}: {total:,} parameters "
                      f"({total - solved['workspace'][1]:+,} vs workspace). Generated by `looped reproduce clw "
                      "--write-recipes`.\n"
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
