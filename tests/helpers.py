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


def recipe_losses(recipe: Path, out: Path) -> list[float]:
    """The training losses logged by one update of a shipped recipe through the normal config path (2 sequences,
    1 thread, no evaluation)."""
    import json

    from looped.train import Trainer, load_run_config

    config = load_run_config(recipe, overrides=["train.max_steps=1", "train.eval_every=0", "train.batch_size=2",
                                                "train.threads=1"])
    Trainer(config, out, progress=False, log=lambda m: None).run()
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [entry["loss"] for entry in logged if "loss" in entry]


# --- tiny trained runs for `looped depth` / `looped lens` (tests/test_depth.py, tests/test_lens.py) ---
LOOP = {"arch": "shared_loop", "dim": 32, "heads": 4, "ffn_dim": 48, "rounds": 2, "context_length": 64}


def train_tiny(out: Path, corpus: Path, model: dict) -> Path:
    """A byte-level run of `model` trained for 3 updates on `corpus` (blocks of 65 bytes)."""
    config = tiny_run_config(corpus, model=model, data={"block_size": 65},
                             train={"max_steps": 3, "eval_every": 0, "batch_size": 4})
    config["model"] = model  # the transformer's keys are not the loop's
    from looped.config import from_dict
    from looped.train import RunConfig, Trainer

    Trainer(from_dict(RunConfig, config), out, progress=False, log=lambda m: None).run()
    return out


def trainer_at_update_zero(config, out: Path):
    """A Trainer for `config` (a RunConfig) set up in `out` as it stands before its first update (weights loaded,
    optimizer made), its run lock released so the test can inspect it and leave."""
    from looped.train import Trainer

    trainer = Trainer(config, out, progress=False, log=lambda m: None)
    try:
        trainer._setup()
    finally:
        trainer.lock.release()
    return trainer


CORE = {"arch": "drt", "input_kind": "graph", "vocab_size": 27, "max_length": 20, "dim": 16, "heads": 2, "ffn_dim": 32,
        "depth_rows": 10, "steps_range": [2, 3], "layer_scale": None, "dropout": 0.0}


def core_config(model: dict) -> dict:
    return {"model": model,
            "task": {"kind": "reasoning", "name": "graph", "train_size": 64, "val_size": 16, "train_difficulties": [1, 2],
                     "eval_steps": [1, 2, 3], "test_difficulties": [1, 2, 3], "test_per_bucket": 8},
            "train": {"seed": 1, "batch_size": 16, "max_steps": 3, "eval_every": 0, "threads": 1}}


def changed_lines(old: str, new: str) -> list[str]:
    """The lines of `new` that differ from `old` (two generated README blocks of the same length)."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    return [b for a, b in zip(old_lines, new_lines) if a != b]
