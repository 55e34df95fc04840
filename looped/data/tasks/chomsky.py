"""The external length-generalisation suite: the fifteen transduction tasks of Delétang et al., "Neural Networks
and the Chomsky Hierarchy" (ICLR 2023, arXiv 2207.02098), as `sequence` tasks.

    regular (R)                      even_pairs, parity_check, cycle_navigation, modular_arithmetic_simple
    deterministic context-free (DCF) stack_manipulation, reverse_string, modular_arithmetic, solve_equation
    context-sensitive (CS)           duplicate_string, missing_duplicate, odds_first, binary_addition,
                                     binary_multiplication, compute_sqrt, bucket_sort   (in chomsky_cs.py)

Row format (the paper's, Section 4 and Appendix A.3: an input x, then |y| empty tokens ∅ from which the model
must emit y; outputs are never fed back):

    tokens : BOS x_1 … x_n  ∅ ∅ … ∅          (∅ = the SEP symbol, one per output token)
    targets:  –   –  …  –  y_1 y_2 … y_m       scored: exactly the m ∅ positions

A causal model therefore reads the whole input before its first scored position, as the paper's encoder does;
the number of ∅ tokens tells it |y| (the paper's setup too, except where its output is padded to a fixed length:
binary_multiplication). Length n is the input length the paper samples: train on n uniform in 1..40 (from the
shortest length a task has rows for), test above 40. The paper averages over every n in 41..500; our grid is 50,
100, 200, 300, 500 (`test_lengths`), averaged with equal weight (`looped lengths` reports that mean as `score`).
The headline metric is per-token accuracy on the outputs (`prefix_token_accuracy`: scored positions pooled over
the rows of a length; the paper averages each row's share first, which differs only where output lengths vary
within a length: stack_manipulation, binary_addition and binary_multiplication).

Symbols: binary strings are ASCII 'a'/'b' (the paper's alphabet), numbers and bits ASCII digits; expressions use
+ - * ( ) and, for solve_equation, x and =; missing_duplicate hides its symbol as '?' and pads with '_'. Each
task's class docstring gives its input, output, chance accuracy (uniform guessing over its output alphabet) and
an example. The six tasks added last (modular_arithmetic, solve_equation, missing_duplicate, odds_first,
binary_multiplication, compute_sqrt) follow the sampling of the paper's released generators
(github.com/google-deepmind/neural_networks_chomsky_hierarchy, tasks/dcf and tasks/cs; the experiments' task
table there builds modular_arithmetic with multiplication); each docstring says where it departs from them. The
answers here are computed by vectorised or list code; chomsky_reference.py recomputes every one from the
rendered text by a different method, and the tests compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .algorithmic import AlgorithmicTask
from .base import SequenceBatch, register_task
from .vocabulary import BOS, EOS, PAD, SEP, decode_task_text, pad_rows, to_batch

QUERY = SEP  # the paper's empty token ∅: one per output token, after the input
A, B = ord("a"), ord("b")
ZERO = ord("0")
POP, PUSH_A, PUSH_B = ord("-"), ord("A"), ord("B")  # stack_manipulation's actions
PLUS, MINUS, TIMES = ord("+"), ord("-"), ord("*")
LPAREN, RPAREN, UNKNOWN, EQUALS = ord("("), ord(")"), ord("x"), ord("=")  # the bracketed tasks' other symbols

TRAIN_LENGTHS = range(1, 41)  # "ℓ ~ U(1, N), N = 40"
TEST_LENGTHS = (50, 100, 200, 300, 500)  # a grid inside the paper's U(41, 500)
SUITE_ROWS_PER_LENGTH = 256  # rows per validation / test length (a duplicate_string row at n = 500 has 1,501 tokens)


class ChomskyTask(AlgorithmicTask):
    """Shared row building: subclasses implement `_instances(rng, n, length) -> (inputs, outputs)`, token lists
    (or 2-D arrays when every row of the call has the same width)."""

    level: str = "?"  # R, DCF or CS: the paper's placement of the task
    paper_name: str = "?"  # the task's name in the paper's Table 2
    train_lengths = TRAIN_LENGTHS
    validation_lengths = (30, 40)
    test_lengths = TEST_LENGTHS
    validation_rows_per_length = SUITE_ROWS_PER_LENGTH
    test_rows_per_length = SUITE_ROWS_PER_LENGTH
    primary_metric = "prefix_token_accuracy"

    def _generate(self, rng: np.random.Generator, n: int, length: int) -> SequenceBatch:
        inputs, outputs = self._instances(rng, n, length)
        return transduction_batch(inputs, outputs, length)

    def _instances(self, rng: np.random.Generator, n: int, length: int):
        raise NotImplementedError

    def render(self, batch: SequenceBatch, i: int) -> str:
        """The input, how many ∅ follow it, and the scored outputs (a row of ∅ printed in full is unreadable)."""
        real = batch.tokens[i, : int(batch.lengths[i])]
        queries = int((real == QUERY).sum())
        inputs = real[1: len(real) - queries].tolist()
        outputs = batch.targets[i][batch.loss_mask[i]].tolist()
        return f"<BOS>{decode_task_text(inputs)}<SEP>×{queries}\n  scored targets: {decode_task_text(outputs)}"


def transduction_batch(inputs: Sequence[Sequence[int]] | np.ndarray, outputs: Sequence[Sequence[int]] | np.ndarray,
                       length: int) -> SequenceBatch:
    """Rows BOS x ∅^|y| with targets y at the ∅ positions (see the module docstring)."""
    n = len(inputs)
    if isinstance(inputs, np.ndarray) and isinstance(outputs, np.ndarray):  # one width for all rows: no Python loop
        width_in, width_out = inputs.shape[1], outputs.shape[1]
        tokens = np.concatenate([np.full((n, 1), BOS), inputs, np.full((n, width_out), QUERY)], axis=1)
        targets = np.concatenate([np.full((n, 1 + width_in), PAD), outputs], axis=1)
        mask = np.zeros(tokens.shape, dtype=bool)
        mask[:, 1 + width_in:] = True
        return to_batch(tokens, targets, mask, np.full(n, tokens.shape[1]), length)
    rows = [[BOS, *map(int, x), *([QUERY] * len(y))] for x, y in zip(inputs, outputs)]
    tokens = pad_rows(rows)
    targets = np.full_like(tokens, PAD)
    mask = np.zeros(tokens.shape, dtype=bool)
    for i, (x, y) in enumerate(zip(inputs, outputs)):
        start = 1 + len(x)
        targets[i, start: start + len(y)] = y
        mask[i, start: start + len(y)] = True
    return to_batch(tokens, targets, mask, np.array([len(r) for r in rows]), length)


def letters(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    """(n, length) uniform 'a'/'b' tokens."""
    return rng.integers(0, 2, size=(n, length)) + A


# ---------------------------------------------------------------------------------------------------------------
# Regular tasks.


@register_task("even_pairs")
class EvenPairsTask(ChomskyTask):
    """Is the number of 'ab' and 'ba' pairs in a string over {a, b} even? Output 'b' when even, 'a' when odd
    (the paper's arbitrary choice). Equivalent to "first symbol = last symbol". One scored token; chance 1/2.

    Example, n = 5: x = aabba (one ab, one ba: even) → y = b:   <BOS>aabba<SEP> → b
    """

    level, paper_name = "R", "Even Pairs"
    chance_accuracy = 0.5

    def _instances(self, rng, n, length):
        x = letters(rng, n, length)
        changes = (x[:, 1:] != x[:, :-1]).sum(1)  # every change of letter is one ab or one ba
        return x, np.where(changes % 2 == 0, B, A)[:, None]


@register_task("parity_check")
class ParityCheckTask(ChomskyTask):
    """Is the number of 'b's in a string over {a, b} even? Output 'b' when even, 'a' when odd. One scored token;
    chance 1/2. (The seed-003 task `parity` is another format: bits, answer at the last bit.)

    Example, n = 6: x = aaabba (two b's) → y = b
    """

    level, paper_name = "R", "Parity Check"
    chance_accuracy = 0.5

    def _instances(self, rng, n, length):
        x = letters(rng, n, length)
        odd = (x == B).sum(1) % 2
        return x, np.where(odd == 0, B, A)[:, None]


@register_task("cycle_navigation")
class CycleNavigationTask(ChomskyTask):
    """Walk a cycle of 5 positions from 0: each input digit is a move, '0' stay, '1' one forward, '2' one back;
    output the final position as one digit '0'..'4'. One scored token; chance 1/5.

    Example, n = 6: x = 010211 → 0+0+1+0−1+1+1 = 2 → y = 2
    """

    level, paper_name = "R", "Cycle Navigation"
    chance_accuracy = 0.2

    def _instances(self, rng, n, length):
        moves = rng.integers(0, 3, size=(n, length))
        steps = np.array([0, 1, -1])[moves]
        return moves + ZERO, (steps.sum(1) % 5 + ZERO)[:, None]


@register_task("modular_arithmetic_simple")
class ModularArithmeticSimpleTask(ChomskyTask):
    """A flat expression d op d op … d over digits 0..4 and + − *, evaluated left to right modulo 5 (the paper's
    5-state machine whose state is the running result; the seed-003 task mod5_flat applies precedence instead).
    Output one digit; chance 1/5. An expression has odd length, so an even n gives n + 1 symbols (the paper's rule).

    Example, n = 5: x = 1+2-4 → ((1 + 2) − 4) mod 5 = 4 → y = 4
    """

    level, paper_name = "R", "Modular Arithmetic (Simple)"
    chance_accuracy = 0.2
    OPERATORS = np.array([PLUS, MINUS, TIMES])

    def _instances(self, rng, n, length):
        width = length if length % 2 else length + 1
        digits = rng.integers(0, 5, size=(n, (width + 1) // 2))
        ops = rng.integers(0, 3, size=(n, width // 2))
        value = digits[:, 0].copy()
        for k in range(ops.shape[1]):  # ops 0, 1, 2 = +, −, *
            operand = digits[:, k + 1]
            value = np.select([ops[:, k] == 0, ops[:, k] == 1], [value + operand, value - operand],
                              value * operand) % 5
        x = np.empty((n, width), dtype=np.int64)
        x[:, 0::2] = digits + ZERO
        x[:, 1::2] = self.OPERATORS[ops]
        return x, (value + ZERO)[:, None]


# ---------------------------------------------------------------------------------------------------------------
# Deterministic context-free tasks.


@register_task("stack_manipulation")
class StackManipulationTask(ChomskyTask):
    """Run stack actions on a stack and output what is left, top first.

    Input: the stack bottom-to-top as 'a'/'b' (k symbols, k uniform in 1..n), then n − k actions, each uniform
    over '-' pop, 'A' push a, 'B' push b; a pop on an empty stack does nothing. Output: the final stack top to
    bottom, then EOS (so an emptied stack still has one scored token, and the end of the stack is predicted too).
    Scored: every output token; chance 1/3 (a, b, EOS).

    Example, n = 8: x = abbaa-A- (stack abbaa, pop, push a, pop) → stack abba → y = abba<EOS>
    """

    level, paper_name = "DCF", "Stack Manipulation"
    chance_accuracy = 1 / 3

    def _instances(self, rng, n, length):
        inputs, outputs = [], []
        for _ in range(n):
            k = int(rng.integers(1, length + 1))
            stack = list(letters(rng, 1, k)[0])
            actions = np.array([POP, PUSH_A, PUSH_B])[rng.integers(0, 3, size=length - k)]
            inputs.append(stack + list(actions))
            for action in actions:
                if action != POP:
                    stack.append(A if action == PUSH_A else B)
                elif stack:
                    stack.pop()
            outputs.append(stack[::-1] + [EOS])
        return inputs, outputs


@register_task("reverse_string")
class ReverseStringTask(ChomskyTask):
    """Output a string over {a, b} reversed. n scored tokens; chance 1/2.

    Example, n = 5: x = aabba → y = abbaa
    """

    level, paper_name = "DCF", "Reverse String"
    chance_accuracy = 0.5

    def _instances(self, rng, n, length):
        x = letters(rng, n, length)
        return x, x[:, ::-1]



@register_task("modular_arithmetic")
class ModularArithmeticTask(ChomskyTask):
    """Evaluate a bracketed expression over the digits 0..4 and + − * modulo 5 (the paper's DCF "Modular
    Arithmetic"; modular_arithmetic_simple is its flat, regular sibling). One scored digit; chance 1/5. The
    released generator offers + − only by default; its experiments' task table switches * on, as here.

    Input: exactly n symbols drawn by `bracket_expression`: n = 1..4 give d, -d, (d), (-d); a longer one is
    (L op R) with |L| uniform in 1..n−4 and op uniform over + − *. A '-' first, after '(' or after an operator
    negates the one digit that follows it; anywhere else it subtracts.

    Example, n = 10: x = ((1-4)*-2) → ((1 − 4) · (−2)) mod 5 = 6 mod 5 = 1 → y = 1
    """

    level, paper_name = "DCF", "Modular Arithmetic"
    chance_accuracy = 0.2

    def _instances(self, rng, n, length):
        rows = [bracket_expression(rng, length, (PLUS, MINUS, TIMES)) for _ in range(n)]
        inputs = np.array([tokens for tokens, _ in rows], dtype=np.int64).reshape(n, length)
        return inputs, np.array([ZERO + value for _, value in rows], dtype=np.int64).reshape(n, 1)


@register_task("solve_equation")
class SolveEquationTask(ChomskyTask):
    """Solve an equation modulo 5 for its unknown x; output x as one digit 0..4. One scored digit; chance 1/5.

    Input (n >= 3 symbols): a `bracket_expression` of n − 2 symbols over + and − only (no *, so x's coefficient
    is ±1 and the solution unique), one of its digits replaced by 'x', then '=' and the expression's value. The
    digit replaced is the first at or after a uniformly drawn position, wrapping around to the start: the
    released generator's rule, which favours digits that follow a run of brackets and operators. Lengths 1 and
    2 hold no equation (the released generator fills them with zeros), so training draws n uniform in 3..40.

    Example, n = 12: x = ((-x)+(4))=1 → −x + 4 ≡ 1 (mod 5) → x = 3 → y = 3
    """

    level, paper_name = "DCF", "Solve Equation"
    chance_accuracy = 0.2
    min_length = 3
    train_lengths = range(3, 41)

    def _instances(self, rng, n, length):
        inputs = np.empty((n, length), dtype=np.int64)
        solutions = np.empty((n, 1), dtype=np.int64)
        for i in range(n):
            tokens, value = bracket_expression(rng, length - 2, (PLUS, MINUS))
            start = int(rng.integers(len(tokens)))
            hidden = next(k % len(tokens) for k in range(start, start + len(tokens))
                          if ZERO <= tokens[k % len(tokens)] < ZERO + 5)
            solutions[i, 0], tokens[hidden] = tokens[hidden], UNKNOWN
            inputs[i] = tokens + [EQUALS, ZERO + value]
        return inputs, solutions


def bracket_expression(rng: np.random.Generator, length: int, operators: Sequence[int]) -> tuple[list[int], int]:
    """An expression of exactly `length` symbols and its value modulo 5, by the grammar of the paper's released
    generator (tasks/dcf/modular_arithmetic_brackets.py): lengths 1..4 are a digit d, -d, (d) and (-d); a longer
    one is (L op R) with |L| uniform in 1..length−4, R the other length − 3 − |L| symbols and op uniform over
    `operators`. Written from an explicit work list rather than by recursion (a length-4096 expression nests
    about 1,000 deep), and valued as it is written: each operation is applied once both operands are done."""
    tokens: list[int] = []
    values: list[int] = []  # values of the finished subexpressions, the latest last
    todo: list[tuple[str, int]] = [("expression", length)]
    while todo:
        kind, arg = todo.pop()
        if kind == "symbol":
            tokens.append(arg)
        elif kind == "apply":
            right, left = values.pop(), values.pop()
            values.append((left + right if arg == PLUS else left - right if arg == MINUS else left * right) % 5)
        elif arg <= 4:  # d, -d, (d), (-d)
            digit = int(rng.integers(5))
            negated, bracketed = arg % 2 == 0, arg >= 3
            tokens += [LPAREN] * bracketed + [MINUS] * negated + [ZERO + digit] + [RPAREN] * bracketed
            values.append(-digit % 5 if negated else digit)
        else:
            left = int(rng.integers(1, arg - 3))
            op = int(operators[int(rng.integers(len(operators)))])
            # taken from the end: "(", L, op, R, the value of L op R, ")"
            todo += [("symbol", RPAREN), ("apply", op), ("expression", arg - 3 - left), ("symbol", op),
                     ("expression", left), ("symbol", LPAREN)]
    return tokens, values[0]

# Grouped by level: R, DCF, CS.
SUITE: tuple[str, ...] = ("even_pairs", "parity_check", "cycle_navigation", "modular_arithmetic_simple",
                          "stack_manipulation", "reverse_string", "modular_arithmetic", "solve_equation",
                          "duplicate_string", "missing_duplicate", "odds_first", "binary_addition",
                          "binary_multiplication", "compute_sqrt", "bucket_sort")
