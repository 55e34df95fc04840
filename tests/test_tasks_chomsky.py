"""The Chomsky-hierarchy suite (looped/data/tasks/chomsky.py): targets against the independent solvers, the row
format, hand-worked examples, chance accuracies, registration, and the published-figures table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from looped.data.tasks import TaskError, get_task
from looped.data.tasks.chomsky import QUERY, SUITE, ChomskyTask, transduction_batch
from looped.data.tasks.chomsky_reference import SOLVERS
from looped.data.tasks.vocabulary import BOS, EOS, PAD, decode_task_text, encode_task_text

# Every training length, and a spread of test lengths up to the paper's 500.
LENGTHS = tuple(range(1, 41)) + (41, 57, 100, 173, 256, 333, 419, 500)
ROWS_PER_LENGTH = 48  # 48 x 48 lengths = 2,304 instances per task


def split_row(batch, i: int) -> tuple[str, str, int]:
    """(input text, scored output text, number of ∅ tokens) of row i."""
    real = batch.tokens[i, : int(batch.lengths[i])].tolist()
    queries = real.count(QUERY)
    outputs = batch.targets[i][batch.loss_mask[i]].tolist()
    return decode_task_text(real[1: len(real) - queries]), decode_task_text(outputs), queries


@pytest.mark.parametrize("name", SUITE)
def test_targets_match_the_independent_solver(name):
    task = get_task(name)
    rng = np.random.default_rng(2207)
    checked = 0
    for length in LENGTHS:
        if length < task.min_length:
            continue
        batch = task.sample(rng, ROWS_PER_LENGTH, length)
        for i in range(len(batch)):
            text, answer, _ = split_row(batch, i)
            assert SOLVERS[name](text) == answer, (name, length, text)
            checked += 1
    assert checked >= 2000


@pytest.mark.parametrize("name", SUITE)
def test_row_format_is_bos_input_then_one_query_per_scored_output(name):
    task = get_task(name)
    batch = task.sample(np.random.default_rng(0), 32, 12)
    assert (batch.tokens[:, 0] == BOS).all() and (batch.difficulty == 12).all()
    for i in range(len(batch)):
        n = int(batch.lengths[i])
        row, mask = batch.tokens[i, :n], batch.loss_mask[i, :n]
        assert torch.equal(mask, row == QUERY)  # scored exactly at the ∅ positions, which all come after the input
        first_query = int(mask.nonzero()[0])
        assert mask[first_query:].all() and not mask[:first_query].any()
        assert (batch.targets[i, :n][~mask] == PAD).all() and not (batch.targets[i, :n][mask] == PAD).any()
        assert not batch.loss_mask[i, n:].any() and (batch.tokens[i, n:] == PAD).all()


def test_input_lengths_follow_the_paper():
    rng = np.random.default_rng(0)
    for name in ("even_pairs", "parity_check", "cycle_navigation", "reverse_string", "duplicate_string",
                 "bucket_sort", "stack_manipulation"):
        assert all(len(split_row(get_task(name).sample(rng, 4, 7), i)[0]) == 7 for i in range(4)), name
    arithmetic = get_task("modular_arithmetic_simple")  # odd only: an even n gives n + 1 symbols (paper, A.3)
    assert len(split_row(arithmetic.sample(rng, 1, 6), 0)[0]) == 7
    assert len(split_row(arithmetic.sample(rng, 1, 7), 0)[0]) == 7
    addition = get_task("binary_addition")  # n bits in all, plus the '+'
    assert all(len(split_row(addition.sample(rng, 8, 9), i)[0]) == 10 for i in range(8))
    with pytest.raises(TaskError, match="outside the supported range 2"):
        addition.sample(rng, 1, 1)


def test_output_lengths():
    rng = np.random.default_rng(0)
    assert split_row(get_task("duplicate_string").sample(rng, 1, 9), 0)[2] == 18
    assert split_row(get_task("reverse_string").sample(rng, 1, 9), 0)[2] == 9
    assert split_row(get_task("parity_check").sample(rng, 1, 9), 0)[2] == 1
    stack = get_task("stack_manipulation").sample(rng, 64, 9)
    for i in range(64):
        text, answer, queries = split_row(stack, i)
        assert answer.endswith("<EOS>") and queries == len(answer) - len("<EOS>") + 1


# --- hand-worked examples (the paper's Appendix A.3 examples first) -------------------------------------------

HAND_WORKED = {
    "even_pairs": [("aabba", "b"), ("ab", "a"), ("a", "b"), ("abab", "a"), ("baab", "b")],
    "parity_check": [("aaabba", "b"), ("b", "a"), ("a", "b"), ("bbb", "a")],
    "cycle_navigation": [("010211", "2"), ("2", "4"), ("11111", "0"), ("222", "2")],
    "modular_arithmetic_simple": [("1+2-4", "4"), ("3", "3"), ("4*4", "1"), ("2+3*2", "0"), ("1-2-3", "1")],
    "stack_manipulation": [("abbaa-A-", "abba<EOS>"), ("a--", "<EOS>"), ("bAB", "bab<EOS>"), ("ab-B", "ba<EOS>"),
                           ("b-A-B", "b<EOS>")],
    "reverse_string": [("aabba", "abbaa"), ("a", "a"), ("ab", "ba")],
    # (1 − 4)(−2) = 6; −2; (−1); 8; 3 + 2·2 = 7; 1 − (−2) = 3; ((−3) − 4)·2 = −14
    "modular_arithmetic": [("((1-4)*-2)", "1"), ("3", "3"), ("-2", "3"), ("(4)", "4"), ("(-1)", "4"),
                           ("(2*4)", "3"), ("(3+(2*2))", "2"), ("(1--2)", "3"), ("((-3-4)*2)", "1")],
    # −x + 4 ≡ 1; x ≡ 3; −x ≡ 1; x + 3 ≡ 1; 2 − x ≡ 0; (x − 1) − (−4) ≡ 0
    "solve_equation": [("((-x)+(4))=1", "3"), ("x=3", "3"), ("-x=1", "4"), ("(x+3)=1", "3"), ("(2-x)=0", "2"),
                       ("((x-1)--4)=0", "2")],
    "duplicate_string": [("abaab", "abaababaab"), ("b", "bb")],
    "missing_duplicate": [("bab?ab_", "b"), ("abb?bb", "a"), ("?b_", "b"), ("a?", "a"), ("abab?bab", "a")],
    "odds_first": [("aaabaa", "aaaaba"), ("abbab", "abbba"), ("bab", "bba"), ("a", "a"), ("ab", "ab")],
    # 6 · 3 = 18 = 10010; 1 · 1; 2 · 3 = 6 = 110; 3 · 5 = 15 = 1111; 1 · 12 = 12 = 1100 (all written reversed)
    "binary_multiplication": [("011*11", "01001<EOS>"), ("1*1", "1<EOS>"), ("01*11", "011<EOS>"),
                              ("11*101", "1111<EOS>"), ("10*0011", "0011<EOS>")],
    # √37 → 6; √7 → 2; √1 in 2 bits; √255 → 15; √16 → 4
    "compute_sqrt": [("100101", "110"), ("111", "10"), ("0001", "01"), ("11111111", "1111"), ("10000", "100"),
                     ("1", "1")],
    "binary_addition": [("011+11", "1001"), ("1+1", "01"), ("0+0", "0"), ("01+1", "11"), ("11+11", "011")],
    "bucket_sort": [("421302214", "011222344"), ("4", "4"), ("40", "04")],
}


@pytest.mark.parametrize("name", SUITE)
def test_solver_on_hand_worked_examples(name):
    for text, answer in HAND_WORKED[name]:
        assert SOLVERS[name](text) == answer, (name, text)


def test_generators_on_hand_worked_examples():
    """Generator answers for inputs we can force: length 1 has every input in a few draws."""
    rng = np.random.default_rng(3)
    seen = {}
    for name in ("even_pairs", "parity_check", "cycle_navigation", "bucket_sort", "reverse_string"):
        batch = get_task(name).sample(rng, 64, 1)
        seen[name] = {split_row(batch, i)[0]: split_row(batch, i)[1] for i in range(64)}
    assert seen["even_pairs"] == {"a": "b", "b": "b"}  # one symbol: no pairs, even
    assert seen["parity_check"] == {"a": "b", "b": "a"}
    assert seen["cycle_navigation"] == {"0": "0", "1": "1", "2": "4"}
    assert seen["bucket_sort"] == {d: d for d in "01234"}
    assert seen["reverse_string"] == {"a": "a", "b": "b"}
    addition = get_task("binary_addition").sample(rng, 64, 2)  # one bit each: the four sums of two bits
    pairs = {split_row(addition, i)[0]: split_row(addition, i)[1] for i in range(64)}
    assert pairs == {"0+0": "0", "0+1": "1", "1+0": "1", "1+1": "01"}



def rows_of(name: str, length: int, n: int = 64, seed: int = 3) -> dict[str, str]:
    """{input text: scored output text} of n rows of one length."""
    batch = get_task(name).sample(np.random.default_rng(seed), n, length)
    return dict(split_row(batch, i)[:2] for i in range(n))


def test_bracketed_generators_on_hand_worked_examples():
    """The shortest expressions are the grammar's terminals d, -d, (d), (-d); every one of them turns up."""
    assert rows_of("modular_arithmetic", 1) == {d: d for d in "01234"}
    assert rows_of("modular_arithmetic", 2) == {"-0": "0", "-1": "4", "-2": "3", "-3": "2", "-4": "1"}
    assert rows_of("modular_arithmetic", 3) == {f"({d})": d for d in "01234"}
    assert rows_of("modular_arithmetic", 4) == {"(-0)": "0", "(-1)": "4", "(-2)": "3", "(-3)": "2", "(-4)": "1"}
    assert rows_of("solve_equation", 3) == {f"x={d}": d for d in "01234"}  # x = d
    assert rows_of("solve_equation", 4) == {"-x=0": "0", "-x=1": "4", "-x=2": "3", "-x=3": "2", "-x=4": "1"}
    five = rows_of("modular_arithmetic", 5, n=1500)  # (d op d): 5 x 3 x 5 = 75 expressions
    assert len(five) == 75 and five["(3*4)"] == "2" and five["(1-3)"] == "3" and five["(4+4)"] == "3"


def test_bracketed_inputs_follow_the_released_generator():
    for length in (5, 12, 40, 173):
        for text in rows_of("modular_arithmetic", length, n=32):
            assert len(text) == length and text.count("(") == text.count(")")
            assert set(text) <= set("01234+-*()")
        for text in rows_of("solve_equation", length, n=32):
            assert len(text) == length and text.count("x") == 1 and text[-2] == "=" and text[-1] in "01234"
            assert "*" not in text  # + and − only: x has coefficient ±1, one solution
    operators = "".join(rows_of("modular_arithmetic", 40, n=64))
    assert all(op in operators for op in "+-*")
    hidden = [text.index("x") for text in rows_of("solve_equation", 9, n=256)]  # the 7-symbol expression's digits
    assert len(set(hidden)) >= 4  # the unknown is drawn from anywhere in the expression, not one fixed place


def test_context_sensitive_generators_on_hand_worked_examples():
    """Short lengths, where every input turns up in a few hundred draws."""
    assert rows_of("missing_duplicate", 2) == {"?a": "a", "?b": "b", "a?": "a", "b?": "b"}
    assert rows_of("missing_duplicate", 3) == {"?a_": "a", "?b_": "b", "a?_": "a", "b?_": "b"}
    assert rows_of("odds_first", 3) == {"aaa": "aaa", "aab": "aba", "aba": "aab", "abb": "abb", "baa": "baa",
                                        "bab": "bba", "bba": "bab", "bbb": "bbb"}
    assert rows_of("binary_multiplication", 3) == {"1*1": "1<EOS>"}  # one-bit operands are never 0
    assert rows_of("binary_multiplication", 4) == {  # 1·1, 1·2, 1·3 and back
        "1*10": "1<EOS>", "1*01": "01<EOS>", "1*11": "11<EOS>", "10*1": "1<EOS>", "01*1": "01<EOS>",
        "11*1": "11<EOS>"}
    assert rows_of("compute_sqrt", 3, n=256) == {  # √1..√7: 1, 1, 1, 2, 2, 2, 2 in two bits
        "001": "01", "010": "01", "011": "01", "100": "10", "101": "10", "110": "10", "111": "10"}


def test_context_sensitive_inputs_and_outputs_follow_the_released_generators():
    for length in (5, 12, 40, 173):
        for text, answer in rows_of("missing_duplicate", length, n=32).items():
            assert len(text) == length and text.count("?") == 1 and answer in "ab"
            assert text.endswith("_") == (length % 2 == 1) and text.count("_") == length % 2
        for text, answer in rows_of("binary_multiplication", length, n=32).items():
            assert len(text) == length and text.count("*") == 1  # n symbols, the '*' included
            assert answer.endswith("<EOS>") and answer[-6] == "1" and len(answer) - 4 <= length
        for text, answer in rows_of("compute_sqrt", length, n=32).items():
            assert len(text) == length and len(answer) == (length + 1) // 2 and "1" in text
        assert all(len(answer) == length for answer in rows_of("odds_first", length, n=8).values())
    hidden = [text.index("?") for text in rows_of("missing_duplicate", 8, n=256)]
    assert set(hidden) == set(range(8))  # either copy, any position
    widths = {text.index("*") for text in rows_of("binary_multiplication", 9, n=256)}
    assert widths == set(range(1, 8))  # a has 1..n−2 bits
    leading_zero = [text for text in rows_of("compute_sqrt", 12, n=256) if text.startswith("0")]
    assert leading_zero  # uniform over 1..2^n − 1 in n bits: half the numbers are under 2^(n−1)

def test_transduction_batch_by_hand():
    x = [encode_task_text("ab"), encode_task_text("b")]
    y = [encode_task_text("ba"), encode_task_text("b")]
    batch = transduction_batch(x, y, 2)
    assert batch.tokens.tolist() == [[BOS, ord("a"), ord("b"), QUERY, QUERY], [BOS, ord("b"), QUERY, PAD, PAD]]
    assert batch.targets.tolist() == [[PAD, PAD, PAD, ord("b"), ord("a")], [PAD, PAD, ord("b"), PAD, PAD]]
    assert batch.lengths.tolist() == [5, 3]
    same = transduction_batch(np.array(x[:1]), np.array(y[:1]), 2)  # the fixed-width path builds the same row
    assert torch.equal(same.tokens, batch.tokens[:1]) and torch.equal(same.targets, batch.targets[:1])


# --- chance, scoring, registration ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SUITE)
def test_chance_is_uniform_over_the_output_alphabet(name):
    task = get_task(name)
    batch = task.sample(np.random.default_rng(1), 256, 30)
    alphabet = set(batch.targets[batch.loss_mask].tolist())
    assert task.chance_accuracy == pytest.approx(1 / len(alphabet))
    if name == "stack_manipulation":
        assert alphabet == {ord("a"), ord("b"), EOS}


def test_scoring_perfect_and_one_wrong_token():
    task = get_task("reverse_string")
    batch = task.sample(np.random.default_rng(0), 4, 10)
    assert task.score(batch, batch.targets)["prefix_token_accuracy"] == 1.0
    wrong = batch.targets.clone()
    row, position = 2, int(batch.loss_mask[2].nonzero()[3])
    wrong[row, position] = ord("a") + ord("b") - wrong[row, position]
    scores = task.score(batch, wrong)
    assert scores["prefix_token_accuracy"] == pytest.approx(39 / 40) and scores["sequence_accuracy"] == 0.75


def test_suite_protocol_and_registration():
    from looped.cli.data import show_examples

    for name in SUITE:
        task = get_task(name)
        assert isinstance(task, ChomskyTask) and task.level in ("R", "DCF", "CS")
        assert max(task.train_lengths) == 40 and min(task.test_lengths) > 40 and max(task.test_lengths) == 500
        assert task.primary_metric == "prefix_token_accuracy"
        assert show_examples(name, n=1, difficulty=5)[0].startswith("<BOS>")


def test_published_table_names_only_suite_tasks():
    from looped.experiments.chomsky import PUBLISHED

    assert set(PUBLISHED) == set(SUITE)
    assert all(set(row) == {"transformer", "lstm"} for row in PUBLISHED.values())
    assert PUBLISHED["parity_check"] == {"transformer": 52.0, "lstm": 100.0}  # percent, as the paper prints them
    assert PUBLISHED["bucket_sort"] == {"transformer": None, "lstm": None}  # not found here: no number invented
    assert PUBLISHED["compute_sqrt"] == {"transformer": None, "lstm": None}
