"""What the trainer trains on: a train task owns its data, its loss and its evaluation.

    task = make_train_task(run_config, log)  # after model init (historical sampling draws from the global stream)
    batch = task.global_batch(n)             # identical on every rank
    mine = task.shard(batch, start, end)     # rows [start, end): a rank's slice, then micro-batches
    loss = task.loss(model, task.to(mine, device))   # mean over the slice's scored targets
    task.evaluate(model, ...) -> {"loss": ..., ...}   # "loss" selects the best checkpoint
    task.state_dict() / load_state_dict()   # tensors and plain numbers, for bit-identical resume

A new kind registers `register_task_kind("name", ConfigDataclass, TrainTaskClass)`; the run config then holds
`task: {kind: name, ...}`. The default kind "lm" is next-symbol prediction on byte blocks (`data` section).

The words (README, "Words"): a *task kind* (lm | sequence | reasoning, the run config's `task.kind`) is how the
trainer trains, and its *train task* (LMTrainTask, SequenceTrainTask, ReasoningTrainTask) the object that does it;
a plain *task* is a data task of looped.data.tasks (parity, s5, graph, ...), which the `sequence` and `reasoning`
kinds draw from by `task.name`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..data import check_symbols, load_streams, make_sampler, to_blocks
from ..eval import evaluate_lm
from ..eval.reasoning import unwrap


@dataclass
class LMTaskConfig:
    kind: str = "lm"


_KINDS: dict[str, tuple[type, type]] = {}


def register_task_kind(kind: str, config_cls: type, task_cls: type) -> None:
    _KINDS[kind] = (config_cls, task_cls)


def task_config_class(kind: str) -> type:
    _load_builtin()
    if kind not in _KINDS:
        from ..config import ConfigError
        raise ConfigError(f"task.kind: unknown kind {kind!r} (known: {', '.join(sorted(_KINDS))})")
    return _KINDS[kind][0]


def make_train_task(config, log=print):
    _load_builtin()
    return _KINDS[config.task.kind][1](config, log)


# Kinds defined outside this module register themselves on import; they are loaded by module name (seed 002
# reasoning, seed 003 algorithmic tasks), so this module imports none of the modules that import it.
BUILTIN_MODULES = ("reasoning", "sequence")


def _load_builtin() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{module}")


class LMTrainTask:
    """Next-symbol prediction on fixed-length byte blocks (seed 000)."""

    def __init__(self, config, log=print):
        data, vocab_size = config.data, config.model.vocab_size
        streams = load_streams(data)
        self.name, self.unit = streams.name, streams.unit
        # int16 storage (ids <= 256): a quarter of int64's memory; batches are widened when used.
        self.train_blocks = to_blocks(streams.train, data.block_size, name=f"{streams.name} train", dtype=torch.int16)
        self.heldout_blocks = to_blocks(streams.heldout, data.block_size, name=f"{streams.name} held-out",
                                        dtype=torch.int16)
        check_symbols(self.train_blocks, vocab_size, name=f"{streams.name} train")
        check_symbols(self.heldout_blocks, vocab_size, name=f"{streams.name} held-out")
        self.targets_per_sequence = data.block_size - 1
        self.description = streams.describe()
        # historical mode: the first permutation is drawn lazily, after model init (seed 000 Appendix E)
        self.sampler = make_sampler(data, len(self.train_blocks), log=log)

    def global_batch(self, n: int) -> torch.Tensor:
        return self.train_blocks[self.sampler.next_indices(n)]

    @staticmethod
    def shard(batch: torch.Tensor, start: int, end: int) -> torch.Tensor:
        return batch[start:end]

    @staticmethod
    def to(batch: torch.Tensor, device) -> torch.Tensor:
        return batch.to(device, dtype=torch.long, non_blocking=True)

    @staticmethod
    def loss(model, batch: torch.Tensor) -> torch.Tensor:
        """Mean next-symbol cross-entropy over every target of the batch (batch, block_size), or the model's own
        objective where it declares one (`has_objective`: exit_gate_loop's expected loss over exit steps). The
        call goes through `model` itself, so a DDP / FSDP wrapper sees the forward."""
        inputs, targets = batch[:, :-1], batch[:, 1:]
        inner = unwrap(model)
        if getattr(inner, "has_objective", False):
            return inner.objective(model(inputs, with_exits=True), targets)
        return F.cross_entropy(model(inputs).float().flatten(0, 1), targets.flatten())

    def evaluate(self, model, *, batch_size: int, max_batches: int, device, autocast_dtype=None) -> dict:
        result = evaluate_lm(model, self.heldout_blocks, batch_size=batch_size, max_batches=max_batches,
                             unit=self.unit, device=device, autocast_dtype=autocast_dtype)
        return {"loss": result["nll"], **result}

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


register_task_kind("lm", LMTaskConfig, LMTrainTask)
