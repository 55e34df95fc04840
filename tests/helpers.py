"""Small data and configs that tests generate for themselves."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jolly "
         "boxer and the river runs to the sea in the morning light").split()


def write_text_corpus(path: Path, n_bytes: int = 120_000, seed: int = 0) -> Path:
    """Deterministic pseudo-English text, enough for a few dozen 513-symbol blocks."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_bytes:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + ".\n"
        out.append(line)
        size += len(line)
    path.write_text("".join(out)[:n_bytes])
    return path


def tiny_run_config(corpus: Path, **sections) -> dict:
    config = {
        "model": {"arch": "transformer", "dim": 32, "heads": 4, "layers": 2, "ffn_dim": 64},
        "data": {"corpus": "raw", "path": str(corpus), "heldout_fraction": 0.1},
        "optim": {"lr": 3e-3, "warmup_steps": 2, "schedule": "cosine"},
        "train": {"max_steps": 8, "batch_size": 4, "eval_every": 4, "eval_batches": 2, "log_every": 1,
                  "threads": 1},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path
