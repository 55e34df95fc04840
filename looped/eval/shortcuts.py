"""Shortcut baselines: predictors fitted on a surface cue of the rows, with no model and no reasoning.

A reasoning task whose labels a cue predicts can be "solved" without the composition it is meant to test,
so a model's accuracy means little until it beats these. Each baseline is a lookup table fitted on the
training rows (cue value -> majority label) and scored on the test rows; see `family_shortcuts`:

    results = family_shortcuts(train_rows, test_rows, trained_difficulties=(2, 5))
    results["relation word + depth"]["by_difficulty"]    # {chain depth: accuracy}

Family relations (looped.data.tasks.family.FamilyRelations), three cues:

- ``relation word + depth``: the queried relation word together with the chain depth;
- ``relation word``: the queried relation word alone;
- ``offset sum``: the queried offset minus the sum of every stated fact's offset (chain facts and
  distractors). Under the paper's generator chain facts are always written E_i -> E_i+1, so the chain's
  stated offsets add up to the answer and only the 2-4 distractors blur it.

Graph reachability: `node_counts` (the number of real nodes per row) and `node_count_cue`, the held-out
accuracy of the better of a lookup and a threshold over it on the hard-negative generator: the tests check
that it stays at chance and the README's learning goals quote it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from ..data.tasks.base import ReasoningBatch, rng_for
from ..data.tasks.family import MAX_OFFSET, relation_word
from ..data.tasks.graph import GraphReachability

__all__ = ["CUE_ROWS", "FAMILY_CUES", "LookupBaseline", "ThresholdBaseline", "family_cues", "family_shortcuts",
           "node_count_cue", "node_counts"]


class LookupBaseline:
    """Cue value -> the majority label of the training rows with that value.

    Ties, and values never seen in training, predict the majority label of all training rows (ties: 1).
    Test buckets are exactly 50/50, so an unseen value scores chance, never better.
    """

    def fit(self, cues: np.ndarray, labels: np.ndarray) -> LookupBaseline:
        """cues (n,) or (n, k) integers, labels (n,) in {0, 1}."""
        cues, labels = _rows(cues), np.asarray(labels).astype(np.int64)
        self.default = int(2 * labels.sum() >= len(labels))
        self.table: dict[tuple, int] = {}
        for key in {tuple(row) for row in cues.tolist()}:
            match = labels[(cues == key).all(axis=1)]
            positives, negatives = int(match.sum()), len(match) - int(match.sum())
            self.table[key] = self.default if positives == negatives else int(positives > negatives)
        return self

    def predict(self, cues: np.ndarray) -> np.ndarray:
        return np.array([self.table.get(tuple(row), self.default) for row in _rows(cues).tolist()], dtype=np.int64)


class ThresholdBaseline:
    """The best rule "label = `above` iff cue >= t" on the training rows (one scalar cue)."""

    def fit(self, cues: np.ndarray, labels: np.ndarray) -> ThresholdBaseline:
        cues, labels = np.asarray(cues).reshape(-1), np.asarray(labels).astype(np.int64)
        best = (-1.0, 0, 1)
        for t in np.unique(np.concatenate([cues, [cues.max() + 1]])).tolist():
            for above in (1, 0):
                accuracy = float((np.where(cues >= t, above, 1 - above) == labels).mean())
                best = max(best, (accuracy, t, above))
        _, self.threshold, self.above = best
        return self

    def predict(self, cues: np.ndarray) -> np.ndarray:
        high = np.asarray(cues).reshape(-1) >= self.threshold
        return np.where(high, self.above, 1 - self.above).astype(np.int64)


def _rows(cues: np.ndarray) -> np.ndarray:
    cues = np.asarray(cues).astype(np.int64)
    return cues.reshape(len(cues), -1)


# ============================================================================ family relations

_RELATION_WORDS = [relation_word(offset) for offset in range(-MAX_OFFSET, MAX_OFFSET + 1)]


def _stated_offsets(vocab: list[str], tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query offset (n,), sum of the facts' stated offsets (n,)) of family rows (n, L).

    Every relation token of a row is a fact's except the last one, which is the query's.
    """
    first = vocab.index(_RELATION_WORDS[0])
    if vocab[first: first + len(_RELATION_WORDS)] != _RELATION_WORDS:
        raise ValueError("family shortcuts: the vocabulary does not list the relations -12..+12 in order")
    is_relation = (tokens >= first) & (tokens < first + len(_RELATION_WORDS))
    offsets = np.where(is_relation, tokens - first - MAX_OFFSET, 0)
    last = tokens.shape[1] - 1 - np.argmax(is_relation[:, ::-1], axis=1)  # the query's relation position
    query = offsets[np.arange(len(tokens)), last]
    return query, offsets.sum(axis=1) - query


def family_cues(batch: ReasoningBatch, vocab: list[str]) -> dict[str, np.ndarray]:
    """Each baseline's cue for every row of a family batch: name -> (n, k) integers."""
    tokens = batch.tokens.numpy()
    query, stated = _stated_offsets(vocab, tokens)
    depth = batch.difficulty.numpy()
    return {
        "relation word + depth": np.stack([query, depth], axis=1),
        "relation word": query[:, None],
        "offset sum": (query - stated)[:, None],
    }


FAMILY_CUES = ("relation word + depth", "relation word", "offset sum")


def family_shortcuts(train: ReasoningBatch, test: ReasoningBatch, trained_difficulties: tuple[int, int],
                     vocab: list[str] | None = None) -> dict[str, dict]:
    """Every family cue's `LookupBaseline`, fitted on `train` and scored on `test`.

    Returns {baseline: {"by_difficulty": {depth: accuracy}, "id", "ood" (means over test depths inside /
    outside `trained_difficulties`, None when there are none), "train_rows", "test_rows"}}.
    """
    if vocab is None:
        from ..data.tasks import get_task

        vocab = get_task("family").vocab
    train_cues, test_cues = family_cues(train, vocab), family_cues(test, vocab)
    train_labels, test_labels = train.labels.numpy() > 0.5, test.labels.numpy() > 0.5
    return {name: _score(LookupBaseline().fit(train_cues[name], train_labels).predict,
                         test_cues[name], test_labels, test.difficulty.numpy(), trained_difficulties,
                         len(train), len(test))
            for name in FAMILY_CUES}


def _score(predict: Callable[[np.ndarray], np.ndarray], cues: np.ndarray, labels: np.ndarray,
           difficulty: np.ndarray, trained: tuple[int, int], train_rows: int, test_rows: int) -> dict:
    hits = predict(cues) == labels
    by_difficulty = {int(d): float(hits[difficulty == d].mean()) for d in np.unique(difficulty).tolist()}
    lo, hi = trained
    inside = [a for d, a in by_difficulty.items() if lo <= d <= hi]
    outside = [a for d, a in by_difficulty.items() if not lo <= d <= hi]
    return {"by_difficulty": by_difficulty, "id": statistics.fmean(inside) if inside else None,
            "ood": statistics.fmean(outside) if outside else None, "train_rows": train_rows,
            "test_rows": test_rows}


# ============================================================================ graph reachability


def node_counts(batch: ReasoningBatch) -> np.ndarray:
    """Real nodes per row of a graph batch (n,): the positions that are not padding."""
    return (~batch.padding).sum(dim=1).numpy()


CUE_ROWS = (1000, 3000)  # generated rows the node-count cue is fitted on, then scored on


def node_count_cue(hops: int, fit_rows: int = CUE_ROWS[0], score_rows: int = CUE_ROWS[1], split: str = "test") -> float:
    """Held-out accuracy of the better of a lookup and a threshold on the node count of hard-negative graphs
    with `hops` hops: fitted on one sample, scored on another (fixed seeds, so the figure is reproducible)."""
    task = GraphReachability(split=split, hard_negatives=True)
    fit, score = task.sample(rng_for(hops), fit_rows, hops), task.sample(rng_for(100 + hops), score_rows, hops)
    counts, labels = node_counts(fit), fit.labels.numpy()
    return max(float((model.fit(counts, labels).predict(node_counts(score)) == score.labels.numpy()).mean())
               for model in (LookupBaseline(), ThresholdBaseline()))
