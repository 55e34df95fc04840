"""Every generated README block (looped.experiments.summary.BLOCKS: claims summary, learning goals, leaderboard,
compare, depth schedules, task quickstarts, each paper's headline results, the benchmark tables, the Chomsky suite's
tables) equals what the committed results give: a README edited by hand, or results committed without
`python -m looped.experiments.summary README.md`, fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from looped.experiments.summary import BLOCKS, rewrite_readme

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


@pytest.mark.parametrize("begin, end, render", BLOCKS, ids=[b[0].split(":")[0].strip("<!- ") for b in BLOCKS])
def test_the_readme_block_is_generated_from_the_committed_results(begin, end, render):
    stale = f"README's {begin!r} block is stale: python -m looped.experiments.summary README.md"
    assert render(RESULTS) in (REPO / "README.md").read_text(), stale


def test_rewriting_the_readme_changes_nothing(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    assert not rewrite_readme(readme, RESULTS), "README is stale: python -m looped.experiments.summary README.md"
