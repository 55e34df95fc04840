"""The run configuration: model (any registered arch) + data + training, loaded from YAML."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config import ConfigError, from_dict, merge, parse_overrides, read_yaml
from ..data import DataConfig
from ..models import TransformerConfig, get_arch
from .tasks import LMTaskConfig, task_config_class
from .tracking import WandbConfig


@dataclass
class OptimConfig:
    """AdamW. Weight decay applies to weight matrices of linear layers only (see trainer.param_groups)."""

    lr: float = 1e-3  # peak learning rate (after the warm-up)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])  # AdamW moment decay rates [beta1, beta2]
    eps: float = 1e-8  # AdamW denominator epsilon
    weight_decay: float = 0.1  # decoupled (AdamW) decay of the weight matrices
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    schedule: Literal["constant", "cosine"] = "constant"  # after linear warm-up
    warmup_steps: int = 0  # updates of linear warm-up from 0 to lr
    min_lr: float = 0.0  # cosine floor

    def validate(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optim.betas must be two numbers in [0, 1), got {self.betas}")
        if self.warmup_steps < 0 or self.grad_clip < 0 or self.weight_decay < 0 or self.min_lr < 0:
            raise ValueError("optim.warmup_steps, grad_clip, weight_decay and min_lr must be >= 0")


BUDGETS = ("max_steps", "max_targets", "max_flops")  # a run sets exactly one


@dataclass
class TrainConfig:
    seed: int = 11  # initial weights and (historical sampler) data order
    batch_size: int = 8  # sequences per optimizer update, summed over processes
    micro_batch_size: int | None = None  # sequences per forward/backward and process; None = no accumulation
    max_steps: int | None = None  # budget in optimizer updates ...
    max_targets: int | None = None  # ... or in scored targets ...
    # ... or in training FLOPs (the compute ledger, 3 x forward; exactly one of the three)
    max_flops: float | None = None
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast forward passes (weights stay fp32)
    eval_every: int = 0  # optimizer updates between held-out evaluations; 0 = only at the end
    eval_batches: int = 0  # held-out batches per evaluation; 0 = the whole held-out stream
    eval_batch_size: int = 16  # sequences per held-out batch
    checkpoint_every: int = 0  # updates between checkpoints; 0 = at evaluations and at the end
    select: Literal["last", "best"] = "last"  # which checkpoint `eval`/`generate` use by default
    log_every: int = 10  # updates between training-loss lines in metrics.jsonl
    tensorboard: bool = False  # also write TensorBoard events to RUN/tensorboard (looped[tensorboard])
    wandb: WandbConfig | None = None  # {project, entity, name}: also log to Weights & Biases (looped[wandb])
    threads: int | None = None  # torch intra-op threads; None = torch's default
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when available
    parallel: Literal["ddp", "fsdp"] = "ddp"  # under torchrun: replicate (DDP) or shard (FSDP2) the model
    compile: bool = False  # torch.compile each model's pure-tensor regions (looped/models/compile.py)
    # Fine-tuning: start from the weights of a run folder (its train.select checkpoint), a checkpoint folder or
    # hf:ORG/NAME; the optimizer, step and data order start fresh, and the model section must match the source's.
    init_from: str | None = None
    exit_gate_stage: int = 1  # exit_gate_loop: 1 = the LM and gate (Ouro stage I); 2 = the gate alone, LM frozen
    exit_gate_slope: float = 50.0  # stage 2: k of the target w = sigmoid(k (loss improvement - margin))
    exit_gate_margin: float = 0.005  # stage 2: gamma, the improvement (nats) at which w = 1/2

    def validate(self) -> None:
        if sum(getattr(self, name) is not None for name in BUDGETS) != 1:
            raise ValueError("train.max_steps / train.max_targets / train.max_flops: set exactly one training budget")
        for name in ("batch_size", "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(f"train.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        for name in BUDGETS:  # 0 is not "unset": it would train nothing and report an untrained model as done
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.init_from is not None and not self.init_from.strip():
            raise ValueError("train.init_from: an empty path (leave the key out to start from random weights)")
        for name in ("eval_every", "eval_batches", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        if self.exit_gate_stage not in (1, 2):
            raise ValueError(f"train.exit_gate_stage must be 1 or 2, got {self.exit_gate_stage}")
        if not self.exit_gate_slope > 0 or self.exit_gate_margin < 0:
            raise ValueError(f"train.exit_gate_slope must be > 0 and train.exit_gate_margin >= 0, got "
                             f"{self.exit_gate_slope} and {self.exit_gate_margin}")


@dataclass
class RunConfig:
    model: Any = field(default_factory=TransformerConfig)
    task: Any = field(default_factory=LMTaskConfig)  # what is trained on; "lm" uses the data section
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(max_steps=100))

    @staticmethod
    def __resolve_field__(name: str, data: dict):
        """The model section's dataclass depends on model.arch, the task section's on task.kind."""
        if name == "task":
            section = data.get("task")
            kind = section.get("kind", "lm") if isinstance(section, dict) else "lm"
            return task_config_class(kind)
        if name != "model":
            return None
        section = data.get("model")
        if not isinstance(section, dict) or "arch" not in section:
            raise ConfigError("model.arch: missing")
        return get_arch(section["arch"]).config_cls

    def validate(self) -> None:
        if self.train.max_flops is not None and self.task.kind != "lm":
            raise ValueError(f"train.max_flops: task.kind {self.task.kind!r} varies its FLOPs per update; a FLOP "
                             f"budget needs task.kind 'lm' (set train.max_steps or train.max_targets)")
        if self.train.exit_gate_stage == 2:
            check_gate_stage(self)
        if self.task.kind == "lm" and self.data.block_size - 1 > self.model.context_length:
            raise ValueError(f"model.context_length: {self.model.context_length} is shorter than the "
                             f"{self.data.block_size - 1} inputs of a data.block_size {self.data.block_size} block")


def check_gate_stage(config: RunConfig) -> None:
    """Stage 2 trains the exit gate of a trained exit_gate_loop LM (Ouro's stage II), at about one forward's cost."""
    if config.model.arch != "exit_gate_loop":
        raise ValueError(f"train.exit_gate_stage 2 trains exit_gate_loop's gate; model.arch is {config.model.arch!r}")
    if config.train.init_from is None:
        raise ValueError("train.exit_gate_stage 2 trains the gate of a trained LM: set train.init_from to a "
                         "stage-1 run")


def load_run_config(path: str | Path | list | None = None, overrides: list[str] | None = None,
                    base: dict | None = None) -> RunConfig:
    """YAML file(s) merged left to right (over `base`) + `key.sub=value` overrides -> validated RunConfig.

    Several files let a recipe be split, e.g. `configs/clw/full/small/workspace.yaml configs/clw/data/enwik8.yaml`.
    """
    data = dict(base or {})
    paths = [] if path is None else list(path) if isinstance(path, (list, tuple)) else [path]
    for one in paths:
        data = merge(data, read_yaml(one))
    return recipe_config(data, parse_overrides(overrides or []))


def recipe_config(recipe: dict, overrides: dict | None = None) -> RunConfig:
    """A recipe (a config as a dict) with `overrides` merged over it, one budget replacing the others, validated."""
    overrides = overrides or {}
    return from_dict(RunConfig, one_budget(merge(recipe, overrides), overrides))


# The `looped quickstart` run (a small Transformer on KJV; README) and the base of `looped bench ddp`.
QUICKSTART = {
    "model": {"arch": "transformer", "dim": 128, "heads": 4, "layers": 4, "ffn_dim": 512, "context_length": 128},
    "data": {"corpus": "kjv", "block_size": 129},
    "optim": {"lr": 3e-3, "weight_decay": 0.1, "schedule": "cosine", "warmup_steps": 50, "min_lr": 2e-4},
    "train": {"seed": 11, "batch_size": 16, "max_steps": 2000, "eval_every": 500, "eval_batches": 16,
              "select": "last", "log_every": 10},
}

def one_budget(data: dict, changes: dict) -> dict:
    """An override of one training budget replaces the others (`--set train.max_steps=50` on a recipe that
    counts targets), unless the override sets several."""
    train_changes = changes.get("train")  # `--set train=3` is left for from_dict to refuse in one line
    changed = [key for key in BUDGETS if isinstance(train_changes, dict) and key in train_changes]
    if len(changed) != 1 or not isinstance(data.get("train"), dict):
        return data
    others = {key: None for key in BUDGETS if key != changed[0]}
    return {**data, "train": {**data["train"], **others}}


# --- `looped config show` ------------------------------------------------------------------------------------------
@dataclass
class ConfigRow:
    key: str  # dotted, e.g. "train.eval_every"
    value: Any
    default: Any  # the value the key takes when a config leaves it out
    meaning: str | None


def describe_config(obj: Any, default: Any = None, prefix: str = "") -> list[ConfigRow]:
    """Every key of a (nested) config dataclass with its value, default and meaning, in declaration order.
    A section's default is the section class's own defaults (a model section: its architecture's)."""
    import dataclasses

    from ..config import meaning_of

    if default is None or type(default) is not type(obj):
        default = _defaults_of(type(obj))
    rows = []
    for f in dataclasses.fields(obj):
        key = f"{prefix}.{f.name}" if prefix else f.name
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            rows += describe_config(value, getattr(default, f.name, None), key)
        else:
            rows.append(ConfigRow(key, value, getattr(default, f.name, None), meaning_of(type(obj), f.name)))
    return rows


def _defaults_of(cls: type) -> Any:
    """An instance of `cls` with every default (None if a field has none); not validated: TrainConfig's defaults
    alone set no budget."""
    try:
        return cls()
    except TypeError:
        return None


def arch_run_config(arch: str, overrides: list[str] | None = None) -> RunConfig:
    """The RunConfig of an architecture with its defaults (+ `--set` overrides), trained on its family's default
    task (reasoning cores on seed 002's tasks, everything else on text)."""
    family = get_arch(arch).family
    kind = family if family in ("reasoning", "sequence") else "lm"
    data = merge({"model": {"arch": arch}, "task": {"kind": kind}}, parse_overrides(overrides or []))
    return from_dict(RunConfig, data)
