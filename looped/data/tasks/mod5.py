"""Seed 003 tasks `mod5_flat` and `mod5_bracketed`: expressions over the digits 0..4, evaluated mod 5."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .algorithmic import AlgorithmicTask
from .base import SequenceBatch, TaskError, register_task
from .vocabulary import LPAREN, MINUS, PLUS, RPAREN, TIMES, ZERO, final_label_batch, pick

# ---------------------------------------------------------------------------------------------------------------
# Modular arithmetic.

MODULUS = 5
_OPERATORS = (PLUS, MINUS, TIMES)


def _apply(op: int, left: int, right: int) -> int:
    if op == PLUS:
        return (left + right) % MODULUS
    if op == MINUS:
        return (left - right) % MODULUS
    return (left * right) % MODULUS


@register_task("mod5_flat")
class Mod5FlatTask(AlgorithmicTask):
    """A flat expression d op d op … d over digits 0..4 and + − × (ASCII '*'), evaluated modulo 5.

    Row: BOS e_1 … e_L '=' r EOS, with r the value of the expression mod 5 as an ASCII digit. × binds tighter
    than + and −, which associate left to right (ordinary arithmetic), and the exact integer value is reduced
    into 0..4. Length L counts expression symbols (digits and operators; not BOS or '='), so it is odd:
    (L + 1) / 2 uniform digits alternate with (L − 1) / 2 uniform operators. Scored: the '=' position (target r).

    Training lengths: odd 3..39 (uniform per batch); validation 33/35/39; test 31, 39, 47, 63, 95, 127, 191, 255
    (the paper's even requests L map to L − 1).

    Example, L = 7:
        <BOS>3-2*4+1=1<EOS>     3 − (2 × 4) + 1 = −4 ≡ 1 (mod 5); scored: position 8 ('=') → '1'
    """

    max_length = 4095
    train_lengths = range(3, 40, 2)
    validation_lengths = (33, 35, 39)
    test_lengths = (31, 39, 47, 63, 95, 127, 191, 255)
    chance_accuracy = 0.2

    def validate_length(self, difficulty: int) -> int:
        length = super().validate_length(difficulty)
        if length % 2 == 0:
            raise TaskError(f"{self.name}: length {length} is even; flat expressions have odd lengths")
        return length

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        count = (length + 1) // 2
        digits = rng.integers(0, MODULUS, size=(n, count))
        ops = np.asarray(_OPERATORS)[rng.integers(0, len(_OPERATORS), size=(n, count - 1))]
        symbols = np.empty((n, length), dtype=np.int64)
        symbols[:, 0::2] = digits + ZERO
        symbols[:, 1::2] = ops
        return final_label_batch(symbols, _evaluate_flat(digits, ops), length)


def _evaluate_flat(digits: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """Values mod 5 of flat expressions, one per row, honouring × before + and −.

    Scans left to right keeping `total` (the sum of finished product terms) and the open product term `term`
    with its sign: × extends the term, + or − closes it and opens the next.
    """
    n = digits.shape[0]
    total = np.zeros(n, dtype=np.int64)
    term = digits[:, 0] % MODULUS
    sign = np.ones(n, dtype=np.int64)
    for j in range(ops.shape[1]):
        nxt = digits[:, j + 1]
        multiply = ops[:, j] == TIMES
        total = np.where(multiply, total, (total + sign * term) % MODULUS)
        sign = np.where(multiply, sign, np.where(ops[:, j] == PLUS, 1, -1))
        term = np.where(multiply, term * nxt, nxt) % MODULUS
    return (total + sign * term) % MODULUS


# Grammar of bracketed expressions (lengths in symbols):
#   expression(L) = term op term             when some split fits L (every L >= 3 except 6);
#                   the root operation carries no brackets
#                 = term                     otherwise (L = 1, 2: "d", "-d"; L = 6: "-(d op d)")
#   term          = atom | "-" atom          (unary minus, so that even lengths exist)
#   atom          = digit | "(" term op term ")"
# Every operation below the root is bracketed, so the value never depends on precedence.

NEGATION_PROBABILITY = 0.25  # of a term whose length allows both a plain and a negated form


@lru_cache(maxsize=None)
def _atom_fits(length: int) -> bool:
    return length == 1 or (length >= 5 and _operation_fits(length - 2))


@lru_cache(maxsize=None)
def _term_fits(length: int) -> bool:
    return _atom_fits(length) or (length >= 2 and _atom_fits(length - 1))


@lru_cache(maxsize=None)
def _operation_splits(length: int) -> tuple[int, ...]:
    """Lengths of the left term for which "left op right" has exactly `length` symbols."""
    return tuple(left for left in range(1, length - 1) if _term_fits(left) and _term_fits(length - 1 - left))


def _operation_fits(length: int) -> bool:
    return bool(_operation_splits(length))


def _warm_grammar_tables(length: int) -> None:
    """Fill the caches bottom-up, so the recursive definitions never recurse deeply."""
    for k in range(1, length + 1):
        _operation_splits(k), _atom_fits(k), _term_fits(k)


def _sample_operation(rng: np.random.Generator, length: int) -> tuple[list[int], int]:
    """"term op term" of exactly `length` symbols: a uniform feasible split, a uniform operator."""
    left_length = pick(rng, _operation_splits(length))
    left, left_value = _sample_term(rng, left_length)
    op = pick(rng, _OPERATORS)
    right, right_value = _sample_term(rng, length - 1 - left_length)
    return left + [op] + right, _apply(op, left_value, right_value)


def _sample_term(rng: np.random.Generator, length: int) -> tuple[list[int], int]:
    plain, negated = _atom_fits(length), length >= 2 and _atom_fits(length - 1)
    if negated and (not plain or rng.random() < NEGATION_PROBABILITY):
        atom, value = _sample_atom(rng, length - 1)
        return [MINUS] + atom, (-value) % MODULUS
    return _sample_atom(rng, length)


def _sample_atom(rng: np.random.Generator, length: int) -> tuple[list[int], int]:
    if length == 1:
        digit = int(rng.random() * MODULUS)
        return [ZERO + digit], digit
    inner, value = _sample_operation(rng, length - 2)
    return [LPAREN] + inner + [RPAREN], value


def _sample_expression(rng: np.random.Generator, length: int) -> tuple[list[int], int]:
    return _sample_operation(rng, length) if _operation_fits(length) else _sample_term(rng, length)


@register_task("mod5_bracketed")
class Mod5BracketedTask(AlgorithmicTask):
    """A random bracketed expression tree over digits 0..4 with + − × and unary minus, evaluated modulo 5.

    Row: BOS e_1 … e_L '=' r EOS, r = value mod 5 as an ASCII digit; scored: the '=' position (target r).
    Length L counts every expression symbol — digits, operators, unary minus, parentheses — but not BOS or '='.

    Grammar (every length L >= 1 is reachable):
        expression = term op term         when such a split fits L: every L >= 3 except 6
                                          (the root operation is not bracketed)
                   = term                 otherwise: L = 1 "d", L = 2 "-d", L = 6 "(d op -d)" or "-(d op d)"
        term       = atom | "-" atom
        atom       = digit | "(" term op term ")"
    Every operation below the root sits in its own brackets, so the value does not depend on precedence. A
    digit and its operators contribute an odd number of symbols and brackets come in pairs, so unary minus is
    what makes even lengths (the paper's 32, 40, …, 256) possible.

    Exact-length sampling, top down: an operation of length m picks the left term's length uniformly among the
    splits for which both sides can be completed (feasibility tables computed once by dynamic programming), the
    operator uniformly; a term negates its atom with probability 1/4 when both forms fit its length (and when
    only one fits, takes it); digits are uniform. The value mod 5 is computed on the tree as it is built.
    Measured at L = 40: ≈ 10 digits, ≈ 6 unary minuses (most forced by the lengths a split leaves), bracket
    depth ≈ 4 (max 7); products make 0 the most common value (≈ 31 % of labels, the other residues ≈ 17 %
    each), so a constant guess beats the 20 % uniform reference (`chance_accuracy`).

    Training lengths 3..40 (uniform per batch); validation 32/36/40; test 32, 40, 48, 64, 96, 128, 192, 256.

    Example, L = 12:
        <BOS>(4-2)*-(1+3)=2<EOS>    (4 − 2) × −(1 + 3) = −8 ≡ 2 (mod 5); scored: '=' → '2'
    """

    max_length = 1024  # the feasibility tables grow quadratically with the length
    train_lengths = range(3, 41)
    validation_lengths = (32, 36, 40)
    test_lengths = (32, 40, 48, 64, 96, 128, 192, 256)
    chance_accuracy = 0.2

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        _warm_grammar_tables(length)
        symbols, values = [], []
        for _ in range(n):
            expression, value = _sample_expression(rng, length)
            symbols.append(expression)
            values.append(value)
        body = np.array(symbols, dtype=np.int64).reshape(n, length)
        return final_label_batch(body, np.array(values, dtype=np.int64), length)


def reference_mod5(expression: str) -> int:
    """Value mod 5 of an ASCII expression over digits, + - * ( ) and unary minus, by recursive descent.

    Grammar: sum = product (('+'|'-') product)*; product = factor ('*' factor)*; factor = '-' factor | digit
    | '(' sum ')'. Exact integers throughout; reduced mod 5 only at the end.
    """
    position = 0

    def peek() -> str:
        return expression[position] if position < len(expression) else ""

    def take(expected: str | None = None) -> str:
        nonlocal position
        char = peek()
        if not char or (expected is not None and char != expected):
            raise TaskError(f"mod5: unexpected {char!r} at {position} in {expression!r}")
        position += 1
        return char

    def parse_sum() -> int:
        value = parse_product()
        while peek() in ("+", "-"):
            value = value + parse_product() if take() == "+" else value - parse_product()
        return value

    def parse_product() -> int:
        value = parse_factor()
        while peek() == "*":
            take()
            value *= parse_factor()
        return value

    def parse_factor() -> int:
        char = take()
        if char == "-":
            return -parse_factor()
        if char == "(":
            value = parse_sum()
            take(")")
            return value
        if char.isdigit():
            return int(char)
        raise TaskError(f"mod5: unexpected {char!r} at {position - 1} in {expression!r}")

    value = parse_sum()
    if position != len(expression):
        raise TaskError(f"mod5: trailing text at {position} in {expression!r}")
    return value % MODULUS
