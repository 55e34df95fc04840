"""Seed 003 (Recurrent Looped Transformer): the rows, the tasks, the shipped recipes and the paper's numbers.

    configs/rlt/full/<task>_<row>.yaml   the paper's recipe (GPU; `looped reproduce rlt --write-recipes`)
    configs/rlt/cpu/<task>_<row>.yaml    a scaled-down recipe that finishes in <= 15 min per run on one
                                         loaded CPU thread here

Full recipe (§3.1, App. J): width 512, 4 heads, FFN 1,365, eight logical layers (RLT 4+4 ... 8+0,
Transformer 8), SWA window 8, one memory group, alpha 0.1, untied encoder/decoder, tied embeddings; AdamW
(0.9, 0.95), weight decay 0.1, clip 1.0, 200 warm-up updates to 1e-4 then cosine to 5e-6; global batch 512
= micro-batch 32 x 16 accumulation; 2,000 updates (mod-5: 5,000); validation every 100 updates, best =
minimum ID validation loss (earliest on ties); seeds 42/43/44. TBPTT 128 never truncates a training row,
so it is full BPTT (truncate_bptt: null).

CPU recipe: the same recipe, scaled, with the changes the CPU trials needed (identical for every row; the
study writes them into its table header):
  shape      width 64, 4 heads, FFN 170 (= 8/3 x width, the paper's ratio), 2+2 (Transformer 4 layers)
  batch      64 rows per update, no accumulation
  updates    S5 and parity 4,500, mod-5 8,000, addition 1,500 (paper 2,000; mod-5 5,000). With alpha = 0.1
             the feedback path's share of the decoder input grows ~4x over the first ~3,000 updates before a
             recurrent solution appears, so 2,000 updates stopped RLT-1 before it used the recurrence; mod-5
             is data-limited for every model (a one-layer LSTM needs ~8,000 updates to leave the majority rate)
  optimiser  lr 1e-3 (paper 1e-4; 2e-3 collapsed in the trials), 100 warm-up updates, cosine to 5e-5
  data       length curriculum: the longest training length ramps from the shortest to the full range over
             the first half of training (mod-5: three quarters); same-length batches. S5 trains on 2..32
             operations (paper: 32 only), ramping from 2: on 32 operations alone no row left chance in 1,500
             updates, because nothing short enough to solve step by step is ever seen. The curriculum started
             at 8 until session 4, when starting at the shortest strings was found to be what lets parity be
             learned (results/rlt_cpu/parity_probes.md)
  feedback   mod-5 only: alpha = 1 (paper 0.1) in the feedback rows; with 0.1 flat mod-5 RLT-1 reached 24 % at
             39 symbols in 8,000 updates, with 1 97.5 % (session 10 probe, results/rlt_cpu/mod5_probes.md)
  row        a one-layer LSTM (`lstm`, width 160, 250,560 parameters) as a recurrent calibration row: whether a
             task is learnable at this budget at all by a model that carries its state token by token
"""

from __future__ import annotations

import copy

from ..eval.sequence import algorithmic_task

# --- rows -------------------------------------------------------------------------------------------------
# name -> (label, model fields at the full shape); the CPU shape halves the layer counts
ROWS: dict[str, tuple[str, dict]] = {
    "rlt1": ("RLT-1", {"arch": "rlt", "encoder_layers": 4, "decoder_layers": 4, "feedback_interval": 1}),
    "chunk4": ("RLT-2 chunk4", {"arch": "rlt", "encoder_layers": 4, "decoder_layers": 4, "feedback_interval": 4}),
    "rlt0": ("RLT-0", {"arch": "rlt0", "encoder_layers": 4, "decoder_layers": 4}),
    "baseline": ("Transformer", {"arch": "rlt_baseline", "layers": 8}),
    # the other depth splits of Fig. 6 (RLT-1); full scale only
    "rlt1_5p3": ("RLT-1", {"arch": "rlt", "encoder_layers": 5, "decoder_layers": 3, "feedback_interval": 1}),
    "rlt1_6p2": ("RLT-1", {"arch": "rlt", "encoder_layers": 6, "decoder_layers": 2, "feedback_interval": 1}),
    "rlt1_7p1": ("RLT-1", {"arch": "rlt", "encoder_layers": 7, "decoder_layers": 1, "feedback_interval": 1}),
    "rlt1_8p0": ("RLT-1", {"arch": "rlt", "encoder_layers": 8, "decoder_layers": 0, "feedback_interval": 1}),
}
STUDY_ROWS = ("rlt1", "chunk4", "rlt0", "baseline", "lstm")  # Fig. 8's rows + a recurrent calibration row
FULL_ROWS = tuple(r for r in ROWS if r != "lstm")  # the calibration row is a CPU-scale addition
# CPU-scale rows at the CPU shape as given (not halved): the LSTM calibration row, and the other encoder+decoder
# splits of the CPU's total depth 4 (2+2 is rlt1 / chunk4), for the claim that swaps-S5 improves with decoder
# depth (Fig. 6: 4+4 > 5+3 > 6+2); run on DEPTH_TASKS only
CPU_ONLY_ROWS = {
    "lstm": ("LSTM", {"arch": "lstm", "dim": 160}),
    **{f"{row}_{e}p{4 - e}": (label, {"arch": "rlt", "encoder_layers": e, "decoder_layers": 4 - e,
                                      "feedback_interval": interval})
       for row, label, interval in (("rlt1", "RLT-1", 1), ("chunk4", "RLT-2 chunk4", 4)) for e in (3, 1)},
}
DEPTH_ROWS = ("rlt1_3p1", "rlt1_1p3", "chunk4_3p1", "chunk4_1p3")
DEPTH_TASKS = ("s5_swaps",)
PLAN_ROWS = STUDY_ROWS + DEPTH_ROWS  # the CPU study's rows (the depth rows on DEPTH_TASKS only)

# --- tasks ------------------------------------------------------------------------------------------------
# name -> task section; the study's order: parity and swaps-S5 first, then mod-5 and addition
TASKS: dict[str, dict] = {
    "parity": {"name": "parity"},
    "s5_swaps": {"name": "s5", "variant": "swaps"},
    "mod5_flat": {"name": "mod5_flat"},
    "mod5_bracketed": {"name": "mod5_bracketed"},
    "addition": {"name": "addition"},
    "s5_standard": {"name": "s5", "variant": "standard"},
}
STUDY_TASKS = ("parity", "s5_swaps", "mod5_flat", "mod5_bracketed", "addition", "s5_standard")


def data_task(task: str):
    """The algorithmic task of study task `task` (s5_swaps: s5, variant swaps): its facts (headline metric, chance,
    test grid) live on the task class."""
    return algorithmic_task(TASKS[task]["name"], TASKS[task].get("variant"))


def primary_metric(task: str) -> str:
    """The headline metric of a study task (Appendix J.4): answer tokens for addition, the final state otherwise."""
    return data_task(task).primary_metric

SEEDS = (42, 43, 44)
FULL_STEPS = {"mod5_flat": 5000, "mod5_bracketed": 5000}  # others 2,000
CPU_STEPS = {"parity": 4500, "s5_swaps": 4500, "s5_standard": 4500, "mod5_flat": 8000, "mod5_bracketed": 8000,
             "addition": 1500}

FULL_SHAPE = {"dim": 512, "heads": 4, "ffn_dim": 1365, "window": 8, "memory_groups": 1, "merge_scale": 0.1,
              "tie_encoder_decoder": False, "tie_embeddings": True, "truncate_bptt": None, "context_length": 1024}
CPU_SHAPE = {"dim": 64, "heads": 4, "ffn_dim": 170, "context_length": 1024}
CPU_LAYER_SCALE = 2  # 4+4 -> 2+2, Transformer 8 -> 4

FULL_RECIPE = {
    "optim": {"lr": 1.0e-4, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1, "grad_clip": 1.0,
              "schedule": "cosine", "warmup_steps": 200, "min_lr": 5.0e-6},
    "train": {"seed": 42, "batch_size": 512, "micro_batch_size": 32, "max_steps": 2000, "precision": "fp32",
              "eval_every": 100, "eval_batches": 0, "eval_batch_size": 32, "select": "best", "log_every": 10},
}
CPU_RECIPE = {
    "optim": {"lr": 1.0e-3, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1, "grad_clip": 1.0,
              "schedule": "cosine", "warmup_steps": 100, "min_lr": 5.0e-5},
    "train": {"seed": 42, "batch_size": 64, "max_steps": 2000, "precision": "fp32", "eval_every": 100,
              "eval_batches": 0, "eval_batch_size": 256, "select": "best", "log_every": 10, "threads": 1,
              "device": "cpu"},
}
CPU_TASK_CHANGES = {"curriculum_start": 3, "curriculum_fraction": 0.5, "same_length_batches": True}
CPU_TASK_OVERRIDES = {  # per task, on top of CPU_TASK_CHANGES
    "s5_swaps": {"train_lengths": [2, 32], "curriculum_start": 2},
    "s5_standard": {"train_lengths": [2, 32], "curriculum_start": 2},
    "mod5_flat": {"curriculum_fraction": 0.75},
    "mod5_bracketed": {"curriculum_fraction": 0.75},
}
# per task, the feedback rows' (arch rlt) model fields: on flat mod-5 RLT-1 with the paper's alpha = 0.1 reached
# 24.0 % at 39 symbols in 8,000 updates (seed 42; the feedback's share of the decoder input stays small while
# the encoder path fits the short lengths), with alpha = 1 97.5 % (results/rlt_cpu/mod5_probes.md)
CPU_FEEDBACK_OVERRIDES = {
    "mod5_flat": {"merge_scale": 1.0},
    "mod5_bracketed": {"merge_scale": 1.0},
}

# what the CPU recipe changes, for the study's table header
CPU_CHANGES = [
    "shape: width 64, 4 heads, FFN 170, RLT 2+2 (Transformer 4 layers) instead of 512 / 1,365 / 4+4 (8)",
    "batch: 64 rows per update (paper 512 = 32 x 16)",
    "updates: parity and S5 4,500, mod-5 8,000, addition 1,500 (paper 2,000; mod-5 5,000)",
    "optimiser: lr 1e-3 (paper 1e-4), 100 warm-up updates, cosine to 5e-5 (paper 200, 5e-6)",
    "length curriculum: the longest training length ramps from the shortest to the full range over the first "
    "half of training (mod-5: three quarters)",
    "**S5 trains on 2-32 operations** (paper: 32 only), the cap ramping from 2",
    "same-length batches (paper: lengths drawn per row)",
    "**mod-5: feedback scale alpha = 1** (paper 0.1) for the feedback rows: with 0.1 flat mod-5 RLT-1 stayed at "
    "24 % at 39 symbols (results/rlt_cpu/mod5_probes.md)",
    "an extra row, a one-layer LSTM (width 160, 250,560 parameters): is the task learnable at this budget by "
    "a model that carries its state token by token?",
    "decoder depth (swaps-S5 only): RLT-1 and chunk4 also at 3+1 and 1+3, the total depth 4 of the CPU shape "
    "(paper: 4+4, 5+3, 6+2 at depth 8)",
    "one CPU thread per run (paper: four)",
]


def model_section(row: str, scale: str) -> dict:
    """Model fields of a row at a scale ("full" | "cpu")."""
    if row in CPU_ONLY_ROWS:
        if scale != "cpu":
            raise ValueError(f"row {row!r} is a CPU-scale row only")
        fields = dict(CPU_ONLY_ROWS[row][1])
        return fields if fields["arch"] == "lstm" else {"arch": fields.pop("arch"), **CPU_SHAPE, **fields}
    if row not in ROWS:
        raise ValueError(f"unknown row {row!r} (known: {', '.join([*ROWS, *CPU_ONLY_ROWS])})")
    fields = dict(ROWS[row][1])
    if scale == "full":
        shape = {k: v for k, v in FULL_SHAPE.items() if fields["arch"] != "rlt_baseline" or k in
                 ("dim", "heads", "ffn_dim", "tie_embeddings", "context_length")}
        return {"arch": fields.pop("arch"), **shape, **fields}
    if scale != "cpu":
        raise ValueError(f"unknown scale {scale!r} (known: full, cpu)")
    if row not in STUDY_ROWS:  # halving 5+3 or 7+1 has no faithful 4-layer counterpart
        raise ValueError(f"row {row!r} has a full-scale recipe only (CPU rows: {', '.join(STUDY_ROWS)})")
    for name in ("encoder_layers", "decoder_layers", "layers"):
        if name in fields:
            fields[name] = fields[name] // CPU_LAYER_SCALE
    return {"arch": fields.pop("arch"), **CPU_SHAPE, **fields}


def row_label(row: str, scale: str) -> str:
    """e.g. "RLT-1 4+4" (full) / "RLT-1 2+2" (cpu), "Transformer 8" / "Transformer 4", "LSTM 1"."""
    if row in CPU_ONLY_ROWS:
        fields = CPU_ONLY_ROWS[row][1]
        depth = f"{fields['encoder_layers']}+{fields['decoder_layers']}" if "encoder_layers" in fields else "1"
        return f"{CPU_ONLY_ROWS[row][0]} {depth}"
    if row not in ROWS:
        return row
    try:
        model = model_section(row, scale)
    except ValueError:
        model = model_section(row, "full")
    depth = model["layers"] if "layers" in model else f"{model['encoder_layers']}+{model['decoder_layers']}"
    return f"{ROWS[row][0]} {depth}"


def run_config_dict(task: str, row: str, scale: str, seed: int = 42) -> dict:
    """The whole run configuration of one (task, row, seed) at a scale, as a plain dict."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r} (known: {', '.join(TASKS)})")
    recipe = copy.deepcopy(FULL_RECIPE if scale == "full" else CPU_RECIPE)
    steps = (FULL_STEPS if scale == "full" else CPU_STEPS).get(task)
    if steps:
        recipe["train"]["max_steps"] = steps
    recipe["train"]["seed"] = seed
    section = {"kind": "sequence", **TASKS[task]}
    model = model_section(row, scale)
    if scale == "cpu":
        section.update(CPU_TASK_CHANGES, **CPU_TASK_OVERRIDES.get(task, {}))
        if model["arch"] == "rlt":
            model.update(CPU_FEEDBACK_OVERRIDES.get(task, {}))
    return {"model": model, "task": section, **recipe}


# --- the paper's numbers (mean, sample SD or None), percent, best ID-loss checkpoint, 3 seeds --------------
# keyed (task, row, length, metric); lengths are the test grid's (flat mod-5: actual odd length)
PAPER: dict[tuple[str, str, int, str], tuple[float, float | None]] = {
    ("parity", "rlt1", 64, "final_state_accuracy"): (100.0, 0.0),
    ("parity", "chunk4", 64, "final_state_accuracy"): (98.99, 1.66),
    ("parity", "rlt0", 64, "final_state_accuracy"): (50.23, 3.80),
    ("parity", "baseline", 64, "final_state_accuracy"): (48.47, None),
    ("parity", "rlt1", 256, "final_state_accuracy"): (66.76, 28.78),
    ("parity", "chunk4", 256, "final_state_accuracy"): (69.34, 24.17),
    ("parity", "baseline", 256, "final_state_accuracy"): (50.07, 1.63),
    ("parity", "rlt1_5p3", 256, "final_state_accuracy"): (100.0, 0.0),
    ("parity", "rlt1_7p1", 256, "final_state_accuracy"): (100.0, 0.0),
    ("parity", "rlt1_6p2", 256, "final_state_accuracy"): (84.05, 27.63),
    ("parity", "rlt1_8p0", 256, "final_state_accuracy"): (68.91, 27.39),
    ("s5_swaps", "rlt1", 64, "final_state_accuracy"): (100.0, 0.0),
    ("s5_swaps", "chunk4", 64, "final_state_accuracy"): (19.60, 6.54),
    ("s5_swaps", "rlt1", 256, "final_state_accuracy"): (97.30, 2.76),
    ("s5_swaps", "baseline", 256, "final_state_accuracy"): (0.85, 0.30),
    ("s5_swaps", "rlt1_5p3", 256, "final_state_accuracy"): (92.71, 1.87),
    ("s5_swaps", "rlt1_6p2", 256, "final_state_accuracy"): (78.91, 22.26),
    ("s5_swaps", "rlt1", 512, "final_state_accuracy"): (55.70, 25.78),
    ("s5_swaps", "baseline", 512, "final_state_accuracy"): (0.85, 0.30),
    ("s5_swaps", "rlt1", 512, "prefix_token_accuracy"): (91.16, 6.09),
    ("s5_swaps", "baseline", 512, "prefix_token_accuracy"): (9.33, 0.11),
    ("mod5_flat", "rlt1", 63, "final_state_accuracy"): (44.43, 43.81),
    ("mod5_flat", "chunk4", 63, "final_state_accuracy"): (50.78, 38.02),
    ("mod5_flat", "rlt0", 63, "final_state_accuracy"): (21.84, 2.17),
    ("mod5_flat", "baseline", 63, "final_state_accuracy"): (33.20, 2.33),
    ("mod5_flat", "rlt1_6p2", 63, "final_state_accuracy"): (93.36, 5.69),
    ("mod5_bracketed", "rlt1", 64, "final_state_accuracy"): (64.10, 3.49),
    ("mod5_bracketed", "chunk4", 64, "final_state_accuracy"): (62.76, 4.42),
    ("mod5_bracketed", "rlt0", 64, "final_state_accuracy"): (39.45, 0.61),
    ("mod5_bracketed", "baseline", 64, "final_state_accuracy"): (46.71, 1.21),
    ("mod5_bracketed", "rlt1_5p3", 64, "final_state_accuracy"): (67.97, 2.91),
    ("addition", "rlt1_7p1", 9, "prefix_token_accuracy"): (68.05, 3.64),
    ("addition", "baseline", 9, "prefix_token_accuracy"): (58.61, 2.44),
    ("addition", "baseline", 32, "prefix_token_accuracy"): (16.84, 1.45),
}
# RLT-0 and the Transformer on swaps-S5 at 64 ops are "near the 1/120 uniform reference" (no exact value);
# addition at 32 digits: all eight-layer means 14.89-16.84 %.
PAPER_NOTES = {
    ("s5_swaps", "rlt0", 64): "≈ 0.83 (1/120)", ("s5_swaps", "baseline", 64): "≈ 0.83 (1/120)",
    ("addition", "rlt1", 32): "14.44–15.91 (RLT-1 splits)",
}
# The paper's CPU timing (seeds/003: Section 2.7 and Appendix J.10; seed 42, 4+4, the two mod-5 tasks): "chunk4
# training steps run 2.27 times as fast as RLT-1 steps, and RLT-0 steps 4.17-4.30 times as fast". As step-time
# ratios over RLT-0 (beside issue 19's goals, looped.bench.rlt.GOALS): RLT-1 4.17-4.30, chunk 4
# (4.17-4.30) / 2.27.
PAPER_RLT0_SPEEDUP, PAPER_CHUNK4_SPEEDUP = (4.17, 4.30), 2.27  # over RLT-1's step time
PAPER_STEP_RATIOS: dict[str, tuple[float, float]] = {
    "rlt1_over_rlt0": PAPER_RLT0_SPEEDUP,
    "chunk4_over_rlt0": (PAPER_RLT0_SPEEDUP[0] / PAPER_CHUNK4_SPEEDUP, PAPER_RLT0_SPEEDUP[1] / PAPER_CHUNK4_SPEEDUP),
}
# lengths shown in the study's table per task (the full grids are in lengths.csv and the plots)
TABLE_LENGTHS = {"parity": (40, 64, 256), "s5_swaps": (32, 64, 128, 256, 512), "mod5_flat": (39, 63, 255),
                 "mod5_bracketed": (40, 64, 256), "addition": (9, 16, 32), "s5_standard": (32, 64, 512)}


__all__ = ["CPU_CHANGES", "CPU_FEEDBACK_OVERRIDES", "CPU_ONLY_ROWS", "CPU_RECIPE", "CPU_TASK_OVERRIDES", "DEPTH_ROWS",
           "DEPTH_TASKS", "FULL_RECIPE", "PAPER", "PAPER_NOTES", "PAPER_STEP_RATIOS", "PLAN_ROWS", "ROWS", "SEEDS",
           "STUDY_ROWS", "STUDY_TASKS", "TABLE_LENGTHS", "TASKS", "data_task", "model_section", "primary_metric",
           "row_label", "run_config_dict"]
