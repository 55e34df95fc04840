"""The leaderboard (issue 31 part 3): what is trained. Every family x every suite it can run, at one parameter
target, with the reasons for the cells that cannot run.

Families (registry names): the plain `transformer`, seed 000's `shared_loop` and `workspace`, `exit_gate_loop`
(Ouro), `prelude_coda` (Huginn), `stable_loop` (Parcae), `mixture_of_recursions` (MoR), seed 003's `rlt` (RLT-1)
and its decoder-only baseline `rlt_baseline`, the `lstm`, and the reasoning cores `drt` and `trm`.

Suites (issue 31 part 2):
  byte LM      kjv (the embedded Bible, held-out books), enwik8 (the 4 MB prefix in ../shared/corpora: a run
               whose file is absent is skipped with that reason); score: held-out bits per byte (lower is better)
  Chomsky      the fifteen tasks of Delétang et al. (looped/data/tasks/chomsky*.py), trained on lengths up to 40;
               score: per-token output accuracy averaged over the test lengths 50-500 (the paper's score)
  seed 003     parity, s5_swaps, mod5_flat, mod5_bracketed; score: final-state accuracy averaged over the test
               lengths above the longest training length
  seed 002     graph, logic (the boolean task); score: OOD accuracy, best over sufficient step budgets (Table 3)

Matched parameters: every row is brought to TARGET[scale] total parameters (embeddings and learned position
tables included) within PARAM_TOLERANCE by solving its FFN width (looped.models.budget.solve_ffn; the LSTM, which
has none, by its width). A model's size depends on the suite (vocabulary, and the context for the rows with a
learned position table), so widths are solved per (family, suite). Where a suite's longest test row makes the
position table so large that the matched FFN would be narrower than the model, the family steps down to the next
narrower width (NARROWER): the table says which width each cell used.

Matched training FLOPs: the byte-LM suites train every row to the same FLOP budget (`train.max_flops`, counted by
the compute ledger), so a row that computes more per update takes fewer updates. The task suites' FLOPs per
update vary with the length or step budget of each batch (the trainer cannot stop on FLOPs there): every row
trains the same updates on the same data stream, and its training FLOPs are counted from the ledger over the
batches it trained on (board_study.training_flops), stated beside its score.
"""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

from ..config import ConfigError
from ..data.tasks.vocabulary import VOCAB_SIZE
from ..models.budget import count_parameters, solve_ffn
from . import chomsky, clw, drt, rlt

SCALES = ("cpu", "full")
TARGET = {"cpu": 200_000, "full": 12_800_000}  # full: every width x 8, so every count ~ x 64
PARAM_TOLERANCE = 0.01  # every row within 1 % of the target
WIDTH_FACTOR = {"cpu": 1, "full": 8}
SEEDS = (1, 2, 3)

# --- families --------------------------------------------------------------------------------------------
# name -> model fields at the CPU target except ffn_dim (solved): the families' own shapes, narrowed. Depth:
# 4 layers, or one shared unit applied 4 times (MoR: 2 shared layers x 3 recursions).
FAMILIES: dict[str, dict] = {
    "transformer": {"arch": "transformer", "dim": 64, "heads": 4, "layers": 4},
    "shared_loop": {"arch": "shared_loop", "dim": 128, "heads": 8, "rounds": 4},
    "workspace": {"arch": "workspace", "dim": 96, "heads": 6, "rounds": 4, "slots": 4, "slot_dim": 16},
    "exit_gate_loop": {"arch": "exit_gate_loop", "dim": 96, "heads": 6, "layers": 2, "rounds": 4},
    "prelude_coda": {"arch": "prelude_coda", "dim": 64, "heads": 4, "prelude_layers": 1, "core_layers": 2,
                     "coda_layers": 1, "rounds": 4, "backprop_rounds": 4},
    "stable_loop": {"arch": "stable_loop", "dim": 64, "heads": 4, "prelude_layers": 1, "core_layers": 2,
                    "coda_layers": 1, "rounds": 4, "backprop_rounds": 2},
    "mixture_of_recursions": {"arch": "mixture_of_recursions", "dim": 96, "heads": 6, "kv_heads": 2,
                              "shared_layers": 2, "recursions": 3},
    "rlt": {"arch": "rlt", "dim": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2, "feedback_interval": 1},
    "rlt_baseline": {"arch": "rlt_baseline", "dim": 64, "heads": 4, "layers": 4},
    "lstm": {"arch": "lstm"},  # width solved
    # reasoning cores: seed 002's CPU graph width (d 128, 4 heads); TRM with fewer recursions and supervision
    # steps than the paper's 6 x 3 x 16, which cost minutes per update here
    "drt": {"arch": "drt", "dim": 128, "heads": 4, "beyond_table": "clamp"},
    "trm": {"arch": "trm", "dim": 128, "heads": 4, "latent_steps": 2, "recursions": 1, "supervision_steps": 4},
}
REASONING_FAMILIES = ("drt", "trm")
LABELS = {"transformer": "Transformer", "shared_loop": "shared loop (seed 000)", "workspace": "workspace (seed 000)",
          "exit_gate_loop": "Ouro exit-gate loop", "prelude_coda": "Huginn prelude-core-coda",
          "stable_loop": "Parcae stable loop", "mixture_of_recursions": "MoR", "rlt": "RLT-1 (seed 003)",
          "rlt_baseline": "RLT decoder-only baseline", "lstm": "LSTM", "drt": "DRT core (seed 002)", "trm": "TRM"}
NARROWER = (1.0, 0.75, 0.5)  # width steps a family takes where a long position table leaves too little (docstring)
LEARNED_POSITIONS = ("transformer", "shared_loop", "workspace")  # the rows whose size grows with the context

# --- suites ----------------------------------------------------------------------------------------------
LM_SUITES = ("kjv", "enwik8")
CHOMSKY_SUITES = tuple(chomsky.PUBLISHED)
SEQUENCE_SUITES = ("parity", "s5_swaps", "mod5_flat", "mod5_bracketed")
REASONING_SUITES = ("graph", "logic")
SUITES = (*LM_SUITES, *CHOMSKY_SUITES, *SEQUENCE_SUITES, *REASONING_SUITES)
# The CPU plan: one byte-LM suite, one seed-003 task, one Chomsky task per level that has both published
# figures, and graph for the reasoning rows; the other suites run with --tasks.
CPU_SUITES = ("kjv", "parity", "parity_check", "reverse_string", "duplicate_string", "graph")


def suite_kind(suite: str) -> str:
    for kind, names in (("lm", LM_SUITES), ("chomsky", CHOMSKY_SUITES), ("sequence", SEQUENCE_SUITES),
                        ("reasoning", REASONING_SUITES)):
        if suite in names:
            return kind
    raise ValueError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")


METRICS = {  # suite kind -> (what the score is, unit, higher is better)
    "lm": ("held-out bits per byte", "bits/byte", False),
    "chomsky": ("per-token output accuracy, mean over test lengths 50-500", "%", True),
    "sequence": ("final-state accuracy, mean over the test lengths above the longest trained", "%", True),
    "reasoning": ("OOD accuracy, best over sufficient step budgets", "%", True),
}


def cannot_run(family: str, suite: str) -> str | None:
    """Why `family` cannot be scored on `suite`, or None when it can."""
    kind = suite_kind(suite)
    if family in REASONING_FAMILIES and kind != "reasoning":
        return ("a bidirectional reasoning core reads a whole instance and answers one bit: it cannot be scored as "
                "a causal LM" if kind == "lm" else
                "a bidirectional reasoning core answers one bit per instance: it cannot emit the next-token outputs "
                "this suite scores")
    if family not in REASONING_FAMILIES and kind == "reasoning":
        what = ("graph rows are node slots and an adjacency matrix, not text" if suite == "graph" else
                "logic rows are classified whole (one bit per formula); no text rendering for a causal LM exists")
        return f"{what}: task kind 'reasoning' trains family-'reasoning' models only"
    return None


# --- widths ----------------------------------------------------------------------------------------------
def vocab_and_context(suite: str, scale: str = "cpu") -> tuple[int, int]:
    """(vocab_size, context_length) an LM-family row needs on `suite`: bytes + separator for the byte-LM
    suites; the task alphabet and the widest test row for the task suites."""
    kind = suite_kind(suite)
    if kind == "lm":
        return 257, LM_BUDGET[scale]["context"]
    return VOCAB_SIZE, widest_test_row(suite)


@functools.cache
def widest_test_row(suite: str) -> int:
    """Positions of the widest row of the suite's test grid (a sample per length, rounded up to 8)."""
    from ..eval.lengths import widest_row
    from ..eval.sequence import algorithmic_task

    spec = rlt.TASKS.get(suite, {"name": suite})
    task = algorithmic_task(spec["name"], spec.get("variant"))
    _, positions = widest_row(task, task.test_lengths)
    return 8 * math.ceil((positions + 1) / 8)


def scaled(fields: dict, scale: str, factor: float = 1.0) -> dict:
    """The family's fields at a scale with the width narrowed by `factor` (each head stays an even width)."""
    out = dict(fields)
    if "dim" in out:
        head = out["dim"] // out["heads"] * WIDTH_FACTOR[scale] * factor
        out["dim"] = out["heads"] * max(2, 2 * round(head / 2))
        if "slot_dim" in out:
            out["slot_dim"] = out["slot_dim"] * WIDTH_FACTOR[scale]
    return out


def reasoning_fields(family: str, suite: str, scale: str) -> dict:
    """A reasoning core's model section for a seed 002 task: seed 002's recipe at the scale (the per-task preset:
    input kind, vocabulary, depth rows, trained steps; the CPU recipe's changes) with the family's fields."""
    return {**drt.recipe(suite, scale, family)["model"], **FAMILIES[family]}


@functools.cache
def solve(family: str, suite: str, scale: str = "cpu") -> dict:
    """The model section of `family` on `suite` at `scale`, matched to TARGET[scale] (module docstring)."""
    reason = cannot_run(family, suite)
    if reason:
        raise ConfigError(f"{family} on {suite}: {reason}")
    target = TARGET[scale]
    if family == "lstm":
        vocab, context = vocab_and_context(suite, scale)
        return solve_lstm(vocab, context, target)
    for factor in NARROWER:
        fields = scaled(FAMILIES[family], scale, factor)
        if family in REASONING_FAMILIES:
            fields = {**reasoning_fields(family, suite, scale), "dim": fields["dim"], "heads": fields["heads"]}
        else:
            vocab, context = vocab_and_context(suite, scale)
            fields = {**fields, "vocab_size": vocab, "context_length": context}
        arch = fields.pop("arch")
        ffn_dim, total = solve_ffn(arch, target, **fields)
        if ffn_dim >= fields["dim"]:
            return {"arch": arch, **fields, "ffn_dim": ffn_dim}
    raise ValueError(f"{family} on {suite}: no width of {NARROWER} fits {target:,} parameters with an FFN as wide "
                     f"as the model")


def solve_lstm(vocab: int, context: int, target: int) -> dict:
    """The LSTM width whose total is closest to the target (its count grows with the square of the width)."""
    def total(dim: int) -> int:
        return count_parameters("lstm", dim=dim, vocab_size=vocab, context_length=context)

    dim = 8
    while total(dim + 8) < target:  # coarse steps, then the closest single width
        dim += 8
    best = min(range(dim, dim + 9), key=lambda d: (abs(total(d) - target), d))
    return {"arch": "lstm", "dim": best, "vocab_size": vocab, "context_length": context}


def parameters(model: dict) -> int:
    return count_parameters(model["arch"], **{k: v for k, v in model.items() if k != "arch"})


DEPTH_FACTORS = (1, 2, 4)  # a row with a test-time depth is also scored at these multiples of its trained depth

# --- budgets ----------------------------------------------------------------------------------------------
# The byte-LM suites: every row trains to the same FLOPs (module docstring). CPU: 685 updates of the plain
# Transformer (16 blocks of 128 bytes, 2.9 GFLOPs each, ~0.06 s here), 200-300 of the looped rows (7-10 GFLOPs
# per update); RLT-1's token-sequential decoder runs ~4 GFLOP/s here against 30-70 for the others, so its cell
# is the slowest (~0.9 s per update, ~9 minutes).
LM_BUDGET = {
    "cpu": {"context": 128, "batch_size": 16, "max_flops": 2.0e12, "heldout_bytes": 65_536, "eval_batch_size": 16},
    "full": {"context": 512, "batch_size": 64, "max_flops": 2.0e16, "heldout_bytes": None, "eval_batch_size": 32},
}
# The task suites: (batch, updates) per suite kind; the same for every row. At CPU scale an update takes
# 0.03-0.4 s here (Chomsky: the LSTM fastest, RLT-1 and the prelude-core-coda rows slowest on duplicate_string),
# a graph update 0.3 s (drt) to 0.7 s (trm: 4 supervision steps). One whole cell, parity_check x shared_loop:
# 70 s of training and 23 s of scoring (load average 5 on 2 cores). Test rows per length / bucket at CPU scale
# are fewer than the suites' own (absent: the suite's).
TASK_BUDGET = {
    "cpu": {"chomsky": (32, 1000), "sequence": (64, 1000), "reasoning": (64, 600)},
    "full": {"chomsky": (128, 20_000), "sequence": (512, 2000), "reasoning": (64, 7500)},
}
TEST_SIZE = {"cpu": {"chomsky": 64, "sequence": 128, "reasoning": 200}, "full": {}}
OPTIM = {"lr": 1.0e-3, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1, "grad_clip": 1.0,
         "schedule": "cosine", "min_lr": 1.0e-4}


def train_section(scale: str, seed: int, batch_size: int, **budget) -> dict:
    return {"seed": seed, "batch_size": batch_size, **budget, "precision": "fp32" if scale == "cpu" else "bf16",
            "log_every": 50, **({"threads": 1, "device": "cpu"} if scale == "cpu" else {})}


def lm_data(suite: str, scale: str) -> dict:
    budget = LM_BUDGET[scale]
    if suite == "kjv":
        data = {"corpus": "kjv"}
    else:
        data = dict(clw.CPU_DATA["enwik8"] if scale == "cpu" else clw.FULL_DATA["enwik8"])
    return {**data, "block_size": budget["context"] + 1, "sampler": "independent", "data_seed": 0,
            **({"max_heldout_bytes": budget["heldout_bytes"]} if budget["heldout_bytes"] else {})}


def sequence_task(suite: str, scale: str) -> dict:
    """The task section of a next-token task suite: the Chomsky protocol (lengths 1-40, one length per batch) or
    seed 003's CPU / full task section (its length curriculum included)."""
    if suite_kind(suite) == "chomsky":
        return {"kind": "sequence", "name": suite, "same_length_batches": True, "validation_size": 128}
    return copy.deepcopy(rlt.run_config_dict(suite, "rlt1", scale)["task"])


def run_config_dict(suite: str, family: str, seed: int, scale: str = "cpu") -> dict:
    """The whole run of one (suite, family, seed) at a scale, as a plain dict (ConfigError: it cannot run)."""
    model = dict(solve(family, suite, scale))
    kind = suite_kind(suite)
    if kind == "lm":
        budget = LM_BUDGET[scale]
        train = train_section(scale, seed, budget["batch_size"], max_flops=budget["max_flops"], eval_every=0,
                              eval_batches=0, eval_batch_size=budget["eval_batch_size"], select="last",
                              checkpoint_every=100)
        return {"model": model, "data": lm_data(suite, scale), "optim": {**OPTIM, "warmup_steps": 50},
                "train": train}
    batch, steps = TASK_BUDGET[scale][kind]
    if kind == "reasoning":  # seed 002's recipe (its optimiser and data), this budget, the matched model
        recipe = drt.recipe(suite, scale, family, seed)
        per_bucket = TEST_SIZE[scale].get("reasoning")
        task = {**recipe["task"], **({"test_per_bucket": per_bucket} if per_bucket else {})}
        train = {**recipe["train"], "batch_size": batch, "max_targets": batch * steps, "eval_every": steps // 10}
        return {"model": model, "task": task, "optim": recipe["optim"], "train": train}
    if model["arch"] == "rlt":
        model.update(rlt.CPU_FEEDBACK_OVERRIDES.get(suite, {}))  # mod-5: the feedback scale the RLT study needed
    train = train_section(scale, seed, batch, max_steps=steps, eval_every=steps // 10, eval_batches=0,
                          eval_batch_size=128, select="best")
    return {"model": model, "task": sequence_task(suite, scale), "optim": {**OPTIM, "warmup_steps": 100},
            "train": train}


def check_data(config: dict) -> None:
    """ConfigError naming the file when a run's corpus is absent here (the enwik8 sample in ../shared/corpora)."""
    path = config.get("data", {}).get("path")
    if path and not Path(path).exists():
        raise ConfigError(f"data.path: {path} is absent here (the enwik8 suite needs the shared corpora); skipped")


__all__ = ["CPU_SUITES", "DEPTH_FACTORS", "FAMILIES", "LABELS", "LM_BUDGET", "METRICS", "PARAM_TOLERANCE", "SEEDS",
           "SUITES", "TARGET", "TASK_BUDGET", "TEST_SIZE", "cannot_run", "check_data", "parameters",
           "run_config_dict", "solve", "suite_kind"]
