"""`looped reproduce board`: the leaderboard (issue 31 part 3), every family x every suite it can run, 3 seeds.

The plan is the product seeds x suites x families in that order, so a study cut short has every cell of the
first seed before any cell of the second (one full row of the table early, then the spread). Cells a family
cannot run are dropped by `keep` (looped.experiments.board.cannot_run; the table prints why), and a suite whose
data is absent here (the enwik8 sample) is skipped with its reason by the engine.

Each run trains its recipe (looped.experiments.board: one parameter target for every row, matched FLOPs on the
byte-LM suites, matched updates on the task suites), is scored on its suite and, for a row with a test-time
depth, at 1x / 2x / 4x its trained depth (looped.experiments.board_scores); its training FLOPs come from the
compute ledger. A finished run is a line in results.csv and is never trained again; an interrupted run resumes.

Writes <out>/results.csv, table.md and board.png (looped.experiments.board_report).

    looped reproduce board --status
    looped reproduce board                                   # the CPU plan (board.CPU_SUITES, seeds 1-3)
    looped reproduce board --tasks enwik8 stack_manipulation # more suites
"""

from __future__ import annotations

import time
from pathlib import Path

from ..train import RunConfig, load_model
from ..train import checkpoint as ckpt
from ..train.config import recipe_config
from ..train.reasoning import TestSets
from . import board
from .board_report import write_report
from .board_scores import score_lm, score_reasoning, score_sequence, trained_depth, training_flops
from .recipes import Recipe
from .report import cell
from .results import ResultTable, study_results
from .study import Axis, RunSummary, StudyBase, StudySpec, register_study

KEY = ["seed", "task", "family"]
COLUMNS = [*KEY, "arch", "parameters", "dim", "updates", "training_flops", "score", "trained_depth",
           *(f"depth_{k}x" for k in board.DEPTH_FACTORS), "train_seconds", "eval_seconds", "status", "machine"]


def results_table(out: Path) -> ResultTable:
    return study_results(out, COLUMNS, KEY)


class BoardStudy(StudyBase):
    """Every (seed, suite, family) run: trained, scored on its suite (and over depths), its FLOPs counted.

    test_size: test rows per length (sequence suites) or per difficulty (reasoning), default the scale's
    (board.TEST_SIZE); depth_rows: rows per length of the depth sweep (default half of test_size); lengths: a
    shorter test grid for every sequence suite (None: each suite's own)."""

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
                 test_size: int | None = None, depth_rows: int | None = None, lengths: list[int] | None = None):
        super().__init__(out, runs, scale=scale, overrides=overrides)
        self.test_size, self.depth_rows, self.lengths = test_size, depth_rows, lengths
        self.results = results_table(self.out)
        self.test_cache: dict = {}  # sequence test rows, shared by every family and seed
        self.reasoning_tests = TestSets()

    def config(self, key: dict) -> RunConfig:
        """ConfigError for a cell that cannot run (keep drops those) or whose data is absent (enwik8)."""
        recipe = board.run_config_dict(key["task"], key["family"], int(key["seed"]), self.scale)
        board.check_data(recipe)
        return recipe_config(recipe, self.overrides)

    def sizes(self, kind: str) -> tuple[int | None, int | None]:
        """(test rows, depth-sweep rows) per length or difficulty for a suite kind at this scale."""
        test = self.test_size or board.TEST_SIZE[self.scale].get(kind)
        return test, self.depth_rows or (max(1, test // 2) if test else None)

    def score(self, model, config: RunConfig, kind: str) -> dict:
        test, depth_rows = self.sizes(kind)
        if kind == "lm":
            return score_lm(model, config, batch_size=config.train.eval_batch_size)
        if kind == "reasoning":
            return score_reasoning(model, config, self.reasoning_tests)
        return score_sequence(model, config, kind, test_size=test, depth_rows=depth_rows, lengths=self.lengths,
                              cache=self.test_cache)

    def evaluate(self, key: dict, config: RunConfig, run: RunSummary, log) -> None:
        start = time.perf_counter()
        kind = board.suite_kind(key["task"])
        model, config = load_model(ckpt.run_checkpoint(run.folder, config.train.select))
        scored = self.score(model, config, kind)
        depth = trained_depth(model, config)
        flops = training_flops(config, model, run.updates)
        log(f"  {key['task']} / {key['family']}: score {scored['score']:.4f}, {flops:.3g} training FLOPs")
        self.results.add({**key, "arch": config.model.arch, "parameters": sum(p.numel() for p in model.parameters()),
                          "dim": config.model.dim, "updates": run.updates, "training_flops": f"{flops:.4g}",
                          "score": cell(scored["score"]), "trained_depth": depth or "",
                          **{f"depth_{k}x": cell(v) for k, v in scored["depth"].items()},
                          "train_seconds": f"{run.seconds:.1f}", "eval_seconds": f"{time.perf_counter() - start:.1f}",
                          "status": "ok"})

    def report(self) -> None:
        write_report(self.out, self.results, self.scale)


# --- the spec ------------------------------------------------------------------------------------------------
def recipes():
    """configs/board/<scale>/<suite>/<family>.yaml for the CPU plan's suites (the other suites' recipes come from
    the same generator: `looped reproduce board --tasks NAME`)."""
    for scale in board.SCALES:
        for suite in board.CPU_SUITES:
            for family in board.FAMILIES:
                if board.cannot_run(family, suite):
                    continue
                config = board.run_config_dict(suite, family, board.SEEDS[0], scale)
                where = "CPU (1 thread)" if scale == "cpu" else "full scale (GPU)"
                header = (f"# leaderboard, {family} on {suite}, {where}: {board.parameters(config['model']):,} "
                          f"parameters (target {board.TARGET[scale]:,}).\n"
                          f"# Generated by `looped reproduce board --write-recipes`. Other seeds: --set train.seed=2\n")
                yield Recipe(f"{scale}/{suite}/{family}.yaml", header, config)


def _toy(tmp: Path) -> dict:
    """Two families on a byte-LM suite and a Chomsky task in seconds (the shared study drivers)."""
    return {"select": {"seed": (1,), "task": ("kjv", "parity_check"), "family": ("transformer", "shared_loop")},
            "overrides": {"model": {"dim": 16, "heads": 2, "ffn_dim": 16},
                          "data": {"max_heldout_bytes": 2048},
                          "train": {"max_steps": 2, "eval_every": 1, "batch_size": 4, "log_every": 1}},
            "options": {"test_size": 2, "depth_rows": 1, "lengths": [50]}}


register_study(StudySpec(
    name="board", help="the leaderboard: every family x every suite it can run, matched parameters, 3 seeds",
    axes=(Axis("seed", "seeds", board.SEEDS, cell=int),
          Axis("task", "tasks", lambda scale: board.CPU_SUITES if scale == "cpu" else board.SUITES, board.SUITES,
               help="byte-LM, Chomsky, seed 003 and seed 002 suites (a family that cannot run one is left out)"),
          Axis("family", "families", tuple(board.FAMILIES), tuple(board.FAMILIES))),
    build=BoardStudy, recipes=recipes, toy=_toy,
    keep=lambda key, scale: board.cannot_run(key["family"], key["task"]) is None))


__all__ = ["BoardStudy", "COLUMNS", "recipes", "results_table"]
