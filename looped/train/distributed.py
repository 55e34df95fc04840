"""torchrun support: one process per device; gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def pick_device(choice: str, local_rank: int = 0) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("train.device=cuda but no CUDA device is available")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(device_choice: str) -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else run single-process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_choice, local_rank)
    if world == 1:
        return Dist(device=device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank, device=device)


def all_mean(value: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.enabled:
        value = value.clone()
        dist.all_reduce(value)
        value /= d.world
    return value


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def shutdown(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every rank when `flag` is true on any (so all ranks stop at the same update)."""
    if not d.enabled:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=d.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
