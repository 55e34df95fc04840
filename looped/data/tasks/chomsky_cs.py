"""The context-sensitive (CS) tasks of the Chomsky-hierarchy suite: the row format, the shared base class and the
regular and deterministic context-free tasks are in chomsky.py, whose docstring describes the suite.
"""

from __future__ import annotations

import numpy as np

from .base import register_task
from .chomsky import PLUS, ZERO, ChomskyTask, letters


@register_task("duplicate_string")
class DuplicateStringTask(ChomskyTask):
    """Output a string over {a, b} twice. 2n scored tokens; chance 1/2.

    Example, n = 5: x = abaab → y = abaababaab
    """

    level, paper_name = "CS", "Duplicate String"
    chance_accuracy = 0.5

    def _instances(self, rng, n, length):
        x = letters(rng, n, length)
        return x, np.concatenate([x, x], axis=1)


@register_task("binary_addition")
class BinaryAdditionTask(ChomskyTask):
    """Add two binary numbers written least-significant bit first.

    Input: a '+' b, with n bits in all (a has k bits, k uniform in 1..n−1, b the other n − k; a number of more
    than one bit has its most significant bit 1), so n >= 2. Output: the bits of a + b, least significant first,
    without superfluous zeros (max(width) or max(width) + 1 bits). Scored: every output bit; chance 1/2.

    Example, n = 5: x = 011+11 (6 + 3) → 9 = 1001 → y = 1001
    """

    level, paper_name = "CS", "Binary Addition"
    chance_accuracy = 0.5
    min_length = 2
    train_lengths = range(2, 41)

    def _instances(self, rng, n, length):
        inputs, outputs = [], []
        for _ in range(n):
            k = int(rng.integers(1, length))
            a, b = _random_bits(rng, k), _random_bits(rng, length - k)
            inputs.append([ZERO + bit for bit in a] + [PLUS] + [ZERO + bit for bit in b])
            outputs.append([ZERO + bit for bit in _ripple_carry_sum(a, b)])
        return inputs, outputs


def _random_bits(rng: np.random.Generator, width: int) -> list[int]:
    """`width` bits least significant first, the most significant one 1 unless the number is one bit wide."""
    bits = rng.integers(0, 2, size=width).tolist()
    if width > 1:
        bits[-1] = 1
    return bits


def _ripple_carry_sum(a: list[int], b: list[int]) -> list[int]:
    """Column addition of little-endian bit lists; the carry out becomes a last bit only when it is 1."""
    out, carry = [], 0
    for column in range(max(len(a), len(b))):
        total = (a[column] if column < len(a) else 0) + (b[column] if column < len(b) else 0) + carry
        out.append(total % 2)
        carry = total // 2
    return out + [1] if carry else out


@register_task("bucket_sort")
class BucketSortTask(ChomskyTask):
    """Sort a string over the digits 0..4. n scored tokens; chance 1/5.

    Example, n = 9: x = 421302214 → y = 011222344
    """

    level, paper_name = "CS", "Bucket Sort"
    chance_accuracy = 0.2

    def _instances(self, rng, n, length):
        x = rng.integers(0, 5, size=(n, length)) + ZERO
        return x, np.sort(x, axis=1)
