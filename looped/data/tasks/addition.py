"""Seed 003 task `addition`: reversed-digit addition (the row format is in `AdditionTask`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .algorithmic import ADDITION_TEST_ROWS_PER_WIDTH, ADDITION_VALIDATION_ROWS_PER_WIDTH, AlgorithmicTask
from .base import SequenceBatch, TaskError, register_task
from .vocabulary import (BOS, EOS, LBRACKET, RBRACKET, SPACE, decode_task_text, digit_tokens, encode_task_text,
                         next_token_batch, pad_rows)

# ---------------------------------------------------------------------------------------------------------------
# Addition.


@register_task("addition")
class AdditionTask(AlgorithmicTask):
    """Addition of two `width`-digit numbers, digits written least-significant first.

    Row: BOS "[a_rev] + [b_rev] =" " [c_rev]" EOS, all ASCII; a_rev is a's decimal digits reversed, c = a + b
    written without leading zeros and then reversed (so it has `width` or `width`+1 digits). Brackets and the
    spaces are literal characters: the paper counts "digits, spaces, brackets, and EOS" among the answer tokens.

    Scored: the positions from '=' up to the last ']', whose targets are the answer " [c_rev]" and EOS
    (teacher-forced answer-token accuracy includes formatting and EOS; the prompt and padding are not scored).

    Operands have exactly `width` digits and no leading zero (width 1: 0..9). Training draws one width
    uniformly from 1..8 per batch (`sample_train`); test widths 9, 10, 11, 12, 14, 16, 32.

    Example, width 2, 47 + 85 = 132:
        <BOS>[74] + [58] = [231]<EOS>
        tokens   : <BOS> [ 7 4 ] ␠ + ␠ [ 5 8 ] ␠ =  ␠ [ 2 3 1 ] <EOS>
        scored at: '=' → ' ', ' ' → '[', '[' → '2', '2' → '3', '3' → '1', '1' → ']', ']' → <EOS>  (7 targets)
    """

    max_length = 1024
    train_lengths = range(1, 9)
    validation_lengths = tuple(range(1, 9))
    test_lengths = (9, 10, 11, 12, 14, 16, 32)
    validation_rows_per_length = ADDITION_VALIDATION_ROWS_PER_WIDTH
    test_rows_per_length = ADDITION_TEST_ROWS_PER_WIDTH
    primary_metric = "prefix_token_accuracy"
    chance_accuracy = 0.1  # one of ten digits; formatting tokens are easier

    def _generate(self, rng: np.random.Generator, n: int, width: int) -> SequenceBatch:
        a = _random_reversed_operands(rng, n, width)
        b = _random_reversed_operands(rng, n, width)
        total = _add_reversed(a, b)  # (n, width + 1), least-significant first; last column is the carry
        rows = [_addition_row(a[i], b[i], total[i] if total[i, -1] else total[i, :-1]) for i in range(n)]
        return _addition_batch(rows, np.full(n, width))

    def from_pairs(self, pairs: Sequence[tuple[int, int]]) -> SequenceBatch:
        """A batch of given operand pairs (non-negative ints), e.g. for hand-made checks; each row's difficulty
        is the digit count of its wider operand."""
        rows, widths = [], []
        for a, b in pairs:
            if a < 0 or b < 0:
                raise TaskError(f"addition: operands must be non-negative, got {a} and {b}")
            rows.append(_addition_row(*(_reversed_digits(x) for x in (a, b, a + b))))
            widths.append(max(len(str(a)), len(str(b))))
        return _addition_batch(rows, np.array(widths))

    def row_key(self, batch: SequenceBatch, i: int) -> bytes:
        """The unordered operand pair: a + b and b + a count as one example (the paper's "unique unordered pairs")."""
        a, b = _addition_operands(decode_task_text(batch.tokens[i, : int(batch.lengths[i])].tolist()))
        low, high = sorted((a, b))
        return f"{low}+{high}".encode()


def _reversed_digits(value: int) -> list[int]:
    return [int(c) for c in reversed(str(value))]


def _addition_row(a_rev: Sequence[int], b_rev: Sequence[int], c_rev: Sequence[int]) -> tuple[list[int], int]:
    """Tokens BOS "[a_rev] + [b_rev] =" " [c_rev]" EOS, and the position of '=' (the first scored position)."""
    prompt = [BOS, LBRACKET, *digit_tokens(a_rev), *encode_task_text("] + ["), *digit_tokens(b_rev),
              *encode_task_text("] =")]
    return prompt + [SPACE, LBRACKET, *digit_tokens(c_rev), RBRACKET, EOS], len(prompt) - 1


def _addition_batch(rows: Sequence[tuple[list[int], int]], difficulty: np.ndarray) -> SequenceBatch:
    """Score from '=' (which predicts the answer's leading space) through the ']' that predicts EOS."""
    lengths = np.array([len(tokens) for tokens, _ in rows], dtype=np.int64)
    first = np.array([equals for _, equals in rows], dtype=np.int64)
    return next_token_batch(pad_rows([tokens for tokens, _ in rows]), lengths, first, lengths - 1, difficulty)


def _random_reversed_operands(rng: np.random.Generator, n: int, width: int) -> np.ndarray:
    """(n, width) digits, least-significant first; the most significant digit is nonzero when width > 1."""
    digits = rng.integers(0, 10, size=(n, width))
    if width > 1:
        digits[:, -1] = rng.integers(1, 10, size=n)
    return digits


def _add_reversed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Column addition of least-significant-first digit arrays (n, w) -> (n, w + 1)."""
    n, width = a.shape
    out = np.zeros((n, width + 1), dtype=np.int64)
    carry = np.zeros(n, dtype=np.int64)
    for column in range(width):
        column_sum = a[:, column] + b[:, column] + carry
        out[:, column] = column_sum % 10
        carry = column_sum // 10
    out[:, width] = carry
    return out


_ADDITION_PROMPT = re.compile(r"\[(\d+)\] \+ \[(\d+)\] =")


def _addition_operands(text: str) -> tuple[int, int]:
    match = _ADDITION_PROMPT.search(text)
    if match is None:
        raise TaskError(f"addition: no '[a_rev] + [b_rev] =' prompt in {text!r}")
    return int(match.group(1)[::-1]), int(match.group(2)[::-1])


def reference_addition_answer(prompt: str) -> str:
    """The answer text (" [c_rev]") that follows an addition prompt "[a_rev] + [b_rev] =", with Python ints."""
    a, b = _addition_operands(prompt)
    return f" [{str(a + b)[::-1]}]"
