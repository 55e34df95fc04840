"""The README's tables of the Chomsky-hierarchy suite (looped/data/tasks/chomsky.py), generated: the facts of each
task from its class and the paper's figures from looped/experiments/chomsky.py, and the measured rows from the
`looped lengths` records committed in results/chomsky_cpu/.

    python -m looped.experiments.summary README.md     # rewrites these blocks with the other generated blocks

    tasks_block(results)     per task: level, trained lengths, the widest test row, chance, the paper's scores
    results_block(results)   per committed record: accuracy by test length, the suite score, chance, the paper's
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from ..data.tasks import get_task
from ..data.tasks.chomsky import SUITE
from ..eval.lengths import widest_row
from .chomsky import PUBLISHED
from .paper_fronts import block, markers
from .render import Column, left, table
from .report import MISSING, figure, interval, paper_figure

FOLDER = "chomsky_cpu"  # the committed records under results/
# a record's file is <task>_<row>.json; the row names the model (results/chomsky_cpu/README.md: how each trained)
# and which of the paper's columns stands beside it
ROWS: dict[str, tuple[str, str | None]] = {
    "baseline": ("Transformer 4 (decoder baseline)", "transformer"),
    "lstm": ("LSTM 1", "lstm"),
    "rlt1": ("RLT-1 2+2", None),
}


# --- the tasks ----------------------------------------------------------------------------------------------------
def fraction(p: float) -> str:
    """A chance accuracy as the fraction it is (1/2, 1/3, 1/5)."""
    return str(Fraction(p).limit_denominator(100))


def trained(task) -> str:
    """The lengths a task trains on: its training range from its shortest length ('3-40')."""
    return interval(n for n in task.train_lengths if n >= task.min_length)


@functools.cache
def widest(name: str) -> tuple[int, int]:
    """(longest test length, positions of its widest row): the check `looped lengths` makes against a model's
    context_length (widest_row, 64 sampled rows). Cached: seconds of sampling, the same in every call."""
    task = get_task(name)
    return widest_row(task, [max(task.test_lengths)])


def published(row: str) -> Column:
    return Column(f"{row.capitalize() if row == 'transformer' else row.upper()} (paper)",
                  lambda name: paper_figure(PUBLISHED[name][row], 1))


TASKS = "chomsky tasks"


def tasks_block(results: Path) -> str:
    """One line per suite task, from its class (looped/data/tasks) and the paper's figures (experiments/chomsky.py);
    `results` is unused: nothing here is measured."""
    columns = [left("task", lambda name: f"`{name}`"), left("level", lambda name: get_task(name).level),
               left("trained lengths", lambda name: trained(get_task(name))),
               Column("widest test row", lambda name: "{1:,} positions at n = {0}".format(*widest(name))),
               Column("chance", lambda name: fraction(get_task(name).chance_accuracy)),
               published("transformer"), published("lstm")]
    intro = ("Each task's level (R regular, DCF deterministic context-free, CS context-sensitive), training lengths, "
             "widest test row (the positions `looped lengths` checks against a model's `context_length`: the widest "
             "of 64 sampled rows) and chance (uniform guessing over the output alphabet) come from its class "
             "(`looped/data/tasks/chomsky.py`, `chomsky_cs.py`); the paper's Transformer / LSTM scores (%) from "
             "`looped/experiments/chomsky.py`, which says where each was read (– = not found here, never guessed).")
    return block(TASKS, intro, table(columns, SUITE))


# --- the measured rows --------------------------------------------------------------------------------------------
Record = tuple[str, dict]  # (file name, the `looped lengths` record)


def records(results: Path) -> list[Record]:
    """The committed records of known rows, in suite order, then in ROWS order."""
    found = {}
    for path in sorted((Path(results) / FOLDER).glob("*.json")):
        task, _, row = path.stem.rpartition("_")
        if task in SUITE and row in ROWS:
            found[(SUITE.index(task), list(ROWS).index(row))] = (path.name, json.loads(path.read_text()))
    return [found[k] for k in sorted(found)]


def row_of(item: Record) -> str:
    return item[0].removesuffix(".json").rpartition("_")[2]


def accuracy_at(length: int) -> Callable[[Record], str]:
    """The record's headline metric at one test length, in %."""
    def cell(item: Record) -> str:
        found = [r for r in item[1]["lengths"] if r["length"] == length]
        return figure(found[0][item[1]["metric"]], 1, 100) if found else MISSING
    return cell


def paper(item: Record) -> str:
    """The paper's figure for the row's kind, as the record carries it (the record's own `published_percent`)."""
    kind = ROWS[row_of(item)][1]
    return paper_figure(item[1]["published_percent"].get(kind), 1) if kind else MISSING


RESULTS = "chomsky results"


def results_block(results: Path) -> str:
    """Accuracy by test length, the suite score, chance and the paper's figure of every committed record; then
    the suite tasks with no record."""
    found = records(results)
    if not found:
        return block(RESULTS, f"`results/{FOLDER}/` holds no `looped lengths` record yet.", [])
    lengths = sorted({r["length"] for _, record in found for r in record["lengths"]})
    columns = [left("task", lambda item: f"`{item[1]['task']}`"), left("row", lambda item: ROWS[row_of(item)][0]),
               *(Column(str(n), accuracy_at(n)) for n in lengths),
               Column("score", lambda item: figure(item[1]["score"], 1, 100)),
               Column("chance", lambda item: figure(item[1]["chance"], 1, 100)), Column("paper", paper),
               left("command", lambda item: f"`looped lengths RUN --out results/{FOLDER}/{item[0]}`")]
    rows = sorted({r["sequences"] for _, record in found for r in record["lengths"]})
    intro = (f"Per-token output accuracy (%) by test length ({', '.join(f'{n:,}' for n in rows)} test rows per "
             "length), the suite score (its mean over the lengths), chance, and the paper's figure for the row's "
             f"kind, from the records `looped lengths` wrote ([`results/{FOLDER}/`](results/{FOLDER}/); its README "
             "says how each RUN was trained).")
    missing = [f"`{task}`" for task in SUITE if task not in {record["task"] for _, record in found}]
    tail = ["", f"No record yet: {', '.join(missing)}."] if missing else []
    return block(RESULTS, intro, [*table(columns, found), *tail])


Render = Callable[[Path], str]
BLOCKS: tuple[tuple[str, str, Render], ...] = tuple(
    (*markers(name), render) for name, render in ((TASKS, tasks_block), (RESULTS, results_block)))

__all__ = ["BLOCKS", "ROWS", "records", "results_block", "tasks_block"]
