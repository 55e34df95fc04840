"""Seed 003 task `parity`: the parity of a bit string (the row format is in `ParityTask`)."""

from __future__ import annotations


import numpy as np

from .algorithmic import AlgorithmicTask
from .base import SequenceBatch, register_task
from .vocabulary import BOS, EOS, ZERO, next_token_batch

# ---------------------------------------------------------------------------------------------------------------
# Parity.


@register_task("parity")
class ParityTask(AlgorithmicTask):
    """Parity of a random bit string; only the final parity bit is scored.

    Row: BOS b_1 … b_n p EOS with bits and p as ASCII '0'/'1', p = (b_1 + … + b_n) mod 2. Length n counts
    the bits only. Bits are uniform and independent, so labels are balanced. Scored: the single position of the
    last bit b_n (target p; "final bit supervised"); EOS is present but not scored. Nothing marks the end of
    the string, so a model must hold the running parity at every bit: reading the answer at a separate '='
    (this task's first format) made even a toy RLT-1 that learns this format stay at chance
    (results/rlt_cpu/parity_probes.md).

    Training lengths 3..40 (uniform per batch), validation 32/36/40, test 32, 40, 48, 64, 96, 128, 192, 256.

    Example, n = 5:
        <BOS>101101<EOS>     scored: position 5 (the last bit) → '1'
    """

    train_lengths = range(3, 41)
    validation_lengths = (32, 36, 40)
    test_lengths = (32, 40, 48, 64, 96, 128, 192, 256)
    chance_accuracy = 0.5

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        bits = rng.integers(0, 2, size=(n, length))
        label = (bits.sum(1) % 2)[:, None]
        tokens = np.concatenate([np.full((n, 1), BOS), bits + ZERO, label + ZERO, np.full((n, 1), EOS)], axis=1)
        last_bit = np.full(n, length, dtype=np.int64)
        return next_token_batch(tokens.astype(np.int64), np.full(n, length + 3, dtype=np.int64), last_bit,
                                 last_bit + 1, length)


def reference_parity(bits: str) -> str:
    """'1' when the bit string has an odd number of ones, else '0'."""
    return "1" if bits.count("1") % 2 else "0"
