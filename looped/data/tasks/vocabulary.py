"""The token vocabulary of the seed 003 tasks: 277 symbols, bytes 0..255 then 21 specials (BOS, EOS, PAD,
SEP, RESERVED_*), the task-text codec (`encode_task_text` / `decode_task_text`; not the 257-symbol byte codec
of looped.infer) and the helpers that turn token rows into a `SequenceBatch`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .base import SEQUENCE_PAD, SequenceBatch

# ---------------------------------------------------------------------------------------------------------------
# Vocabulary: bytes 0..255, then 21 special symbols.

NUM_BYTES = 256
VOCAB_SIZE = 277
BOS = 256  # first token of every row
EOS = 257  # ends a generated answer
PAD = SEQUENCE_PAD  # 258; fills rows up to the batch width; never scored
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
# Small helpers.


def encode_task_text(text: str) -> list[int]:
    """ASCII text as byte tokens."""
    return list(text.encode("ascii"))


def decode_task_token(token: int) -> str:
    """One token as text: printable ASCII as itself, specials as <NAME>, other bytes as \\xNN."""
    if token in _SPECIAL_NAMES:
        return f"<{_SPECIAL_NAMES[token]}>"
    if 32 <= token < 127:
        return chr(token)
    if 0 <= token < NUM_BYTES:
        return f"\\x{token:02x}"
    return f"<?{token}>"


def decode_task_text(tokens: Iterable[int]) -> str:
    """Tokens as one human-readable string (see `decode_task_token`)."""
    return "".join(decode_task_token(int(t)) for t in tokens)


def digit_tokens(digits: Iterable[int]) -> list[int]:
    return [ZERO + int(d) for d in digits]


def pick(rng: np.random.Generator, options: Sequence):
    """A uniform choice from a short sequence; rng.random() is much cheaper than rng.choice per call."""
    return options[int(rng.random() * len(options))]


def pad_rows(rows: Sequence[Sequence[int]], fill: int = PAD) -> np.ndarray:
    """List of token lists -> (n, max_len) int64 array padded with `fill`."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def next_token_batch(
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
    return to_batch(tokens, targets, mask, lengths, difficulty)


def to_batch(
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


def final_label_batch(symbols: np.ndarray, label: np.ndarray, length: int) -> SequenceBatch:
    """Rows BOS <symbols> '=' <label digit> EOS; `symbols` (n, length) are ASCII tokens, `label` 0..9."""
    n = symbols.shape[0]
    tokens = np.concatenate(
        [np.full((n, 1), BOS), symbols, np.full((n, 1), EQUALS), (label + ZERO)[:, None], np.full((n, 1), EOS)], axis=1
    ).astype(np.int64)
    width = tokens.shape[1]
    question = np.full(n, width - 3, dtype=np.int64)  # position of '='
    return next_token_batch(tokens, np.full(n, width, dtype=np.int64), question, question + 1, length)
