"""Held-out evaluation of byte LMs exactly as seed 000 eq. 9.

NLL = (sum of -log P(y_n | prefix) over every scored target of every complete block) / K,
including the last short batch; PPL = exp(NLL); bits per byte (raw corpora) or per symbol (WikiText)
= NLL / ln 2.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from ..data import heldout_batches
from .progress import progress_bar


def check_eval_options(*, batch_size: int, max_batches: int, exit_threshold: float | None) -> None:
    """One-line errors for options that cannot apply (before any work is done)."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if max_batches < 0:
        raise ValueError(f"--eval-batches must be >= 0, got {max_batches}")
    if exit_threshold is not None and not exit_threshold >= 0:  # a model without early exit refuses it itself
        raise ValueError(f"--exit-threshold must be >= 0, got {exit_threshold}")


@torch.inference_mode()
def evaluate_lm(model, blocks: torch.Tensor, *, batch_size: int = 16, max_batches: int = 0,
                rounds: int | None = None, unit: str = "byte", device: torch.device | str = "cpu",
                autocast_dtype: torch.dtype | None = None, progress: bool = False,
                exit_threshold: float | None = None, by_position: bool = False) -> dict:
    """Score `blocks` (num_blocks, block_size); max_batches 0 = all of them.

    exit_threshold (looped rows): evaluate with the early-exit rule and report mean rounds used. Exit
    decisions are per position, so scores do not depend on the batch size.
    by_position: also report the score by target position in doubling buckets (1, 2-3, 4-7, ..., counting
    the first target as position 1), which shows how much of a model's gain comes from using more context.

    Throughput: whole blocks are scored `batch_size` at a time under inference mode (no autograd records),
    and the sums stay on the device until the end (no host sync per batch).
    """
    check_eval_options(batch_size=batch_size, max_batches=max_batches, exit_threshold=exit_threshold)
    was_training = model.training
    model.eval()
    total_targets, used_blocks = 0, 0
    device = torch.device(device)
    total_rounds = torch.zeros((), dtype=torch.int64, device=device)
    position_nll = torch.zeros(blocks.shape[1] - 1, dtype=torch.float64, device=device)  # summed over blocks
    n_batches = math.ceil(len(blocks) / batch_size)
    if max_batches:
        n_batches = min(n_batches, max_batches)
    for batch in progress_bar(heldout_batches(blocks, batch_size, max_batches), total=n_batches,
                              disable=not progress, desc="eval", unit="batch", leave=False):
        batch = batch.to(device, dtype=torch.long, non_blocking=True)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            if exit_threshold is None:
                logits = model(inputs, rounds=rounds)
            else:
                logits, used = model.forward_early_exit(inputs, exit_threshold, rounds=rounds)
                total_rounds += used.sum()
        nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (batch, length)
        position_nll += nll.sum(0).double()
        total_targets += targets.numel()
        used_blocks += len(batch)
    model.train(was_training)
    if total_targets == 0:
        raise ValueError("evaluation scored no targets (empty held-out set)")
    position_nll = position_nll.cpu()
    nll = position_nll.sum().item() / total_targets
    ppl = perplexity(nll)
    result = {"nll": nll, "ppl": ppl, f"bits_per_{unit}": nll / math.log(2), "targets": total_targets,
              "blocks": used_blocks, "unit": unit, "rounds": rounds}
    if exit_threshold is not None:
        result.update(exit_threshold=exit_threshold, mean_rounds_used=total_rounds.item() / total_targets)
    if by_position:
        result["by_position"] = position_buckets(position_nll / used_blocks)
    return result


def perplexity(nll: float) -> float:
    """exp(NLL), infinite for a diverged model instead of an OverflowError."""
    return math.exp(nll) if nll < math.log(sys.float_info.max) else math.inf


def position_buckets(mean_nll: torch.Tensor) -> list[dict]:
    """Mean NLL per target position (length,) -> doubling buckets [1], [2, 3], [4, 7], ... (1-based), each with
    its mean NLL in nats and in bits. The last bucket runs to the last target, absorbing a remainder shorter than
    itself (512 targets: ..., [128, 255], [256, 512]) rather than leaving a bucket of a few noisy positions."""
    buckets, start = [], 1
    while start <= len(mean_nll):
        end = min(2 * start - 1, len(mean_nll))
        if len(mean_nll) - end < start:
            end = len(mean_nll)
        nll = mean_nll[start - 1:end].mean().item()
        buckets.append({"first": start, "last": end, "nll": nll, "bits": nll / math.log(2)})
        start = end + 1
    return buckets


def merge_scores(parts: list[dict]) -> dict:
    """One evaluate_lm result from several (complete blocks + a file's tail): NLL and rounds weighted by targets.
    `by_position` stays that of the complete blocks (positions of a shorter tail would skew its buckets)."""
    if len(parts) == 1:
        return parts[0]
    targets = sum(p["targets"] for p in parts)
    nll = sum(p["nll"] * p["targets"] for p in parts) / targets
    merged = {**parts[0], "nll": nll, "ppl": perplexity(nll),
              f"bits_per_{parts[0]['unit']}": nll / math.log(2), "targets": targets,
              "blocks": sum(p["blocks"] for p in parts)}
    if "mean_rounds_used" in merged:
        merged["mean_rounds_used"] = sum(p["mean_rounds_used"] * p["targets"] for p in parts) / targets
    return merged
