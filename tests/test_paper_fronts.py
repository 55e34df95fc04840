"""The README's headline table of each paper's CPU study (looped.experiments.paper_fronts): a block follows the
committed CSVs line by line (one changed result changes exactly the line that shows it, so a README left stale
fails tests/test_readme_blocks.py), a study without results says so, and a study column that was renamed is an
error, not a column silently dropped. Edited copies of the results live in tmp folders only."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
from helpers import changed_lines

from looped.experiments import paper_fronts
from looped.experiments.summary import BLOCKS

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def copy_study(tmp_path: Path, folder: str, *files: str) -> Path:
    """The committed CSVs a block reads, copied to tmp_path/results/<folder>/; the results root."""
    (tmp_path / "results" / folder).mkdir(parents=True)
    for name in files:
        shutil.copy(RESULTS / folder / name, tmp_path / "results" / folder / name)
    return tmp_path / "results"


def set_cell(path: Path, column: str, value: str, **match) -> None:
    """Set `column` of the one CSV row whose columns equal `match`."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    hits = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, (path, match)
    hits[0][column] = value
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


# (study folder, files the block reads, the CSV edited, its column, the row, how the changed line starts)
EDITS = [
    ("clw_cpu", ("results.csv",), "results.csv", "bits_per_byte",
     {"corpus": "enwik8", "row": "workspace", "seed": "11"}, "| workspace |"),
    ("drt_cpu", ("results.csv", "shortcuts.csv"), "results.csv", "ood_accuracy",
     {"task": "family", "arch": "drt", "alpha": "0.0", "seed": "42"}, "| family | drt |"),
    ("rlt_cpu", ("results.csv", "lengths.csv"), "lengths.csv", "final_state_accuracy",
     {"task": "parity", "row": "rlt1", "seed": "42", "length": "256"}, "| parity | 3-40 | 256 |"),
]
RENDER = {"clw_cpu": paper_fronts.clw_block, "drt_cpu": paper_fronts.drt_block, "rlt_cpu": paper_fronts.rlt_block}


@pytest.mark.parametrize("folder, files, edited, column, match, line", EDITS, ids=[e[0] for e in EDITS])
def test_one_changed_result_changes_the_line_that_shows_it(tmp_path, folder, files, edited, column, match, line):
    render = RENDER[folder]
    committed = render(RESULTS)
    assert committed in (REPO / "README.md").read_text()  # the README holds the block as committed
    results = copy_study(tmp_path, folder, *files)
    assert render(results) == committed  # the block reads nothing but the copied files
    set_cell(results / folder / edited, column, "0.123456", **match)
    changed = changed_lines(committed, render(results))
    assert len(changed) == 1 and changed[0].startswith(line), changed


@pytest.mark.parametrize("render", RENDER.values())
def test_a_study_without_results_says_so_and_writes_nothing(tmp_path, render):
    block = render(tmp_path)
    assert "is not committed yet" in block and "|" not in block
    assert list(tmp_path.iterdir()) == []


def test_every_paper_block_is_a_readme_block_with_its_own_markers():
    begins = [b[0] for b in BLOCKS]
    assert all(begin in begins for begin, _, _ in paper_fronts.BLOCKS)
    assert len(set(begins)) == len(begins)


def test_a_renamed_study_column_is_an_error_not_a_dropped_column():
    columns = paper_fronts.picked(paper_fronts.drt_study.MAIN_COLUMNS, "ID %", "OOD %")
    assert [c.header for c in columns] == ["ID %", "OOD %"]
    with pytest.raises(KeyError):
        paper_fronts.picked(paper_fronts.drt_study.MAIN_COLUMNS, "ID accuracy")
