"""The context-sensitive (CS) tasks of the Chomsky-hierarchy suite: the row format, the shared base class and the
regular and deterministic context-free tasks are in chomsky.py, whose docstring describes the suite.
"""

from __future__ import annotations

import math

import numpy as np

from .base import register_task
from .chomsky import PLUS, TIMES, ZERO, ChomskyTask, letters
from .vocabulary import EOS

HIDDEN, EMPTY = ord("?"), ord("_")  # missing_duplicate's hidden symbol and its padding (the released empty token)


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



@register_task("missing_duplicate")
class MissingDuplicateTask(ChomskyTask):
    """Find the symbol hidden in a string written twice. One scored token; chance 1/2.

    Input (n >= 2 symbols): ww, w uniform over {a, b} with n // 2 symbols, one of the 2 · (n // 2) positions
    (uniform, in either copy) replaced by '?'; an odd n ends with one padding symbol '_' so that the row has n
    symbols (the released generator's empty token). Output: the hidden symbol. Length 1 holds no ww (the
    released generator fills it with a constant), so training draws n uniform in 2..40.

    Example, n = 7: x = bab?ab_ (w = bab) → y = b
    """

    level, paper_name = "CS", "Missing Duplicate"
    chance_accuracy = 0.5
    min_length = 2
    train_lengths = range(2, 41)

    def _instances(self, rng, n, length):
        half = length // 2
        w = letters(rng, n, half)
        x = np.concatenate([w, w, np.full((n, length % 2), EMPTY, dtype=w.dtype)], axis=1)
        rows, hidden = np.arange(n), rng.integers(0, 2 * half, size=n)
        answer = x[rows, hidden]  # fancy indexing copies, so hiding below leaves the answers intact
        x[rows, hidden] = HIDDEN
        return x, answer[:, None]


@register_task("odds_first")
class OddsFirstTask(ChomskyTask):
    """Output a string over {a, b} with the symbols at odd positions first, then those at even positions,
    counting from 1: x_1 x_3 x_5 … x_2 x_4 …. n scored tokens; chance 1/2.

    That is the order the released task's docstring and both its examples give; the code under them takes
    x_2 x_4 … first (slices [1::2] then [::2]), the same task mirrored, not the one described.

    Example, n = 6: x = aaabaa → odd positions aaa, even positions aba → y = aaaaba
    """

    level, paper_name = "CS", "Odds First"
    chance_accuracy = 0.5

    def _instances(self, rng, n, length):
        x = letters(rng, n, length)
        return x, np.concatenate([x[:, 0::2], x[:, 1::2]], axis=1)

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



@register_task("binary_multiplication")
class BinaryMultiplicationTask(ChomskyTask):
    """Multiply two binary numbers written least-significant bit first.

    Input: a '*' b, n symbols in all (the released generator counts the '*'): a has k bits, k uniform in 1..n−2,
    b the other n − 1 − k; each operand is uniform over 1..2^width − 1 written in exactly `width` bits, so its
    last (most significant) bits may be 0. Output: the product's bits, least significant first, without trailing
    zeros, then EOS: the released task's termination token, which it scores too. It pads its output to n tokens
    after EOS and leaves the padding unscored; one ∅ per scored token needs no padding, but tells the model the
    product's length, which the padded output does not. Scored: the product and EOS, at most n tokens; chance 1/3
    (0, 1, EOS). Lengths 1 and 2 hold no product (the released generator fills them with constants), so training
    draws n uniform in 3..40.

    Example, n = 6: x = 011*11 (6 · 3) → 18 = 10010 → y = 01001<EOS>
    """

    level, paper_name = "CS", "Binary Multiplication"
    chance_accuracy = 1 / 3
    min_length = 3
    train_lengths = range(3, 41)

    def _instances(self, rng, n, length):
        inputs, outputs = [], []
        for _ in range(n):
            k = int(rng.integers(1, length - 1))
            a, b = _nonzero_bits(rng, k), _nonzero_bits(rng, length - 1 - k)
            inputs.append([ZERO + bit for bit in a] + [TIMES] + [ZERO + bit for bit in b])
            product = _bits_value(a[::-1]) * _bits_value(b[::-1])
            outputs.append([ZERO + int(bit) for bit in reversed(format(product, "b"))] + [EOS])
        return inputs, outputs


@register_task("compute_sqrt")
class ComputeSqrtTask(ChomskyTask):
    """The integer square root of a binary number, most significant bit first.

    Input: n bits, a number uniform over 1..2^n − 1 written in exactly n bits (leading zeros allowed). Output:
    ⌊√x⌋ written in exactly ⌈n/2⌉ bits, most significant first (it always fits, leading zeros kept). Scored:
    ⌈n/2⌉ bits; chance 1/2.

    Example, n = 6: x = 100101 (37) → ⌊√37⌋ = 6 → y = 110
    """

    level, paper_name = "CS", "Compute Sqrt"
    chance_accuracy = 0.5

    def _instances(self, rng, n, length):
        numbers = [_nonzero_bits(rng, length) for _ in range(n)]
        width = (length + 1) // 2
        roots = [format(math.isqrt(_bits_value(bits)), f"0{width}b") for bits in numbers]
        inputs = np.array(numbers, dtype=np.int64).reshape(n, length) + ZERO
        outputs = np.array([[ZERO + int(bit) for bit in root] for root in roots], dtype=np.int64)
        return inputs, outputs.reshape(n, width)


def _nonzero_bits(rng: np.random.Generator, width: int) -> list[int]:
    """`width` uniform bits, redrawn while all are 0: a number uniform over 1..2^width − 1 in exactly `width`
    bits, as the released generators draw their operands."""
    while True:
        bits = rng.integers(0, 2, size=width).tolist()
        if any(bits):
            return bits


def _bits_value(bits: list[int]) -> int:
    """The number whose bits, most significant first, are `bits`."""
    return int("".join(map(str, bits)), 2)

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
