"""Nested boolean logic (seed 002): the value of an expression over T F & | ! ( )."""

from __future__ import annotations

import bisect
import functools
import itertools

import numpy as np

from .base import ReasoningBatch, TaskError, register_task
from .reasoning import CLS, PAD, ReasoningTask, Row, pad_ids


BOOLEAN_SYMBOLS = "TF&|!()"


def nesting_depth(text: str) -> int:
    """Largest number of parentheses open at once: 'T&F' → 0, '(T|F)' → 1, '!((T)&F)' → 2."""
    depth = deepest = 0
    for ch in text:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    return deepest


def evaluate_boolean_reference(text: str) -> bool:
    """Reference evaluator: translate to Python (not > and > or, the same precedence as ! > & > |).

    Independent of the generator's recursive-descent parser; `text` must use only T F & | ! ( ).
    """
    if not text or set(text) - set(BOOLEAN_SYMBOLS):
        raise TaskError(f"boolean: not an expression over {BOOLEAN_SYMBOLS}: {text!r}")
    words = {"T": " True ", "F": " False ", "&": " and ", "|": " or ", "!": " not ", "(": "(", ")": ")"}
    return bool(eval("".join(words[ch] for ch in text), {"__builtins__": {}}, {}))  # noqa: S307 (checked alphabet)


class _BooleanParser:
    """Recursive descent over  or := and ('|' and)* ;  and := unary ('&' unary)* ;
    unary := '!' unary | 'T' | 'F' | '(' or ')'  — giving ! > & > |. Evaluates while parsing."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def parse(self) -> bool:
        value = self._or()
        if self.pos != len(self.text):
            self._fail("end of expression")
        return value

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _fail(self, expected: str) -> None:
        found = repr(self._peek()) if self._peek() else "the end"
        raise TaskError(f"boolean: malformed expression, expected {expected} at position {self.pos}, found {found}")

    def _or(self) -> bool:
        value = self._and()
        while self._peek() == "|":
            self.pos += 1
            value = self._and() or value  # evaluate the right side first: parse it regardless
        return value

    def _and(self) -> bool:
        value = self._unary()
        while self._peek() == "&":
            self.pos += 1
            value = self._unary() and value
        return value

    def _unary(self) -> bool:
        ch = self._peek()
        if ch == "!":
            self.pos += 1
            return not self._unary()
        if ch in ("T", "F"):
            self.pos += 1
            return ch == "T"
        if ch == "(":
            self.pos += 1
            value = self._or()
            if self._peek() != ")":
                self._fail("')'")
            self.pos += 1
            return value
        self._fail("'T', 'F', '!' or '('")
        raise AssertionError  # unreachable: _fail raises


@register_task("boolean")
class NestedBoolean(ReasoningTask):
    """Evaluate a nested boolean expression over T/F with ``&``, ``|``, ``!`` and parentheses.

    Vocabulary (9 tokens): 0 ``[PAD]``, 1 ``[CLS]``, 2 ``T``, 3 ``F``, 4 ``&``, 5 ``|``, 6 ``!``,
    7 ``(``, 8 ``)``.

    Layout (`max_length` 128): ``[CLS]`` then one token per character of the expression (at most 127),
    then PAD. No extras. Label: the value of the expression with precedence ``!`` > ``&`` > ``|``
    (so ``T|F&F`` is true); labels are the natural ones, not balanced.

    Nesting depth (the difficulty): the largest number of parentheses open at once while reading the
    string left to right (`nesting_depth`); ``!T&F`` has depth 0, ``!((T|F)&T)`` depth 2.

    Generation (seed 002): depth 0 is an atom — ``T``/``F`` (p .5, each equally likely), ``!T``/``!F``
    (p .25), or ``a op b`` with a, b ∈ {T, F} and op ∈ {&, |} (p .25). Depth d > 0 takes one child of
    depth d−1 and one of depth k ∈ {0..d−1} drawn with weight 2^(d−1−k), in random order, joined as
    ``(L op R)`` with op uniform over {&, |}, then prefixed by ``!`` with p .25. This has nesting depth
    exactly d by construction; an expression longer than 127 characters is thrown away and redrawn.
    Children are plain strings, so the precedence rule (not the generation tree) decides the label:
    ``(T|F&F)`` is read as T|(F&F).

    Text syntax (`from_text` / `to_text`): the expression itself, e.g. ``(T&!F)|F`` (whitespace ignored).
    """

    vocab = [PAD, CLS, *BOOLEAN_SYMBOLS]
    max_length = 128
    max_chars = 127
    train_difficulties = list(range(1, 9))
    test_difficulties = list(range(2, 15, 2))
    test_per_bucket = 500
    input_kind = "tokens"
    paper_width = {"dim": 256, "heads": 8, "ffn_dim": 1024}
    paper_train_size = 64_000
    eval_steps = (1, 2, 4, 6, 8, 10, 12, 16, 20, 24)
    difficulty_name = "nesting depth"
    answer_words = ("T", "F")
    aliases = {"logic": {}}  # the paper's and the DRT study's name for the task
    # Share of depth-d draws that fit in 127 characters: d 14 ≈ 39 %, 16 ≈ 16 %, 18 ≈ 4 %, 20 ≈ 0.3 %.
    max_difficulty = 18
    balanced = False
    _ids_of = {ch: j for j, ch in enumerate([PAD, CLS, *BOOLEAN_SYMBOLS])}

    def _check_difficulty(self, difficulty: int) -> None:
        if not 0 <= difficulty <= self.max_difficulty:
            raise TaskError(f"boolean: depth must be in 0..{self.max_difficulty}, got {difficulty}")

    # ---------------------------------------------------------------- generation

    @staticmethod
    def _atom(rng: np.random.Generator) -> str:
        # One draw of four uniforms per node is several times faster than four scalar draws.
        kind, a, op, b = rng.random(4).tolist()
        left = "T" if a < 0.5 else "F"
        if kind < 0.5:
            return left
        if kind < 0.75:
            return "!" + left
        return left + ("&" if op < 0.5 else "|") + ("T" if b < 0.5 else "F")

    @staticmethod
    @functools.cache
    def _other_depth_cdf(depth: int) -> list[float]:
        """Cumulative probabilities of the shallower child's depth k = 0..depth-1 (weight 2^(depth-1-k))."""
        weights = [2.0 ** (depth - 1 - k) for k in range(depth)]
        total = sum(weights)
        return list(itertools.accumulate(w / total for w in weights))

    def _expression(self, rng: np.random.Generator, depth: int) -> str:
        if depth == 0:
            return self._atom(rng)
        pick, order, op, negate = rng.random(4).tolist()
        other_depth = min(bisect.bisect_right(self._other_depth_cdf(depth), pick), depth - 1)
        deep, other = self._expression(rng, depth - 1), self._expression(rng, other_depth)
        left, right = (deep, other) if order < 0.5 else (other, deep)
        text = "(" + left + ("&" if op < 0.5 else "|") + right + ")"
        return "!" + text if negate < 0.25 else text

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> Row:
        while True:
            text = self._expression(rng, difficulty)
            if len(text) <= self.max_chars:
                return self._make_row(text, difficulty)

    def _make_row(self, text: str, difficulty: int) -> Row:
        ids = [self._ids_of[CLS]] + [self._ids_of[ch] for ch in text]
        value = _BooleanParser(text).parse()
        return Row(tokens=pad_ids(ids, self.max_length), label=int(value), difficulty=difficulty)

    # ---------------------------------------------------------------- reference solver and text

    def to_text(self, batch: ReasoningBatch, i: int) -> str:
        return "".join(self.vocab[t] for t in self._ids(batch, i)[1:])  # drop [CLS]

    def label_of(self, batch: ReasoningBatch, i: int) -> int:
        return int(evaluate_boolean_reference(self.to_text(batch, i)))

    def render(self, batch: ReasoningBatch, i: int) -> str:
        text = self.to_text(batch, i)
        value = "T" if batch.labels[i] == 1 else "F"
        return f"{text} = {value}  (depth {int(batch.difficulty[i])}, {len(text)} chars, label {int(batch.labels[i])})"

    def from_text(self, text: str) -> ReasoningBatch:
        """One row from an expression such as ``(T&!F)|F``; difficulty = its nesting depth."""
        expr = "".join(text.split())
        if not expr:
            raise TaskError("boolean: empty expression")
        for pos, ch in enumerate(expr):
            if ch not in BOOLEAN_SYMBOLS:
                raise TaskError(f"boolean: unknown symbol {ch!r} at position {pos} (allowed: T F & | ! ( ))")
        self._check_balance(expr)
        if len(expr) > self.max_chars:
            raise TaskError(f"boolean: expression has {len(expr)} characters, more than {self.max_chars}")
        return self._collate([self._make_row(expr, nesting_depth(expr))])

    @staticmethod
    def _check_balance(expr: str) -> None:
        depth = 0
        for pos, ch in enumerate(expr):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth < 0:
                raise TaskError(f"boolean: unbalanced parentheses, ')' at position {pos} closes nothing")
        if depth:
            raise TaskError(f"boolean: unbalanced parentheses, {depth} '(' never closed")


