"""The README's `looped compare` block (looped.experiments.compare_front): budgets in order of updates, rows
missing from one budget shown as a dash, and the in-words tally counting a difference only beyond two standard
errors (staleness against the committed tables: tests/test_readme_blocks.py). Fake tables live in tmp folders."""

from __future__ import annotations

import json
from pathlib import Path

from looped.experiments import compare_front

FLOOR = {"sha256": "ab", "bytes": 16, "rates": {"gzip -9": 2.5}}


def row(name: str, mean: float, sd: float | None, seeds: int = 3, updates: int = 90) -> dict:
    return {"row": name, "arch": name.split("@")[0], "seeds": seeds, "parameters": 1000, "updates": updates,
            "bits_per_byte_mean": mean, "bits_per_byte_sd": sd}


def write(results: Path, steps: int, rows: list[dict], name: str = "kjv") -> None:
    folder = results / "compare" / f"{name}_{steps}steps"
    folder.mkdir(parents=True)
    archs = [r["row"] for r in rows if "@" not in r["row"]]
    (folder / "table.json").write_text(json.dumps({"rows": rows, "verdicts": [f"verdict at {steps}"], "floor": FLOOR,
                                                   "plan": {"steps": steps, "options": {"archs": archs}}}))


def test_budgets_are_columns_in_order_of_updates_and_rows_missing_from_one_show_a_dash(tmp_path):
    results = tmp_path / "results"
    write(results, 270, [row("transformer", 3.0, 0.01), row("workspace", 2.9, 0.01)])
    write(results, 90, [row("transformer", 3.3, 0.01)])  # written second, shown first
    block = compare_front.compare_block(results)
    header = next(line for line in block.splitlines() if line.startswith("| row |"))
    assert header.index("90 updates") < header.index("270 updates")
    (workspace,) = [line for line in block.splitlines() if line.startswith("| workspace |")]
    assert workspace.split("|")[2].strip() == "–"
    assert "2.900 ± 0.010 (n=3)" in workspace
    assert block.index("verdict at 90") < block.index("verdict at 270")


def test_the_tally_counts_only_differences_beyond_two_standard_errors(tmp_path):
    results = tmp_path / "results"
    write(results, 90, [row("transformer", 3.00, 0.01), row("shared_loop", 2.90, 0.01),  # 10 SE: better
                        row("workspace", 2.99, 0.01),  # 0.01 < 2 x 0.008: indistinguishable
                        row("anchored_loop", 2.95, None, seeds=1),  # one seed: no SD, cannot be told apart
                        row("transformer@flops", 2.80, 0.01, updates=300)])
    words = next(line for line in compare_front.compare_block(results).splitlines() if "In words" in line)
    assert "at equal parameters the looped rows against the plain one: 1 better, 2 indistinguishable" in words
    assert "at equal training FLOPs the looped rows against the plain one: 2 worse, 1 indistinguishable" in words


def test_no_committed_comparison_says_so(tmp_path):
    assert "No `looped compare` result is committed yet." in compare_front.compare_block(tmp_path)


def test_the_fields_comparison_is_its_own_table_not_a_budget_column_of_the_default_rows(tmp_path):
    """Its FLOP-matched plain row trains to another target than the default rows': one column would mix them."""
    results = tmp_path / "results"
    write(results, 90, [row("transformer", 3.3, 0.01), row("workspace", 3.2, 0.01)])
    field = [row("transformer", 3.3, 0.01), row("prelude_coda", 3.1, 0.01),
             row("transformer@flops", 2.9, 0.01, updates=420)]
    for r, flops, depth in zip(field, (1.2e12, 5.6e12, 5.6e12), (None, 6, None)):
        r.update(train_flops=flops, best_depth=depth, inference_flops_per_token=2.16e6)
    write(results, 90, field, name="field_kjv")
    block = compare_front.compare_block(results)
    header = next(line for line in block.splitlines() if line.startswith("| row |"))
    assert header.count("updates: held-out") == 1 and "| prelude_coda | 90 |" not in block.split("**The field")[0]
    section = block.split("**The field's looped LMs**")[1]
    assert "`looped compare --archs transformer prelude_coda`" in section
    assert "| prelude_coda | 90 | 5.60 T | 3.100 ± 0.010 (n=3) | 6 | 2.16 M |" in section
    assert "| transformer@flops | 420 | 5.60 T | 2.900 ± 0.010 (n=3) | — |" in section
    assert "at equal parameters the looped rows against the plain one: 1 better" in section
    assert "part of every difference is the block, not the looping" in section
