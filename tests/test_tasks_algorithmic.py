"""Algorithmic tasks of seed 003: labels against independent evaluators, formats, masks, seeds, scoring."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from looped.data.tasks import addition, algorithmic, mod5, parity, s5, vocabulary
from looped.data.tasks.base import _TASKS, SequenceBatch, TaskError

ALL_TASKS = {
    "addition": addition.AdditionTask(),
    "parity": parity.ParityTask(),
    "mod5_flat": mod5.Mod5FlatTask(),
    "mod5_bracketed": mod5.Mod5BracketedTask(),
    "s5_standard": s5.S5Task("standard"),
    "s5_swaps": s5.S5Task("swaps"),
}
# A few lengths per task: short, training-range and beyond.
LENGTHS = {
    "addition": (1, 3, 8, 9, 32),
    "parity": (1, 3, 40, 256),
    "mod5_flat": (1, 3, 39, 255),
    "mod5_bracketed": (1, 2, 3, 4, 6, 7, 40, 256),
    "s5_standard": (1, 32, 512),
    "s5_swaps": (1, 32, 512),
}
CASES = [(key, length) for key, lengths in LENGTHS.items() for length in lengths]


def rows_text(batch: SequenceBatch, i: int) -> str:
    return vocabulary.decode_task_text(batch.tokens[i, : int(batch.lengths[i])].tolist())


def scored(batch: SequenceBatch, i: int) -> list[int]:
    return batch.targets[i][batch.loss_mask[i]].tolist()


# ----------------------------------------------------------------------------------------------------------------
# Vocabulary and registration


def test_special_tokens_fill_ids_256_to_276():
    assert vocabulary.VOCAB_SIZE == 277
    assert sorted(vocabulary.SPECIAL_TOKENS.values()) == list(range(256, 277))
    assert (vocabulary.BOS, vocabulary.EOS, vocabulary.PAD, vocabulary.SEP) == (256, 257, 258, 259)
    assert vocabulary.SPECIAL_TOKENS["RESERVED_0"] == 260 and vocabulary.SPECIAL_TOKENS["RESERVED_16"] == 276


def test_tasks_are_registered():
    for name, cls in [("addition", addition.AdditionTask), ("parity", parity.ParityTask),
                      ("mod5_flat", mod5.Mod5FlatTask),
                      ("mod5_bracketed", mod5.Mod5BracketedTask), ("s5", s5.S5Task)]:
        assert _TASKS[name] is cls and cls.name == name


@pytest.mark.parametrize("key,length", CASES)
def test_tokens_within_vocabulary_and_framing(key, length):
    task = ALL_TASKS[key]
    batch = task.sample(np.random.default_rng(length), 64, length)
    for tensor in (batch.tokens, batch.targets):
        assert tensor.dtype == torch.int64 and int(tensor.min()) >= 0 and int(tensor.max()) < vocabulary.VOCAB_SIZE
    assert (batch.tokens[:, 0] == vocabulary.BOS).all()
    assert (batch.difficulty == length).all()
    width = batch.tokens.shape[1]
    assert width == int(batch.lengths.max())
    position = torch.arange(width)[None, :]
    padding = position >= batch.lengths[:, None]
    assert (batch.tokens[padding] == vocabulary.PAD).all() and (batch.targets[padding] == vocabulary.PAD).all()
    assert not batch.loss_mask[padding].any()
    real = ~padding
    assert not (batch.tokens[real] == vocabulary.PAD).any()
    for i in range(len(batch)):
        n = int(batch.lengths[i])
        inner = batch.tokens[i, 1 : n - 1]
        assert not ((inner == vocabulary.BOS) | (inner == vocabulary.EOS)).any()
        if key.startswith("s5"):
            assert int(batch.tokens[i, n - 1]) != vocabulary.EOS  # a transducer: no EOS
        else:
            assert int(batch.tokens[i, n - 1]) == vocabulary.EOS
            # Next-token targets: targets[t] = tokens[t + 1] on the real row, PAD after its last token.
            assert torch.equal(batch.targets[i, : n - 1], batch.tokens[i, 1:n])
            assert int(batch.targets[i, n - 1]) == vocabulary.PAD


# ----------------------------------------------------------------------------------------------------------------
# Exact lengths and scored positions


@pytest.mark.parametrize("length", [1, 3, 17, 40, 256])
def test_parity_layout(length):
    batch = parity.ParityTask().sample(np.random.default_rng(0), 50, length)
    assert batch.tokens.shape == (50, length + 3) and (batch.lengths == length + 3).all()
    assert set(batch.tokens[:, 1:length + 1].flatten().tolist()) <= {ord("0"), ord("1")}
    expected_mask = torch.zeros(length + 3, dtype=torch.bool)
    expected_mask[length] = True  # only the last bit is scored: it predicts the parity symbol
    assert (batch.loss_mask == expected_mask).all()


@pytest.mark.parametrize("task_cls,length", [(mod5.Mod5FlatTask, 1), (mod5.Mod5FlatTask, 33),
                                             (mod5.Mod5BracketedTask, 2), (mod5.Mod5BracketedTask, 36)])
def test_mod5_layout(task_cls, length):
    batch = task_cls().sample(np.random.default_rng(1), 50, length)
    assert batch.tokens.shape == (50, length + 4)
    assert (batch.tokens[:, length + 1] == ord("=")).all()
    assert (batch.loss_mask.sum(1) == 1).all() and batch.loss_mask[:, length + 1].all()
    assert ((batch.targets[:, length + 1] >= ord("0")) & (batch.targets[:, length + 1] <= ord("4"))).all()


@pytest.mark.parametrize("width", [1, 2, 8, 12])
def test_addition_layout(width):
    batch = addition.AdditionTask().sample(np.random.default_rng(2), 200, width)
    for i in range(len(batch)):
        n = int(batch.lengths[i])
        text = rows_text(batch, i)
        answer_digits = len(text.split("= [")[1].split("]")[0])
        assert answer_digits in (width, width + 1)
        assert n == 3 * width + 14 + (answer_digits - width)
        mask = batch.loss_mask[i].nonzero().flatten().tolist()
        equals = 2 * width + 9  # BOS [ a ] ␠ + ␠ [ b ] ␠ =
        assert int(batch.tokens[i, equals]) == ord("=")
        assert mask == list(range(equals, n - 1))  # from '=' through the ']' that predicts EOS
        assert vocabulary.decode_task_text(scored(batch, i)) == text.split("=")[1]  # " [c_rev]<EOS>"


@pytest.mark.parametrize("length", [1, 5, 32])
def test_s5_layout(length):
    batch = s5.S5Task("swaps").sample(np.random.default_rng(3), 20, length)
    assert batch.tokens.shape == (20, length + 1)
    assert not batch.loss_mask[:, 0].any() and batch.loss_mask[:, 1:].all()  # one scored state per input
    assert (batch.targets[:, 0] == vocabulary.PAD).all()


# ----------------------------------------------------------------------------------------------------------------
# Labels against independent evaluators


def python_mod5(expression: str) -> int:
    """A second, independent evaluator: Python's own parser (same precedence, exact integers)."""
    return eval(expression, {"__builtins__": {}}) % 5  # noqa: S307 — the text holds only digits and + - * ( )


@pytest.mark.parametrize("length", [1, 3, 8, 9, 16, 32])
def test_addition_answers_match_python_ints(length):
    task = addition.AdditionTask()
    batch = task.sample(np.random.default_rng(10 + length), 300, length)
    for i in range(len(batch)):
        text = rows_text(batch, i)
        prompt = text[len("<BOS>") : text.index("=") + 1]
        a_rev, b_rev = prompt[1:].split("] + [")[0], prompt.split("] + [")[1][:-3]
        assert len(a_rev) == len(b_rev) == length
        if length > 1:
            assert a_rev[-1] != "0" and b_rev[-1] != "0"  # no leading zero
        total = int(a_rev[::-1]) + int(b_rev[::-1])
        assert text.endswith(f" [{str(total)[::-1]}]<EOS>")
        assert vocabulary.decode_task_text(scored(batch, i)) == addition.reference_addition_answer(prompt) + "<EOS>"


@pytest.mark.parametrize("length", [1, 3, 40, 64, 256])
def test_parity_labels(length):
    batch = parity.ParityTask().sample(np.random.default_rng(20 + length), 300, length)
    for i in range(len(batch)):
        text = rows_text(batch, i)[len("<BOS>") :]
        bits, label = text[:length], text[length:]
        assert set(bits) <= {"0", "1"} and len(bits) == length
        assert label == parity.reference_parity(bits) + "<EOS>"
        assert scored(batch, i) == [ord(str(sum(map(int, bits)) % 2))]


@pytest.mark.parametrize("task_cls,length", [(mod5.Mod5FlatTask, 1), (mod5.Mod5FlatTask, 3), (mod5.Mod5FlatTask, 39),
                                             (mod5.Mod5FlatTask, 255), (mod5.Mod5BracketedTask, 1),
                                             (mod5.Mod5BracketedTask, 2), (mod5.Mod5BracketedTask, 6),
                                             (mod5.Mod5BracketedTask, 13), (mod5.Mod5BracketedTask, 40),
                                             (mod5.Mod5BracketedTask, 128)])
def test_mod5_labels(task_cls, length):
    batch = task_cls().sample(np.random.default_rng(30 + length), 300, length)
    for i in range(len(batch)):
        expression = rows_text(batch, i)[len("<BOS>") : len("<BOS>") + length]
        assert len(expression) == length
        label = int(chr(scored(batch, i)[0]))
        assert label == mod5.reference_mod5(expression) == python_mod5(expression), expression
        if task_cls is mod5.Mod5FlatTask:  # digits 0..4 alternate with binary operators
            assert all(c in "01234" for c in expression[0::2]) and all(c in "+-*" for c in expression[1::2])


def test_mod5_reference_evaluator_by_hand():
    assert mod5.reference_mod5("3-2*4+1") == 1  # 3 - 8 + 1 = -4
    assert mod5.reference_mod5("(4-2)*-(1+3)") == 2  # 2 * -4 = -8
    assert mod5.reference_mod5("4*4*4") == 4  # 64
    assert mod5.reference_mod5("2--3") == 0
    with pytest.raises(TaskError):
        mod5.reference_mod5("(1+2")


def test_bracketed_generator_reaches_every_length():
    task = mod5.Mod5BracketedTask()
    rng = np.random.default_rng(4)
    for length in range(1, 301):
        batch = task.sample(rng, 2, length)
        assert batch.tokens.shape == (2, length + 4)
        expression = rows_text(batch, 0)[len("<BOS>") : len("<BOS>") + length]
        assert expression.count("(") == expression.count(")")
        assert int(chr(scored(batch, 0)[0])) == python_mod5(expression)


@pytest.mark.parametrize("variant,length", [("standard", 1), ("standard", 32), ("swaps", 32), ("swaps", 512)])
def test_s5_states_match_tuple_composition(variant, length):
    task = s5.S5Task(variant)
    batch = task.sample(np.random.default_rng(40 + length), 200 if length < 512 else 40, length)
    allowed = set(range(120)) if variant == "standard" else {0} | {
        k for k, p in enumerate(itertools.permutations(range(5))) if sum(p[j] != j for j in range(5)) == 2}
    assert len(allowed) == (120 if variant == "standard" else 11)
    for i in range(len(batch)):
        inputs = [s5.token_permutation(t) for t in batch.tokens[i, 1:].tolist()]
        assert {s5.PERMUTATIONS.index(p) for p in inputs} <= allowed
        states = [s5.token_permutation(t) for t in scored(batch, i)]
        assert states == s5.reference_s5_states(inputs)
        # Independent check by composing functions on 0..4 directly: apply g_1 first.
        for t in (0, length - 1):
            image = list(range(5))
            for g in inputs[: t + 1]:
                image = [g[x] for x in image]
            assert states[t] == tuple(image)


def test_s5_permutation_tokens():
    assert s5.permutation_token((0, 1, 2, 3, 4)) == 128
    assert s5.permutation_token((4, 3, 2, 1, 0)) == 247
    assert s5.permutation_token((1, 0, 2, 3, 4)) == 152 and s5.permutation_token((0, 2, 1, 3, 4)) == 134
    assert s5.token_permutation(152) == (1, 0, 2, 3, 4)
    with pytest.raises(TaskError):
        s5.token_permutation(vocabulary.BOS)
    # The docstring example: (0 1), identity, (1 2) -> states 10234, 10234, 20134.
    assert s5.reference_s5_states([(1, 0, 2, 3, 4), (0, 1, 2, 3, 4), (0, 2, 1, 3, 4)]) == [
        (1, 0, 2, 3, 4), (1, 0, 2, 3, 4), (2, 0, 1, 3, 4)]


def test_label_distributions_are_sensible():
    rng = np.random.default_rng(5)
    bits = parity.ParityTask().sample(rng, 2000, 40)
    assert 0.45 < (bits.targets[:, 40] == ord("1")).double().mean() < 0.55
    standard = s5.S5Task("standard").sample(rng, 100, 32)
    assert len(set(standard.tokens[:, 1:].flatten().tolist())) == 120
    bracketed = mod5.Mod5BracketedTask().sample(rng, 1000, 40)
    counts = np.bincount(bracketed.targets[:, 41].numpy() - ord("0"), minlength=5)
    assert counts.min() > 50  # every residue occurs


# ----------------------------------------------------------------------------------------------------------------
# Lengths, training draws, errors


@pytest.mark.parametrize("task,bad,message", [
    (parity.ParityTask(), 0, "parity: length 0 outside the supported range 1..4096"),
    (parity.ParityTask(), 4097, "parity: length 4097 outside the supported range 1..4096"),
    (addition.AdditionTask(), 0, "addition: length 0 outside the supported range 1..1024"),
    (mod5.Mod5FlatTask(), 32, "mod5_flat: length 32 is even"),
    (mod5.Mod5FlatTask(), -1, "mod5_flat: length -1 outside the supported range 1..4095"),
    (mod5.Mod5BracketedTask(), 1025, "mod5_bracketed: length 1025 outside the supported range 1..1024"),
    (s5.S5Task(), 0, "s5: length 0 outside the supported range 1..4096"),
    (parity.ParityTask(), 3.5, "parity: length must be an integer"),
])
def test_validate_length_errors(task, bad, message):
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace(".", r"\.")):
        task.validate_length(bad)
    with pytest.raises(TaskError):
        task.sample(np.random.default_rng(0), 2, bad)


def test_unknown_s5_variant():
    with pytest.raises(TaskError, match="unknown variant"):
        s5.S5Task("cycles")


def test_length_grids_follow_the_paper():
    assert list(addition.AdditionTask.train_lengths) == list(range(1, 9))
    assert addition.AdditionTask.test_lengths == (9, 10, 11, 12, 14, 16, 32)
    assert list(parity.ParityTask.train_lengths) == list(range(3, 41))
    assert list(mod5.Mod5FlatTask.train_lengths) == list(range(3, 40, 2))
    assert mod5.Mod5FlatTask.test_lengths == (31, 39, 47, 63, 95, 127, 191, 255)
    assert mod5.Mod5BracketedTask.test_lengths == parity.ParityTask.test_lengths == (32, 40, 48, 64, 96, 128, 192, 256)
    assert tuple(s5.S5Task.train_lengths) == (32,)
    assert s5.S5Task.test_lengths == (32, 48, 64, 96, 128, 192, 256, 512)
    for task in ALL_TASKS.values():
        for length in (*task.train_lengths, *task.validation_lengths, *task.test_lengths):
            assert task.validate_length(length) == length


@pytest.mark.parametrize("key", list(ALL_TASKS))
def test_sample_train_uses_one_training_length(key):
    task = ALL_TASKS[key]
    rng = np.random.default_rng(6)
    seen = set()
    for _ in range(40):
        batch = task.sample_train(rng, 8)
        lengths = set(batch.difficulty.tolist())
        assert len(lengths) == 1 and lengths <= set(task.train_lengths)
        seen |= lengths
    assert len(seen) >= min(len(task.train_lengths), 5)


# ----------------------------------------------------------------------------------------------------------------
# Determinism, seeds, fixed sets, deduplication


def assert_same_batch(x: SequenceBatch, y: SequenceBatch) -> None:
    for name in ("tokens", "targets", "loss_mask", "lengths", "difficulty"):
        assert torch.equal(getattr(x, name), getattr(y, name)), name


@pytest.mark.parametrize("key", list(ALL_TASKS))
def test_sampling_is_deterministic(key):
    task = ALL_TASKS[key]
    length = task.validation_lengths[0]
    first = task.sample(np.random.default_rng(7), 30, length)
    assert_same_batch(first, task.sample(np.random.default_rng(7), 30, length))
    assert task.keys(first) != task.keys(task.sample(np.random.default_rng(8), 30, length))


def test_data_seeds():
    assert algorithmic.DATA_SEEDS == {"train": 20260914, "validation": 20260915, "test": 20260916}
    assert algorithmic.ADDITION_DATA_SEED == 42
    assert algorithmic.split_seed("parity", "train") == 20260914 and algorithmic.split_seed("s5", "test") == 20260916
    assert algorithmic.split_seed("addition", "train") == algorithmic.split_seed("addition", "validation") == 42
    assert algorithmic.split_seed("addition", "test") == 20260916
    with pytest.raises(TaskError):
        algorithmic.split_seed("parity", "dev")


def test_fixed_sets_are_deterministic_distinct_and_unique():
    first = algorithmic.fixed_set("parity", "test", 48, 100)
    assert_same_batch(first, algorithmic.fixed_set(parity.ParityTask(), "test", 48, 100))
    assert len(first) == 100 and len(set(parity.ParityTask().keys(first))) == 100
    assert not torch.equal(first.tokens, algorithmic.fixed_set("parity", "validation", 48, 100).tokens)
    assert not torch.equal(first.tokens, algorithmic.fixed_set("parity", "test", 40, 100).tokens[:, :52])
    # The variant is part of the seed: the two S5 settings do not share input positions.
    standard = algorithmic.fixed_set(s5.S5Task("standard"), "test", 32, 20)
    swaps = algorithmic.fixed_set(s5.S5Task("swaps"), "test", 32, 20)
    assert not torch.equal(standard.tokens, swaps.tokens)


def test_test_sets_exclude_validation_rows_and_exhaustion_is_reported():
    task = parity.ParityTask()
    task.validation_lengths, task.validation_rows_per_length = (8,), 100  # 256 strings of 8 bits exist
    validation = set(task.keys(algorithmic.fixed_set(task, "validation", 8, 100)))
    test = algorithmic.fixed_set(task, "test", 8, 156)  # exactly the 156 strings the validation set left
    keys = set(task.keys(test))
    assert len(keys) == 156 and not keys & validation and len(keys | validation) == 256
    with pytest.raises(TaskError, match="only 156 distinct admissible rows found at length 8; 157 were requested"):
        algorithmic.fixed_set(task, "test", 8, 157)


def test_addition_sets_use_unordered_pairs():
    task = addition.AdditionTask()
    batch = task.from_pairs([(12, 34), (34, 12), (12, 35)])
    assert task.row_key(batch, 0) == task.row_key(batch, 1) != task.row_key(batch, 2)
    assert len(task.dedup(batch)) == 2
    # 55 unordered pairs of one-digit numbers exist.
    assert len(algorithmic.fixed_set(task, "train", 1, 55)) == 55
    with pytest.raises(TaskError):
        algorithmic.fixed_set(task, "train", 1, 56)
    validation = algorithmic.validation_sets(task)
    assert sorted(validation) == list(range(1, 9)) and all(len(b) == 32 for b in validation.values())
    assert sum(len(b) for b in validation.values()) == 256
    test = algorithmic.fixed_set(task, "test", 2, 300)
    assert not set(task.keys(test)) & set(task.keys(validation[2]))


def test_dedup_removes_repeats_and_excluded_rows():
    task = parity.ParityTask()
    batch = task.sample(np.random.default_rng(9), 40, 30)
    doubled = SequenceBatch.concat([batch, batch])
    unique = task.dedup(doubled)
    assert_same_batch(unique, batch)
    excluded = set(task.keys(batch)[:10])
    kept = task.dedup(batch, excluded)
    assert len(kept) == 30 and task.keys(kept) == task.keys(batch)[10:]
    # Rows of different widths: trimming keeps only the padding the remaining rows need.
    adder = addition.AdditionTask()
    mixed = adder.from_pairs([(5, 5), (1, 2)])  # answers "01" and "3": lengths 18 and 17
    assert mixed.tokens.shape[1] == 18 and adder.dedup(mixed, {adder.row_key(mixed, 0)}).tokens.shape[1] == 17


def test_train_batches_are_indexed_and_can_skip_heldout_rows():
    task = parity.ParityTask()
    assert_same_batch(algorithmic.train_batch(task, 5, 16), algorithmic.train_batch("parity", 5, 16))
    assert not torch.equal(algorithmic.train_batch(task, 5, 16).tokens[:, :8], algorithmic.train_batch(task, 6, 16).tokens[:, :8])
    # Filtering one-digit addition against a held-out set removes those pairs from the stream.
    adder = addition.AdditionTask()
    heldout = set(adder.keys(algorithmic.fixed_set(adder, "validation", 1, 32)))
    for step in range(30):
        batch = algorithmic.train_batch(adder, step, 64, exclude=heldout)
        assert len(batch) == 64
        if int(batch.difficulty[0]) == 1:
            assert not set(adder.keys(batch)) & heldout
    assert algorithmic.heldout_keys(adder, 1) == heldout
    assert len(algorithmic.heldout_keys("parity", 40)) == 256 + 1024


def test_default_held_out_sets_have_the_paper_sizes():
    sets = algorithmic.test_sets(s5.S5Task("swaps"), lengths=(32, 512))
    assert [len(b) for b in sets.values()] == [1024, 1024]
    assert sets[512].tokens.shape == (1024, 513)
    assert {d: len(b) for d, b in algorithmic.validation_sets("mod5_flat").items()} == {33: 256, 35: 256, 39: 256}
    assert [len(b) for b in algorithmic.test_sets("addition", lengths=(9,)).values()] == [256]


# ----------------------------------------------------------------------------------------------------------------
# Scoring and rendering


@pytest.mark.parametrize("key", list(ALL_TASKS))
def test_perfect_and_corrupted_predictions(key):
    task = ALL_TASKS[key]
    batch = task.sample(np.random.default_rng(11), 64, task.validation_lengths[-1])
    perfect = task.score(batch, batch.targets.clone())
    assert perfect["final_state_accuracy"] == perfect["prefix_token_accuracy"] == perfect["sequence_accuracy"] == 1.0
    assert perfect["sequences"] == 64.0 and perfect["scored_tokens"] == float(batch.loss_mask.sum())
    # Changing every prediction outside the scored positions changes nothing.
    noisy = torch.where(batch.loss_mask, batch.targets, torch.zeros_like(batch.targets))
    assert task.score(batch, noisy) == perfect
    corrupted = batch.targets.clone()
    corrupted[batch.loss_mask] = (corrupted[batch.loss_mask] + 1) % vocabulary.VOCAB_SIZE
    worst = task.score(batch, corrupted)
    assert worst["final_state_accuracy"] == worst["prefix_token_accuracy"] == worst["sequence_accuracy"] == 0.0
    # Logits are accepted too.
    logits = torch.nn.functional.one_hot(batch.targets, vocabulary.VOCAB_SIZE).float()
    assert task.score(batch, logits) == perfect


def test_score_hand_computed_s5():
    task = s5.S5Task("swaps")
    batch = task.sample(np.random.default_rng(12), 2, 4)  # 2 rows x 4 scored states
    predictions = batch.targets.clone()
    predictions[0, 2] = s5.permutation_token((4, 3, 2, 1, 0)) if predictions[0, 2] != 247 else 128  # mid-row error
    predictions[1, 4] = 128 if predictions[1, 4] != 128 else 129  # final-state error
    result = task.score(batch, predictions)
    assert result["final_state_accuracy"] == 0.5
    assert result["prefix_token_accuracy"] == 6 / 8
    assert result["sequence_accuracy"] == 0.0


def test_score_hand_computed_addition():
    task = addition.AdditionTask()
    batch = task.from_pairs([(47, 85), (5, 7)])  # " [231]<EOS>" (7 targets) and " [21]<EOS>" (6 targets)
    predictions = batch.targets.clone()
    equals = 2 * 2 + 9
    predictions[0, equals + 2] = ord("9")  # first answer digit of row 0 wrong
    result = task.score(batch, predictions)
    assert result == {"final_state_accuracy": 1.0, "prefix_token_accuracy": 12 / 13, "sequence_accuracy": 0.5,
                      "sequences": 2.0, "scored_tokens": 13.0}
    predictions[1, batch.lengths[1] - 2] = ord("0")  # row 1 predicts '0' instead of EOS after ']'
    assert task.score(batch, predictions)["final_state_accuracy"] == 0.5


def test_score_hand_computed_parity():
    task = parity.ParityTask()
    batch = task.sample(np.random.default_rng(13), 4, 3)
    predictions = batch.targets.clone()
    predictions[0, 3] = ord("1") + ord("0") - predictions[0, 3]  # flip row 0's parity bit (scored at the last bit)
    result = task.score(batch, predictions)
    assert result["final_state_accuracy"] == result["prefix_token_accuracy"] == result["sequence_accuracy"] == 0.75


def test_score_rejects_bad_input():
    task = parity.ParityTask()
    batch = task.sample(np.random.default_rng(0), 3, 5)
    with pytest.raises(TaskError, match="do not match"):
        task.score(batch, batch.targets[:, :-1])
    with pytest.raises(TaskError, match="empty"):
        task.score(batch.select([]), batch.targets[:0])


def test_render():
    adder = addition.AdditionTask()
    assert adder.render(adder.from_pairs([(47, 85)]), 0) == (
        "<BOS>[74] + [58] = [231]<EOS>\n  expected output:  [231]<EOS>")
    swaps = s5.S5Task("swaps")
    tokens = torch.tensor([[vocabulary.BOS, 152, 128, 134]])
    targets = torch.tensor([[vocabulary.PAD, 152, 152, s5.permutation_token((2, 0, 1, 3, 4))]])
    batch = SequenceBatch(tokens, targets, targets != vocabulary.PAD, torch.tensor([4]), torch.tensor([3]))
    assert swaps.render(batch, 0) == "<BOS> 10234 01234 02134\n  expected output: 10234 10234 20134"
    bits_row = parity.ParityTask().sample(np.random.default_rng(0), 1, 5)
    row, targets = parity.ParityTask().render(bits_row, 0).split("\n  expected output: ")
    bits = row[len("<BOS>") : len("<BOS>") + 5]
    assert row == f"<BOS>{bits}{targets}<EOS>" and targets == parity.reference_parity(bits)


def test_each_task_owns_its_held_out_sets():
    from looped.data.tasks import get_task
    from looped.data.tasks.algorithmic import fixed_set

    task = get_task("parity")
    test = task.test_sets([32], 16)[32]
    assert torch.equal(test.tokens, fixed_set(task, "test", 32, 16).tokens)
    validation = task.validation_sets()
    assert set(validation) == set(task.validation_lengths)
    # the test rows of a validation length never repeat a validation row, and the task lists both kinds of key
    assert not set(task.keys(test)) & set(task.keys(validation[32]))
    assert task.heldout_keys(32) >= set(task.keys(test))
