"""Next-symbol prediction on fixed-length byte blocks: what the trainer samples, scores and evaluates."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data import BlockSampler, DataConfig, check_symbols, load_streams, make_sampler, to_blocks
from ..eval import evaluate_lm


class LMTask:
    def __init__(self, data: DataConfig, vocab_size: int, log=print):
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
        self.data, self.log = data, log
        self.sampler: BlockSampler | None = None

    def make_sampler(self) -> BlockSampler:
        """historical: permutations come from the global torch stream (drawn after model init);
        independent: from a private generator seeded with data.data_seed (seed 000 Appendix E)."""
        self.sampler = make_sampler(self.data, len(self.train_blocks), log=self.log)
        return self.sampler

    @staticmethod
    def loss(model, batch: torch.Tensor) -> torch.Tensor:
        """Mean next-symbol cross-entropy over every target of the batch (batch, block_size)."""
        logits = model(batch[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())

    def evaluate(self, model, *, batch_size: int, max_batches: int, device, autocast_dtype=None) -> dict:
        return evaluate_lm(model, self.heldout_blocks, batch_size=batch_size, max_batches=max_batches,
                           unit=self.unit, device=device, autocast_dtype=autocast_dtype)
