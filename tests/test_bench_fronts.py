"""The README's benchmark tables (looped.experiments.bench_fronts) and Chomsky-suite tables
(looped.experiments.chomsky_fronts): a block follows its committed records value by value (one changed figure
changes exactly the line that shows it, so a README left stale fails tests/test_readme_blocks.py), a goal's verdict
follows the goal constant, and a record that is not committed reads as a line saying so. Edited copies of the
records live in tmp folders only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import changed_lines

from looped.bench import train as train_bench
from looped.experiments import bench_fronts, chomsky_fronts
from looped.experiments.summary import BLOCKS

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
FOLDERS = ("bench", "chomsky_cpu")  # what the blocks read, with results/quickstart.json


def copy_results(tmp_path: Path) -> Path:
    """The committed records the blocks read, copied to tmp_path/results/; the results root."""
    root = tmp_path / "results"
    for folder in FOLDERS:
        shutil.copytree(RESULTS / folder, root / folder)
    shutil.copy(RESULTS / "quickstart.json", root / "quickstart.json")
    return root


def set_value(path: Path, keys: tuple, value) -> None:
    """Set one value of a JSON record, found by its keys (and list indices)."""
    record = json.loads(path.read_text())
    inner = record
    for k in keys[:-1]:
        inner = inner[k]
    assert keys[-1] in inner if isinstance(inner, dict) else keys[-1] < len(inner), (path, keys)
    inner[keys[-1]] = value
    path.write_text(json.dumps(record))


RENDER = {"benchmarks": bench_fronts.benchmarks_block, "performance": bench_fronts.performance_block,
          "scaling": bench_fronts.scaling_block, "chomsky results": chomsky_fronts.results_block}
# (block, record under results/, the keys of the value changed, its new value, what the one changed line says)
EDITS = [
    ("benchmarks", "quickstart.json", ("bits_per_byte",), 2.5, "**2.5000 bits/byte**"),
    ("benchmarks", "bench/train.json", ("ratio", "median_of_pairs"), 0.5, "**0.500** (goal ≥ 0.95, missed)"),
    ("benchmarks", "bench/rlt.json", ("ratios", "rlt1_over_rlt0"), 1.5, "step time **1.50** (goal ≤ 2, met)"),
    ("benchmarks", "bench/think.json", ("goals", "core_latency_linear", "fits", "8", "r2"), 0.9,
     "R² 0.9997 / 0.9000 / 0.9941 (goal ≥ 0.98 at every batch, missed)"),
    ("performance", "bench/clw_decode.json",
     ("decode", "workspace_over_anchored_tokens_per_s", "median_of_token_pairs"), 0.85, "**0.850** (goal ≥ 0.8, met)"),
    ("performance", "bench/exit.json", ("batches", "8", "time_saving_over_flop_saving", "stream"), 0.75,
     "stream **0.75** (met)"),
    ("scaling", "bench/scaling.json", ("decode", "curves", "workspace", "time_exponent"), 0.5, "| workspace |"),
    ("chomsky results", "chomsky_cpu/parity_check_lstm.json", ("lengths", 0, "prefix_token_accuracy"), 0.5,
     "| `parity_check` | LSTM 1 | 50.0 |"),
]


@pytest.mark.parametrize("name, record, keys, value, says", EDITS, ids=[f"{e[0]}: {e[1]}" for e in EDITS])
def test_one_changed_figure_changes_the_line_that_shows_it(tmp_path, name, record, keys, value, says):
    render = RENDER[name]
    committed = render(RESULTS)
    assert committed in (REPO / "README.md").read_text()  # the README holds the block as committed
    results = copy_results(tmp_path)
    assert render(results) == committed  # the block reads nothing but the copied records
    set_value(results / record, keys, value)
    changed = changed_lines(committed, render(results))
    assert len(changed) == 1 and says in changed[0], changed


def test_a_verdict_follows_the_goal_constant_not_a_typed_word(monkeypatch):
    assert "**0.975** (goal ≥ 0.95, met)" in bench_fronts.benchmarks_block(RESULTS)
    monkeypatch.setattr(train_bench, "TARGET_RATIO", 0.99)
    assert "**0.975** (goal ≥ 0.99, missed)" in bench_fronts.benchmarks_block(RESULTS)


def test_one_record_not_committed_reads_as_such_and_leaves_the_other_lines(tmp_path):
    committed = bench_fronts.benchmarks_block(RESULTS)
    results = copy_results(tmp_path)
    (results / "bench" / "think.json").unlink()
    (changed,) = changed_lines(committed, bench_fronts.benchmarks_block(results))
    assert changed.startswith("| seed 002 core vs chain of thought at inference | "
                              "`results/bench/think.json` is not committed yet |")
    assert "`looped bench think --out results/bench/think.json`" in changed  # the command stays named


@pytest.mark.parametrize("name", RENDER)
def test_without_records_a_block_says_so_and_writes_nothing(tmp_path, name):
    block = RENDER[name](tmp_path)
    if name in ("benchmarks", "performance"):  # a line per record: each says its file is not committed
        lines = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line][1:]
        assert lines and all("is not committed yet" in line for line in lines)
    else:
        assert ("is not committed yet" in block or "holds no `looped lengths` record yet" in block) and "|" not in block
    assert list(tmp_path.iterdir()) == []


def test_the_task_table_reads_the_task_classes_and_the_papers_figures():
    block = chomsky_fronts.tasks_block(RESULTS)
    assert "| `parity_check` | R | 1-40 | 502 positions at n = 500 | 1/2 | 52.0 | 100.0 |" in block
    assert "| `stack_manipulation` | DCF | 1-40 | 1,002 positions at n = 500 | 1/3 | 57.5 | 59.1 |" in block
    assert "| `solve_equation` | DCF | 3-40 |" in block


def test_the_papers_step_ratios_are_derived_from_its_two_figures():
    block = bench_fronts.performance_block(RESULTS)
    assert "| 4.17–4.30 (seed 003, CPU, 4+4) |" in block and "| 1.84–1.89 (seed 003) |" in block


def test_every_new_block_is_a_readme_block_with_its_own_markers():
    begins = [b[0] for b in BLOCKS]
    assert all(begin in begins for begin, _, _ in (*bench_fronts.BLOCKS, *chomsky_fronts.BLOCKS))
    assert len(set(begins)) == len(begins)
