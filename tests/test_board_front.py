"""The README's leaderboard block (looped.experiments.board_front) and `looped reproduce board --report` on a
partial results.csv: the block is generated from the committed results (stale = a failing test), a cell shows n
while seeds are missing, and a cell with no row says so instead of going blank. Fake rows live in tmp folders
only."""

from __future__ import annotations

from pathlib import Path

import pytest

from looped.experiments import board, board_front, board_report, board_study
from looped.experiments.summary import replace_block, rewrite_readme



def add_rows(folder: Path, task: str, family: str, scores, status: str = "ok") -> None:
    table = board_study.results_table(folder)
    for seed, score in enumerate(scores, start=1):
        table.add({"seed": seed, "task": task, "family": family, "arch": family, "parameters": 200_000, "dim": 64,
                   "updates": 1000, "training_flops": "1.5e+12", "score": score, "status": status})


def row_of(block: str, label: str) -> list[str]:
    """The cells of the table row that starts with `label`."""
    (line,) = [line for line in block.splitlines() if line.startswith(f"| {label} |")]
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


@pytest.fixture
def partial(tmp_path) -> Path:
    """A results folder in the middle of seed 2: three finished kjv seeds, one-seed cells, a failed cell."""
    folder = tmp_path / "results" / board_front.FOLDER
    add_rows(folder, "kjv", "transformer", [2.5, 2.6, 2.55])
    add_rows(folder, "parity_check", "transformer", [0.5, 0.6])
    add_rows(folder, "parity_check", "lstm", [1.0])
    add_rows(folder, "graph", "drt", [0.7])
    add_rows(folder, "reverse_string", "rlt", [""], status="failed")
    return tmp_path / "results"


# --- the README block -------------------------------------------------------------------------------------------
def test_a_partial_csv_shows_means_seed_counts_and_what_has_not_run(partial):
    block = board_front.front_block(partial)
    header = row_of(block, "family")
    assert header == ["kjv", "parity_check", "reverse_string", "duplicate_string", "parity", "graph"]
    transformer = dict(zip(header, row_of(block, "Transformer")))
    assert transformer["kjv"] == "2.550"  # all three seeds: no n
    assert transformer["parity_check"] == "55.0 (n=2)"
    assert transformer["parity"] == board_report.NOT_RUN
    assert transformer["graph"] == "n/a"
    assert dict(zip(header, row_of(block, "LSTM")))["parity_check"] == "100.0 (n=1)"
    assert dict(zip(header, row_of(block, "RLT-1 (seed 003)")))["reverse_string"] == "failed"
    assert dict(zip(header, row_of(block, "DRT core (seed 002)")))["graph"] == "70.0 (n=1)"
    published = dict(zip(header, row_of(block, "Transformer, published (Delétang et al.)")))
    assert published["parity_check"] == "52.0" and published["kjv"] == ""
    assert "[the full table](results/board_cpu/table.md)" in block


def test_without_results_every_runnable_cell_is_not_run(tmp_path):
    block = board_front.front_block(tmp_path)
    suites = row_of(block, "family")
    assert set(suites) == set(board.CPU_SUITES)
    for family in board.FAMILIES:
        expected = ["n/a" if board.cannot_run(family, s) else board_report.NOT_RUN for s in suites]
        assert row_of(block, board.LABELS[family]) == expected, family
    assert not (tmp_path / board_front.FOLDER).exists()  # reading the block writes nothing


def test_rewriting_a_readme_replaces_the_block_between_its_markers(partial, tmp_path):
    readme = tmp_path / "README.md"
    text = "intro\n\n" + board_front.BEGIN + "\nold\n" + board_front.END + "\n\nrest\n"
    new = replace_block(text, board_front.BEGIN, board_front.END, board_front.front_block(partial))
    assert new.startswith("intro\n\n" + board_front.BEGIN) and new.endswith(board_front.END + "\n\nrest\n")
    assert "old" not in new and "55.0 (n=2)" in new
    readme.write_text(text)
    with pytest.raises(ValueError, match="no markers"):
        rewrite_readme(readme, partial)  # the other blocks' markers are missing: said, not skipped


# --- the full table through the command line ------------------------------------------------------------------
def test_report_renders_a_partial_csv_through_the_command(partial, capsys):
    from looped.cli import main

    out = partial / board_front.FOLDER
    assert main(["reproduce", "board", "--scale", "cpu", "--report", "--out", str(out),
                 "--runs", str(out.parent / "runs")]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().endswith((out / "table.md").read_text().strip().splitlines()[-1])
    scores = printed.split("## Budget")[0]  # the score table (the budget table has the same row labels)
    lines = {line.split(" | ")[0]: line for line in scores.splitlines() if line.startswith("| ")}
    assert "| 55.0 ± 7.1 (n=2) | not run | not run | not run | n/a (a) |" in lines["| Transformer"]
    assert "| not run | failed |" in lines["| RLT-1 (seed 003)"]  # parity_check not run, reverse_string failed
    assert f"- (a) {board.cannot_run('transformer', 'graph')}" in scores
    assert "| 52.0 | 62.3 | 52.8 |" in lines["| Transformer, published"]
