"""Algorithmic length-generalisation tasks of seed 003 (Recurrent Looped Transformer).

Six task settings, all byte-level token streams over a 277-symbol vocabulary (256 byte values + 21 specials):

  addition         reversed-digit addition, 1–8 digits per operand for training
  parity           parity of a bit string, 3–40 bits for training
  mod5_flat        flat +, −, × expression over digits 0..4 with precedence, odd lengths 3–39
  mod5_bracketed   bracketed expression trees over digits 0..4, lengths 3–40
  s5               running product of S5 permutations, 32 inputs for training
                   (variant "standard": inputs from all 120 permutations; "swaps": identity + 10 transpositions)

Every batch is a `SequenceBatch`: `tokens` starts with BOS, `targets[t]` is the token the model must predict at
position t (the next token, except for S5 where it is the running state, see `S5Task`), `loss_mask` marks the
scored positions, rows are padded with PAD. One call to `sample` uses one length for all rows.

Data seeds follow the paper (Appendix J.4): 20260914 / 20260915 / 20260916 for train / validation / test, and 42
for addition's training and validation data (its test pairs use the test seed, Appendix J.6). `fixed_set` draws a
deterministic, duplicate-free held-out set per (task, split, length); test sets exclude the validation rows of the
same length. `train_batch` draws step `k` of the shared, indexed training stream.

Pure-Python reference evaluators (`reference_*`) recompute every label from the rendered text, by a different code
path than the generators; the tests compare the two.
"""

from __future__ import annotations

import itertools
import operator
import re
import zlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
import torch

from .base import SequenceBatch, TaskError, get_task, register_task

# ---------------------------------------------------------------------------------------------------------------
# Vocabulary: bytes 0..255, then 21 special symbols.

NUM_BYTES = 256
VOCAB_SIZE = 277
BOS = 256  # first token of every row
EOS = 257  # ends a generated answer
PAD = 258  # fills rows up to the batch width; never scored
SEP = 259  # separator, unused by the tasks here (they use ASCII '=' as the query marker)
NUM_RESERVED = VOCAB_SIZE - 260
SPECIAL_TOKENS: dict[str, int] = {
    "BOS": BOS,
    "EOS": EOS,
    "PAD": PAD,
    "SEP": SEP,
    **{f"RESERVED_{k}": 260 + k for k in range(NUM_RESERVED)},  # RESERVED_0 = 260 ... RESERVED_16 = 276
}
_SPECIAL_NAMES = {token: name for name, token in SPECIAL_TOKENS.items()}

ZERO = ord("0")
PLUS, MINUS, TIMES, EQUALS = ord("+"), ord("-"), ord("*"), ord("=")
LPAREN, RPAREN, LBRACKET, RBRACKET, SPACE = ord("("), ord(")"), ord("["), ord("]"), ord(" ")

# ---------------------------------------------------------------------------------------------------------------
# Data seeds and held-out set sizes (paper Appendix J.1.1, J.4, J.6).

DATA_SEEDS: dict[str, int] = {"train": 20260914, "validation": 20260915, "test": 20260916}
ADDITION_DATA_SEED = 42
SPLITS = ("train", "validation", "test")
VALIDATION_ROWS_PER_LENGTH = 256  # formal tasks: 256 per validation length
TEST_ROWS_PER_LENGTH = 1024  # formal tasks: 1,024 per test length
ADDITION_VALIDATION_ROWS_PER_WIDTH = 32  # 8 widths x 32 = the paper's 256 mixed 1-8-digit validation pairs
ADDITION_TEST_ROWS_PER_WIDTH = 256


# ---------------------------------------------------------------------------------------------------------------
# Small helpers.


def encode_text(text: str) -> list[int]:
    """ASCII text as byte tokens."""
    return list(text.encode("ascii"))


def decode_token(token: int) -> str:
    """One token as text: printable ASCII as itself, specials as <NAME>, other bytes as \\xNN."""
    if token in _SPECIAL_NAMES:
        return f"<{_SPECIAL_NAMES[token]}>"
    if 32 <= token < 127:
        return chr(token)
    if 0 <= token < NUM_BYTES:
        return f"\\x{token:02x}"
    return f"<?{token}>"


def decode_text(tokens: Iterable[int]) -> str:
    """Tokens as one human-readable string (see `decode_token`)."""
    return "".join(decode_token(int(t)) for t in tokens)


def _digit_tokens(digits: Iterable[int]) -> list[int]:
    return [ZERO + int(d) for d in digits]


def _pick(rng: np.random.Generator, options: Sequence):
    """A uniform choice from a short sequence; rng.random() is much cheaper than rng.choice per call."""
    return options[int(rng.random() * len(options))]


def _pad_rows(rows: Sequence[Sequence[int]], fill: int = PAD) -> np.ndarray:
    """List of token lists -> (n, max_len) int64 array padded with `fill`."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _next_token_batch(
    tokens: np.ndarray,
    lengths: np.ndarray,
    first_scored: np.ndarray,
    stop_scored: np.ndarray,
    difficulty: int | np.ndarray,
) -> SequenceBatch:
    """Batch whose targets are the next tokens; positions first_scored <= t < stop_scored are scored.

    tokens: (n, width) PAD-padded full streams; the last real position (and padding) gets target PAD.
    """
    n, width = tokens.shape
    targets = np.full_like(tokens, PAD)
    targets[:, :-1] = tokens[:, 1:]
    position = np.arange(width)[None, :]
    targets[position >= (lengths[:, None] - 1)] = PAD
    mask = (position >= first_scored[:, None]) & (position < stop_scored[:, None])
    return _to_batch(tokens, targets, mask, lengths, difficulty)


def _to_batch(
    tokens: np.ndarray, targets: np.ndarray, mask: np.ndarray, lengths: np.ndarray, difficulty: int | np.ndarray
) -> SequenceBatch:
    """numpy arrays -> SequenceBatch; `difficulty` is one int for all rows or one per row."""
    n = tokens.shape[0]
    return SequenceBatch(
        tokens=torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64)),
        targets=torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64)),
        loss_mask=torch.from_numpy(np.ascontiguousarray(mask, dtype=bool)),
        lengths=torch.from_numpy(np.asarray(lengths, dtype=np.int64).reshape(n)),
        difficulty=torch.from_numpy(np.broadcast_to(np.asarray(difficulty, dtype=np.int64), (n,)).copy()),
    )


def select_rows(batch: SequenceBatch, rows: Sequence[int] | torch.Tensor) -> SequenceBatch:
    """The batch restricted to `rows` (in that order), with padding trimmed to the longest kept row."""
    index = torch.as_tensor(rows, dtype=torch.int64)
    width = int(batch.lengths[index].max()) if len(index) else batch.tokens.shape[1]
    return SequenceBatch(
        tokens=batch.tokens[index, :width],
        targets=batch.targets[index, :width],
        loss_mask=batch.loss_mask[index, :width],
        lengths=batch.lengths[index],
        difficulty=batch.difficulty[index],
    )


def concat_batches(batches: Sequence[SequenceBatch]) -> SequenceBatch:
    """Rows of several batches in order, padded to the widest."""
    width = max(b.tokens.shape[1] for b in batches)

    def padded(name: str, fill) -> torch.Tensor:
        parts = []
        for b in batches:
            part = getattr(b, name)
            extra = width - part.shape[1]
            parts.append(torch.nn.functional.pad(part, (0, extra), value=fill) if extra else part)
        return torch.cat(parts)

    return SequenceBatch(
        tokens=padded("tokens", PAD),
        targets=padded("targets", PAD),
        loss_mask=padded("loss_mask", False),
        lengths=torch.cat([b.lengths for b in batches]),
        difficulty=torch.cat([b.difficulty for b in batches]),
    )


# ---------------------------------------------------------------------------------------------------------------
# The common task interface.


class AlgorithmicTask:
    """Shared machinery: length checks, training-length draws, scoring, rendering, deduplication.

    Subclasses set the length attributes and implement `_generate(rng, n, difficulty) -> SequenceBatch`.
    """

    name: str = "?"  # set by @register_task
    min_length: int = 1
    max_length: int = 4096
    train_lengths: Sequence[int] = ()
    validation_lengths: tuple[int, ...] = ()
    test_lengths: tuple[int, ...] = ()
    validation_rows_per_length: int = VALIDATION_ROWS_PER_LENGTH
    test_rows_per_length: int = TEST_ROWS_PER_LENGTH
    primary_metric: str = "final_state_accuracy"  # the paper's headline number for this task
    chance_accuracy: float = 0.0  # uniform-prediction accuracy of the primary metric's label

    @property
    def data_key(self) -> str:
        """Names the data distribution (task + options); part of every fixed-set seed."""
        return self.name

    # -- lengths -------------------------------------------------------------------------------------------------

    def validate_length(self, difficulty: int) -> int:
        """`difficulty` as an int, or TaskError when the generator cannot produce that length."""
        try:
            length = operator.index(difficulty)
        except TypeError:
            raise TaskError(f"{self.name}: length must be an integer, got {difficulty!r}") from None
        if not self.min_length <= length <= self.max_length:
            raise TaskError(
                f"{self.name}: length {length} outside the supported range {self.min_length}..{self.max_length}"
            )
        return length

    def draw_train_length(self, rng: np.random.Generator) -> int:
        """One training length, uniform over `train_lengths`."""
        return int(self.train_lengths[int(rng.integers(len(self.train_lengths)))])

    # -- sampling ------------------------------------------------------------------------------------------------

    def sample(self, rng: np.random.Generator, n: int, difficulty: int) -> SequenceBatch:
        """`n` rows of length parameter `difficulty`, deterministic given `rng`'s state."""
        length = self.validate_length(difficulty)
        if operator.index(n) < 0:
            raise TaskError(f"{self.name}: number of rows must be >= 0, got {n}")
        return self._generate(rng, n, length)

    def sample_train(self, rng: np.random.Generator, n: int) -> SequenceBatch:
        """A same-length training batch: one length drawn uniformly from `train_lengths` for all rows."""
        return self.sample(rng, n, self.draw_train_length(rng))

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        raise NotImplementedError

    # -- scoring -------------------------------------------------------------------------------------------------

    def score(self, batch: SequenceBatch, predictions: torch.Tensor) -> dict[str, float]:
        """Accuracies of argmax `predictions` (n, width) — or logits (n, width, vocab) — against the targets.

        final_state_accuracy   fraction of rows whose last scored position is right
        prefix_token_accuracy  fraction of all scored positions that are right (pooled over rows)
        sequence_accuracy      fraction of rows with every scored position right
        sequences, scored_tokens  the denominators, so callers can pool several batches exactly
        """
        if len(batch) == 0:
            raise TaskError(f"{self.name}: cannot score an empty batch")
        if predictions.dim() == 3:
            predictions = predictions.argmax(-1)
        if tuple(predictions.shape) != tuple(batch.targets.shape):
            raise TaskError(
                f"{self.name}: predictions of shape {tuple(predictions.shape)} do not match "
                f"targets of shape {tuple(batch.targets.shape)}"
            )
        mask = batch.loss_mask
        correct = (predictions.to(batch.targets.device) == batch.targets) & mask
        scored_per_row = mask.sum(1)
        last = mask.shape[1] - 1 - mask.flip(1).to(torch.int64).argmax(1)  # last scored position of each row
        final = correct[torch.arange(len(batch)), last]
        return {
            "final_state_accuracy": final.double().mean().item(),
            "prefix_token_accuracy": int(correct.sum()) / int(mask.sum()),
            "sequence_accuracy": (correct.sum(1) == scored_per_row).double().mean().item(),
            "sequences": float(len(batch)),
            "scored_tokens": float(mask.sum()),
        }

    # -- display -------------------------------------------------------------------------------------------------

    def render(self, batch: SequenceBatch, i: int) -> str:
        """Row `i` as text, followed by the scored targets."""
        length = int(batch.lengths[i])
        tokens = batch.tokens[i, :length].tolist()
        scored = batch.targets[i][batch.loss_mask[i]].tolist()
        text = self._render_tokens(tokens)
        return f"{text}\n  scored targets: {self._render_tokens(scored)}"

    def _render_tokens(self, tokens: Sequence[int]) -> str:
        return decode_text(tokens)

    # -- deduplication -------------------------------------------------------------------------------------------

    def row_key(self, batch: SequenceBatch, i: int) -> bytes:
        """Identity of row `i` for deduplication: its real tokens."""
        length = int(batch.lengths[i])
        return batch.tokens[i, :length].numpy().astype("<u2").tobytes()

    def keys(self, batch: SequenceBatch) -> list[bytes]:
        return [self.row_key(batch, i) for i in range(len(batch))]

    def dedup(self, batch: SequenceBatch, exclude: set[bytes] | frozenset[bytes] = frozenset()) -> SequenceBatch:
        """The batch without rows whose key is in `exclude` or repeats an earlier row of the batch."""
        seen = set(exclude)
        keep = []
        for i, key in enumerate(self.keys(batch)):
            if key not in seen:
                seen.add(key)
                keep.append(i)
        return select_rows(batch, keep)


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
        a, b = _addition_operands(decode_text(batch.tokens[i, : int(batch.lengths[i])].tolist()))
        low, high = sorted((a, b))
        return f"{low}+{high}".encode()


def _reversed_digits(value: int) -> list[int]:
    return [int(c) for c in reversed(str(value))]


def _addition_row(a_rev: Sequence[int], b_rev: Sequence[int], c_rev: Sequence[int]) -> tuple[list[int], int]:
    """Tokens BOS "[a_rev] + [b_rev] =" " [c_rev]" EOS, and the position of '=' (the first scored position)."""
    prompt = [BOS, LBRACKET, *_digit_tokens(a_rev), *encode_text("] + ["), *_digit_tokens(b_rev), *encode_text("] =")]
    return prompt + [SPACE, LBRACKET, *_digit_tokens(c_rev), RBRACKET, EOS], len(prompt) - 1


def _addition_batch(rows: Sequence[tuple[list[int], int]], difficulty: np.ndarray) -> SequenceBatch:
    """Score from '=' (which predicts the answer's leading space) through the ']' that predicts EOS."""
    lengths = np.array([len(tokens) for tokens, _ in rows], dtype=np.int64)
    first = np.array([equals for _, equals in rows], dtype=np.int64)
    return _next_token_batch(_pad_rows([tokens for tokens, _ in rows]), lengths, first, lengths - 1, difficulty)


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
        return _next_token_batch(tokens.astype(np.int64), np.full(n, length + 3, dtype=np.int64), last_bit,
                                 last_bit + 1, length)


def _final_label_batch(symbols: np.ndarray, label: np.ndarray, length: int) -> SequenceBatch:
    """Rows BOS <symbols> '=' <label digit> EOS; `symbols` (n, length) are ASCII tokens, `label` 0..9."""
    n = symbols.shape[0]
    tokens = np.concatenate(
        [np.full((n, 1), BOS), symbols, np.full((n, 1), EQUALS), (label + ZERO)[:, None], np.full((n, 1), EOS)], axis=1
    ).astype(np.int64)
    width = tokens.shape[1]
    question = np.full(n, width - 3, dtype=np.int64)  # position of '='
    return _next_token_batch(tokens, np.full(n, width, dtype=np.int64), question, question + 1, length)


def reference_parity(bits: str) -> str:
    """'1' when the bit string has an odd number of ones, else '0'."""
    return "1" if bits.count("1") % 2 else "0"


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
        return _final_label_batch(symbols, _evaluate_flat(digits, ops), length)


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
    left_length = _pick(rng, _operation_splits(length))
    left, left_value = _sample_term(rng, left_length)
    op = _pick(rng, _OPERATORS)
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
        return _final_label_batch(body, np.array(values, dtype=np.int64), length)


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


# ---------------------------------------------------------------------------------------------------------------
# S5 permutation tracking.

PERMUTATIONS: tuple[tuple[int, ...], ...] = tuple(itertools.permutations(range(5)))  # lexicographic; [0] = identity
PERMUTATION_TOKEN_BASE = 128  # permutation k <-> byte 128 + k (bytes 128..247: outside ASCII, one token each)
_PERMUTATION_INDEX = {p: k for k, p in enumerate(PERMUTATIONS)}
IDENTITY = 0
TRANSPOSITIONS: tuple[int, ...] = tuple(
    _PERMUTATION_INDEX[tuple(j if j not in (a, b) else (b if j == a else a) for j in range(5))]
    for a, b in itertools.combinations(range(5), 2)
)


def _composition_table() -> np.ndarray:
    """table[x, g] = index of "x, then g": (g ∘ x)(j) = g[x[j]]."""
    table = np.empty((len(PERMUTATIONS), len(PERMUTATIONS)), dtype=np.int64)
    for x, px in enumerate(PERMUTATIONS):
        for g, pg in enumerate(PERMUTATIONS):
            table[x, g] = _PERMUTATION_INDEX[tuple(pg[j] for j in px)]
    return table


_THEN = _composition_table()


def permutation_token(permutation: Sequence[int]) -> int:
    """The token of a permutation of 0..4 given in one-line notation (p[j] is the image of j)."""
    return PERMUTATION_TOKEN_BASE + _PERMUTATION_INDEX[tuple(permutation)]


def token_permutation(token: int) -> tuple[int, ...]:
    """Inverse of `permutation_token`."""
    index = int(token) - PERMUTATION_TOKEN_BASE
    if not 0 <= index < len(PERMUTATIONS):
        raise TaskError(f"s5: token {token} is not a permutation token (128..247)")
    return PERMUTATIONS[index]


@register_task("s5")
class S5Task(AlgorithmicTask):
    """Track the running product of a sequence of permutations of {0,…,4}; every prefix state is scored.

    Tokens: each of the 120 permutations is one byte token, 128 + its rank in lexicographic order of one-line
    notation (identity 01234 = 128, …, 43210 = 247). Inputs and states share this alphabet (a state is a group
    element too); bytes 128..247 are not ASCII, so they never clash with the other tasks' symbols.

    Row (a transducer, one target per input): tokens BOS g_1 … g_n (no EOS); targets[t] = s_t for t = 1..n,
    where s_t = g_t ∘ … ∘ g_1 is "apply g_1 first, then g_2, …": s_t[j] = g_t[s_{t−1}[j]], s_0 = identity.
    The BOS position is not scored; positions 1..n are. The targets are states, not the next input — feeding
    states back as inputs (BOS g_1 s_1 g_2 s_2 …) would let a model copy s_{t−1} and solve each step locally,
    while the paper reports 8,192 scored prefix states for 256 sequences of 32 inputs, i.e. exactly one scored
    state per input.

    Variants: "standard" draws each input uniformly from all 120 permutations; "swaps" uniformly from the identity
    and the 10 transpositions (11 inputs). Length n = number of inputs; training uses n = 32 only ("S5 trains on
    32 operations"); validation 32; test 32, 48, 64, 96, 128, 192, 256, 512.

    Example, swaps, n = 3, inputs (0 1), identity, (1 2) — rendered in one-line notation:
        tokens : <BOS> 10234 01234 02134        (bytes 152, 128, 134)
        targets:   –   10234 10234 20134        (scored at positions 1, 2, 3)
    s_3 = (1 2) ∘ (0 1): 0 → 1 → 2, 1 → 0 → 0, 2 → 2 → 1, so s_3 = 20134.
    """

    train_lengths = (32,)
    validation_lengths = (32,)
    test_lengths = (32, 48, 64, 96, 128, 192, 256, 512)
    chance_accuracy = 1 / 120

    def __init__(self, variant: Literal["standard", "swaps"] = "standard") -> None:
        if variant not in ("standard", "swaps"):
            raise TaskError(f"s5: unknown variant {variant!r} (known: standard, swaps)")
        self.variant = variant
        self.inputs = np.arange(len(PERMUTATIONS)) if variant == "standard" else np.array((IDENTITY, *TRANSPOSITIONS))

    @property
    def data_key(self) -> str:
        return f"{self.name}-{self.variant}"

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        inputs = self.inputs[rng.integers(0, len(self.inputs), size=(n, length))]
        states = np.empty_like(inputs)
        state = np.full(n, IDENTITY, dtype=np.int64)
        for t in range(length):
            state = _THEN[state, inputs[:, t]]
            states[:, t] = state
        tokens = np.concatenate([np.full((n, 1), BOS), inputs + PERMUTATION_TOKEN_BASE], axis=1)
        targets = np.concatenate([np.full((n, 1), PAD), states + PERMUTATION_TOKEN_BASE], axis=1)
        mask = np.ones_like(tokens, dtype=bool)
        mask[:, 0] = False
        return _to_batch(tokens, targets, mask, np.full(n, length + 1), length)

    def _render_tokens(self, tokens: Sequence[int]) -> str:
        words = []
        for token in tokens:
            index = int(token) - PERMUTATION_TOKEN_BASE
            is_permutation = 0 <= index < len(PERMUTATIONS)
            words.append("".join(map(str, PERMUTATIONS[index])) if is_permutation else decode_token(int(token)))
        return " ".join(words)


def reference_s5_states(inputs: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Running products of permutations in one-line notation, applying the first input first, with tuples."""
    state = tuple(range(5))
    states = []
    for g in inputs:
        state = tuple(g[state[j]] for j in range(5))
        states.append(state)
    return states


# ---------------------------------------------------------------------------------------------------------------
# Fixed data: seeds, held-out sets, the indexed training stream.

TaskLike = AlgorithmicTask | str


def _resolve(task: TaskLike) -> AlgorithmicTask:
    if isinstance(task, AlgorithmicTask):
        return task
    resolved = get_task(task)
    if not isinstance(resolved, AlgorithmicTask):
        raise TaskError(f"{task!r} is not an algorithmic task")
    return resolved


def split_seed(task: TaskLike, split: str) -> int:
    """The paper's data seed of a split: 20260914/5/6, except addition's train and validation data (42)."""
    if split not in DATA_SEEDS:
        raise TaskError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    if _resolve(task).name == "addition" and split != "test":
        return ADDITION_DATA_SEED
    return DATA_SEEDS[split]


def _stream_rng(task: AlgorithmicTask, split: str, index: int, purpose: str) -> np.random.Generator:
    """A generator keyed by (split seed, task + options + split + purpose, index): independent streams for
    every combination, stable across Python runs (crc32, not hash())."""
    label = zlib.crc32(f"{task.data_key}/{split}/{purpose}".encode())
    return np.random.default_rng(np.random.SeedSequence([split_seed(task, split), label, index]))


def fixed_set(
    task: TaskLike, split: str, difficulty: int, n: int, *, exclude: Iterable[bytes] = ()
) -> SequenceBatch:
    """`n` distinct rows of one length, drawn deterministically from the split's seed and the length.

    Rows are unique under `task.row_key`; rows whose key is in `exclude` are skipped. A test set also skips
    the validation rows of the same length (when that length is a validation length), so the two never
    share an example. Raises TaskError when the length has fewer than `n` distinct admissible rows.
    """
    task = _resolve(task)
    length = task.validate_length(difficulty)
    excluded = set(exclude)
    if split == "test" and length in task.validation_lengths:
        excluded |= set(task.keys(fixed_set(task, "validation", length, task.validation_rows_per_length)))
    rng = _stream_rng(task, split, length, "fixed")
    return _draw(task, rng, n, length, excluded, unique=True)


def validation_sets(task: TaskLike) -> dict[int, SequenceBatch]:
    """The paper's validation sets: {length: batch} over `validation_lengths`."""
    task = _resolve(task)
    return {d: fixed_set(task, "validation", d, task.validation_rows_per_length) for d in task.validation_lengths}


def test_sets(task: TaskLike, lengths: Iterable[int] | None = None, n: int | None = None) -> dict[int, SequenceBatch]:
    """Test sets {length: batch}; defaults are the paper's grid and sizes (1,024 rows, addition 256)."""
    task = _resolve(task)
    lengths = task.test_lengths if lengths is None else lengths
    return {d: fixed_set(task, "test", d, n or task.test_rows_per_length) for d in lengths}


test_sets.__test__ = False  # not a pytest test despite its name


def heldout_keys(task: TaskLike, difficulty: int, splits: Sequence[str] = ("validation", "test")) -> set[bytes]:
    """Keys of the default rows of one length in `splits`, for filtering training data against them."""
    task = _resolve(task)
    keys: set[bytes] = set()
    if "validation" in splits and difficulty in task.validation_lengths:
        keys |= set(task.keys(fixed_set(task, "validation", difficulty, task.validation_rows_per_length)))
    if "test" in splits and difficulty in task.test_lengths:
        keys |= set(task.keys(fixed_set(task, "test", difficulty, task.test_rows_per_length)))
    return keys


def train_batch(task: TaskLike, step: int, n: int, *, exclude: Iterable[bytes] = ()) -> SequenceBatch:
    """Batch `step` of the shared training stream: one training length, `n` rows, rows in `exclude` redrawn.

    The same (task, step, n) always gives the same batch, so runs that share the seed share the stream and a
    resumed run continues it exactly. Duplicates within a batch are allowed (short lengths have few rows).
    """
    task = _resolve(task)
    rng = _stream_rng(task, "train", operator.index(step), "stream")
    return _draw(task, rng, n, task.draw_train_length(rng), set(exclude), unique=False)


def replace_excluded(task: TaskLike, batch: SequenceBatch, length: int, rng: np.random.Generator,
                     exclude: set[bytes] | frozenset[bytes]) -> SequenceBatch:
    """`batch` (rows of one `length`) with every row whose key is in `exclude` replaced by a fresh admissible row
    drawn from `rng`. A batch with no such row comes back unchanged (the same object), so filtering a training
    stream against held-out rows leaves every batch that never met one exactly as it was."""
    if not exclude:  # most training lengths have no held-out rows: skip hashing the batch
        return batch
    task = _resolve(task)
    hits = {i for i, key in enumerate(task.keys(batch)) if key in exclude}
    if not hits:
        return batch
    kept = select_rows(batch, [i for i in range(len(batch)) if i not in hits])
    return concat_batches([kept, _draw(task, rng, len(hits), length, set(exclude), unique=False)])


MAX_BARREN_DRAWS = 20_000  # consecutive candidates without a new admissible row before a request is refused


def _draw(
    task: AlgorithmicTask, rng: np.random.Generator, n: int, length: int, exclude: set[bytes], *, unique: bool
) -> SequenceBatch:
    """Sample rounds until `n` admissible rows are collected.

    Small spaces (a few bits, one-digit operands) can run out of admissible rows; the request is refused with
    TaskError once MAX_BARREN_DRAWS consecutive candidates brought nothing new. Rounds double while they come
    back empty, so collecting the last few rows of a nearly exhausted space stays quick.
    """
    if not exclude and not unique:
        return task.sample(rng, n, length)
    kept: list[SequenceBatch] = []
    seen = set(exclude)
    have, barren_draws, round_size = 0, 0, 0
    while have < n:
        round_size = 2 * (n - have) + 16 if barren_draws == 0 else min(2 * round_size, 4096)
        candidates = task.sample(rng, round_size, length)
        keep = []
        for i, key in enumerate(task.keys(candidates)):
            if key in seen or have + len(keep) == n:
                continue
            keep.append(i)
            if unique:
                seen.add(key)
        barren_draws = 0 if keep else barren_draws + round_size
        if barren_draws >= MAX_BARREN_DRAWS:
            raise TaskError(
                f"{task.name}: only {have} distinct admissible rows found at length {length}; {n} were requested"
            )
        if keep:
            kept.append(select_rows(candidates, keep))
            have += len(keep)
    return concat_batches(kept) if kept else task.sample(rng, 0, length)


__all__ = [
    "ADDITION_DATA_SEED", "BOS", "DATA_SEEDS", "EOS", "PAD", "PERMUTATIONS", "PERMUTATION_TOKEN_BASE", "SEP",
    "SPECIAL_TOKENS", "VOCAB_SIZE", "AdditionTask", "AlgorithmicTask", "Mod5BracketedTask", "Mod5FlatTask",
    "ParityTask", "S5Task", "concat_batches", "decode_text", "decode_token", "encode_text", "fixed_set",
    "heldout_keys", "permutation_token", "reference_addition_answer", "reference_mod5", "reference_parity",
    "reference_s5_states", "replace_excluded", "select_rows", "split_seed", "test_sets", "token_permutation", "train_batch",
    "validation_sets",
]
