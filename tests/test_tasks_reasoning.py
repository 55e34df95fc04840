"""Tests of the seed 002 reasoning tasks (looped.data.tasks.graph, boolean, family and their shared reasoning.py).

Generator labels are checked against the reference solvers (`label_of`) and, for the graph, against
boolean matrix powers of the attention mask computed here; structure is checked against SPEC §2.
"""

import numpy as np
import pytest
import torch

from looped.data.tasks import ReasoningBatch, TaskError, rng_for
from looped.data.tasks import base
from looped.data.tasks.boolean import NestedBoolean, nesting_depth
from looped.data.tasks.family import FamilyRelations, relation_word
from looped.data.tasks.graph import GraphReachability, shortest_hops
from looped.data.tasks.reasoning import row_hits


def one_line(excinfo: pytest.ExceptionInfo) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message, message
    return message


def assert_same_batch(a: ReasoningBatch, b: ReasoningBatch) -> None:
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.labels, b.labels)
    assert torch.equal(a.padding, b.padding)
    assert torch.equal(a.difficulty, b.difficulty)
    assert sorted(a.extras) == sorted(b.extras)
    for name in a.extras:
        assert torch.equal(a.extras[name], b.extras[name]), name


@pytest.mark.parametrize("name, cls", [("graph", GraphReachability), ("boolean", NestedBoolean),
                                       ("family", FamilyRelations)])
def test_tasks_are_registered(name, cls):
    assert base._TASKS[name] is cls
    assert cls.name == name
    assert cls.vocab[0] == "[PAD]"


@pytest.mark.parametrize("task, difficulty", [(GraphReachability(), 3), (GraphReachability(hard_negatives=True), 3),
                                              (NestedBoolean(), 5), (FamilyRelations(), 4)])
def test_same_seed_same_batch_and_other_seed_differs(task, difficulty):
    a = task.sample(rng_for(7), 40, difficulty)
    assert_same_batch(a, task.sample(rng_for(7), 40, difficulty))
    other = task.sample(rng_for(8), 40, difficulty)
    assert {task.row_key(a, i) for i in range(40)} != {task.row_key(other, i) for i in range(40)}
    mixed = task.sample_mixed(rng_for(3), 30, [difficulty, difficulty + 1])
    assert_same_batch(mixed, task.sample_mixed(rng_for(3), 30, [difficulty, difficulty + 1]))


@pytest.mark.parametrize("task", [GraphReachability(), NestedBoolean(), FamilyRelations()])
def test_sample_mixed_gives_equal_shares_in_shuffled_order(task):
    difficulties = task.train_difficulties[:3]
    batch = task.sample_mixed(rng_for(0), 61, difficulties)
    counts = [int((batch.difficulty == d).sum()) for d in difficulties]
    assert counts == [21, 20, 20]
    assert not torch.equal(batch.difficulty, batch.difficulty.sort().values)  # rows are shuffled
    assert batch.tokens.shape == (61, task.max_length)
    assert batch.labels.dtype == torch.float32 and batch.difficulty.dtype == torch.int64
    assert torch.equal(batch.padding, batch.tokens == 0)


@pytest.mark.parametrize("task", [GraphReachability(), GraphReachability(hard_negatives=True), FamilyRelations()])
def test_balanced_tasks_are_exactly_50_50(task):
    for difficulty in task.train_difficulties[:2]:
        batch = task.sample(rng_for(difficulty), 200, difficulty)
        assert int(batch.labels.sum()) == 100


def test_sample_rejects_unsupported_difficulty():
    with pytest.raises(TaskError) as excinfo:
        GraphReachability().sample(rng_for(0), 4, 19)
    assert "hops" in one_line(excinfo)
    with pytest.raises(TaskError):
        NestedBoolean().sample(rng_for(0), 4, 30)
    with pytest.raises(TaskError):
        FamilyRelations().sample(rng_for(0), 4, 13)


# ============================================================================ graph


def mask_reach(adjacency: torch.Tensor, steps: int) -> np.ndarray:
    """reach[v, u]: information from u arrives at v within `steps` attention steps (matrix power)."""
    a = adjacency.numpy().astype(np.int64)
    reach = np.eye(a.shape[0], dtype=np.int64)
    for _ in range(steps):
        reach = np.minimum(a @ reach, 1)
    return reach.astype(bool)


def edges_and_nodes(batch: ReasoningBatch, i: int) -> tuple[np.ndarray, int]:
    adj = batch.extras["adjacency"][i].numpy().copy()
    np.fill_diagonal(adj, False)
    return adj, int((~batch.padding[i]).sum())


def search_depth(adj: np.ndarray, start: int, backward: bool) -> int:
    """Number of BFS levels that find new nodes from `start` (against the edges when backward)."""
    # adj[v, u] is edge u→v: a backward move goes v → u (columns of row v), a forward one u → v.
    moves = adj if backward else adj.T
    reached = np.zeros(adj.shape[0], dtype=bool)
    reached[start] = True
    depth = 0
    while True:
        grown = reached | moves[reached].any(axis=0)
        if (grown == reached).all():
            return depth
        reached, depth = grown, depth + 1


def test_graph_vocabulary_and_layout():
    task = GraphReachability()
    assert task.vocab_size == 27 and task.vocab[1:] == list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert task.max_length == 20
    assert task.train_difficulties == [1, 2, 3, 4, 5]
    assert task.test_difficulties == [1, 2, 3, 4, 6, 8, 10, 12]
    batch = task.sample(rng_for(0), 64, 4)
    assert batch.extras["adjacency"].shape == (64, 20, 20) and batch.extras["adjacency"].dtype == torch.bool
    assert batch.extras["query"].shape == (64, 2) and batch.extras["query"].dtype == torch.int64
    for i in range(64):
        n = int((~batch.padding[i]).sum())
        assert batch.tokens[i, :n].tolist() == list(range(1, n + 1))  # nodes in order
        assert not batch.tokens[i, n:].any()
        s, r = batch.extras["query"][i].tolist()
        assert s != r and 0 <= s < n and 0 <= r < n


@pytest.mark.parametrize("split, difficulty, expected", [
    ("train", 1, (8, 16)), ("train", 5, (8, 16)), ("train", 10, (12, 16)),
    ("test", 1, (10, 16)), ("test", 4, (10, 16)), ("test", 8, (10, 16)),
    ("test", 10, (12, 16)), ("test", 12, (14, 18)), ("test", 16, (18, 20)),
])
def test_graph_node_count_ranges(split, difficulty, expected):
    task = GraphReachability(split=split)
    assert task.num_nodes_range(difficulty) == expected
    assert GraphReachability().num_nodes_range(difficulty, split) == expected
    counts = (~task.sample(rng_for(difficulty), 300, difficulty).padding).sum(1)
    assert int(counts.min()) == expected[0] and int(counts.max()) == expected[1]


@pytest.mark.parametrize("split, hops", [("train", 1), ("train", 3), ("train", 5), ("test", 8), ("test", 12)])
def test_graph_positives_have_exact_hops_and_negatives_no_path(split, hops):
    task = GraphReachability(split=split)
    batch = task.sample(rng_for(hops), 120, hops)
    assert (batch.difficulty == hops).all()
    for i in range(len(batch)):
        s, r = batch.extras["query"][i].tolist()
        found = shortest_hops(batch.extras["adjacency"][i], s, r)
        if batch.labels[i] == 1:
            assert found == hops
        else:
            assert found is None
        assert task.label_of(batch, i) == int(batch.labels[i])
        # The mask moves information one hop per step: r hears of s exactly at step `hops`.
        adjacency = batch.extras["adjacency"][i]
        if batch.labels[i] == 1:
            assert not mask_reach(adjacency, hops - 1)[r, s] and mask_reach(adjacency, hops)[r, s]
        else:
            assert not mask_reach(adjacency, 20)[r, s]


def test_graph_mask_has_self_loops_everywhere_and_one_hop_per_step():
    task = GraphReachability(split="test")
    batch = task.sample(rng_for(1), 12, 6)
    adjacency = batch.extras["adjacency"]
    assert adjacency[:, torch.arange(20), torch.arange(20)].all()  # padding positions included
    for i in range(len(batch)):
        n = int((~batch.padding[i]).sum())
        off_diagonal = adjacency[i] & ~torch.eye(20, dtype=torch.bool)
        assert not off_diagonal[n:].any() and not off_diagonal[:, n:].any()  # no edge touches padding
        hops = np.full((20, 20), 99)
        for u in range(n):
            for v in range(n):
                found = shortest_hops(adjacency[i], u, v)
                hops[v, u] = 99 if found is None else found
        for steps in range(1, 12):
            assert np.array_equal(mask_reach(adjacency[i], steps)[:n, :n], hops[:n, :n] <= steps)


@pytest.mark.parametrize("split, hops", [("train", 1), ("train", 3), ("train", 5), ("test", 8), ("test", 12),
                                         ("test", 17)])
def test_hard_negatives_satisfy_their_guarantee(split, hops):
    task = GraphReachability(split=split, hard_negatives=True)
    batch = task.sample(rng_for(hops), 100, hops)
    negatives = [i for i in range(len(batch)) if batch.labels[i] == 0]
    assert len(negatives) == 50
    lo, hi = task.num_nodes_range(hops)
    for i in negatives:
        adj, n = edges_and_nodes(batch, i)
        s, r = batch.extras["query"][i].tolist()
        assert max(lo, hops + 3) <= n <= hi
        assert shortest_hops(batch.extras["adjacency"][i], s, r) is None
        assert adj[:, s].any() and adj[r].any()  # source has an out-edge, target an in-edge
        assert search_depth(adj, r, backward=True) >= hops
        assert search_depth(adj, s, backward=False) >= min(hops, n - hops - 2)
        # Under the mask, the target's (h-1)-step view is not closed: a node h hops back is still unseen.
        reach = mask_reach(batch.extras["adjacency"][i], hops - 1)[r]
        assert (mask_reach(batch.extras["adjacency"][i], hops)[r] & ~reach).any()
        assert task.label_of(batch, i) == 0


def test_local_cue_statistics_of_both_generators():
    paper = GraphReachability()
    stats = paper.local_cue_stats(paper.sample_mixed(rng_for(0), 3000, paper.train_difficulties))
    assert stats["negatives"] == 1500
    # SPEC §2 quotes 42 % / 73 % / 93 % for the paper's generator (12,000 examples).
    assert 0.36 < stats["target_no_in"] < 0.50
    assert 0.67 < stats["source_no_out_or_target_no_in"] < 0.80
    assert 0.89 < stats["backward_settles"] < 0.97
    hard = GraphReachability(hard_negatives=True)
    stats = hard.local_cue_stats(hard.sample_mixed(rng_for(0), 1000, hard.train_difficulties))
    assert stats["target_no_in"] == 0 and stats["source_no_out_or_target_no_in"] == 0
    deep = hard.local_cue_stats(hard.sample(rng_for(0), 200, 5))
    assert deep["backward_settles"] == 0  # depth >= 5: not settled within 5 expansions


def test_graph_render_shows_query_and_label():
    task = GraphReachability()
    batch = task.sample(rng_for(0), 2, 2)
    for i in range(2):
        text = task.render(batch, i)
        assert f"label: {int(batch.labels[i])}" in text and "query:" in text
        assert task.to_text(batch, i) in text


def test_graph_encode_round_trips_and_parses_user_graphs():
    task = GraphReachability(hard_negatives=True)
    batch = task.sample_mixed(rng_for(5), 40, [1, 4])
    for i in range(len(batch)):
        row = task.from_text(task.to_text(batch, i))
        assert torch.equal(row.tokens[0], batch.tokens[i]) and torch.equal(row.padding[0], batch.padding[i])
        assert torch.equal(row.extras["adjacency"][0], batch.extras["adjacency"][i])
        assert torch.equal(row.extras["query"][0], batch.extras["query"][i])
        assert row.labels[0] == batch.labels[i]
        if batch.labels[i] == 1:
            assert row.difficulty[0] == batch.difficulty[i]
    row = task.from_text("A>B, B>C, C>D ? A D")
    assert row.tokens[0].tolist() == [1, 2, 3, 4] + [0] * 16
    assert row.labels.tolist() == [1.0] and row.difficulty.tolist() == [3]
    assert row.extras["query"].tolist() == [[0, 3]]
    assert row.extras["adjacency"][0, 1, 0] and not row.extras["adjacency"][0, 0, 1]  # [v, u]: edge u→v
    row = task.from_text("nodes=6;  A > B ,C>D ? D A")
    assert row.labels.tolist() == [0.0] and int((~row.padding[0]).sum()) == 6
    assert task.from_text("? A T").labels.tolist() == [0.0]  # no edges, 20 nodes
    spaced = task.from_text("A>B B>C  C > D ? A D")  # spaces separate edges as commas do
    assert torch.equal(spaced.extras["adjacency"], task.from_text("A>B, B>C, C>D ? A D").extras["adjacency"])


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("   ", "empty"),
    ("A>b ? A B", "unknown node"), ("A>1 ? A B", "unknown node"), ("AB>C ? A C", "unknown node"),
    ("A>U ? A B", "more than 20"), ("nodes=21; A>B ? A B", "more than 20"), ("nodes=3; A>D ? A B", "unknown node"),
    ("nodes=1; ? A B", "at least 2"), ("nodes=x; ? A B", "not a number"),
    ("A-B ? A B", "malformed edge"), ("A>B>C ? A C", "malformed edge"), ("A B ? A B", "malformed edge"), ("A>B", "'?'"), ("A>B ? A", "two nodes"), ("A>B ? A A", "same node"),
])
def test_graph_encode_errors(text, words):
    with pytest.raises(TaskError) as excinfo:
        GraphReachability().from_text(text)
    assert words in one_line(excinfo)


def test_graph_test_set_excludes_training_rows_and_duplicates():
    task = GraphReachability()
    train = task.sample_mixed(rng_for(1), 300, [1, 2])
    excluded = task.keys(train)
    first = task.test_set(9, per_bucket=40, difficulties=[1, 2], exclude=excluded)
    keys = [task.row_key(first, i) for i in range(80)]
    assert len(set(keys)) == 80 and not set(keys) & excluded
    assert [int((first.difficulty == d).sum()) for d in (1, 2)] == [40, 40]
    assert [int(first.labels[first.difficulty == d].sum()) for d in (1, 2)] == [20, 20]
    n = (~first.padding).sum(1)
    assert int(n[first.difficulty == 1].min()) >= 10  # the test split's node range
    # Excluding rows the same seed would produce forces fresh replacements.
    again = task.test_set(9, per_bucket=40, difficulties=[1, 2], exclude=excluded | set(keys[:10]))
    again_keys = {task.row_key(again, i) for i in range(80)}
    assert not again_keys & set(keys[:10]) and len(again_keys) == 80
    # The key covers the adjacency and the query, not only the (node-list) tokens.
    same_tokens = [i for i in range(1, 80) if torch.equal(first.tokens[i], first.tokens[0])]
    assert same_tokens and all(keys[i] != keys[0] for i in same_tokens)


# ============================================================================ boolean


def test_boolean_vocabulary_and_layout():
    task = NestedBoolean()
    assert task.vocab == ["[PAD]", "[CLS]", "T", "F", "&", "|", "!", "(", ")"]
    assert task.max_length == 128
    assert task.train_difficulties == list(range(1, 9)) and task.test_difficulties == [2, 4, 6, 8, 10, 12, 14]
    batch = task.sample(rng_for(0), 50, 6)
    assert (batch.tokens[:, 0] == 1).all()
    for i in range(50):
        length = int((~batch.padding[i]).sum())
        assert not batch.padding[i, :length].any() and batch.padding[i, length:].all()
        assert len(task.to_text(batch, i)) == length - 1


@pytest.mark.parametrize("depth", [0, 1, 4, 8, 14])
def test_boolean_exact_depth_length_and_reference_label(depth):
    task = NestedBoolean()
    batch = task.sample(rng_for(depth), 150, depth)
    for i in range(len(batch)):
        text = task.to_text(batch, i)
        assert nesting_depth(text) == depth == int(batch.difficulty[i])
        assert len(text) <= 127
        assert task.label_of(batch, i) == int(batch.labels[i])


def test_boolean_precedence_and_depth_definition():
    task = NestedBoolean()
    cases = {"T|F&F": 1, "F&F|T": 1, "!T&F": 0, "!F&F": 0, "!(T&F)": 1, "(T&!F)|F": 1, "!!F": 0,
             "(T|F)&F": 0, "!((T|F)&T)": 0, "T": 1, "F|!T": 0}
    for text, label in cases.items():
        row = task.from_text(text)
        assert int(row.labels[0]) == label == task.label_of(row, 0), text
    assert [nesting_depth(t) for t in ("T&F", "(T|F)", "!((T)&F)", "(T)&(F)", "((T))|((F))")] == [0, 1, 2, 1, 2]


def test_boolean_generation_distribution():
    task = NestedBoolean()
    rng = rng_for(0)
    atoms = [task._atom(rng) for _ in range(4000)]
    assert abs(np.mean([len(a) == 1 for a in atoms]) - 0.5) < 0.03
    assert abs(np.mean([a.startswith("!") for a in atoms]) - 0.25) < 0.03
    assert abs(np.mean([len(a) == 3 and a[1] in "&|" for a in atoms]) - 0.25) < 0.03
    batch = task.sample(rng, 2000, 3)
    texts = [task.to_text(batch, i) for i in range(2000)]
    assert abs(np.mean([t.startswith("!") for t in texts]) - 0.25) < 0.03
    # Natural labels: not forced to 50/50, but not degenerate either.
    assert 0.35 < float(batch.labels.mean()) < 0.65
    # Shallower child depth k has weight 2^(d-1-k): for d = 2, k = 0 with p 2/3, so the shallow
    # child is a bare atom in 2/3 of depth-2 expressions (one side has no parenthesis).
    assert task._other_depth_cdf(2) == pytest.approx([2 / 3, 1.0])
    assert task._other_depth_cdf(3) == pytest.approx([4 / 7, 6 / 7, 1.0])


def test_boolean_encode_round_trips():
    task = NestedBoolean()
    batch = task.sample_mixed(rng_for(2), 30, [2, 7])
    for i in range(30):
        row = task.from_text(task.to_text(batch, i))
        assert torch.equal(row.tokens[0], batch.tokens[i])
        assert row.labels[0] == batch.labels[i] and row.difficulty[0] == batch.difficulty[i]
    assert task.from_text(" ( T & ! F ) | F ").tokens[0, :10].tolist() == [1, 7, 2, 4, 6, 3, 8, 5, 3, 0]
    assert "= T" in task.render(task.from_text("(T&!F)|F"), 0)


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("T&X", "unknown symbol"), ("t&F", "unknown symbol"), ("((T)", "unbalanced"),
    ("T)", "unbalanced"), (")T(", "unbalanced"), ("T&", "malformed"), ("()", "malformed"), ("TF", "malformed"),
    ("T" + "&T" * 64, "more than 127"),
])
def test_boolean_encode_errors(text, words):
    with pytest.raises(TaskError) as excinfo:
        NestedBoolean().from_text(text)
    assert words in one_line(excinfo)


def test_boolean_test_set_dedup_and_exhaustion():
    task = NestedBoolean()
    train = task.sample(rng_for(0), 300, 2)
    test = task.test_set(1, per_bucket=100, difficulties=[2], exclude=task.keys(train))
    keys = task.keys(test)
    assert len(keys) == 100 and not keys & task.keys(train)
    # Depth 0 has only 12 distinct expressions: asking for 20 unseen ones must fail loudly.
    with pytest.raises(TaskError) as excinfo:
        task.test_set(0, per_bucket=20, difficulties=[0], max_tries=200)
    assert "unseen" in one_line(excinfo)


# ============================================================================ family


def parse_family(task: FamilyRelations, batch: ReasoningBatch, i: int):
    """(facts, query) with names and signed offsets, read straight from the tokens."""
    offsets = {relation_word(o): o for o in range(-12, 13)}
    words = [task.vocab[t] for t in batch.tokens[i].tolist() if t != 0]
    assert words[0] == "[CLS]" and words[-1] == "[SEP]"
    q = words.index("query")
    body = words[1:q]
    assert len(body) % 7 == 0
    facts = [(body[j], offsets[body[j + 3]], body[j + 5]) for j in range(0, len(body), 7)]
    for j in range(0, len(body), 7):
        assert body[j + 1: j + 3] == ["is", "the"] and body[j + 4] == "of" and body[j + 6] == "."
    tail = words[q:]
    assert tail[:2] == ["query", ":"] and tail[3:5] == ["is", "the"] and tail[6] == "of" and len(tail) == 9
    return facts, (tail[2], offsets[tail[5]], tail[7])


def test_family_vocabulary():
    task = FamilyRelations()
    assert task.vocab_size == 54 and len(set(task.vocab)) == 54
    names = task.vocab[9:29]
    assert len(names) == 20 and [n[0] for n in names] == list("ABCDEFGHIJKLMNOPQRST")
    assert names[0] == "Alice" and names[-1] == "Tina"
    assert [relation_word(o) for o in (0, 1, -1, 2, -2, 3, -3, 4, -12)] == [
        "sibling", "parent", "child", "grandparent", "grandchild", "great-grandparent", "great-grandchild",
        "great2-grandparent", "great10-grandchild"]
    assert task.train_difficulties == [2, 3, 4, 5] and task.test_difficulties == list(range(2, 10))


@pytest.mark.parametrize("depth", [2, 3, 5, 9, 12])
def test_family_chains_distractors_and_labels(depth):
    task = FamilyRelations()
    batch = task.sample(rng_for(depth), 100, depth)
    assert int((~batch.padding).sum(1).max()) <= 128
    for i in range(len(batch)):
        facts, (first, asked, last) = parse_family(task, batch, i)
        # Follow the chain from the query's first name through facts read in their stated direction.
        hops, at, chain_names = [], first, {first}
        while at != last:
            (fact,) = [f for f in facts if f[0] == at]
            hops.append(fact[1])
            at = fact[2]
            chain_names.add(at)
        assert len(hops) == depth and len(chain_names) == depth + 1
        ups = hops.count(1)
        assert hops == [1] * ups + [-1] * (depth - ups) and 1 <= ups <= depth - 1  # apex routing
        distractors = [f for f in facts if f[0] not in chain_names]
        assert 2 <= len(distractors) <= 4 and len(facts) == depth + len(distractors)
        assert all(f[0] not in chain_names and f[2] not in chain_names and f[1] in (1, -1) for f in distractors)
        truth = sum(hops)
        if batch.labels[i] == 1:
            assert asked == truth
        else:
            assert abs(asked - truth) in (2, 4)
        assert task.label_of(batch, i) == int(batch.labels[i])


def test_family_negative_offsets_cover_both_distances():
    task = FamilyRelations()
    batch = task.sample(rng_for(0), 400, 4)
    gaps = []
    for i in range(len(batch)):
        if batch.labels[i] == 0:
            facts, (first, asked, last) = parse_family(task, batch, i)
            chain = {f[0]: f for f in facts}
            truth, at = 0, first
            while at != last:
                truth += chain[at][1]
                at = chain[at][2]
            gaps.append(asked - truth)
    assert set(gaps) == {-4, -2, 2, 4}


def test_family_encode_round_trips_and_reads_user_text():
    task = FamilyRelations()
    batch = task.sample_mixed(rng_for(4), 30, [2, 5, 9])
    for i in range(30):
        row = task.from_text(task.to_text(batch, i))
        assert torch.equal(row.tokens[0], batch.tokens[i])
        assert row.labels[0] == batch.labels[i] and row.difficulty[0] == batch.difficulty[i]
    facts = "Alice is the parent of Bob . Bob is the parent of Carl ."
    row = task.from_text(f"{facts} query : Alice is the grandparent of Carl")
    assert row.labels.tolist() == [1.0] and row.difficulty.tolist() == [2]
    assert row.tokens[0, 0] == 1 and task.vocab[int(row.tokens[0, (~row.padding[0]).sum() - 1])] == "[SEP]"
    assert task.from_text(f"{facts} query : Alice is the sibling of Carl").labels.tolist() == [0.0]
    assert task.from_text("alice is the parent of bob. bob is the child of carl. query: alice is the sibling of "
                       "carl [SEP]").labels.tolist() == [1.0]
    assert task.from_text(f"{facts} query : Alice is the parent of Dora").labels.tolist() == [0.0]  # unrelated
    assert "label: 1" in task.render(row, 0)


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("Alice is the uncle of Bob . query : Alice is the parent of Bob", "unknown word"),
    ("Alice is the parent of Zed . query : Alice is the parent of Bob", "unknown word"),
    ("Alice parent Bob . query : Alice is the parent of Bob", "malformed fact 1"),
    ("Alice is the parent of Bob .", "query"),
    ("Alice is the parent of Bob . query : Alice is the parent", "malformed query"),
    ("Alice is the parent of Bob . Bob is the parent of Alice . query : Alice is the parent of Bob", "contradictory"),
    ("Alice is the parent of Alice . query : Alice is the parent of Bob", "itself"),
])
def test_family_encode_errors(text, words):
    with pytest.raises(TaskError) as excinfo:
        FamilyRelations().from_text(text)
    assert words in one_line(excinfo)


def test_family_test_set_dedup():
    task = FamilyRelations()
    train = task.sample_mixed(rng_for(0), 200, [2, 3])
    test = task.test_set(3, per_bucket=50, difficulties=[2, 3, 9], exclude=task.keys(train))
    keys = task.keys(test)
    assert len(keys) == 150 and not keys & task.keys(train)
    assert [int(test.labels[test.difficulty == d].sum()) for d in (2, 3, 9)] == [25, 25, 25]


@pytest.mark.parametrize("name", ["graph", "boolean", "family"])
def test_score_counts_logit_signs_against_labels_per_difficulty(name):
    task = base.get_task(name)
    batch = task.sample_mixed(rng_for(3), 12, task.train_difficulties[:2])
    labels = batch.labels
    perfect = torch.where(labels > 0.5, 2.0, -2.0)
    result = task.score(batch, perfect)
    assert result["accuracy"] == 1.0 and result["rows"] == 12
    assert set(result["by_difficulty"]) == set(batch.difficulty.tolist())
    wrong_first = perfect.clone()
    wrong_first[0] = -wrong_first[0]
    result = task.score(batch, wrong_first)
    assert result["accuracy"] == pytest.approx(11 / 12)
    first = int(batch.difficulty[0])
    share = int((batch.difficulty == first).sum())
    assert result["by_difficulty"][first] == pytest.approx((share - 1) / share)
    assert row_hits(torch.zeros(2), torch.tensor([0.0, 1.0])).tolist() == [1.0, 0.0]  # logit 0 predicts 0
    with pytest.raises(TaskError, match="empty batch"):
        task.score(task.sample(rng_for(0), 0, task.train_difficulties[0]), torch.zeros(0))
    with pytest.raises(TaskError, match="do not match"):
        task.score(batch, torch.zeros(3))
