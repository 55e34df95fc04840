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
from .figures import Dots, Figure, Lines, curve_figures, reference_line, training_curves, with_parameters
from .lm_scores import heldout_scorer, position_rows, score_cells, sweep_rows
from .recipes import Recipe
from .render import (Column, at_cost, fewest, groups, heading, ints, key, labelled_tables, markdown, matching, mean,
                     mean_of, minutes_per_run, over_budget, parameters, part, relative_changes, section, shows_beyond,
                     spread_of, table, write_table)
from .report import cell, figure, finished
from .results import ResultTable, study_results
from .retrain import Reproduction, retrains_note
from .study import Axis, Backfill, Flag, RunSummary, StudyBase, StudySpec, register_study

COLUMNS = ["corpus", "row", "arch", "seed", "parameters", "targets", "nll", "ppl", "bits_per_byte",
           "heldout_targets", "train_seconds", "updates", "status", "machine"]
EXIT_THRESHOLDS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1)
EXIT_SWEEP = {"column": "threshold", "values": EXIT_THRESHOLDS, "setting": "exit_threshold"}  # early_exit.csv
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
                     lambda key, last: self.exits.add_many(sweep_rows(key, heldout_scorer(last)[2], **EXIT_SWEEP)),
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
            self.exits.add_many(sweep_rows(key, score, **EXIT_SWEEP))
        self.results.add({**key, **run.cells(model), "arch": config.model.arch, "targets": run.targets,
                          **score_cells(whole), "ppl": cell(whole["ppl"]), "heldout_targets": whole["targets"]})

    def report(self) -> None:
        tables = (self.results, self.by_rounds, self.exits, self.positions)
        write_table(self.out, tables, lambda: table_markdown(self.results, self.exits, self.positions,
                                                             retrains_note(self, "clw")))
        done = finished(self.results.rows)
        # every panel names its corpus and the parameter counts of the rows it shows
        corpora = {with_parameters(f"{c} sample", finished(done, corpus=c)): {"corpus": c} for c in clw.CORPORA}
        for drawn, rows in zip(FIGURES, (done, *(scores.rows for scores in tables[1:]))):
            drawn.draw(self.out, rows, corpora)
        curve_figures(self.out, CURVES, self.training_curves.rows, done, "corpus", "{corpus} sample, seed {seed}",
                      lambda runs: with_parameters("Training loss of every row with a recorded curve (CPU recipe",
                                                   runs) + ")")


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
SPAN = ints("first", "last")  # a position bucket of positions.csv
EXIT_KEYS = [(corpus, row) for corpus in clw.CORPORA for row in clw.LOOPED_ROWS]
EXIT_COLUMNS = [key("corpus"), key("row"),  # held-out bits/byte @ mean rounds used at each early-exit threshold
                *(at_cost(f"TV < {t:g}", "bits_per_byte", "mean_rounds_used", threshold=t) for t in EXIT_THRESHOLDS)]
POSITION_CAPTION = ("Target positions 1..512 of each held-out block in doubling buckets; mean over the seeds scored "
                    "(n). A row whose numbers fall from left to right uses the context it has read.")
ROW_COLUMNS = [key("row"), parameters(), minutes_per_run("minutes per run (median, both corpora)"),
               *(c for corpus in clw.CORPORA for c in (  # per corpus, beside the paper
                   spread_of(f"{corpus} bits/byte", "bits_per_byte", 4, corpus=corpus),
                   spread_of(f"{corpus} PPL", "ppl", 3, corpus=corpus),
                   Column(f"paper PPL ({corpus})", lambda g, c=corpus: figure(PAPER_SMALL_PPL.get((c, g["row"])), 4))))]


def table_markdown(results: ResultTable, exits: ResultTable | None = None, positions: ResultTable | None = None,
                   notes: list[str] = ()) -> str:
    lines = [*heading("Seed 000 rows at CPU scale (small budget widths)", results.rows, CAPTION),
             *table(ROW_COLUMNS, row_groups := groups(results.rows, ("row",), order=ROW_KEYS, keep_empty=True)),
             *over_budget(row_groups),
             "", "Relative change in mean PPL against the workspace row (negative = workspace better):", "",
             *relative_changes(results.rows, "ppl", "workspace", ROW_KEYS, "corpus", clw.CORPORA)]
    if exits is not None:
        exit_groups = groups(exits.rows, ("corpus", "row"), order=EXIT_KEYS)
        lines += part("Early exit at inference", EXIT_COLUMNS, exit_groups, EXIT_CAPTION, keep=shows_beyond(2))
    if positions is not None and positions.rows:
        by_corpus = labelled_tables((c, positions_table(positions, c)) for c in clw.CORPORA)
        lines += ["", *section("Held-out bits/byte by position in the block", by_corpus, POSITION_CAPTION)]
    return markdown([*lines, *notes])


def positions_table(positions: ResultTable, corpus: str) -> list[str]:
    """Held-out bits/byte of one corpus by target position bucket, one line per row (mean over seeds)."""
    spans = sorted({SPAN(r) for r in matching(positions.rows, corpus=corpus)})
    columns = [key("row"), fewest("n", SPAN),
               *(mean_of(f"{a}" if a == z else f"{a}-{z}", "bits_per_byte", 3, first=a, last=z) for a, z in spans)]
    return table(columns, groups(positions.rows, ("row",), order=ROW_KEYS, corpus=corpus)) if spans else []


# --- figures: a panel per corpus, one line per row (mean over seeds) ------------------------------------------
TITLE = "Held-out bits/byte {}, mean over seeds (CPU recipe)"
FIGURES = (  # nll.png from results.csv (seed 000 Fig. 3 style), then rounds.csv, early_exit.csv and positions.csv
    Figure("nll", Dots("bits_per_byte", tuple(clw.ROWS), "held-out bits/byte (lower is better)"), title_size=10),
    Figure("rounds", Lines("bits_per_byte", lambda r: int(r["rounds"]), clw.LOOPED_ROWS,
                           "test-time rounds R' (trained with R = 4)", "held-out bits/byte",
                           touch=reference_line(4, top=8.5)), TITLE.format("against test-time rounds"), title_size=10),
    Figure("early_exit", Lines("bits_per_byte", lambda r: float(r["threshold"]), clw.LOOPED_ROWS,  # at the rounds used
                               "mean rounds used per position (early exit, thresholds 0 ... 0.1 TV)",
                               "held-out bits/byte", place=lambda _, hits: mean(hits, "mean_rounds_used")),
           TITLE.format("against the rounds early exit uses"), title_size=10),
    Figure("positions", Lines("bits_per_byte", SPAN, tuple(clw.ROWS), "target position in the 512-byte block",
                              "held-out bits/byte", place=lambda span, _: (span[0] * span[1]) ** 0.5,  # bucket middle
                              style={"marker": "o", "ms": 3}, touch=lambda ax: ax.set_xscale("log", base=2)),
           TITLE.format("by target position in the block"), title_size=10))
CURVES = training_curves(tuple(clw.ROWS), "training loss (nats/byte)")  # one seed: the rows share the data order


# --- the spec ------------------------------------------------------------------------------------------------
def recipes():
    """configs/clw/full/{small,medium}/<row>.yaml (the seed's recipe with solved widths), configs/clw/cpu/<row>.yaml
    (small widths, a 2.05M-target budget) and the data sections under configs/clw/data/."""
    for budget in clw.BUDGETS:
        solved = clw.solve_budget(budget)
        for row, (ffn_dim, total) in solved.items():
            yield Recipe.commented(
                f"full/{budget}/{row}.yaml", {"model": clw.model_section(budget, row, ffn_dim), **clw.RECIPES[budget]},
                f"seed 000 {budget} budget, row {row}: {total:,} parameters ({total - solved['workspace'][1]:+,} vs "
                "workspace). Generated by `looped reproduce clw --write-recipes`.",
                f"Add a data file: looped train configs/clw/full/{budget}/{row}.yaml configs/clw/data/enwik8.yaml")
    for row, (ffn_dim, total) in clw.solve_budget("small").items():
        yield Recipe.commented(f"cpu/{row}.yaml", {"model": clw.model_section("small", row, ffn_dim), **clw.CPU_RECIPE},
                               f"CPU-scale seed 000 row {row} ({total:,} parameters): 500 updates x 8 x 512 targets.",
                               f"looped train configs/clw/cpu/{row}.yaml configs/clw/data/cpu_enwik8.yaml")
    for name, data in [*(("cpu_" + k, v) for k, v in clw.CPU_DATA.items()), *clw.FULL_DATA.items()]:
        yield Recipe.commented(f"data/{name}.yaml", {"data": data},
                               f"data section for seed 000 runs ({name}); combine with a row config.")


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
