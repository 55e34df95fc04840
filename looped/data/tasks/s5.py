"""Seed 003 task `s5`: tracking a running product of S5 permutations (variants standard / swaps)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .algorithmic import AlgorithmicTask
from .base import SequenceBatch, TaskError, register_task
from .vocabulary import BOS, PAD, decode_task_token, to_batch

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
    # The RLT study's recipe names for the two variants (looped reproduce rlt --tasks).
    aliases = {"s5_swaps": {"variant": "swaps"}, "s5_standard": {"variant": "standard"}}

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
        return to_batch(tokens, targets, mask, np.full(n, length + 1), length)

    def _render_tokens(self, tokens: Sequence[int]) -> str:
        words = []
        for token in tokens:
            index = int(token) - PERMUTATION_TOKEN_BASE
            is_permutation = 0 <= index < len(PERMUTATIONS)
            words.append("".join(map(str, PERMUTATIONS[index])) if is_permutation else decode_task_token(int(token)))
        return " ".join(words)


def reference_s5_states(inputs: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Running products of permutations in one-line notation, applying the first input first, with tuples."""
    state = tuple(range(5))
    states = []
    for g in inputs:
        state = tuple(g[state[j]] for j in range(5))
        states.append(state)
    return states
