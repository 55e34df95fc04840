"""Words for the axes and titles of `looped plot`: each metric's unit, and what a run is (architecture,
parameters, data, the task's chance level), read from the run folder's config.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

# metrics.jsonl keys -> y-axis labels with their unit. Training lines score the training batch, `val_` lines the
# held-out stream; losses are mean NLL per scored target, in nats (natural log).
Y_LABELS = {
    "loss": "training loss (nats/target)",
    "val_loss": "held-out loss (nats/target)",
    "val_nll": "held-out loss (nats/target)",
    "val_bits_per_byte": "held-out bits/byte",
    "val_bits_per_symbol": "held-out bits/symbol",
    "val_ppl": "held-out perplexity (per target)",
    "val_accuracy": "held-out accuracy (fraction)",
    "val_final_state_accuracy": "held-out final-state accuracy (fraction)",
    "lr": "learning rate",
    "grad_norm": "gradient norm (before clipping)",
    "tokens_per_s": "training targets/s",
    "targets": "training targets",
}


def y_label(metric: str) -> str:
    """The axis label of a metric; unknown metrics keep their key (accuracies still say they are fractions)."""
    if metric in Y_LABELS:
        return Y_LABELS[metric]
    if "accuracy" in metric:
        return f"{metric.removeprefix('val_').replace('_', ' ')} (fraction)"
    return metric


def run_config(run: Path) -> dict | None:
    """The config.yaml of a run folder (or of the folder of a metrics.jsonl path) as a dict, None without one."""
    folder = run if run.is_dir() else run.parent
    path = folder / "config.yaml"
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return config if isinstance(config, dict) else None


def parameter_count(model: dict) -> int | None:
    """Total parameters of a model section (built on the meta device: no memory); None if it cannot be built
    here, e.g. an architecture from a plugin that is not loaded."""
    import torch

    from ..config import from_dict
    from ..models import build_model, get_arch

    try:
        config = from_dict(get_arch(model["arch"]).config_cls, model, "model")
        with torch.device("meta"):
            return int(build_model(config).parameter_counts()["total"])
    except (ValueError, KeyError, TypeError):
        return None


def data_name(config: dict) -> str:
    """What the run trained on: a synthetic task's name, or the corpus with its file name."""
    task = config.get("task") or {}
    if task.get("kind", "lm") != "lm":
        return f"task {task.get('name', task.get('kind'))}"
    data = config.get("data") or {}
    files = [data["path"]] if data.get("path") else list(data.get("train_paths") or [])
    corpus = data.get("corpus", "kjv")
    return f"{corpus} ({Path(files[0]).name}{' ...' if len(files) > 1 else ''})" if files else corpus


def sequence_task_fact(config: dict, name: str):
    """Attribute `name` of a sequence task's class (chance_accuracy, primary_metric), None for other runs."""
    task = config.get("task") or {}
    if task.get("kind") != "sequence":
        return None
    from ..data.tasks import get_task

    try:
        return getattr(get_task(task.get("name", "parity")), name, None)
    except ValueError:
        return None


def chance_level(config: dict) -> float | None:
    """The accuracy of a uniform guess for a sequence task that states one (parity 0.5, s5 1/120), else None."""
    chance = sequence_task_fact(config, "chance_accuracy")
    return float(chance) if chance else None


def describe_run(run: Path) -> dict | None:
    """{"text": "transformer, 812,672 parameters, kjv", "chance": None} of a run folder; None without a config."""
    config = run_config(Path(run))
    if config is None or not isinstance(config.get("model"), dict):
        return None
    params = parameter_count(config["model"])
    size = f"{params:,} parameters" if params is not None else "parameters unknown"
    start = (config.get("train") or {}).get("init_from")
    tuned = f", fine-tuned from {start}" if start else ""
    primary = sequence_task_fact(config, "primary_metric")
    return {"text": f"{config['model'].get('arch', '?')}, {size}, {data_name(config)}{tuned}",
            "chance": chance_level(config), "headline": f"val_{primary}" if primary else None}
