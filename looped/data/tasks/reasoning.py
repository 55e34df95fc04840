"""Reasoning tasks of seed 002 (DRT): graph reachability, nested boolean logic, family relations.

Each task is a binary classifier over one instance per row (`ReasoningBatch`), with

  sample(rng, n, difficulty)          n rows of exactly that difficulty
  sample_mixed(rng, n, difficulties)  an equal share per difficulty, rows shuffled
  test_set(seed, per_bucket, ...)     per-difficulty test rows, minus any row seen in `exclude`
  encode(text) / to_text(batch, i)    a user's own instance in a small text syntax, and back
  render(batch, i)                    a human-readable example with its label
  label_of(batch, i)                  the label from an independent reference solver (for tests)
  row_key(batch, i)                   bytes identifying a row's input, for de-duplication

Generation follows SPEC §2 (the paper's generators); where the spec leaves a choice open, the choice
is written in the class docstring. All randomness comes from the numpy Generator that is passed in,
so equal generators give equal batches.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from .base import ReasoningBatch, TaskError, register_task, rng_for

__all__ = [
    "FamilyRelations",
    "GraphReachability",
    "NestedBoolean",
    "balanced_labels",
    "concat_batches",
    "evaluate_boolean_reference",
    "nesting_depth",
    "relation_word",
    "row_hits",
    "shortest_hops",
]

PAD, CLS, SEP = "[PAD]", "[CLS]", "[SEP]"

# ============================================================================ shared machinery


@dataclass
class _Row:
    """One generated instance before collation: padded tokens plus fixed-shape extras."""

    tokens: np.ndarray  # (max_length,) int64, PAD = 0
    label: int
    difficulty: int
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def key(self) -> bytes:
        return _key_bytes(self.tokens, self.extras)


def _key_bytes(tokens: np.ndarray, extras: dict[str, np.ndarray]) -> bytes:
    """The identity of a row's input: its token bytes, then every extra (sorted by name)."""
    parts = [np.ascontiguousarray(tokens, dtype=np.int64).tobytes()]
    parts += [np.ascontiguousarray(extras[name]).tobytes() for name in sorted(extras)]
    return b"".join(parts)


def _pad(ids: list[int], length: int) -> np.ndarray:
    out = np.zeros(length, dtype=np.int64)
    out[: len(ids)] = ids
    return out


def balanced_labels(rng: np.random.Generator, n: int) -> np.ndarray:
    """n labels, ⌈n/2⌉ positive and ⌊n/2⌋ negative, in random order (exact 50/50 for even n)."""
    labels = np.zeros(n, dtype=np.int64)
    labels[: (n + 1) // 2] = 1
    return rng.permutation(labels)


def concat_batches(batches: list[ReasoningBatch]) -> ReasoningBatch:
    """Rows of all batches, in order (ReasoningBatch.concat; kept for older imports)."""
    return ReasoningBatch.concat(batches)


def row_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-row correctness (n,) float64 on the CPU: the prediction is label 1 where the logit is > 0."""
    if logits.shape != labels.shape:
        raise TaskError(f"logits of shape {tuple(logits.shape)} do not match labels of shape {tuple(labels.shape)}")
    return ((logits.detach().float().cpu() > 0) == (labels.detach().cpu() > 0.5)).double()


def _select(batch: ReasoningBatch, index: torch.Tensor) -> ReasoningBatch:
    return ReasoningBatch(
        tokens=batch.tokens[index],
        labels=batch.labels[index],
        padding=batch.padding[index],
        difficulty=batch.difficulty[index],
        extras={name: value[index] for name, value in batch.extras.items()},
    )


class _ReasoningTask:
    """Batching, mixing, test sets and de-duplication shared by the three tasks.

    A subclass supplies `_row(rng, difficulty, label)` (label None: the task picks its natural
    label), `_check_difficulty`, `label_of`, `to_text`, `encode` and `render`.
    """

    name: str
    vocab: list[str]
    max_length: int
    train_difficulties: list[int]
    test_difficulties: list[int]
    test_per_bucket: int
    balanced: bool = True  # 50/50 labels by construction; False: natural labels
    _extra_names: tuple[str, ...] = ()

    # ---------------------------------------------------------------- to implement per task

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> _Row:
        raise NotImplementedError

    def _check_difficulty(self, difficulty: int) -> None:
        raise NotImplementedError

    def label_of(self, batch: ReasoningBatch, i: int) -> int:
        raise NotImplementedError

    def _test_view(self) -> _ReasoningTask:
        """The task configured for test rows (the graph task changes its node-count range)."""
        return self

    # ---------------------------------------------------------------- sampling

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def sample(self, rng: np.random.Generator, n: int, difficulty: int) -> ReasoningBatch:
        """n rows, all of exactly `difficulty`; 50/50 labels unless the task has natural labels."""
        difficulty = int(difficulty)
        self._check_difficulty(difficulty)
        labels: Iterable[int | None] = balanced_labels(rng, n) if self.balanced else [None] * n
        return self._collate([self._row(rng, difficulty, None if lab is None else int(lab)) for lab in labels])

    def sample_mixed(self, rng: np.random.Generator, n: int, difficulties: list[int]) -> ReasoningBatch:
        """n rows split equally over the k `difficulties` (the first n % k get one row more), shuffled."""
        if not difficulties:
            raise TaskError("sample_mixed needs at least one difficulty")
        share, extra = divmod(n, len(difficulties))
        parts = [self.sample(rng, share + (j < extra), d) for j, d in enumerate(difficulties)]
        batch = concat_batches(parts)
        return _select(batch, torch.from_numpy(rng.permutation(n)))

    def test_set(
        self,
        seed: int,
        per_bucket: int | None = None,
        difficulties: list[int] | None = None,
        exclude: set[bytes] | frozenset[bytes] = frozenset(),
        max_tries: int = 1000,
    ) -> ReasoningBatch:
        """`per_bucket` rows per test difficulty, none of whose `row_key` is in `exclude`.

        Rows are also unique within the returned set. A dropped row is replaced by a fresh one of
        the same label, so balanced tasks stay exactly 50/50 per bucket. Raises TaskError when
        `max_tries` fresh draws in a row all collide (the difficulty has too few distinct instances).
        """
        view = self._test_view()
        rng = rng_for(seed)
        per_bucket = self.test_per_bucket if per_bucket is None else per_bucket
        seen = set(exclude)
        parts = []
        for difficulty in difficulties or view.test_difficulties:
            view._check_difficulty(int(difficulty))
            labels = balanced_labels(rng, per_bucket) if view.balanced else [None] * per_bucket
            rows = [view._fresh_row(rng, int(difficulty), lab, seen, max_tries) for lab in labels]
            parts.append(view._collate(rows))
        return concat_batches(parts)

    def _fresh_row(
        self, rng: np.random.Generator, difficulty: int, label: int | None, seen: set[bytes], max_tries: int
    ) -> _Row:
        for _ in range(max_tries):
            row = self._row(rng, difficulty, None if label is None else int(label))
            key = row.key()
            if key not in seen:
                seen.add(key)
                return row
        raise TaskError(f"{self.name}: no unseen instance of difficulty {difficulty} in {max_tries} draws")

    # ---------------------------------------------------------------- scoring

    def score(self, batch: ReasoningBatch, logits: torch.Tensor) -> dict:
        """Accuracy of final-step `logits` (n,) on `batch`: overall and per difficulty, with the row counts."""
        if len(batch) == 0:
            raise TaskError(f"{self.name}: cannot score an empty batch")
        hits = row_hits(logits, batch.labels)
        difficulty = batch.difficulty.cpu()
        by_difficulty = {int(d): float(hits[difficulty == d].mean()) for d in difficulty.unique().tolist()}
        return {"accuracy": float(hits.mean()), "rows": len(batch), "by_difficulty": by_difficulty}

    # ---------------------------------------------------------------- identity of rows

    def row_key(self, batch: ReasoningBatch, i: int) -> bytes:
        """Bytes of row i's input (tokens, then every extra such as adjacency and query)."""
        extras = {name: value[i].numpy() for name, value in batch.extras.items()}
        return _key_bytes(batch.tokens[i].numpy(), extras)

    def keys(self, batch: ReasoningBatch) -> set[bytes]:
        """`row_key` of every row: pass the union over training/validation sets as `exclude`."""
        return {self.row_key(batch, i) for i in range(len(batch))}

    # ---------------------------------------------------------------- collation

    def _collate(self, rows: list[_Row]) -> ReasoningBatch:
        if rows:
            tokens = torch.from_numpy(np.stack([r.tokens for r in rows]))
        else:
            tokens = torch.zeros(0, self.max_length, dtype=torch.int64)
        extras = {}
        for name in self._extra_names:
            if rows:
                extras[name] = torch.from_numpy(np.stack([r.extras[name] for r in rows]))
            else:
                extras[name] = torch.from_numpy(self._empty_extra(name))
        return ReasoningBatch(
            tokens=tokens,
            labels=torch.tensor([r.label for r in rows], dtype=torch.float32),
            padding=tokens == 0,
            difficulty=torch.tensor([r.difficulty for r in rows], dtype=torch.int64),
            extras=extras,
        )

    def _empty_extra(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def _ids(self, batch: ReasoningBatch, i: int) -> list[int]:
        """Row i's token ids without the padding."""
        return [int(t) for t in batch.tokens[i][~batch.padding[i]]]


# ============================================================================ graph reachability

MAX_NODES = 20
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class _Digraph:
    """A small directed graph under construction (nodes 0..n-1, no self-loops, no parallel edges)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.pred: list[list[int]] = [[] for _ in range(n)]
        self.edges: set[tuple[int, int]] = set()

    def add(self, u: int, v: int) -> None:
        self.edges.add((u, v))
        self.succ[u].append(v)
        self.pred[v].append(u)

    def can_add(self, u: int, v: int) -> bool:
        return u != v and (u, v) not in self.edges

    def dist_from(self, start: int) -> list[int]:
        """Hops from `start` to every node along edges (-1: unreachable)."""
        return _bfs(self.succ, start)

    def dist_to(self, end: int) -> list[int]:
        """Hops from every node to `end` along edges (-1: cannot reach it)."""
        return _bfs(self.pred, end)

    def adjacency(self) -> np.ndarray:
        """(20, 20) attention mask: [v, u] True iff edge u→v, plus self-loops on all 20 positions."""
        mask = np.eye(MAX_NODES, dtype=bool)
        for u, v in self.edges:
            mask[v, u] = True
        return mask


def _bfs(neighbours: list[list[int]], start: int) -> list[int]:
    dist = [-1] * len(neighbours)
    dist[start] = 0
    frontier = [start]
    while frontier:
        nxt = []
        for x in frontier:
            for y in neighbours[x]:
                if dist[y] < 0:
                    dist[y] = dist[x] + 1
                    nxt.append(y)
        frontier = nxt
    return dist


def _candidate_edges(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """`count` uniformly random ordered pairs (u, v) with u != v, drawn in one go for speed."""
    u = rng.integers(0, n, size=count)
    v = (u + rng.integers(1, n, size=count)) % n
    return np.stack([u, v], axis=1)


def _add_distractors(
    rng: np.random.Generator, graph: _Digraph, count: int, allowed: Callable[[int, int], bool],
    after_add: Callable[[], None], tries_per_edge: int = 20,
) -> None:
    """Add up to `count` new random edges that pass `allowed`; `after_add` refreshes its distances.

    Candidates failing `allowed` are rejected and redrawn; the search stops after
    tries_per_edge * count candidates, so a dense constraint can leave fewer than `count` edges.
    """
    budget = tries_per_edge * max(count, 1)
    added = 0
    while added < count and budget > 0:
        chunk = _candidate_edges(rng, graph.n, min(budget, 4 * count + 8))
        budget -= len(chunk)
        for u, v in chunk.tolist():
            if graph.can_add(u, v) and allowed(u, v):
                graph.add(u, v)
                after_add()
                added += 1
                if added == count:
                    return


def _edges_of(adjacency: np.ndarray) -> list[tuple[int, int]]:
    """Edges u→v of an attention mask (self-loops dropped), sorted by (u, v)."""
    vs, us = np.nonzero(adjacency)
    return sorted((int(u), int(v)) for v, u in zip(vs, us) if u != v)


def shortest_hops(adjacency: np.ndarray | torch.Tensor, source: int, target: int) -> int | None:
    """Reference solver: shortest path length source→target in a mask ([v, u] = edge u→v), None if none.

    Written independently of the generator (a plain queue BFS over the mask) so tests can check it.
    """
    adj = np.asarray(adjacency, dtype=bool)
    seen = {source: 0}
    queue = deque([source])
    while queue:
        u = queue.popleft()
        if u == target:
            return seen[u]
        for v in np.nonzero(adj[:, u])[0].tolist():
            if v not in seen:
                seen[v] = seen[u] + 1
                queue.append(v)
    return None


def _search_depth(adjacency: np.ndarray, start: int, backward: bool) -> int:
    """Levels a BFS from `start` discovers (forward along edges, or backward against them)."""
    adj = np.asarray(adjacency, dtype=bool).copy()
    np.fill_diagonal(adj, False)
    if not backward:
        adj = adj.T  # row x now lists x's successors
    level = {start: 0}
    frontier = [start]
    while frontier:
        nxt = []
        for x in frontier:
            for y in np.nonzero(adj[x])[0].tolist():
                if y not in level:
                    level[y] = level[x] + 1
                    nxt.append(y)
        frontier = nxt
    return max(level.values())


@register_task("graph")
class GraphReachability(_ReasoningTask):
    """Directed graph reachability: is there a path from the source to the target node?

    Vocabulary (27 tokens): 0 ``[PAD]``, 1..26 the node letters ``A``..``Z``. Only A..T occur (at most
    20 nodes); U..Z keep the paper's vocabulary size.

    Layout (`max_length` 20): an n-node graph lists its nodes in order, node i as token i+1 at position
    i, then PAD up to 20 positions (``padding`` True there). Extras:

    - ``adjacency`` bool (n, 20, 20): ``adjacency[b, v, u]`` True iff edge u→v (node v attends to u),
      plus a self-loop on every one of the 20 positions, padding included, so no attention row is empty.
      One attention step under this mask moves information exactly one hop: v sees u after k steps iff
      u reaches v in at most k hops.
    - ``query`` int64 (n, 2): (source index, target index), always distinct real nodes.

    ``difficulty`` is the hop count h: positives have a shortest source→target path of exactly h hops;
    negatives are sampled for the bucket h (same node-count range, and for hard negatives the depth
    guarantee below).

    Node counts (`num_nodes_range`): train split n ∈ [max(8, h+2), 16]; test split n ∈
    [max(h+2, 10), min(max(h+6, 16), 20)]; uniform over the range. Edge counts m are uniform over
    [n // 2, 2n].

    - Positive: a random simple path of h hops (h+1 distinct random nodes, first = source, last =
      target), plus m distractor edges drawn uniformly (no self-loops, no duplicates); a candidate that
      would make the shortest source→target path shorter than h is rejected and redrawn, for at most
      20·m candidates (so very constrained graphs can carry fewer than m distractors).
    - Negative (default): a random graph with m distinct edges; (source, target) uniform over the
      ordered pairs with no path. If every pair is connected: the nodes are split at random into two
      halves, the m edges are drawn inside the halves only, source in one half and target in the other.
    - Hard negative (``hard_negatives=True``, needs n ≥ h+3, so the node range starts at max(lo, h+3)):
      a chain of h hops ending at the target, a path of f = min(h, n−h−2) ≥ 1 hops starting at the
      source, plus up to m − f distractors (so h + m edges, like a positive), rejecting any that would
      connect source to target or shorten either chain. Guaranteed, for every hard negative:

      1. no path from source to target;
      2. the source has ≥ 1 out-edge and the target ≥ 1 in-edge;
      3. a backward BFS from the target discovers nodes at distance ≥ h (it needs ≥ h levels to
         exhaust; `local_cue_stats` calls this depth), so under the mask a model with k < h steps sees
         the target's k-hop in-neighbourhood unchanged if an edge source→(a node at distance k+1) were
         added, which would make the instance positive;
      4. a forward BFS from the source discovers nodes at distance ≥ f.

      Positives satisfy 2–4 too (with f = h), so none of these local statistics separates the labels.

    Text syntax (`encode` / `to_text`): ``nodes=12; A>B, B>C, C>D ? A D``: an optional node count
    (default: up to the highest letter used), edges ``U>V`` separated by commas or spaces, then ``?`` and
    the source and target letters. Spaces around ``>`` are free. `encode` sets ``difficulty`` to the
    shortest-path length, or 0 when the target is unreachable.
    """

    vocab = [PAD, *LETTERS]
    max_length = MAX_NODES
    train_difficulties = [1, 2, 3, 4, 5]
    test_difficulties = [1, 2, 3, 4, 6, 8, 10, 12]
    test_per_bucket = 500
    _extra_names = ("adjacency", "query")

    def __init__(self, split: Literal["train", "test"] = "train", hard_negatives: bool = False) -> None:
        if split not in ("train", "test"):
            raise TaskError(f"graph: split must be 'train' or 'test', got {split!r}")
        self.split = split
        self.hard_negatives = bool(hard_negatives)

    # ---------------------------------------------------------------- difficulty and sizes

    @property
    def max_difficulty(self) -> int:
        # A positive needs h+1 path nodes plus one more node (n >= h+2); a hard negative one more.
        return MAX_NODES - 3 if self.hard_negatives else MAX_NODES - 2

    def num_nodes_range(self, difficulty: int, split: str | None = None) -> tuple[int, int]:
        """Inclusive (lo, hi) node counts for h-hop rows of `split` (default: this task's split)."""
        h = difficulty
        split = split or self.split
        if split == "train":
            lo, hi = max(8, h + 2), 16
        else:
            lo, hi = max(h + 2, 10), min(max(h + 6, 16), MAX_NODES)
        return lo, max(lo, hi)  # beyond the paper's ranges (train h > 14) keep the smallest count

    def _check_difficulty(self, difficulty: int) -> None:
        if not 1 <= difficulty <= self.max_difficulty:
            raise TaskError(f"graph: hops must be in 1..{self.max_difficulty}, got {difficulty}")

    def _test_view(self) -> GraphReachability:
        return GraphReachability(split="test", hard_negatives=self.hard_negatives)

    def _empty_extra(self, name: str) -> np.ndarray:
        if name == "adjacency":
            return np.zeros((0, MAX_NODES, MAX_NODES), dtype=bool)
        return np.zeros((0, 2), dtype=np.int64)

    # ---------------------------------------------------------------- generation

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> _Row:
        lo, hi = self.num_nodes_range(difficulty)
        if label == 0 and self.hard_negatives:
            lo = max(lo, difficulty + 3)
        n = int(rng.integers(lo, hi + 1))
        m = int(rng.integers(n // 2, 2 * n + 1))
        if label == 1:
            graph, s, r = self._positive(rng, n, m, difficulty)
        elif self.hard_negatives:
            graph, s, r = self._hard_negative(rng, n, m, difficulty)
        else:
            graph, s, r = self._negative(rng, n, m)
        return _Row(
            tokens=_pad(list(range(1, n + 1)), MAX_NODES),
            label=int(label == 1),
            difficulty=difficulty,
            extras={"adjacency": graph.adjacency(), "query": np.array([s, r], dtype=np.int64)},
        )

    @staticmethod
    def _positive(rng: np.random.Generator, n: int, m: int, h: int) -> tuple[_Digraph, int, int]:
        path = rng.permutation(n)[: h + 1].tolist()
        s, r = path[0], path[-1]
        graph = _Digraph(n)
        for u, v in zip(path, path[1:]):
            graph.add(u, v)
        dist = {"s": graph.dist_from(s), "r": graph.dist_to(r)}

        def allowed(u: int, v: int) -> bool:
            # The shortest path through the new edge is dist(s→u) + 1 + dist(v→r).
            ds, dr = dist["s"][u], dist["r"][v]
            return ds < 0 or dr < 0 or ds + 1 + dr >= h

        def refresh() -> None:
            dist["s"], dist["r"] = graph.dist_from(s), graph.dist_to(r)

        _add_distractors(rng, graph, m, allowed, refresh)
        return graph, s, r

    @staticmethod
    def _random_graph(rng: np.random.Generator, n: int, m: int) -> _Digraph:
        graph = _Digraph(n)
        _add_distractors(rng, graph, m, lambda u, v: True, lambda: None)
        return graph

    def _negative(self, rng: np.random.Generator, n: int, m: int) -> tuple[_Digraph, int, int]:
        graph = self._random_graph(rng, n, m)
        reach = [set(np.nonzero(np.array(graph.dist_from(x)) >= 0)[0].tolist()) for x in range(n)]
        pairs = [(s, r) for s in range(n) for r in range(n) if s != r and r not in reach[s]]
        if pairs:
            s, r = pairs[int(rng.integers(len(pairs)))]
            return graph, s, r
        return self._split_halves(rng, n, m)

    @staticmethod
    def _split_halves(rng: np.random.Generator, n: int, m: int) -> tuple[_Digraph, int, int]:
        """Fallback negative: edges only inside two random halves; source and target in different halves."""
        order = rng.permutation(n).tolist()
        half_of = {x: int(j >= n // 2) for j, x in enumerate(order)}
        graph = _Digraph(n)
        _add_distractors(rng, graph, m, lambda u, v: half_of[u] == half_of[v], lambda: None)
        first, second = order[: n // 2], order[n // 2:]
        s = first[int(rng.integers(len(first)))]
        r = second[int(rng.integers(len(second)))]
        return graph, s, r

    @staticmethod
    def _hard_negative(rng: np.random.Generator, n: int, m: int, h: int) -> tuple[_Digraph, int, int]:
        order = rng.permutation(n).tolist()
        back_chain = order[: h + 1]  # far end ... target: h hops into the target
        f = min(h, n - h - 2)
        fwd_chain = order[h + 1: h + 2 + f]  # source ... end: f hops out of the source
        far, r = back_chain[0], back_chain[-1]
        s, end = fwd_chain[0], fwd_chain[-1]
        graph = _Digraph(n)
        for chain in (back_chain, fwd_chain):
            for u, v in zip(chain, chain[1:]):
                graph.add(u, v)
        dist: dict[str, list[int]] = {}

        def refresh() -> None:
            dist.update(s=graph.dist_from(s), r=graph.dist_to(r), far=graph.dist_from(far), end=graph.dist_to(end))

        def shortens(from_a: list[int], to_b: list[int], u: int, v: int, minimum: int) -> bool:
            return from_a[u] >= 0 and to_b[v] >= 0 and from_a[u] + 1 + to_b[v] < minimum

        def allowed(u: int, v: int) -> bool:
            connects = dist["s"][u] >= 0 and dist["r"][v] >= 0
            return not (
                connects or shortens(dist["far"], dist["r"], u, v, h) or shortens(dist["s"], dist["end"], u, v, f)
            )

        refresh()
        # h + f chain edges plus m - f distractors: the same h + m edges a positive carries.
        _add_distractors(rng, graph, max(m - f, 0), allowed, refresh)
        return graph, s, r

    # ---------------------------------------------------------------- reference solver and text

    def label_of(self, batch: ReasoningBatch, i: int) -> int:
        """1 iff a BFS over the mask finds a path from the query source to the target."""
        s, r = (int(x) for x in batch.extras["query"][i])
        return int(shortest_hops(batch.extras["adjacency"][i].numpy(), s, r) is not None)

    def to_text(self, batch: ReasoningBatch, i: int) -> str:
        """Row i in the `encode` syntax, e.g. ``nodes=9; A>C, B>D ? A D``."""
        n = int((~batch.padding[i]).sum())
        s, r = (int(x) for x in batch.extras["query"][i])
        edges = ", ".join(f"{LETTERS[u]}>{LETTERS[v]}" for u, v in _edges_of(batch.extras["adjacency"][i].numpy()))
        return f"nodes={n}; {edges} ? {LETTERS[s]} {LETTERS[r]}"

    def render(self, batch: ReasoningBatch, i: int) -> str:
        n = int((~batch.padding[i]).sum())
        s, r = (int(x) for x in batch.extras["query"][i])
        adjacency = batch.extras["adjacency"][i].numpy()
        hops = shortest_hops(adjacency, s, r)
        verdict = f"reachable, shortest path {hops} hops" if hops is not None else "not reachable"
        return (
            f"graph: {n} nodes (A-{LETTERS[n - 1]}), {len(_edges_of(adjacency))} edges, "
            f"bucket {int(batch.difficulty[i])} hops\n"
            f"query: is {LETTERS[r]} reachable from {LETTERS[s]}?\n"
            f"text : {self.to_text(batch, i)}\n"
            f"label: {int(batch.labels[i])} ({verdict})"
        )

    def encode(self, text: str) -> ReasoningBatch:
        """One row from the text syntax ``[nodes=N;] U>V, ... ? SOURCE TARGET`` (see class docstring); edges are
        separated by commas or spaces."""
        body = text.strip()
        if not body:
            raise TaskError("graph: empty input (expected e.g. 'A>B, B>C ? A C')")
        declared = None
        match = re.match(r"nodes\s*=\s*(\S+?)\s*;", body)
        if match:
            if not match.group(1).isdigit():
                raise TaskError(f"graph: node count {match.group(1)!r} is not a number")
            declared = int(match.group(1))
            if declared < 2:
                raise TaskError(f"graph: a query needs at least 2 nodes (nodes={declared})")
            if declared > MAX_NODES:
                raise TaskError(f"graph: more than {MAX_NODES} nodes (nodes={declared})")
            body = body[match.end():]
        if body.count("?") != 1:
            raise TaskError("graph: expected exactly one '?' before the source and target nodes")
        edge_text, query_text = body.split("?")
        names = query_text.split()
        if len(names) != 2:
            raise TaskError(f"graph: the query needs two nodes after '?', got {query_text.strip()!r}")
        edges = []
        edge_text = re.sub(r"\s*>\s*", ">", edge_text)  # "A > B" is one edge; commas or spaces separate edges
        for item in filter(None, re.split(r"[,\s]+", edge_text)):
            ends = item.split(">")
            if len(ends) != 2:
                raise TaskError(f"graph: malformed edge {item!r} (expected 'U>V')")
            edges.append((self._node(ends[0].strip(), declared), self._node(ends[1].strip(), declared)))
        s, r = self._node(names[0], declared), self._node(names[1], declared)
        if s == r:
            raise TaskError(f"graph: source and target are the same node {names[0]!r}")
        n = declared if declared is not None else 1 + max([s, r, *(x for e in edges for x in e)])
        graph = _Digraph(n)
        for u, v in edges:
            if graph.can_add(u, v):  # repeated edges and self-loops add nothing to the mask
                graph.add(u, v)
        adjacency = graph.adjacency()
        hops = shortest_hops(adjacency, s, r)
        row = _Row(
            tokens=_pad(list(range(1, n + 1)), MAX_NODES),
            label=int(hops is not None),
            difficulty=hops or 0,
            extras={"adjacency": adjacency, "query": np.array([s, r], dtype=np.int64)},
        )
        return self._collate([row])

    @staticmethod
    def _node(name: str, declared: int | None) -> int:
        if len(name) != 1 or name not in LETTERS:
            raise TaskError(f"graph: unknown node {name!r} (nodes are the capital letters A-T)")
        index = LETTERS.index(name)
        if index >= MAX_NODES:
            raise TaskError(f"graph: node {name!r} would make more than {MAX_NODES} nodes (A-T)")
        if declared is not None and index >= declared:
            raise TaskError(f"graph: unknown node {name!r} (nodes={declared} declares A-{LETTERS[declared - 1]})")
        return index

    # ---------------------------------------------------------------- diagnostics

    def local_cue_stats(self, batch: ReasoningBatch, steps: int = 5) -> dict[str, float]:
        """How often negatives can be refuted from local cues (fractions of the negatives in `batch`).

        - ``target_no_in``: the target has no incoming edge;
        - ``source_no_out_or_target_no_in``: the source has no out-edge or the target no in-edge;
        - ``backward_settles``: a backward BFS from the target runs out of new nodes within `steps`
          expansions (its depth, the largest distance of a node that reaches the target, is < steps);
        - ``backward_depth_le_steps``: the looser reading, depth ≤ steps;
        - ``negatives``: how many negatives were counted.
        """
        counts = {"target_no_in": 0, "source_no_out_or_target_no_in": 0, "backward_settles": 0,
                  "backward_depth_le_steps": 0}
        negatives = [i for i in range(len(batch)) if batch.labels[i] == 0]
        for i in negatives:
            adj = batch.extras["adjacency"][i].numpy().copy()
            np.fill_diagonal(adj, False)
            s, r = (int(x) for x in batch.extras["query"][i])
            no_in, no_out = not adj[r].any(), not adj[:, s].any()
            depth = _search_depth(adj, r, backward=True)
            counts["target_no_in"] += no_in
            counts["source_no_out_or_target_no_in"] += no_in or no_out
            counts["backward_settles"] += depth < steps
            counts["backward_depth_le_steps"] += depth <= steps
        total = max(len(negatives), 1)
        stats = {name: value / total for name, value in counts.items()}
        stats["negatives"] = float(len(negatives))
        return stats


# ============================================================================ nested boolean logic

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
class NestedBoolean(_ReasoningTask):
    """Evaluate a nested boolean expression over T/F with ``&``, ``|``, ``!`` and parentheses.

    Vocabulary (9 tokens): 0 ``[PAD]``, 1 ``[CLS]``, 2 ``T``, 3 ``F``, 4 ``&``, 5 ``|``, 6 ``!``,
    7 ``(``, 8 ``)``.

    Layout (`max_length` 128): ``[CLS]`` then one token per character of the expression (at most 127),
    then PAD. No extras. Label: the value of the expression with precedence ``!`` > ``&`` > ``|``
    (so ``T|F&F`` is true); labels are the natural ones, not balanced.

    Nesting depth (the difficulty): the largest number of parentheses open at once while reading the
    string left to right (`nesting_depth`); ``!T&F`` has depth 0, ``!((T|F)&T)`` depth 2.

    Generation (SPEC §2): depth 0 is an atom — ``T``/``F`` (p .5, each equally likely), ``!T``/``!F``
    (p .25), or ``a op b`` with a, b ∈ {T, F} and op ∈ {&, |} (p .25). Depth d > 0 takes one child of
    depth d−1 and one of depth k ∈ {0..d−1} drawn with weight 2^(d−1−k), in random order, joined as
    ``(L op R)`` with op uniform over {&, |}, then prefixed by ``!`` with p .25. This has nesting depth
    exactly d by construction; an expression longer than 127 characters is thrown away and redrawn.
    Children are plain strings, so the precedence rule (not the generation tree) decides the label:
    ``(T|F&F)`` is read as T|(F&F).

    Text syntax (`encode` / `to_text`): the expression itself, e.g. ``(T&!F)|F`` (whitespace ignored).
    """

    vocab = [PAD, CLS, *BOOLEAN_SYMBOLS]
    max_length = 128
    max_chars = 127
    train_difficulties = list(range(1, 9))
    test_difficulties = list(range(2, 15, 2))
    test_per_bucket = 500
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

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> _Row:
        while True:
            text = self._expression(rng, difficulty)
            if len(text) <= self.max_chars:
                return self._make_row(text, difficulty)

    def _make_row(self, text: str, difficulty: int) -> _Row:
        ids = [self._ids_of[CLS]] + [self._ids_of[ch] for ch in text]
        value = _BooleanParser(text).parse()
        return _Row(tokens=_pad(ids, self.max_length), label=int(value), difficulty=difficulty)

    # ---------------------------------------------------------------- reference solver and text

    def to_text(self, batch: ReasoningBatch, i: int) -> str:
        return "".join(self.vocab[t] for t in self._ids(batch, i)[1:])  # drop [CLS]

    def label_of(self, batch: ReasoningBatch, i: int) -> int:
        return int(evaluate_boolean_reference(self.to_text(batch, i)))

    def render(self, batch: ReasoningBatch, i: int) -> str:
        text = self.to_text(batch, i)
        value = "T" if batch.labels[i] == 1 else "F"
        return f"{text} = {value}  (depth {int(batch.difficulty[i])}, {len(text)} chars, label {int(batch.labels[i])})"

    def encode(self, text: str) -> ReasoningBatch:
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


# ============================================================================ family relations

FAMILY_NAMES = [
    "Alice", "Bob", "Carl", "Dora", "Eve", "Frank", "Grace", "Henry", "Iris", "Jack",
    "Kate", "Leo", "Mia", "Nina", "Oscar", "Paul", "Quinn", "Rose", "Sam", "Tina",
]
MAX_OFFSET = 12
FAMILY_WORDS = ["is", "the", "of", "query", ":", "."]


def relation_word(offset: int) -> str:
    """The one-token name of a signed generation offset (X is the R of Y: X sits `offset` above Y).

    0 sibling; ±1 parent/child; ±2 grandparent/grandchild; ±3 great-grandparent/great-grandchild;
    ±k for k = 4..12: great{k-2}-grandparent / great{k-2}-grandchild (e.g. +4 great2-grandparent).
    """
    if not -MAX_OFFSET <= offset <= MAX_OFFSET:
        raise TaskError(f"family: no relation word for offset {offset}")
    if offset == 0:
        return "sibling"
    base = "parent" if offset > 0 else "child"
    k = abs(offset)
    if k == 1:
        return base
    if k == 2:
        return "grand" + base
    if k == 3:
        return "great-grand" + base
    return f"great{k - 2}-grand{base}"


_OFFSET_OF = {relation_word(o): o for o in range(-MAX_OFFSET, MAX_OFFSET + 1)}


@register_task("family")
class FamilyRelations(_ReasoningTask):
    """Relational composition over shuffled parent/child facts (a signed-offset algebra).

    Vocabulary (54 tokens): 0 ``[PAD]``, 1 ``[CLS]``, 2 ``[SEP]``; 3..8 ``is the of query : .``;
    9..28 the names Alice Bob Carl Dora Eve Frank Grace Henry Iris Jack Kate Leo Mia Nina Oscar Paul
    Quinn Rose Sam Tina; 29..53 the relations for offsets −12..+12 (id = 41 + offset, see
    `relation_word`): sibling = 0, parent +1, child −1, grandparent +2, grandchild −2,
    great-grandparent +3, great-grandchild −3, then great2-grandparent +4 … great10-grandparent +12
    and great2-grandchild −4 … great10-grandchild −12.

    Semantics: "X is the R of Y" states p(X) − p(Y) = offset(R) for a per-name potential p; facts
    compose by adding offsets (Alice parent of Bob, Bob child of Carl ⇒ Alice sibling of Carl).

    Layout (`max_length` 128): ``[CLS]``, the facts ``X is the R of Y .`` (7 tokens each) in random
    order, then ``query : E0 is the R of EK [SEP]``, then PAD. No extras.

    Chain of depth K (the difficulty): K+1 distinct random names E0..EK. Apex routing: u up-hops
    (fact "E_i is the parent of E_i+1", offset +1) followed by K−u down-hops ("E_i is the child of
    E_i+1", offset −1), so the true offset is 2u − K. u is uniform over 1..K−1, so every chain has
    exactly one reversal (for K = 1, u is uniform over {0, 1}). Distractors: 2–4 (uniform) parent/child
    facts among names outside the chain, forming a forest (no cycles, so never contradictory).
    Positive: R is the true relation. Negative: R has offset 2u − K + δ, δ uniform over those of
    {−4, −2, +2, +4} whose result stays within ±12 (same parity as the truth). Labels are 50/50.
    K ranges over 1..12 (12 chain facts + 4 distractors + query take 122 of the 128 tokens).

    Text syntax (`encode` / `to_text`): the words separated by spaces, e.g. ``Alice is the parent of
    Bob . Bob is the parent of Carl . query : Alice is the grandparent of Carl``; case is ignored;
    ``[CLS]``/``[SEP]`` may be given or left out. Facts may use any relation word. `encode` sets
    ``difficulty`` to the number of facts on the shortest chain linking the two query names (0 if none).
    """

    names = FAMILY_NAMES
    vocab = [PAD, CLS, SEP, *FAMILY_WORDS, *FAMILY_NAMES, *(relation_word(o) for o in range(-12, 13))]
    max_length = 128
    train_difficulties = [2, 3, 4, 5]
    test_difficulties = list(range(2, 10))
    test_per_bucket = 2000
    max_difficulty = 12
    _id = {word: j for j, word in enumerate(vocab)}
    _lower_id = {word.lower(): j for j, word in enumerate(vocab)}
    assert len(vocab) == 54, len(vocab)
    _NAME0 = vocab.index(FAMILY_NAMES[0])
    _SIBLING = vocab.index("sibling")

    def _check_difficulty(self, difficulty: int) -> None:
        if not 1 <= difficulty <= self.max_difficulty:
            raise TaskError(f"family: chain depth must be in 1..{self.max_difficulty}, got {difficulty}")

    def _name_id(self, person: int) -> int:
        return self._NAME0 + person

    def _relation_id(self, offset: int) -> int:
        return self._SIBLING + offset

    # ---------------------------------------------------------------- generation

    def _fact(self, x: int, offset: int, y: int) -> list[int]:
        i = self._id
        return [self._name_id(x), i["is"], i["the"], self._relation_id(offset), i["of"], self._name_id(y), i["."]]

    @staticmethod
    def _distractors(rng: np.random.Generator, people: list[int], count: int) -> list[tuple[int, int, int]]:
        """`count` parent/child facts among `people` that form a forest (each joins two components)."""
        component = {p: p for p in people}

        def root(p: int) -> int:
            while component[p] != p:
                p = component[p]
            return p

        facts = []
        while len(facts) < count:
            x, y = rng.choice(people, size=2, replace=False).tolist()
            if root(x) != root(y):
                component[root(x)] = root(y)
                facts.append((x, 1 if rng.random() < 0.5 else -1, y))
        return facts

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> _Row:
        k = difficulty
        people = rng.permutation(len(FAMILY_NAMES)).tolist()
        chain, outside = people[: k + 1], people[k + 1:]
        ups = int(rng.integers(1, k)) if k >= 2 else int(rng.integers(0, 2))
        hops = [1] * ups + [-1] * (k - ups)
        facts = [(chain[j], hop, chain[j + 1]) for j, hop in enumerate(hops)]
        facts += self._distractors(rng, outside, int(rng.integers(2, 5)))
        truth = sum(hops)
        asked = truth
        if label == 0:
            deltas = [d for d in (-4, -2, 2, 4) if abs(truth + d) <= MAX_OFFSET]
            asked = truth + deltas[int(rng.integers(len(deltas)))]
        ids = [self._id[CLS]]
        for j in rng.permutation(len(facts)).tolist():
            ids += self._fact(*facts[j])
        ids += [self._id["query"], self._id[":"], *self._fact(chain[0], asked, chain[-1])[:-1], self._id[SEP]]
        return _Row(tokens=_pad(ids, self.max_length), label=int(label == 1), difficulty=k)

    # ---------------------------------------------------------------- reference solver and text

    def _parse(self, words: list[str]) -> tuple[list[tuple[str, int, str]], tuple[str, int, str]]:
        """(facts, query) as (name, offset, name) triples from a word list without [CLS]/[SEP]."""
        if not words:
            raise TaskError("family: empty input")
        if words.count("query") != 1:
            raise TaskError("family: expected exactly one 'query :' statement")
        split = words.index("query")
        fact_words, query_words = words[:split], words[split + 1:]
        if not query_words or query_words[0] != ":":
            raise TaskError("family: 'query' must be followed by ':'")
        query_words = query_words[1:]
        if query_words and query_words[-1] == ".":
            query_words = query_words[:-1]
        if fact_words and fact_words[-1] != ".":
            fact_words = [*fact_words, "."]
        sentences, current = [], []
        for word in fact_words:
            if word == ".":
                sentences.append(current)
                current = []
            else:
                current.append(word)
        facts = [self._statement(s, f"fact {j + 1}") for j, s in enumerate(sentences)]
        return facts, self._statement(query_words, "query")

    def _statement(self, words: list[str], what: str) -> tuple[str, int, str]:
        relations = _OFFSET_OF
        shape_ok = (
            len(words) == 6 and words[1:3] == ["is", "the"] and words[4] == "of"
            and words[0] in FAMILY_NAMES and words[5] in FAMILY_NAMES and words[3] in relations
        )
        if not shape_ok:
            raise TaskError(f"family: malformed {what} {' '.join(words)!r} (expected 'NAME is the RELATION of NAME')")
        if words[0] == words[5]:
            raise TaskError(f"family: {what} relates {words[0]} to itself")
        return words[0], relations[words[3]], words[5]

    @staticmethod
    def _solve(facts: list[tuple[str, int, str]], query: tuple[str, int, str]) -> tuple[int, int]:
        """Reference solver: (label, hops). Potentials p by BFS from the query's first name over the
        facts read both ways (p(Y) = p(X) − offset); the label is p(X) − p(Y) == the queried offset."""
        links: dict[str, list[tuple[str, int]]] = {}
        for x, offset, y in facts:
            links.setdefault(x, []).append((y, -offset))
            links.setdefault(y, []).append((x, offset))
        start, asked, goal = query
        potential, hops = {start: 0}, {start: 0}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            for y, step in links.get(x, []):
                if y not in potential:
                    potential[y], hops[y] = potential[x] + step, hops[x] + 1
                    queue.append(y)
                elif potential[y] != potential[x] + step:
                    raise TaskError(f"family: contradictory facts about {x} and {y}")
        if goal not in potential:
            return 0, 0
        return int(potential[start] - potential[goal] == asked), hops[goal]

    def _words(self, batch: ReasoningBatch, i: int) -> list[str]:
        return [self.vocab[t] for t in self._ids(batch, i)]

    def label_of(self, batch: ReasoningBatch, i: int) -> int:
        words = [w for w in self._words(batch, i) if w not in (CLS, SEP)]
        return self._solve(*self._parse(words))[0]

    def to_text(self, batch: ReasoningBatch, i: int) -> str:
        return " ".join(w for w in self._words(batch, i) if w not in (CLS, SEP))

    def render(self, batch: ReasoningBatch, i: int) -> str:
        text = self.to_text(batch, i)
        facts, query = text.split(" query : ")
        lines = [f"{sentence.strip()} ." for sentence in facts.split(" .") if sentence.strip()]
        label = int(batch.labels[i])
        return "\n".join([
            *lines,
            f"query: {query} ?",
            f"label: {label} ({'true' if label else 'false'}; chain depth {int(batch.difficulty[i])})",
        ])

    def encode(self, text: str) -> ReasoningBatch:
        """One row from facts and a query in words (see the class docstring for the syntax)."""
        spaced = re.sub(r"\s*([.:])(?=\s|$)", r" \1", text.strip())  # detach '.' and ':' from words
        raw = spaced.split()
        if raw and raw[0].lower() == CLS.lower():
            raw = raw[1:]
        if raw and raw[-1].lower() == SEP.lower():
            raw = raw[:-1]
        if not raw:
            raise TaskError("family: empty input")
        for word in raw:
            if word.lower() not in self._lower_id or word.lower() in (PAD.lower(), CLS.lower(), SEP.lower()):
                raise TaskError(f"family: unknown word {word!r}")
        words = [self.vocab[self._lower_id[w.lower()]] for w in raw]
        facts, query = self._parse(words)
        label, hops = self._solve(facts, query)
        ids = [self._id[CLS]]
        for x, offset, y in facts:
            ids += self._fact(FAMILY_NAMES.index(x), offset, FAMILY_NAMES.index(y))
        x, offset, y = query
        ids += [self._id["query"], self._id[":"]]
        ids += self._fact(FAMILY_NAMES.index(x), offset, FAMILY_NAMES.index(y))[:-1] + [self._id[SEP]]
        if len(ids) > self.max_length:
            raise TaskError(f"family: {len(ids)} tokens, more than {self.max_length}")
        return self._collate([_Row(tokens=_pad(ids, self.max_length), label=label, difficulty=hops)])
