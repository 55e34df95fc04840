"""Family relations (seed 002): is a queried relation implied by a chain of stated ones?"""

from __future__ import annotations

import re
from collections import deque

import numpy as np

from .base import ReasoningBatch, TaskError, register_task
from .reasoning import CLS, PAD, SEP, ReasoningTask, Row, pad_ids


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
class FamilyRelations(ReasoningTask):
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

    Text syntax (`from_text` / `to_text`): the words separated by spaces, e.g. ``Alice is the parent of
    Bob . Bob is the parent of Carl . query : Alice is the grandparent of Carl``; case is ignored;
    ``[CLS]``/``[SEP]`` may be given or left out. Facts may use any relation word. `from_text` sets
    ``difficulty`` to the number of facts on the shortest chain linking the two query names (0 if none).

    De-cued generator (``decued=True``, our addition; the default is the paper's generator above). The
    paper's rows carry three shortcuts (looped.eval.shortcuts): the queried relation word with the depth
    (a negative's offset lies ±2/±4 from an apex chain's, so it is more often extreme), the word alone,
    and the sum of the stated offsets (chain facts are always written E_i → E_i+1, so their offsets add up
    to the answer). Here:

    - u is uniform over 0..K (monotone chains included: under apex routing every depth-2 chain answers
      "sibling", which leaves a negative nothing else to ask);
    - a negative asks the answer of another chain of the same depth, offset 2u' − K with u' uniform over
      0..K minus u, so the queried word has the same distribution under both labels at every depth;
    - each chain fact is written in a random direction ("E_i is the parent of E_i+1" or "E_i+1 is the
      child of E_i"), so the stated offsets no longer add up to the answer.

    Facts, distractors, layout and vocabulary are as above; labels stay 50/50.
    """

    names = FAMILY_NAMES
    vocab = [PAD, CLS, SEP, *FAMILY_WORDS, *FAMILY_NAMES, *(relation_word(o) for o in range(-12, 13))]
    max_length = 128
    train_difficulties = [2, 3, 4, 5]
    test_difficulties = list(range(2, 10))
    test_per_bucket = 2000
    max_difficulty = 12
    input_kind = "tokens"
    paper_width = {"dim": 256, "heads": 8, "ffn_dim": 1024}
    paper_train_size = 60_000
    eval_steps = (1, 2, 4, 6, 8, 10, 12, 16, 20)
    difficulty_name = "chain depth"
    answer_words = ("true", "false")
    # The DRT study's recipe on the de-cued generator (looped reproduce drt --tasks family_decued).
    aliases = {"family_decued": {"decued": True}}
    _id = {word: j for j, word in enumerate(vocab)}
    _lower_id = {word.lower(): j for j, word in enumerate(vocab)}
    assert len(vocab) == 54, len(vocab)
    _NAME0 = vocab.index(FAMILY_NAMES[0])
    _SIBLING = vocab.index("sibling")

    def __init__(self, decued: bool = False) -> None:
        self.decued = bool(decued)

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

    def _row(self, rng: np.random.Generator, difficulty: int, label: int | None) -> Row:
        k = difficulty
        people = rng.permutation(len(FAMILY_NAMES)).tolist()
        chain, outside = people[: k + 1], people[k + 1:]
        if self.decued:
            ups = int(rng.integers(0, k + 1))
        else:
            ups = int(rng.integers(1, k)) if k >= 2 else int(rng.integers(0, 2))
        hops = [1] * ups + [-1] * (k - ups)
        facts = [(chain[j], hop, chain[j + 1]) for j, hop in enumerate(hops)]
        if self.decued:  # the same fact read from the other end: "Y is the child of X" for "X is the parent of Y"
            facts = [(y, -hop, x) if flip else (x, hop, y)
                     for (x, hop, y), flip in zip(facts, rng.random(k) < 0.5)]
        facts += self._distractors(rng, outside, int(rng.integers(2, 5)))
        truth = sum(hops)
        asked = truth
        if label == 0 and self.decued:
            other_ups = int(rng.integers(0, k))  # uniform over 0..k without `ups`
            asked = 2 * (other_ups + (other_ups >= ups)) - k
        elif label == 0:
            deltas = [d for d in (-4, -2, 2, 4) if abs(truth + d) <= MAX_OFFSET]
            asked = truth + deltas[int(rng.integers(len(deltas)))]
        ids = [self._id[CLS]]
        for j in rng.permutation(len(facts)).tolist():
            ids += self._fact(*facts[j])
        ids += [self._id["query"], self._id[":"], *self._fact(chain[0], asked, chain[-1])[:-1], self._id[SEP]]
        return Row(tokens=pad_ids(ids, self.max_length), label=int(label == 1), difficulty=k)

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

    def from_text(self, text: str) -> ReasoningBatch:
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
        return self._collate([Row(tokens=pad_ids(ids, self.max_length), label=label, difficulty=hops)])
