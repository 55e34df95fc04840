"""`looped reproduce depth_schedules`: fixed against random training depth, each swept over test-time depth
(issue 30 part 2.2), over seeds.

The two recipes are configs/examples/depth_fixed.yaml and depth_random.yaml: seed 000's anchored loop trained for
300 updates on the embedded KJV, differing in `model.depth_schedule` alone (4 rounds on every update, or a
Poisson log-normal draw of mean 4). Each (schedule, seed) run trains its recipe with `train.seed` set to the seed
and one thread, then the depth sweep of `looped depth RUN --max-factor 4` (looped.eval.depth.lm_depth_sweep)
scores its best checkpoint at test-time depths 1-16 on the whole held-out stream (the option heldout_batches
scores a prefix instead, the same for every run, and the report says so).

Writes <out>/results.csv (one line per run: its FLOPs from the compute ledger, its best depth and slope),
depth.csv (one line per run and test-time depth), table.md (mean ± SD over seeds) and depth_schedules.png.

    looped reproduce depth_schedules --status
    looped reproduce depth_schedules --scale cpu --stop-after 40
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from ..config import from_dict, merge
from ..data import load_streams, to_blocks
from ..eval.depth import lm_depth_sweep
from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from .board_scores import training_flops
from .depth_report import write_report
from .report import cell
from .results import OVERRIDES, ResultTable
from .study import Axis, RunSummary, StudyBase, StudySpec, register_study

REPO = Path(__file__).resolve().parents[2]
RECIPES = {"fixed": "configs/examples/depth_fixed.yaml", "random": "configs/examples/depth_random.yaml"}
SEEDS = (11, 23, 37)
MAX_FACTOR = 4  # as `looped depth RUN --max-factor 4`: test-time depths 1 .. 4 x the trained rounds
HELDOUT_BATCHES = 0  # the held-out batches every sweep scores (0: the whole stream, as `looped depth` does)
SWEEP_BATCH = 16  # `looped depth`'s batch size

KEY = ["seed", "schedule"]  # seed outermost: a study cut short has both schedules of its first seeds
COLUMNS = [*KEY, "arch", "parameters", "updates", "best_step", "training_flops", "trained_depth", "scored_bytes",
           "best_depth", "slope_past_trained", "train_seconds", "eval_seconds", "status", "machine"]
DEPTH_COLUMNS = [*KEY, "depth", "bits_per_byte"]


def recipe(schedule: str) -> dict:
    """The schedule's shipped example config as a dict (ValueError naming the known schedules)."""
    if schedule not in RECIPES:
        raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(RECIPES)})")
    return yaml.safe_load((REPO / RECIPES[schedule]).read_text())


class DepthSchedules(StudyBase):
    """Each (schedule, seed): train the recipe at that seed, then sweep its best checkpoint over depths 1-16.

    heldout_batches: how many held-out batches of 16 blocks each sweep scores (0: the whole stream)."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 heldout_batches: int = HELDOUT_BATCHES):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.heldout_batches = heldout_batches
        self.results = ResultTable(self.out / "results.csv", COLUMNS, KEY, extra=(OVERRIDES,))
        self.depths = ResultTable(self.out / "depth.csv", DEPTH_COLUMNS, [*KEY, "depth"])

    def config(self, key: dict) -> RunConfig:
        seeded = merge(recipe(key["schedule"]), {"train": {"seed": int(key["seed"]), "threads": 1}})
        return from_dict(RunConfig, merge(seeded, self.overrides))

    def folder(self, key: dict) -> Path:
        return self.runs / key["schedule"] / f"seed{key['seed']}"

    def sweep(self, model, config: RunConfig) -> dict:
        """`looped depth RUN --max-factor 4` on the held-out prefix: the record of looped.eval.depth."""
        streams = load_streams(config.data)
        blocks = to_blocks(streams.heldout, config.data.block_size, name=f"{streams.name} held-out")
        source = ({"corpus": streams.name, "heldout": streams.split_rule}, [blocks], streams.unit)
        return lm_depth_sweep(model, [source], max_factor=MAX_FACTOR, batch_size=SWEEP_BATCH,
                              max_batches=self.heldout_batches)

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        start = time.perf_counter()
        model, config = load_model(ckpt.run_checkpoint(run.folder, config.train.select))
        record = self.sweep(model, config)
        entry, flops = record["sources"][0], training_flops(config, model, run.updates)
        summary = entry["summary"]
        log(f"  {key['schedule']} seed {key['seed']}: best depth {summary['best_depth']} "
            f"({summary['best_score']:.4f} bits/byte), {flops:.3g} training FLOPs")
        self.depths.add_many([{**key, "depth": p["depth"], "bits_per_byte": cell(p["bits_per_byte"])}
                              for p in entry["fixed"]])
        self.results.add({**key, "arch": record["arch"], "parameters": record["parameters"], "updates": run.updates,
                          "best_step": run.best_step, "training_flops": f"{flops:.4g}",
                          "trained_depth": record["trained_depth"], "scored_bytes": entry["targets"],
                          "best_depth": summary["best_depth"],
                          "slope_past_trained": cell(summary["slope_past_trained"]),
                          "train_seconds": f"{run.seconds:.1f}", "eval_seconds": f"{time.perf_counter() - start:.1f}",
                          "status": "ok"})

    def report(self) -> None:
        write_report(self.out, self.results, self.depths, self.heldout_batches)


def _toy(tmp: Path) -> dict:
    return {"select": {"seed": (11,)},
            "overrides": {"model": {"dim": 16, "heads": 2, "ffn_dim": 16, "rounds": 2},
                          "data": {"max_heldout_bytes": 2048},
                          "train": {"max_steps": 2, "eval_every": 1, "batch_size": 4, "log_every": 1}},
            "options": {"heldout_batches": 1}}


register_study(StudySpec(
    name="depth_schedules", help="fixed against random training depth, each swept over test-time depth, 3 seeds",
    axes=(Axis("seed", "seeds", SEEDS, cell=int), Axis("schedule", "schedules", tuple(RECIPES), tuple(RECIPES))),
    build=DepthSchedules, recipes=lambda: (), toy=_toy, scales=("cpu",),
    results_name=lambda scale, flags: "depth_schedules"))


__all__ = ["COLUMNS", "DEPTH_COLUMNS", "DepthSchedules", "recipe"]
