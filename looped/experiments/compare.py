"""`looped compare`: does looping pay on this data? Every row at one parameter count (and, for `--match flops`, a
plain row given the looped rows' training FLOPs), each over a few seeds, in the same data order; a held-out
curve of ~20 evaluations per run, scored at its best checkpoint; then a table and plots (compare_report).

    plan = load_or_make_plan(out, CompareOptions(archs=[...], seeds=3, minutes=25))
    run_compare(out, runs, plan)

It is a study for the shared runner (results.run_study): a finished run is a row of OUT/results.csv and is never
trained again, a killed run resumes from its last checkpoint, and several processes started on the same OUT
share the runs (each is claimed by one). Per run it records:
  curves.csv   held-out bits/byte at every evaluation, with the training FLOPs spent by then;
  depth.csv    looped rows: held-out bits/byte at test-time rounds 1 .. 2 x trained (the best checkpoint);
  results.csv  params, updates, training FLOPs, best held-out bits/byte (the best checkpoint is the one with
               the lowest held-out score, over the same held-out bytes), best depth, inference FLOPs per token,
               decoding tokens/s (median of three timed decodes with the incremental state), state bytes at
               context 1,024.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from ..data import load_heldout
from ..eval import evaluate_lm
from ..models.ledger import model_ledger
from ..train import load_model
from ..train import checkpoint as ckpt
from ..train.run_folder import read_metrics
from .compare_plan import (DEPTH_FACTOR, FLOPS_ROW, PLAIN, CompareOptions, is_swept, predicted_seconds, row_steps,
                           run_config)
from .compare_report import write_report
from .results import ResultTable
from .study import RunSummary, execute

COLUMNS = ["row", "arch", "seed", "parameters", "updates", "train_flops", "bits_per_byte", "best_step",
           "best_depth", "best_depth_bits_per_byte", "inference_flops_per_token", "decode_tokens_per_s",
           "state_bytes_1024", "train_seconds", "status", "machine"]
CURVE_COLUMNS = ["row", "seed", "step", "flops", "bits_per_byte"]
DEPTH_COLUMNS = ["row", "seed", "rounds", "bits_per_byte"]
STATE_CONTEXT = 1024
DECODE_PROMPT, DECODE_TOKENS, DECODE_REPEATS = 16, 48, 3


def tables(out: Path) -> tuple[ResultTable, ResultTable, ResultTable]:
    out = Path(out)
    return (ResultTable(out / "results.csv", COLUMNS, ["row", "seed"]),
            ResultTable(out / "curves.csv", CURVE_COLUMNS, ["row", "seed", "step"]),
            ResultTable(out / "depth.csv", DEPTH_COLUMNS, ["row", "seed", "rounds"]))


class CompareStudy:
    """The comparison for the study engine (study.execute); see the module docstring."""

    trains = True

    def __init__(self, out: Path, runs: Path, plan: dict, log=print):
        self.out, self.runs, self.spec, self.log = Path(out), Path(runs), plan, log  # spec: plan.json
        self.options = CompareOptions(**plan["options"])
        self.results, self.curves, self.depths = tables(self.out)
        self.clock = Progress(plan, log)

    def plan_runs(self) -> list[dict]:
        """Seed by seed, every row: a comparison stopped early still holds whole seeds."""
        return [{"row": row, "seed": seed} for seed in self.options.seed_list for row in self.options.rows]

    def config(self, key: dict):
        return run_config(self.spec, key["row"], int(key["seed"]))

    def folder(self, key: dict) -> Path:
        return self.runs / key["row"].replace("@", "_at_") / f"seed{key['seed']}"

    def label(self, key: dict) -> str:
        return self.clock.before(key, self.plan_runs(), self.results)

    def failure_key(self, key: dict, config) -> dict:
        return {**key, "arch": config.model.arch}

    def prepare(self, plan: list[dict], log) -> None:
        self.clock.start()

    def evaluate(self, key: dict, config, run: RunSummary, log) -> None:
        folder, seconds = run.folder, run.seconds
        update_flops = self.spec["update_flops"][config.model.arch]
        curve = record_curve(self.curves, key, folder, update_flops)
        best = min(curve, key=lambda e: e["val_bits_per_byte"])
        model, _ = load_model(ckpt.run_checkpoint(folder, "best"))
        blocks, _ = load_heldout(config.data)  # the comparison's first --heldout-bytes of held-out text
        depth = depth_sweep(self.depths, key, model, blocks) if is_swept(key["row"]) else None
        ledger = model_ledger(model, self.options.context)
        updates = run.updates
        self.results.add({**key, "arch": config.model.arch, "parameters": model.parameter_counts()["total"],
                          "updates": updates, "train_flops": f"{updates * update_flops:.6g}",
                          "bits_per_byte": f"{best['val_bits_per_byte']:.6f}", "best_step": best["step"],
                          "best_depth": depth[0] if depth else "", "best_depth_bits_per_byte":
                          f"{depth[1]:.6f}" if depth else "", "inference_flops_per_token": f"{ledger.per_token:.6g}",
                          "decode_tokens_per_s": f"{decode_speed(model):.1f}",
                          # round: MoR's state is an expectation (its router decides which tokens each depth caches)
                          "state_bytes_1024": round(ledger.state_bytes(STATE_CONTEXT)),
                          "train_seconds": f"{seconds:.1f}", "status": "ok"})
        self.clock.ran(key, trained=seconds > 0)

    def report(self) -> None:
        write_report(self.out, self.spec)


def run_compare(out: Path, runs: Path, plan: dict, *, progress: bool = True, stop_after: float | None = None,
                finish_within: float | None = None, log=print) -> ResultTable:
    """Train, score and report every run of the plan not yet in OUT/results.csv (module docstring)."""
    study = CompareStudy(out, runs, plan, log)
    return execute(study, study.plan_runs(), progress=progress, stop_after=stop_after, finish_within=finish_within,
                   log=log)


def record_curve(table: ResultTable, key: dict, folder: Path, update_flops: float) -> list[dict]:
    """The run's held-out evaluations (metrics.jsonl, resumes included) as curve rows; returns the evaluations."""
    by_step = {e["step"]: e for e in read_metrics(folder / "metrics.jsonl") if "val_bits_per_byte" in e}
    curve = [by_step[step] for step in sorted(by_step)]
    if not curve:
        raise ValueError(f"{folder}: the run recorded no held-out evaluation")
    table.add_many([{**key, "step": e["step"], "flops": f"{e['step'] * update_flops:.6g}",
                     "bits_per_byte": f"{e['val_bits_per_byte']:.6f}"} for e in curve])
    return curve


def depth_sweep(table: ResultTable, key: dict, model, blocks: torch.Tensor) -> tuple[int, float]:
    """Held-out bits/byte at test-time rounds 1 .. DEPTH_FACTOR x trained; (best rounds, its bits/byte)."""
    trained = model.default_rounds
    scores = {}
    for rounds in range(1, DEPTH_FACTOR * trained + 1):
        scores[rounds] = evaluate_lm(model, blocks, batch_size=16, rounds=rounds)["bits_per_byte"]
    table.add_many([{**key, "rounds": r, "bits_per_byte": f"{bits:.6f}"} for r, bits in scores.items()])
    best = min(scores, key=lambda r: (scores[r], r))
    return best, scores[best]


@torch.inference_mode()
def decode_speed(model, prompt: int = DECODE_PROMPT, tokens: int = DECODE_TOKENS) -> float:
    """Tokens per second of greedy decoding with the incremental state at batch 1: prefill a prompt, then feed
    each predicted token back; the median of DECODE_REPEATS timed decodes (the prefill is not timed)."""
    context = model.config.context_length
    prompt, tokens = min(prompt, context // 2), min(tokens, context - min(prompt, context // 2))
    start_tokens = torch.randint(0, 256, (1, prompt), generator=torch.Generator().manual_seed(0))
    speeds = []
    for _ in range(DECODE_REPEATS):
        state = model.init_state(1)
        next_token = model.decode(start_tokens, state)[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(tokens):
            next_token = model.decode(next_token, state)[:, -1:].argmax(-1)
        speeds.append(tokens / (time.perf_counter() - start))
    return statistics.median(speeds)


class Progress:
    """What the log says before each run: which of how many, and the minutes left for it and for the comparison.
    A row's time is what its earlier seeds took (training and scoring); a row not run yet is predicted from the
    plan's timings (--minutes), else from the seconds per training FLOP of the runs finished so far."""

    def __init__(self, plan: dict, log):
        self.plan, self.log = plan, log
        self.predicted = predicted_seconds(plan)
        self.observed: dict[str, list[float]] = {}
        self.started: float | None = None

    def start(self) -> None:
        self.observed, self.started = {}, None

    def ran(self, key: dict, trained: bool) -> None:
        """Record the run that just finished (a run trained by an earlier process tells nothing about speed)."""
        if trained and self.started is not None:
            self.observed.setdefault(key["row"], []).append(time.perf_counter() - self.started)

    def seconds(self, row: str) -> float | None:
        if row in self.observed:
            return statistics.fmean(self.observed[row])
        if row in self.predicted:
            return self.predicted[row]
        done = [(r, statistics.fmean(v)) for r, v in self.observed.items()]
        if not done:
            return None
        per_flop = sum(s for _, s in done) / sum(row_train_flops(self.plan, r) for r, _ in done)
        return per_flop * row_train_flops(self.plan, row)

    def before(self, key: dict, plan: list[dict], results: ResultTable) -> str:
        self.started = time.perf_counter()
        results.reload()
        left = [k for k in plan if not results.has(**k)]
        text = f"compare [{plan.index(key) + 1}/{len(plan)}]: {key['row']} / seed {key['seed']}"
        this, each = self.seconds(key["row"]), [self.seconds(k["row"]) for k in left]
        if this is None or None in each:
            return text
        return f"{text} (ETA this run ~{this / 60:.1f} min, all {len(left)} left ~{sum(each) / 60:.1f} min)"


def row_train_flops(plan: dict, row: str) -> float:
    return row_steps(plan, row) * plan["update_flops"][PLAIN if row == FLOPS_ROW else row]
