"""`looped reproduce drt --scale cpu`: the seed 002 recipes x seeds 42/43/44, evaluated and reported, resumable.

Every (task, arch, alpha, seed) run trains its recipe (looped.experiments.drt), then is scored on its test buckets
(disjoint from its training and validation rows) over the step budgets x difficulty grid -> grids/<run>.csv:
ID / OOD best over sufficient budgets, step-1 accuracy on 12-hop graphs, mean gate per step and the
depth-embedding diagnostic -> results.csv, gates.csv, diagnostic.csv (looped.experiments.reasoning_scores); a
graph run also on the *other* negative generator's buckets -> grids/<run>_cross.csv. table.md puts the paper's
numbers alongside; a heatmap per recipe shows its mean grid over the finished seeds. Before any training, the
shortcut baselines of every family recipe selected (no model) -> shortcuts.csv (looped.experiments.drt_shortcuts);
`shortcuts_only` (--shortcuts-only) stops there.

The alpha sweep of seed 002 Table 4 (graph reachability, alpha in {0, 0.1, 0.5, 1}) is `alphas=(0, 0.1, 0.5, 1)`;
alphas other than 0 apply to the graph task only.
"""

from __future__ import annotations

from pathlib import Path

from ..data.tasks.base import task_class
from ..eval.reasoning import shortcut_accuracy
from ..models import arch_names
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train import reasoning as rtask
from ..train.reasoning import TestSets, score_grid
from . import drt, drt_shortcuts
from .drt import run_name
from .drt_claims import CLAIMS
from .reasoning_scores import (best_accuracy, diagnostic_rows, difficulty_columns, fixed_depth_label, gate_rows,
                               generator_columns, grid_cells, mean_heatmap, negatives, other_generator_cells,
                               plot_gates)
from .recipes import Recipe, parameter_count
from .render import (RIGHT, Column, Group, bullets, groups, heading, key, left, markdown, minutes_per_run,
                     noting_failures, over_budget, parameters, part, percent_of, spread_of, table, write_table)
from .report import MISSING, cell, finished, percent, read_interval, spread
from .study import (Axis, Backfill, Flag, RunSummary, StudyBase, StudySpec, grouped_plan, register_study,
                    unit_interval)
from .results import ResultTable, study_results
from .retrain import Reproduction, retrains_note

COLUMNS = ["task", "arch", "alpha", "seed", "parameters", "updates", "train_seconds", "trained_difficulties",
           "trained_steps", "id_accuracy", "ood_accuracy", "step1_12hop", "best_by_difficulty", "val_accuracy",
           "diagnostic_max_change", "mean_ponder_ood", "cross_id_accuracy", "cross_ood_accuracy", "status", "machine"]
KEY = ["task", "arch", "alpha", "seed"]
ALPHA_SWEEP = (0.0, 0.1, 0.5, 1.0)
# A retrained run reproduces its row when its OOD accuracy equals the row's up to the row's 4-decimal rounding:
# one OOD test item answered differently moves it by more (the graph recipe has at most 2,000 OOD items)
REPRODUCE_TOLERANCE = 1e-4


class DrtStudy(StudyBase):
    """Seed 002's study: every (task, arch, alpha, seed), each scored on its test grid, by the other negative
    generator (graph), and by the depth-embedding diagnostic (the core). With `shortcuts_only` it trains
    nothing: the family recipes' shortcut baselines are scored, then the report is rewritten."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 shortcuts_only: bool = False, diagnostic_per_bucket: int | None | str = "scale",
                 eval_batch_size: int = 256):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.trains = not shortcuts_only
        if diagnostic_per_bucket == "scale":  # a sample of each test bucket at CPU scale, every row at full
            diagnostic_per_bucket = drt.CPU_DIAGNOSTIC_PER_BUCKET if scale == "cpu" else None
        self.per_bucket, self.batch_size = diagnostic_per_bucket, eval_batch_size
        self.results = study_results(self.out, COLUMNS, KEY)
        self.gates = self.per_run("gates.csv", "step", ["gate_mean"])
        self.diagnostics = self.per_run("diagnostic.csv", "variant", ["accuracy", "change", "budgets", "rows"])
        self.shortcuts = drt_shortcuts.table(self.out)  # study-wide: one row per family recipe and shortcut
        self.tests = TestSets()
        self._grids: dict[tuple[str, int], tuple] = {}  # (checkpoint, its mtime) -> score_grid's (grid, summary)
        # graph runs finished before the cross-generator evaluation existed are scored on it from their folder
        self.backfills = (Backfill("on the other negative generator", self.results, owed=self.cross_owed,
                                   score=lambda key, last: self.results.add(
                                       {**self.results.find(**key), **self.cross(key, *load_model(last))})),)

    def config(self, key: dict) -> RunConfig:
        """ConfigError for a pair that does not exist (the GNN on a sequence task): the engine skips it."""
        return self.config_once(key, lambda: drt.run_config(key["task"], self.scale, key["arch"], int(key["seed"]),
                                                            float(key["alpha"]), self.overrides))

    def folder(self, key: dict) -> Path:
        return self.runs / run_name(key["task"], key["arch"], float(key["alpha"]), key["seed"])

    def timed_like(self, key: dict) -> tuple[dict, float] | None:
        """A variant's first seed takes about its recipe's time, times its budget (updates are most of it)."""
        variant = drt.VARIANTS.get(key["task"])
        return None if variant is None else ({**key, "task": variant.of}, variant.budget)

    def reproduces(self, key: dict, run: RunSummary) -> Reproduction:
        """A retrained run against its results.csv row: OOD accuracy over its test grid, as `evaluate` scores it."""
        grid, summary = self.scored_grid(run)
        return Reproduction("OOD accuracy", float(self.results.find(**key)["ood_accuracy"]), summary["ood"],
                            REPRODUCE_TOLERANCE)

    def scored_grid(self, run: RunSummary, loaded: tuple | None = None) -> tuple:
        """The run's test grid and its summary, scored once per checkpoint: a retrain that replaces its row is
        checked (`reproduces`) and then scored (`evaluate`) on the same grid, minutes apart on a CPU. `loaded`:
        the checkpoint's (model, config) where the caller has loaded it already."""
        checkpoint = ckpt.run_checkpoint(run.folder)
        mark = (str(checkpoint), checkpoint.stat().st_mtime_ns)
        if mark not in self._grids:
            model, config = loaded or load_model(checkpoint)
            self._grids = {mark: score_grid(model, self.tests.get(config.task), config.task,
                                            batch_size=self.batch_size)}  # one run at a time: keep only the last
        return self._grids[mark]

    def prepare(self, plan: list[dict], log) -> None:
        """The family recipes' shortcut baselines (seconds, no model) -> shortcuts.csv."""
        drt_shortcuts.record(self.shortcuts, [(key, self.config(key)) for key in plan],
                             self.tests.get, log)

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        """The test grid (grids/<run>.csv), gates per step, the depth-embedding diagnostic, the other negative
        generator (graph), then the results.csv row: ID / OOD best over sufficient budgets, step-1 accuracy on
        12-hop graphs, the OOD ponder steps of ACT."""
        model, config = load_model(ckpt.run_checkpoint(run.folder))
        test = self.tests.get(config.task)
        grid, summary = self.scored_grid(run, (model, config))
        grid.write_csv(self.out / self.run_files(key)[0])
        self.gates.add_many(gate_rows(key, grid))
        # the depth-embedding diagnostic, at CPU scale on a sample of each test bucket
        diagnosed, max_change = diagnostic_rows(key, model, test.first_per_difficulty(self.per_bucket), grid.budgets,
                                                rtask.trained_steps_range(config)[1], batch_size=self.batch_size)
        self.diagnostics.add_many(diagnosed)
        self.results.add({
            **key, **run.cells(model), **grid_cells(grid, summary, config),
            "step1_12hop": cell(shortcut_accuracy(grid, 12) if config.task.name == "graph" else None, 4),
            "val_accuracy": cell(run.last("val_accuracy"), 4), "diagnostic_max_change": cell(max_change, 4),
            **self.cross(key, model, config)})

    def run_files(self, key: dict) -> list[str]:
        """The files the run of `key` writes under the results folder: its test grids (a merge copies them)."""
        name = self.folder(key).name
        return [f"grids/{name}.csv", f"grids/{name}_cross.csv"]

    def cross(self, key: dict, model, config: RunConfig) -> dict:
        """A graph model on the other negative generator's test buckets -> grids/<run>_cross.csv, its cells."""
        path = self.out / self.run_files(key)[1]
        return other_generator_cells(model, config, self.tests, path, batch_size=self.batch_size)

    def cross_owed(self, key: dict) -> bool:
        return _graph(key["task"]) and not self.results.find(**key).get("cross_id_accuracy")

    def report(self) -> None:
        """table.md, a heatmap per recipe (mean grid over its seeds) and gates.png (mean gate per step)."""
        out, results, gates, shortcuts = self.out, self.results, self.gates, self.shortcuts
        write_table(out, (results, gates, shortcuts), lambda: table_markdown(results, self.scale, shortcuts,
                                                                  retrains_note(self, "drt")))
        draw_heatmaps(out, results.rows, out / "grids")
        plot_gates(gates.rows, results.rows, out / "gates.png", core="drt", name=lambda r: run_name(
            r["task"], r["arch"], float(r["alpha"]), int(r["seed"])).removeprefix(f"{r['task']}_"))


def draw_heatmaps(out: Path, rows: list[dict], grids: Path) -> None:
    """heatmap_<recipe>.png in `out` for every recipe of the results `rows`: the mean of its seeds' grid files in
    `grids`. An archived folder is redrawn the same way:
    `python -c "from looped.experiments.drt_study import redraw_archive; redraw_archive('FOLDER')"`."""
    for g in groups(rows, GROUP):
        task, arch, alpha = g.key.values()
        label = run_name(task, arch, float(alpha), 0).removesuffix("_seed0")
        mean_heatmap([grids / f"{run_name(task, arch, float(alpha), int(r['seed']))}.csv" for r in g.runs],
                     out / f"heatmap_{label}.png", g.runs[0] if g.runs else {}, label,
                     difficulty_name=task_class(drt.base(task)).difficulty_name,
                     fixed_depth=fixed_depth_label(arch, drt.base(task)))


def redraw_archive(folder: str | Path) -> None:
    """The heatmaps of an archived results folder (its results.csv, grids in grids/ or beside it) in today's style."""
    folder = Path(folder)
    rows = ResultTable(folder / "results.csv", COLUMNS, KEY).rows
    draw_heatmaps(folder, rows, folder / "grids" if (folder / "grids").is_dir() else folder)


# --- report -----------------------------------------------------------------------------------------------
CAPTION = ("ID / OOD: mean over test difficulties inside / outside the trained range of the best accuracy over "
           "sufficient step budgets (T >= difficulty; the largest budget where none is), in %, mean ± sample SD "
           "over seeds (n = seeds finished). Paper: seed 002 Table 3, the paper's full recipe.")
SWEEP_NOTE = ("Paper (d = 128): step-1 accuracy on 12-hop ≈ 50 % with silent thinking, 64–69 % with per-step "
              "supervision; alpha = 0.1 already loses 10-hop paths.")
CROSS_CAPTION = ("The paper's negatives can often be refuted by local cues (a source without out-edges, a target "
                 "without in-edges); hard negatives cannot (the source has out-edges, the target in-edges, and "
                 "refuting needs as many hops as the matching positives). Every graph run is scored on both test sets "
                 "(ID / OOD %, runs with a checkpoint).")
GROUP = ("task", "arch", "alpha")  # a table line: the seeds of one recipe
KEY_COLUMNS = [key("task"), key("arch"), key("alpha", align=RIGHT)]
MAIN_COLUMNS = [
    *KEY_COLUMNS,
    noting_failures(percent_of("ID %", "id_accuracy"), counted=False),
    percent_of("OOD %", "ood_accuracy"),
    Column("paper ID / OOD", lambda g: "{} / {}".format(*drt.PAPER[g["arch"], g["task"]])
           if float(g["alpha"]) == 0 and (g["arch"], g["task"]) in drt.PAPER else MISSING),
    Column("step-1 acc. 12-hop", lambda g: percent(g.values("step1_12hop")) if _graph(g["task"]) else MISSING),
    percent_of("depth-emb. max |change|", "diagnostic_max_change"),
    spread_of("ACT ponder steps (OOD)", "mean_ponder_ood", 2), parameters(), minutes_per_run()]
SWEEP_COLUMNS = [key("arch"), key("alpha", align=RIGHT), percent_of("step-1 acc. 12-hop %", "step1_12hop"),
                 percent_of("sufficient-step OOD %", "ood_accuracy"),
                 Column("10-hop best %", lambda g: spread([best_accuracy(r).get(10) for r in g.runs], 1, 100))]


VARIANT_CAPTION = ("Each variant is its recipe with one of the CPU changes put back to the paper's value, or trained "
                   "longer (drt.VARIANTS), at the recipe's seeds; the last column is the variant's OOD minus its "
                   "recipe's OOD at the same seed, mean over the seeds both have (points): what that change is "
                   "worth, seed for seed.")


def variant_columns(rows: list[dict]) -> list[Column]:
    def against_recipe(g: Group) -> str:
        base = drt.VARIANTS[g["task"]].of
        gaps = []
        for run in g.runs:
            theirs = finished(rows, task=base, arch=g["arch"], alpha=g["alpha"], seed=run["seed"])
            if theirs and run["ood_accuracy"] and theirs[0]["ood_accuracy"]:
                gaps.append(float(run["ood_accuracy"]) - float(theirs[0]["ood_accuracy"]))
        text = spread(gaps, 1, 100) if gaps else MISSING
        return f"+{text}" if gaps and not text.startswith("-") else text

    return [key("task", "variant"), key("arch"), left("changed", lambda g: drt.variant_change(g["task"])),
            percent_of("ID %", "id_accuracy"), percent_of("OOD %", "ood_accuracy"),
            Column("OOD − recipe's, same seeds", against_recipe, RIGHT)]


def _graph(task: str) -> bool:
    return drt.TASKS.get(task) == "graph"


def table_markdown(results: ResultTable, scale: str, shortcuts: ResultTable | None = None,
                   retrained: list[str] = ()) -> str:
    every = groups(results.rows, GROUP, order=line_order(results.rows))
    tasks = sorted({str(r["task"]) for r in results.rows} & set(drt.TASKS))
    recipes = [bullets(drt.describe(task, scale) for task in tasks)] if scale == "cpu" and tasks else []
    lines = [*heading(f"Seed 002 (DRT) at {scale} scale", results.rows, CAPTION, *recipes),
             *table(MAIN_COLUMNS, every)]
    if shortcuts is not None:
        lines += drt_shortcuts.main_table_rows(shortcuts, columns=len(MAIN_COLUMNS))
    lines += over_budget(every)
    sweep = sorted(groups(results.rows, GROUP, task="graph", arch="drt"), key=lambda g: float(g["alpha"]))  # core's
    lines += part("Silent thinking vs intermediate supervision (graph, seed 002 Table 4)", SWEEP_COLUMNS,
                  sweep if len(sweep) > 1 else [], note=SWEEP_NOTE)
    variants = [g for g in every if g["task"] in drt.VARIANTS and g.runs]
    lines += part("Variants: one CPU change reverted, or a longer budget", variant_columns(results.rows), variants,
                  VARIANT_CAPTION)
    lines += _hop_table([g for g in every if _graph(g["task"]) and g.runs])
    if shortcuts is not None:
        lines += drt_shortcuts.by_depth_section(shortcuts, [g for g in every if drt.TASKS.get(g["task"]) == "family"])
    crossed = [g for g in every if _graph(g["task"]) and any(r.get("cross_id_accuracy") for r in g.runs)]
    lines += part("Graph frontier on both negative generators", CROSS_COLUMNS, crossed, CROSS_CAPTION)
    lines += ["", "Paper's heatmap notes:", bullets(f"{t}: {note}" for t, note in drt.PAPER_NOTES.items())]
    return markdown([*lines, *retrained])


ARCH_ORDER = ("drt", "drt_tied", "ut_act", "fixed_transformer", "gnn", "trm")  # the core, its ablation, baselines


def line_order(rows: list[dict]) -> list[tuple]:
    """The (task, arch, alpha) lines of the tables: by recipe as drt.TASKS lists them (the paper's tasks, then the
    harder and de-cued ones, then the variants), the core before its baselines, alpha rising; not the order
    the runs happened to finish in."""
    def rank(line: tuple) -> tuple:
        task, arch, alpha = line
        return (list(drt.TASKS).index(task) if task in drt.TASKS else len(drt.TASKS), task,
                ARCH_ORDER.index(arch) if arch in ARCH_ORDER else len(ARCH_ORDER), arch, float(alpha))

    return sorted({tuple(str(r[c]) for c in GROUP) for r in rows}, key=rank)


CROSS_COLUMNS = [left("trained on", lambda g: f"{negatives(g['task'])} negatives"), *KEY_COLUMNS[1:],
                 *generator_columns()]


def _hop_table(graph: list[Group]) -> list[str]:
    """Graph accuracy by hop count for every graph run group: where each architecture's frontier ends (the paper's
    claim: fixed-depth baselines fall to chance beyond the hops their depth covers, the core follows h steps)."""
    if not graph:
        return []
    runs = [r for g in graph for r in g.runs]
    hops = sorted({h for r in runs for h in best_accuracy(r)})
    lo, hi = read_interval(runs[0]["trained_difficulties"])  # every graph recipe trains on the same hop counts
    caption = ("Best accuracy over sufficient step budgets (T >= hops; the largest budget where none is) per test "
               f"bucket, in %, mean over seeds; * marks hop counts outside the trained range ({lo}-{hi}); chance is "
               "50 %.")
    columns = [key("task", "recipe"), *KEY_COLUMNS[1:], Column("seeds", lambda g: str(len(g.runs))),
               *difficulty_columns(hops, (lo, hi), best_accuracy)]
    return part("Graph accuracy by hop count", columns, graph, caption)


# --- the spec ------------------------------------------------------------------------------------------------
def recipes():
    """configs/drt/{full,cpu}/<recipe>.yaml for every recipe in drt.TASKS (its CPU-study variants: cpu/ only)."""
    for scale in ("full", "cpu"):
        for task in (t for t in drt.TASKS if scale == "cpu" or t not in drt.VARIANTS):  # variants: CPU study only
            params = parameter_count(drt.run_config(task, scale).model)
            header = (f"# {drt.describe(task, scale)}; {params:,} parameters.\n"
                      f"# train.max_targets counts rows (one label per row): epochs x training rows.\n"
                      f"# Generated by `looped reproduce drt --write-recipes`. "
                      f"Run: looped train configs/drt/{scale}/{task}.yaml --out runs/...\n")
            yield Recipe(f"{scale}/{task}.yaml", header, drt.recipe(task, scale))


TOY = {"select": {"task": ("graph",), "arch": ("drt",), "seed": (42,)},  # the core on a few tiny graphs in seconds
       "overrides": {"model": {"dim": 16, "heads": 2, "ffn_dim": 32},
                     "task": {"train_size": 128, "val_size": 16, "test_per_bucket": 8,
                              "test_difficulties": [1, 2, 6, 12], "eval_steps": [1, 2, 8, 12]},
                     "train": {"max_targets": 128, "eval_every": 0}},
       "options": {"diagnostic_per_bucket": 4}}

AXES = (Axis("task", "tasks", drt.PAPER_TASKS, tuple(drt.TASKS), aliases={"boolean": "logic"},
             help="with none of --tasks / --archs / --alphas / --seeds, --scale cpu runs the whole CPU plan "
                  "(drt.CPU_PLAN: the core on the three tasks, drt_tied and the core on 5 graph seeds, every "
                  "baseline and the alpha sweep on 3)"),
        Axis("arch", "archs", ("drt",), lambda scale: tuple(arch_names("reasoning")),
             help="also drt_tied ut_act fixed_transformer gnn"),
        Axis("alpha", "alphas", ("0.0",), cell=unit_interval,
             help="intermediate-supervision weights, graph only (the paper's sweep: " + " ".join(map(str, ALPHA_SWEEP))
                  + ")"),
        Axis("seed", "seeds", drt.SEEDS, cell=int))

register_study(StudySpec(
    name="drt", help="seed 002: depth-recurrent core and baselines on graph / logic / family", axes=AXES,
    build=DrtStudy, recipes=recipes, toy=TOY, claims=CLAIMS,
    default_plan=lambda scale: grouped_plan(AXES, drt.CPU_PLAN) if scale == "cpu" else None,  # else the axes
    flags=(Flag("shortcuts_only", "only fit and score the shortcut baselines of the selected family recipes and "
                                  "rewrite the report (no training)"),),
    keep=lambda key, scale: float(key["alpha"]) == 0 or key["task"] == "graph"))
