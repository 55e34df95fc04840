"""`looped compare`, part 1: what is trained. The rows at one parameter count, their run configs, the FLOP-matched
plain row, and the per-run budget sized to fit a number of minutes.

Every row trains on the same data in the same order (`data.sampler: independent` with one `data_seed`), with the
same recipe and the same number of updates; only the architecture differs. Widths follow seed 000's small budget
(plain 4 layers of width 128; shared loop width 256; anchored rows width 192; 4 rounds), scaled with the square
root of the parameter target, and the FFN widths are solved (looped.models.budget) so every row lands within
PARAM_TOLERANCE of the target. The `flops` matching adds one more row: the plain architecture given the updates
whose training FLOPs (the compute ledger) equal those of the most expensive looped row.

The resolved plan (widths, updates, FLOP target) is written once to OUT/plan.json: a resumed or second process
reuses it, so every run of a comparison has the same budget even when `--minutes` was sized by a measurement.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..config import from_dict
from ..io import atomic_write_text
from ..models import build_model, get_arch
from ..models.budget import match_rows
from ..models.ledger import model_ledger
from ..train import RunConfig
from .results import exclusive_lock

PLAIN = "transformer"


def _rounds(r: int) -> dict:
    return {"rounds": r}


# Every row compare trains: heads, head width at BASE_PARAMS (widths scale from these) and its depth fields at
# --rounds R. Seed 000's rows keep its small-budget widths (plain 4 layers of width 128, shared loop width 256,
# anchored rows width 192). The field's families keep the leaderboard's shapes (looped.experiments.board.FAMILIES)
# at twice its head width: Ouro's shared unit of two blocks applied R times; Huginn's and Parcae's one prelude
# block, a two-block core iterated R times (back-propagating through all R, Parcae through half) and one coda
# block; MoR's two shared layers with R recursions; RLT-1 as R layers split between encoder and decoder (its
# recurrence runs over tokens, so it has no test-time depth and is not swept).
SHAPES = {
    "transformer": (4, 32, lambda r: {"layers": r}),
    "shared_loop": (8, 32, _rounds), "adaptive_exit": (8, 32, _rounds), "anchored_loop": (6, 32, _rounds),
    "conditioned_dense": (6, 32, _rounds), "workspace": (6, 32, _rounds), "workspace_retention": (6, 32, _rounds),
    "exit_gate_loop": (6, 32, lambda r: {"layers": 2, "rounds": r}),
    "prelude_coda": (4, 32, lambda r: {"prelude_layers": 1, "core_layers": 2, "coda_layers": 1, "rounds": r,
                                       "backprop_rounds": r}),
    "stable_loop": (4, 32, lambda r: {"prelude_layers": 1, "core_layers": 2, "coda_layers": 1, "rounds": r,
                                      "backprop_rounds": max(1, r // 2)}),
    "mixture_of_recursions": (6, 32, lambda r: {"kv_heads": 2, "shared_layers": 2, "recursions": r}),
    "rlt": (4, 32, lambda r: {"encoder_layers": max(1, r // 2), "decoder_layers": max(1, r - r // 2),
                              "feedback_interval": 1}),
}
ARCHS = tuple(SHAPES)
FIELD_ARCHS = ("exit_gate_loop", "prelude_coda", "stable_loop", "mixture_of_recursions", "rlt")  # not seed 000's
DEFAULT_ARCHS = ("transformer", "shared_loop", "anchored_loop", "workspace")
FLOPS_ROW = f"{PLAIN}@flops"  # the plain row given the looped rows' training FLOPs
SEEDS = (11, 23, 37, 41, 53, 67, 79, 83, 97, 101)  # --seeds N takes the first N
BYTE_VOCAB = 257  # every row reads bytes (stated: RLT's default vocabulary is its task alphabet)
BASE_PARAMS = 918_000
PARAM_TOLERANCE = 0.005  # every row within 0.5 % of the plain row's count
CURVE_POINTS = 20  # held-out evaluations per run
DEPTH_FACTOR = 2  # looped rows are swept over test-time rounds 1 .. 2 x trained
RECIPE = {"lr": 2.0e-3, "weight_decay": 0.1, "schedule": "cosine", "min_lr": 2.0e-4}
MIN_STEPS = 20  # fewer updates than this say nothing about an architecture
# Updates per run when neither --steps nor --minutes is given: the default comparison (4 rows + the FLOP-matched
# plain row, 3 seeds, 1M parameters, 16 x 128 bytes per update) fits 30 minutes on 2 idle cores. Estimated from
# the CPU seconds (time.process_time, one thread) of updates and held-out batches, which a loaded machine does
# not inflate the way it inflates wall clock: default_budget_minutes(90) gave 27.5 minutes on one core (10.1 s per
# common update over the 15 runs, 12.3 minutes of evaluations, depth sweeps and overhead), so two idle cores
# take less. 90 updates x 16 x 128 bytes is a short budget: the comparison answers at what fits half an hour.
DEFAULT_STEPS = 90
PLAN_FILE = "plan.json"
# options a saved plan may change on resume: more seeds add runs of the same budget; `minutes` only sized the
# updates when the plan was made (the plan keeps them), and `steps` may repeat the plan's own number
EXTENSIBLE = ("seeds", "minutes", "steps")


@dataclass
class CompareOptions:
    """What the user asked for; two processes sharing OUT must ask for the same thing."""

    archs: list[str] = field(default_factory=lambda: list(DEFAULT_ARCHS))
    params: int = 1_000_000
    match: list[str] = field(default_factory=lambda: ["params", "flops"])
    seeds: int = 3
    minutes: float | None = None  # size the updates per run so the whole comparison takes this long here
    steps: int | None = None  # updates per run (neither given: DEFAULT_STEPS)
    context: int = 128
    batch_size: int = 16
    rounds: int = 4  # training depth of the looped rows (the plain row has this many layers)
    heldout_bytes: int = 16_384  # held-out bytes scored (each curve point and the depth sweep)
    data_seed: int = 0
    data: dict = field(default_factory=lambda: {"corpus": "kjv"})  # the data section (without block/sampler keys)
    threads: int | None = None

    def validate(self) -> None:
        unknown = [a for a in self.archs if a not in ARCHS]
        if unknown:
            raise ValueError(f"--archs: {unknown[0]!r} is not a byte-level row compare trains "
                             f"(known: {', '.join(ARCHS)})")
        if PLAIN not in self.archs:
            raise ValueError(f"--archs: the plain row {PLAIN!r} must be one of them "
                             "(every verdict compares against it)")
        if len(set(self.archs)) != len(self.archs) or len(self.archs) < 2:
            raise ValueError("--archs: name at least two different architectures, each once")
        if not self.match or any(m not in ("params", "flops") for m in self.match):
            raise ValueError(f"--match: choose from params, flops (got {' '.join(self.match) or 'nothing'})")
        checks = {"--params": (self.params, 1000), "--seeds": (self.seeds, 1), "--context": (self.context, 8),
                  "--batch-size": (self.batch_size, 1), "--rounds": (self.rounds, 1),
                  "--heldout-bytes": (self.heldout_bytes, self.context + 1)}
        if self.steps is not None:
            checks["--steps"] = (self.steps, 1)
        for option, (value, least) in checks.items():
            if value < least:
                raise ValueError(f"{option}: must be at least {least}, got {value}")
        if self.seeds > len(SEEDS):
            raise ValueError(f"--seeds: at most {len(SEEDS)}, got {self.seeds}")
        if self.steps is not None and self.minutes is not None:
            raise ValueError("--steps / --minutes: give one budget (updates per run, or the minutes to fit)")
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"--minutes: must be > 0, got {self.minutes}")

    @property
    def looped(self) -> list[str]:
        return [a for a in self.archs if a != PLAIN]

    @property
    def rows(self) -> list[str]:
        """Every trained row: the architectures, then the FLOP-matched plain row when asked for."""
        return list(self.archs) + ([FLOPS_ROW] if "flops" in self.match and self.looped else [])

    @property
    def seed_list(self) -> list[int]:
        return list(SEEDS[:self.seeds])


def parse_count(text: str) -> int:
    """'1M' / '250k' / '918000' -> an integer parameter count (a ValueError names the text)."""
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}.get(text[-1:].lower(), 1)
    try:
        value = float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        raise ValueError(f"--params: {text!r} is not a count (e.g. 1M, 250k, 918000)") from None
    return int(round(value))


# --- widths ---------------------------------------------------------------------------------------------
def base_fields(arch: str, options: CompareOptions) -> dict:
    """Model fields of `arch` except ffn_dim: heads fixed, head width scaled with sqrt(params / 918k) (even,
    at least 8), the bytes' vocabulary, the depth fields at --rounds (SHAPES), the comparison's context."""
    heads, head_dim, depth = SHAPES[arch]
    scaled = max(8, 2 * round(head_dim * math.sqrt(options.params / BASE_PARAMS) / 2))
    return {"dim": heads * scaled, "heads": heads, "vocab_size": BYTE_VOCAB, "context_length": options.context,
            **depth(options.rounds)}


def solve_widths(options: CompareOptions) -> dict[str, dict]:
    """{arch: model section} with FFN widths solved so every row is within PARAM_TOLERANCE of the plain row,
    whose width is the one closest to --params. A ValueError when the target is too small for the widths."""
    rows = {arch: base_fields(arch, options) for arch in options.archs}
    tolerance = max(1, math.ceil(PARAM_TOLERANCE * options.params))
    try:
        solved = match_rows(PLAIN, rows[PLAIN], rows, options.params, tolerance)
    except ValueError as err:
        raise ValueError(f"--params {options.params:,}: the rows cannot be matched ({err})") from None
    sections = {}
    for arch, (ffn_dim, total) in solved.items():
        if ffn_dim < 8:
            raise ValueError(f"--params {options.params:,}: too small for {arch} (its FFN would be {ffn_dim} wide)")
        sections[arch] = {"arch": arch, **rows[arch], "ffn_dim": ffn_dim, "parameters": total}
    return sections


def model_section(widths: dict[str, dict], row: str) -> dict:
    arch = PLAIN if row == FLOPS_ROW else row
    return {k: v for k, v in widths[arch].items() if k != "parameters"}


def update_flops(model_fields: dict, options: CompareOptions) -> float:
    """Training FLOPs of one update of this model (the ledger, on the meta device: nothing allocated)."""
    fields = dict(model_fields)
    with torch.device("meta"):
        model = build_model(get_arch(fields.pop("arch")).config(**fields))
    return model_ledger(model, options.context).training_flops(options.batch_size)


# --- run configs ----------------------------------------------------------------------------------------
def run_config(plan: dict, row: str, seed: int) -> RunConfig:
    """The run of one row and seed: the shared recipe, the row's model, its budget and 20 held-out evaluations."""
    options = CompareOptions(**plan["options"])
    steps = row_steps(plan, row)
    budget = {"max_flops": plan["flops_target"]} if row == FLOPS_ROW else {"max_steps": steps}
    data = {**options.data, "block_size": options.context + 1, "sampler": "independent",
            "data_seed": options.data_seed, "max_heldout_bytes": options.heldout_bytes}
    train = {"seed": seed, "batch_size": options.batch_size, **budget, "eval_every": max(1, steps // CURVE_POINTS),
             "eval_batches": 0, "eval_batch_size": 16, "select": "best", "log_every": max(1, min(10, steps // 20)),
             "threads": options.threads}
    section = {"model": model_section(plan["widths"], row), "data": data,
               "optim": {**RECIPE, "warmup_steps": max(1, min(50, steps // 10))}, "train": train}
    return from_dict(RunConfig, section)


def row_steps(plan: dict, row: str) -> int:
    """Updates of a row: the common budget, or for the FLOP-matched row what its FLOP target buys."""
    if row != FLOPS_ROW:
        return plan["steps"]
    return math.floor(plan["flops_target"] / plan["update_flops"][PLAIN])


# --- the budget -----------------------------------------------------------------------------------------
@dataclass
class Timing:
    """Measured seconds of one training update and one held-out batch (16 sequences) of a row."""

    update_s: float
    eval_batch_s: float


def measure(model_fields: dict, options: CompareOptions, repeats: int = 2, clock=time.perf_counter) -> Timing:
    """Time a few updates and held-out batches of a freshly built model on random bytes (after one warm-up).
    The wall clock (default) measures the machine as it is now, load included, which is what the comparison
    will run on; time.process_time measures the CPU seconds, what an idle machine would take."""
    fields = dict(model_fields)
    model = build_model(get_arch(fields.pop("arch")).config(**fields))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, 256, (options.batch_size, options.context + 1))
    held = torch.randint(0, 256, (16, options.context + 1))
    updates, evals = [], []
    for i in range(repeats + 1):
        start = clock()
        logits = model(batch[:, :-1])
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        middle = clock()
        with torch.inference_mode():
            model(held[:, :-1])
        if i:  # the first pass allocates and warms caches
            updates.append(middle - start)
            evals.append(clock() - middle)
    return Timing(statistics.median(updates), statistics.median(evals))


RUN_OVERHEAD_S = 8.0  # per run: loading the data, checkpoints, the decode timing


def run_seconds(steps: int, timing: Timing, heldout_batches: int, depth_sweep_rounds: float) -> float:
    """Predicted wall clock of one run: its updates, ~21 held-out evaluations, the depth sweep (in units of one
    evaluation at the trained depth) and a fixed overhead."""
    evaluations = CURVE_POINTS + 1 + depth_sweep_rounds
    return steps * timing.update_s + evaluations * heldout_batches * timing.eval_batch_s + RUN_OVERHEAD_S


def is_swept(row: str) -> bool:
    """Whether a row has a test-time depth, so its runs are also scored at rounds 1 .. 2 x trained: the looped
    rows but RLT-1 (the registry's depths the shared drivers sweep; none for a fixed-depth model)."""
    return row != FLOPS_ROW and bool(get_arch(row).test_depths)


def sweep_units(row: str, rounds: int) -> float:
    """The depth sweep's cost in evaluations at the trained depth: rounds 1..2R cost (1 + ... + 2R) / R."""
    if not is_swept(row):
        return 0.0
    top = DEPTH_FACTOR * rounds
    return top * (top + 1) / 2 / rounds


def cost_model(options: CompareOptions, timings: dict[str, Timing], flops_ratio: float) -> tuple[float, float]:
    """(seconds per common update, fixed seconds) of the whole comparison, every row and seed: each run's time is
    linear in the updates (run_seconds) and the FLOP-matched row trains `flops_ratio` x as many."""
    heldout_batches = math.ceil(options.heldout_bytes // (options.context + 1) / 16)
    per_step, fixed = 0.0, 0.0
    for row in options.rows:
        timing = timings[PLAIN if row == FLOPS_ROW else row]
        fixed += run_seconds(0, timing, heldout_batches, sweep_units(row, options.rounds))
        per_step += (flops_ratio if row == FLOPS_ROW else 1.0) * timing.update_s
    return per_step * options.seeds, fixed * options.seeds


def steps_for_minutes(options: CompareOptions, timings: dict[str, Timing], flops_ratio: float) -> int:
    """The common updates per run that make the whole comparison fit --minutes: (60 x minutes - fixed) / per
    update (cost_model)."""
    per_step, fixed = cost_model(options, timings, flops_ratio)
    steps = math.floor((60 * options.minutes - fixed) / per_step)
    if steps < MIN_STEPS:
        least = (fixed + MIN_STEPS * per_step) / 60
        raise ValueError(f"--minutes {options.minutes:g}: too short for {len(options.rows)} rows x {options.seeds} "
                         f"seed(s) here (the evaluations alone take ~{fixed / 60:.1f} minutes); give at least "
                         f"{math.ceil(least)}, or fewer --seeds / --archs")
    return steps


def default_budget_minutes(steps: int = DEFAULT_STEPS) -> float:
    """Predicted minutes of the default comparison on an idle machine at `steps` updates per run: the cost model
    fed with CPU seconds at one thread (time.process_time), which ignores the time a loaded machine's other jobs
    take from this process; a second idle core only makes it faster. How DEFAULT_STEPS was chosen."""
    options = CompareOptions()
    torch.set_num_threads(1)
    widths = solve_widths(options)
    flops = {arch: update_flops(model_section(widths, arch), options) for arch in options.archs}
    timings = {arch: measure(model_section(widths, arch), options, clock=time.process_time) for arch in options.archs}
    per_step, fixed = cost_model(options, timings, max(flops[a] for a in options.looped) / flops[PLAIN])
    return (steps * per_step + fixed) / 60


def make_plan(options: CompareOptions, log=print) -> dict:
    """Solve the widths, size the budget (measuring when --minutes sizes it) and the FLOP target."""
    widths = solve_widths(options)
    flops = {arch: update_flops(model_section(widths, arch), options) for arch in options.archs}
    looped_max = max((flops[a] for a in options.looped), default=flops[PLAIN])
    timings = None
    if options.minutes is None:
        steps = options.steps or DEFAULT_STEPS
    else:
        log(f"timing a few updates of each row to fit {options.minutes:g} minutes ...")
        timings = {arch: measure(model_section(widths, arch), options) for arch in options.archs}
        steps = steps_for_minutes(options, timings, looped_max / flops[PLAIN])
    plan = {"options": asdict(options), "widths": widths, "steps": steps, "update_flops": flops,
            "flops_target": steps * looped_max, "timings": {a: asdict(t) for a, t in (timings or {}).items()}}
    plan["predicted_seconds"] = predicted_seconds(plan) if timings else None
    return plan


def predicted_seconds(plan: dict) -> dict[str, float]:
    """{row: predicted seconds of one run} from the plan's timings (empty without timings)."""
    options = CompareOptions(**plan["options"])
    heldout_batches = math.ceil(options.heldout_bytes // (options.context + 1) / 16)
    out = {}
    for row in options.rows:
        timing = plan["timings"].get(PLAIN if row == FLOPS_ROW else row)
        if timing:
            out[row] = run_seconds(row_steps(plan, row), Timing(**timing), heldout_batches,
                                   sweep_units(row, options.rounds))
    return out


def load_or_make_plan(out: Path, options: CompareOptions, log=print) -> dict:
    """OUT/plan.json when it exists (a resumed or second process: the options must be the same), else a new
    plan written there. Made under a lock, so two processes starting together make one plan."""
    path = Path(out) / PLAN_FILE
    with exclusive_lock(Path(out) / f".{PLAN_FILE}.lock"):
        if path.exists():
            plan = json.loads(path.read_text())
            given, saved = asdict(options), plan["options"]
            differ = [k for k in given if k not in EXTENSIBLE and given[k] != saved.get(k)]
            if differ:
                raise ValueError(f"{out} holds a comparison with other options ({differ[0]}: {saved.get(differ[0])!r} "
                                 f"there, {given[differ[0]]!r} now); use another --out, or the same options to resume")
            if options.steps is not None and options.steps != plan["steps"]:
                raise ValueError(f"{out} holds a comparison of {plan['steps']} updates per run "
                                 f"(--steps {options.steps} now); use another --out for another budget")
            if given["seeds"] != saved["seeds"]:  # more (or fewer) seeds of the same runs: the budget stays
                plan["options"]["seeds"] = given["seeds"]
                atomic_write_text(path, json.dumps(plan, indent=2) + "\n")
            log(f"resuming the comparison in {out} ({plan['steps']} updates per run, {given['seeds']} seed(s))")
            return plan
        plan = make_plan(options, log)
        atomic_write_text(path, json.dumps(plan, indent=2) + "\n")
        return plan
