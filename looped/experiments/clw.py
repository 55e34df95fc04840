"""Seed 000 (causal latent workspace): the seven rows, their matched budgets, and the shipped recipes.

Widths are our decision (the seed's Table 7 is missing):
  small  : plain d=128/4 heads, shared loop & adaptive exit d=256/8, anchored rows d=192/6, m=32
  larger : plain d=1536/12,     shared loop & adaptive exit d=3072/24, anchored rows d=2560/20, m=128
FFN widths are solved (looped.models.budget.match_rows): the workspace row's width is the one closest to the
budget (0.918M / 101.71M) for which every other row can be matched within the seed's maximum difference
(474 / 6,058 parameters). At the larger budget that is simply the closest width (101,709,714; the plain row
then differs by exactly 6,058, the seed's figure). At the small budget the closest width (917,998) leaves the
plain row 506 away (its FFN step is 1,028 parameters), so the workspace row moves one width up, to 918,383.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..models.budget import count_parameters, match_rows

# registry name of each row, in the paper's table order
ROWS = {
    "plain": "transformer",
    "shared_loop": "shared_loop",
    "adaptive_exit": "adaptive_exit",
    "anchored_loop": "anchored_loop",
    "conditioned_dense": "conditioned_dense",
    "workspace": "workspace",
    "workspace_retention": "workspace_retention",
}
LOOPED_ROWS = [r for r in ROWS if r != "plain"]

BUDGETS = {
    "small": {"target": 918_000, "max_difference": 474, "widths": {
        "plain": dict(dim=128, heads=4), "shared_loop": dict(dim=256, heads=8), "adaptive_exit": dict(dim=256, heads=8),
        "anchored_loop": dict(dim=192, heads=6), "conditioned_dense": dict(dim=192, heads=6),
        "workspace": dict(dim=192, heads=6, slots=4, slot_dim=32),
        "workspace_retention": dict(dim=192, heads=6, slots=4, slot_dim=32)}},
    "medium": {"target": 101_710_000, "max_difference": 6058, "widths": {
        "plain": dict(dim=1536, heads=12), "shared_loop": dict(dim=3072, heads=24),
        "adaptive_exit": dict(dim=3072, heads=24), "anchored_loop": dict(dim=2560, heads=20),
        "conditioned_dense": dict(dim=2560, heads=20), "workspace": dict(dim=2560, heads=20, slots=4, slot_dim=128),
        "workspace_retention": dict(dim=2560, heads=20, slots=4, slot_dim=128)}},
}

# Seed 000 §5.3; what Table 2 leaves open is our choice, identical across rows (README).
RECIPES = {
    "small": {
        "optim": {"lr": 1.0e-3, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1, "grad_clip": 1.0,
                  "schedule": "constant", "warmup_steps": 2000},
        "train": {"batch_size": 8, "max_steps": 20000, "precision": "fp32", "eval_every": 2000, "eval_batches": 50,
                  "select": "last", "log_every": 50},
    },
    "medium": {
        "optim": {"lr": 1.0e-4, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1, "grad_clip": 1.0,
                  "schedule": "constant", "warmup_steps": 2000},
        "train": {"batch_size": 8, "micro_batch_size": 4, "max_steps": 20000, "precision": "bf16",
                  "eval_every": 2000, "eval_batches": 50, "select": "last", "log_every": 50},
    },
}
SEEDS = (11, 23, 37)


def model_section(budget: str, row: str, ffn_dim: int) -> dict:
    fields = {"arch": ROWS[row], **BUDGETS[budget]["widths"][row], "ffn_dim": ffn_dim, "context_length": 512}
    if ROWS[row] != "transformer":
        fields["rounds"] = 4
    else:
        fields["layers"] = 4
    return fields


def get_config(budget: str, row: str, ffn_dim: int):
    """The model config of one row at one budget."""
    from ..models import get_arch

    fields = model_section(budget, row, ffn_dim)
    return get_arch(fields.pop("arch")).config(**fields)


@functools.cache  # the solver counts parameters of many candidate widths: seconds per budget
def solve_budget(budget: str) -> dict[str, tuple[int, int]]:
    """{row: (ffn_dim, parameters)} for one budget (callers must not change the returned dict)."""
    spec = BUDGETS[budget]
    rows = {ROWS[r]: {**w, **({"layers": 4} if ROWS[r] == "transformer" else {"rounds": 4})}
            for r, w in spec["widths"].items()}
    solved = match_rows("workspace", rows["workspace"], rows, spec["target"], spec["max_difference"])
    return {row: solved[ROWS[row]] for row in ROWS}


def parameters(model: dict) -> int:
    return count_parameters(model["arch"], **{k: v for k, v in model.items() if k != "arch"})


# --- CPU scale (runs here, 2 cores) ------------------------------------------------------------------------
CPU_RECIPE = {
    "optim": {"lr": 2.0e-3, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1, "grad_clip": 1.0,
              "schedule": "cosine", "warmup_steps": 50, "min_lr": 2.0e-4},
    "train": {"batch_size": 8, "max_targets": 2_048_000, "precision": "fp32", "eval_every": 0, "eval_batches": 0,
              "eval_batch_size": 16, "select": "last", "log_every": 10,
              "checkpoint_every": 100},  # no evaluation before the end: a kill loses at most 100 updates
}
CORPORA = ("enwik8", "tinystories")
SHARED = Path("../shared/corpora")
CPU_DATA = {  # the samples in ../shared/corpora; the held-out part is the file's tail
    "enwik8": {"corpus": "raw", "path": str(SHARED / "enwik8/enwik8_prefix_4M"), "heldout_fraction": 0.05},
    "tinystories": {"corpus": "raw", "path": str(SHARED / "tinystories/tinystories_val_prefix.txt"),
                    "heldout_fraction": 0.1},
}
FULL_DATA = {
    "enwik8": {"corpus": "enwik8", "path": "data/enwik8.zip", "heldout_split": "test"},
    "wikitext103": {"corpus": "wikitext103",
                    "train_paths": ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"],
                    "heldout_paths": ["data/test-00000-of-00001.parquet"]},
    "tinystories": {"corpus": "tinystories", "train_paths": ["data/TinyStoriesV2-GPT4-train.txt"],
                    "heldout_paths": ["data/TinyStoriesV2-GPT4-valid.txt"], "max_train_bytes": 250_000_000},
}
