"""Shortcut baselines (looped.eval.shortcuts) and the generators that remove the cues they exploit.

Each cue test fits a baseline on one generated sample and scores it on another, as a user's shortcut
would be trained and tested.
"""

import hashlib

import numpy as np
import pytest
from looped.data.tasks import rng_for
from looped.data.tasks.family import FamilyRelations
from looped.data.tasks.graph import GraphReachability
from looped.eval.shortcuts import (FAMILY_CUES, LookupBaseline, ThresholdBaseline, family_cues, family_shortcuts,
                                   node_count_cue, node_counts)

DEPTHS = list(range(2, 10))  # the family test buckets


# ============================================================================ the baselines themselves


def test_lookup_learns_majority_per_value_and_falls_back_on_unseen_values():
    cues = np.array([1, 1, 1, 2, 2, 3, 3])
    labels = np.array([1, 1, 0, 0, 0, 1, 0])  # 3 is a tie; overall 3 of 7 positive
    model = LookupBaseline().fit(cues, labels)
    assert model.predict(np.array([1, 2, 3, 9])).tolist() == [1, 0, 0, 0]


def test_threshold_finds_the_separating_cut_in_either_direction():
    cues = np.array([10, 11, 12, 13, 14, 15])
    assert ThresholdBaseline().fit(cues, np.array([0, 0, 0, 1, 1, 1])).predict(np.array([12, 13])).tolist() == [0, 1]
    assert ThresholdBaseline().fit(cues, np.array([1, 1, 0, 0, 0, 0])).predict(np.array([11, 12])).tolist() == [1, 0]


def test_family_cues_read_the_query_word_and_the_stated_offsets():
    task = FamilyRelations()
    row = task.from_text("Alice is the parent of Bob . Bob is the child of Carl . Dora is the parent of Eve . "
                         "query : Alice is the grandparent of Carl")
    cues = family_cues(row, task.vocab)
    # Stated offsets +1, -1, +1 (sum 1); queried +2 (grandparent) at chain depth 2.
    assert cues["relation word + depth"].tolist() == [[2, 2]]
    assert cues["relation word"].tolist() == [[2]]
    assert cues["offset sum"].tolist() == [[2 - 1]]


# ============================================================================ family: paper vs de-cued generator


def family_cue_rates(decued: bool, fit_rows: int, test_rows: int) -> dict[str, dict[int, float]]:
    """Every baseline fitted on `fit_rows` rows and scored on `test_rows` other rows, over depths 2-9."""
    task = FamilyRelations(decued=decued)
    fit = task.sample_mixed(rng_for(1), fit_rows, DEPTHS)
    test = task.sample_mixed(rng_for(2), test_rows, DEPTHS)
    results = family_shortcuts(fit, test, trained_difficulties=(min(DEPTHS), max(DEPTHS)), vocab=task.vocab)
    return {name: results[name]["by_difficulty"] for name in FAMILY_CUES}


def test_paper_family_generator_is_solved_by_its_cues():
    """The cues the de-cued generator must remove are real on the paper's rows (so the test below can fail)."""
    rates = family_cue_rates(decued=False, fit_rows=1600, test_rows=1600)
    assert min(rates["relation word + depth"][d] for d in (2, 3)) > 0.8
    assert min(rates["relation word"][d] for d in (2, 3)) > 0.8
    assert min(rates["offset sum"].values()) > 0.62  # ~72 % at every depth


def test_decued_family_generator_leaves_every_cue_at_chance():
    rates = family_cue_rates(decued=True, fit_rows=3200, test_rows=16_000)  # 2,000 test rows per depth
    for name, by_depth in rates.items():
        assert sorted(by_depth) == DEPTHS
        off = {d: round(a, 3) for d, a in by_depth.items() if abs(a - 0.5) > 0.03}
        assert not off, f"{name} predicts the label beyond 50 ± 3 % at depths {off}"


@pytest.mark.parametrize("depth", [1, 2, 5, 12])
def test_decued_family_labels_match_the_solver_and_stay_balanced(depth):
    task = FamilyRelations(decued=True)
    batch = task.sample(rng_for(depth), 200, depth)
    assert int(batch.labels.sum()) == 100
    assert [task.label_of(batch, i) for i in range(len(batch))] == batch.labels.int().tolist()
    reversed_facts = sum(" child of " in task.to_text(batch, i).split(" query ")[0] for i in range(len(batch)))
    assert reversed_facts > 150  # chain facts are written both ways (the paper's: one reversal per chain)


def test_paper_family_generator_is_unchanged_by_the_option():
    """decued=False draws exactly the rows it drew before the option existed (committed results stay valid):
    the fingerprint was taken from the generator before the option was added."""
    batch = FamilyRelations(decued=False).sample_mixed(rng_for(0), 64, list(range(1, 13)))
    digest = hashlib.sha256(batch.tokens.numpy().tobytes() + batch.labels.numpy().tobytes()).hexdigest()
    assert digest[:16] == "9b08db66d515b802"


# ============================================================================ graph: node count of hard negatives


@pytest.mark.parametrize("hops", [8, 10, 12])
def test_hard_negative_node_count_does_not_predict_the_label(hops):
    """At 8-12 test hops n = h + 2 used to mean "positive" (57-60 % from the node count alone)."""
    assert node_count_cue(hops, fit_rows=1000, score_rows=3000) <= 0.52


@pytest.mark.parametrize("split", ["train", "test"])
def test_hard_negative_node_counts_share_one_range_with_positives_at_every_hop(split):
    task = GraphReachability(split=split, hard_negatives=True)
    for hops in range(1, task.max_difficulty + 1):  # 14-17 train hops used to raise "low >= high"
        batch = task.sample(rng_for(hops), 120, hops)
        counts, labels = node_counts(batch), batch.labels.numpy()
        lo, hi = task.num_nodes_range(hops)
        assert lo >= hops + 3
        for label in (0, 1):
            assert lo <= counts[labels == label].min() and counts[labels == label].max() <= hi, (hops, label)
        if hi - lo <= 3:  # few values: both labels must show the whole range
            assert set(counts[labels == 0]) == set(counts[labels == 1]) == set(range(lo, hi + 1)), hops
