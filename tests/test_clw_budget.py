"""Seed 000 budgets: every row of both budgets within the seed's maximum difference of the workspace row."""

from pathlib import Path

import pytest

from looped.config import to_dict
from looped.experiments import clw
from looped.models import arch_names, build_model, get_arch
from looped.models.budget import count_parameters, solve_ffn
from looped.train import load_run_config

ROOT = Path(__file__).resolve().parents[1] / "configs" / "clw"

# counts the shipped recipes must have (regenerate with `looped reproduce clw --write-recipes`)
EXPECTED = {
    "small": {"workspace": 918_383, "workspace_retention": 918_383, "plain": 918_504, "shared_loop": 918_522,
              "adaptive_exit": 918_524, "anchored_loop": 918_380, "conditioned_dense": 918_379},
    "medium": {"workspace": 101_709_714, "workspace_retention": 101_709_714, "plain": 101_715_772,
               "shared_loop": 101_708_450, "adaptive_exit": 101_708_452, "anchored_loop": 101_711_503,
               "conditioned_dense": 101_711_502},
}


@pytest.mark.parametrize("budget", ["small", "medium"])
def test_shipped_rows_are_budget_matched(budget):
    counts = {row: clw.parameters(load_run_config(ROOT / "full" / budget / f"{row}.yaml").model.__dict__)
              for row in clw.ROWS}
    assert counts == EXPECTED[budget]
    limit = clw.BUDGETS[budget]["max_difference"]
    assert all(abs(c - counts["workspace"]) <= limit for c in counts.values())
    assert abs(counts["workspace"] - clw.BUDGETS[budget]["target"]) < 400


def test_larger_budget_reproduces_the_seeds_maximum_difference():
    """With the seed's larger widths the plain row lands exactly 6,058 above the workspace row."""
    assert EXPECTED["medium"]["plain"] - EXPECTED["medium"]["workspace"] == 6058


def test_cpu_recipes_use_the_small_widths():
    for row in clw.ROWS:
        cpu = load_run_config(ROOT / "cpu" / f"{row}.yaml").model
        full = load_run_config(ROOT / "full" / "small" / f"{row}.yaml").model
        assert cpu == full


def test_solver():
    f, total = solve_ffn("transformer", 1_000_000, dim=64, heads=4, layers=2)
    assert abs(total - 1_000_000) <= (2 * 64 + 1) * 2 // 2 + 1
    assert count_parameters("transformer", dim=64, heads=4, layers=2, ffn_dim=f) == total


def test_params_cli_reports_components_and_solves(capsys):
    from looped.cli import main
    assert main(["params", str(ROOT / "full/small/workspace.yaml"), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"total": 918383' in out and '"workspace"' in out
    assert main(["params", "workspace", "--set", "model.dim=192", "--set", "model.heads=6",
                 "--solve-ffn", "918000"]) == 0
    assert '"ffn_dim": 1093' in capsys.readouterr().out


@pytest.mark.parametrize("arch", arch_names())
def test_the_meta_device_count_that_skips_initialisers_is_the_built_models_count(arch):
    """count_parameters skips in-place initialisers on the meta device (models/budget.py): a skipped op that
    changed a shape, or a model whose size depended on one, would make every budget-matched table wrong."""
    fields = {k: v for k, v in to_dict(get_arch(arch).tiny_config()).items() if v is not None and k != "arch"}
    built = sum(p.numel() for p in build_model(get_arch(arch).config(**fields)).parameters())
    assert count_parameters(arch, **fields) == built > 0
    assert count_parameters(arch, **fields) == built  # the second answer comes from the cache
