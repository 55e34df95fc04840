"""FSDP2 (`train.parallel: fsdp` under torchrun): parameters, gradients and optimizer moments sharded over the
processes, for a row that does not fit one device.

Sharding units: each Transformer block of the plain Transformer, then the root. The looped rows run their one
shared block R times per forward and the RLT rows run every layer once per feedback chunk, so for them the root is
the only unit (a unit called several times per forward would reshard and re-gather between calls). On GPU with
`train.precision: bf16` the units compute in bf16 and reduce gradients in fp32.

Checkpoints stay the single-process format: the full weights in one model.safetensors and the optimizer moments
keyed by parameter index, gathered on every rank (collectives) and written by rank 0. So `looped eval` and
`--resume` read an FSDP checkpoint in one process, and an FSDP run resumes a single-process checkpoint.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor, distribute_tensor

# methods evaluation and decoding call besides forward: FSDP gathers the parameters around them too
EXTRA_ENTRY_POINTS = ("decode", "forward_early_exit", "init_state")


def sharding_units(model: nn.Module) -> list[nn.Module]:
    """Modules sharded on their own before the root: blocks that run exactly once per forward."""
    blocks = getattr(model, "blocks", None)
    if getattr(model, "arch_name", None) == "transformer" and isinstance(blocks, nn.ModuleList):
        return list(blocks)
    return []


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """Apply fully_shard per unit and then to the root, in place; returns the model."""
    if any(p.dim() == 0 for p in model.parameters()):
        name = next(n for n, p in model.named_parameters() if p.dim() == 0)
        raise ValueError(f"train.parallel=fsdp: parameter {name} is 0-d, which FSDP cannot shard")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if device.type == "cuda" and precision == "bf16" else MixedPrecisionPolicy()
    for unit in sharding_units(model):
        fully_shard(unit, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for method in EXTRA_ENTRY_POINTS:
        if callable(getattr(model, method, None)):
            register_fsdp_forward_method(model, method)
    return model


def _full(value):
    return value.full_tensor() if isinstance(value, DTensor) else value


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded weights (every rank must call this: gathering is a collective)."""
    return {name: _full(value).detach().cpu() for name, value in model.state_dict().items()}


def _indexed_params(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """optimizer.state_dict() with every sharded moment gathered (collective), in the single-process layout."""
    state = optimizer.state_dict()
    state["state"] = {idx: {k: _full(v).detach().cpu() if isinstance(v, torch.Tensor) else v
                            for k, v in entry.items()} for idx, entry in state["state"].items()}
    return state


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a single-process optimizer state (full moments) into the optimizer of a sharded model."""
    params = _indexed_params(optimizer)
    sharded = {}
    for idx, entry in state["state"].items():
        param = params[int(idx)]
        sharded[int(idx)] = {
            k: distribute_tensor(v.to(param.device), param.device_mesh, param.placements)
            if isinstance(param, DTensor) and isinstance(v, torch.Tensor) and v.shape == param.shape else v
            for k, v in entry.items()}
    optimizer.load_state_dict({"state": sharded, "param_groups": state["param_groups"]})
