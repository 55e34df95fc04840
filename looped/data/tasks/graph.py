"""Graph reachability (seed 002): is TARGET reachable from SOURCE along directed edges?"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch

from .base import ReasoningBatch, TaskError, register_task
from .reasoning import PAD, ReasoningTask, Row, pad_ids


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
class GraphReachability(ReasoningTask):
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
    - Hard negative (``hard_negatives=True``, needs n ≥ h+3, so the node range starts at max(lo, h+3) for
      *both* labels: the node count carries no information about the label):
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

    Text syntax (`from_text` / `to_text`): ``nodes=12; A>B, B>C, C>D ? A D``: an optional node count
    (default: up to the highest letter used), edges ``U>V`` separated by commas or spaces, then ``?`` and
    the source and target letters. Spaces around ``>`` are free. `from_text` sets ``difficulty`` to the
    shortest-path length, or 0 when the target is unreachable.
    """

    vocab = [PAD, *LETTERS]
    max_length = MAX_NODES
    train_difficulties = [1, 2, 3, 4, 5]
    test_difficulties = [1, 2, 3, 4, 6, 8, 10, 12]
    test_per_bucket = 500
    _extra_names = ("adjacency", "query")
    input_kind = "graph"
    paper_width = {"dim": 128, "heads": 4, "ffn_dim": 256}
    paper_train_size = 12_000
    eval_steps = (1, 2, 3, 5, 8, 12, 15, 20)
    difficulty_name = "hops"
    answer_words = ("reachable", "unreachable")
    # The DRT study's hard-negative recipe (looped reproduce drt --tasks graph_hard).
    aliases = {"graph_hard": {"hard_negatives": True}}

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
        if self.hard_negatives:
            # A hard negative needs h + 3 nodes. Both labels draw n from the same range, so the node count
            # says nothing about the label (issue 15: at 8-12 hops n = h + 2 used to mean "positive").
            lo = max(lo, h + 3)
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

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> Row:
        # Hard negatives: the range starts at h + 3 for both labels, with hi >= lo (train 14-17 hops used to
        # raise "low >= high" when only the negatives' lower bound was raised, past the range's top).
        lo, hi = self.num_nodes_range(difficulty)
        n = int(rng.integers(lo, hi + 1))
        m = int(rng.integers(n // 2, 2 * n + 1))
        if label == 1:
            graph, s, r = self._positive(rng, n, m, difficulty)
        elif self.hard_negatives:
            graph, s, r = self._hard_negative(rng, n, m, difficulty)
        else:
            graph, s, r = self._negative(rng, n, m)
        return Row(
            tokens=pad_ids(list(range(1, n + 1)), MAX_NODES),
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
        """Row i in the `from_text` syntax, e.g. ``nodes=9; A>C, B>D ? A D``."""
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

    def from_text(self, text: str) -> ReasoningBatch:
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
        row = Row(
            tokens=pad_ids(list(range(1, n + 1)), MAX_NODES),
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


