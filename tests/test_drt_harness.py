"""Seed 002 (DRT) harness: task kind "reasoning" in the Trainer, evaluation grid and analyses, `looped think`,
`looped data show`, the think benchmark and the resumable study runner, all at tiny sizes."""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import looped.train.reasoning as rtask
from looped.cli import data as data_cli
from looped.cli import reasoning as reasoning_cli
from looped.bench import think as think_bench
from looped.config import from_dict
from looped.data.tasks import get_task
from looped.eval.reasoning import (AccuracyGrid, beyond_range_grids, depth_embedding_diagnostic, depth_embedding_variant, evaluate_grid,
                                   id_ood, logits_by_budget, shortcut_accuracy, sufficient_budgets)
from looped.experiments.study import run_study
from looped.experiments import drt, drt_study
from looped.models import build_model
from looped.train import RunConfig, Trainer, load_run_config


REPO = Path(__file__).resolve().parents[1]
TINY_GRAPH_MODEL = {"arch": "drt", "input_kind": "graph", "vocab_size": 27, "max_length": 20, "dim": 16, "heads": 2,
                    "ffn_dim": 32, "depth_rows": 8, "steps_range": [2, 4], "layer_scale": None, "dropout": 0.0}


def tiny_config(**sections) -> dict:
    config = {
        "model": dict(TINY_GRAPH_MODEL),
        "task": {"kind": "reasoning", "name": "graph", "train_size": 128, "val_size": 32, "train_difficulties": [1, 2],
                 "eval_steps": [1, 2, 4, 6], "test_difficulties": [1, 2, 3], "test_per_bucket": 12},
        "optim": {"lr": 1e-2, "weight_decay": 1e-2, "schedule": "cosine", "betas": [0.9, 0.999]},
        "train": {"seed": 1, "batch_size": 32, "max_steps": 40, "log_every": 1, "eval_every": 20, "threads": 1},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def trainer(config: dict, out: Path, **kw) -> Trainer:
    return Trainer(from_dict(RunConfig, config), out, progress=False, log=lambda m: None, **kw)


def losses(run: Path) -> list[tuple[int, float]]:
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(e["step"], e["loss"]) for e in events if "loss" in e]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """One tiny graph model trained for 40 updates, shared by the tests that need a trained run."""
    out = tmp_path_factory.mktemp("drt") / "run"
    trainer(tiny_config(), out).run()
    return out


def tiny_model(**overrides):
    config = from_dict(RunConfig, tiny_config(model=overrides)).model
    return build_model(config).eval()


# ============================================================================ training


def test_training_lowers_the_loss_and_reports_accuracy(trained_run):
    curve = [loss for _, loss in losses(trained_run)]
    assert len(curve) == 40
    assert statistics.fmean(curve[-5:]) < statistics.fmean(curve[:5]) - 0.05
    evals = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()
             if "val_loss" in line]
    assert [e["step"] for e in evals] == [20, 40]
    assert all("val_accuracy" in e and e["val_steps"] == 4 for e in evals)  # T = top of [2, 4]


def test_resume_is_bit_identical(tmp_path):
    config = tiny_config(train={"max_steps": 12, "eval_every": 4, "micro_batch_size": 16},
                         task={"alpha": 0.5})  # alpha > 0: every step's logits enter the loss
    trainer(config, tmp_path / "straight").run()
    trainer(config, tmp_path / "split").run(stop_after=5)
    trainer(config, tmp_path / "split", resume=True).run()
    assert losses(tmp_path / "straight") == losses(tmp_path / "split")
    a = load_file(str(tmp_path / "straight/checkpoints/last/model.safetensors"))
    b = load_file(str(tmp_path / "split/checkpoints/last/model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_batches_walk_epochs_without_replacement_with_deterministic_depths():
    config = from_dict(RunConfig, tiny_config(task={"train_size": 40}))
    task = rtask.ReasoningTrainTask(config, log=lambda m: None)
    batches = [task.global_batch(16) for _ in range(5)]  # 80 rows = exactly two epochs
    keys = [task.task.row_key(b.rows, i) for b in batches for i in range(len(b))]
    all_keys = [task.task.row_key(task.train_rows, i) for i in range(40)]
    assert sorted(keys[:40]) == sorted(all_keys) and sorted(keys[40:]) == sorted(all_keys)
    assert keys[:40] != keys[40:]  # a fresh permutation each epoch
    assert all(2 <= b.steps <= 4 for b in batches) and len({b.steps for b in batches}) > 1
    # a task restored from the state dict continues with exactly the same rows and depth
    again = rtask.ReasoningTrainTask(config, log=lambda m: None)
    again.load_state_dict(json.loads(json.dumps(task.state_dict())))
    mine, theirs = task.global_batch(16), again.global_batch(16)
    assert mine.steps == theirs.steps and torch.equal(mine.rows.tokens, theirs.rows.tokens)
    assert torch.equal(mine.rows.extras["adjacency"], theirs.rows.extras["adjacency"])


def test_same_difficulty_batches_hold_one_difficulty_and_still_walk_every_row_once_per_epoch():
    config = from_dict(RunConfig, tiny_config(task={"train_size": 64, "same_difficulty_batches": True},
                                              train={"batch_size": 8}))
    task = rtask.ReasoningTrainTask(config, log=lambda m: None)
    batches = [task.global_batch(8) for _ in range(16)]  # 128 rows = two epochs, 32 rows per difficulty
    assert all(len(set(b.rows.difficulty.tolist())) == 1 for b in batches)
    keys = [task.task.row_key(b.rows, i) for b in batches for i in range(len(b))]
    all_keys = [task.task.row_key(task.train_rows, i) for i in range(64)]
    assert sorted(keys[:64]) == sorted(all_keys) and sorted(keys[64:]) == sorted(all_keys)
    first = [int(b.rows.difficulty[0]) for b in batches[:8]]
    assert first != sorted(first) and first != sorted(first, reverse=True)  # batches visited in a random order
    mixed = rtask.ReasoningTrainTask(from_dict(RunConfig, tiny_config(task={"train_size": 64})), log=lambda m: None)
    assert any(len(set(mixed.global_batch(8).rows.difficulty.tolist())) > 1 for _ in range(8))


def test_splits_have_spec_sizes_and_are_disjoint():
    tc = from_dict(RunConfig, tiny_config(task={"train_size": None, "train_difficulties": None, "val_size": 200,
                                                "test_per_bucket": 20, "test_difficulties": [1, 6]})).task
    task, train_rows, val = rtask.training_data(tc)
    assert len(train_rows) == 12_000  # SPEC §2: 12,000 graphs, hops 1..5 in equal shares
    assert np.bincount(train_rows.difficulty.numpy()).tolist()[1:] == [2_400] * 5
    test = rtask.test_rows(tc, train_rows, val)
    train_keys, val_keys, test_keys = task.keys(train_rows), task.keys(val), task.keys(test)
    assert len(val_keys) == len(val) and not val_keys & train_keys
    assert len(test) == 40 and not test_keys & (train_keys | val_keys)


def test_boolean_validation_drops_rows_seen_in_training():
    tc = from_dict(RunConfig, tiny_config(task={"name": "boolean", "train_size": 400, "val_size": 400,
                                                "train_difficulties": [1]},
                                          model=drt.model_section("logic", dim=16, heads=2, ffn_dim=32))).task
    task, train_rows, val = rtask.training_data(tc)
    assert len(val) < 400 and not task.keys(val) & task.keys(train_rows)  # few distinct depth-1 expressions


def test_shipped_recipes_load_and_train_through_the_cli(tmp_path, capsys):
    from looped.cli import main

    for scale in ("full", "cpu"):
        for name in ("graph", "logic", "family"):
            config = load_run_config(REPO / f"configs/drt/{scale}/{name}.yaml")
            assert config.task.kind == "reasoning" and config.task.name == drt.TASKS[name]
            tuned = scale == "cpu" and name == "logic"  # drt.CPU_RECIPE_CHANGES
            assert (config.optim.lr, config.optim.warmup_steps) == ((2e-3, 100) if tuned else (3e-4, 0))
            assert config.optim.weight_decay == 1e-2 and config.task.same_difficulty_batches == tuned
    full = load_run_config(REPO / "configs/drt/full/graph.yaml")
    assert build_model(full.model).parameter_counts()["total"] == 205_441
    assert full.train.max_targets // full.train.batch_size == 7_500  # 40 epochs x 12,000 rows / 64
    code = main(["train", str(REPO / "configs/drt/cpu/graph.yaml"), "--out", str(tmp_path / "run"), "--no-progress",
                 "--json", "--set", "model.dim=16", "--set", "model.heads=2", "--set", "model.ffn_dim=32",
                 "--set", "task.train_size=64", "--set", "task.val_size=16", "--set", "train.max_targets=128",
                 "--set", "train.eval_every=0"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out[out.index("\n{") + 1:])["step"] == 2  # after the trainer's log line


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="hard_negatives applies to the graph task only"):
        from_dict(RunConfig, tiny_config(task={"name": "boolean", "hard_negatives": True}))
    with pytest.raises(ValueError, match="input_kind"):
        trainer(tiny_config(task={"name": "family"}), Path("/nonexistent/x")).run()


# ============================================================================ evaluation


def small_test_set():
    task = get_task("graph")
    return task.test_set(7, per_bucket=6, difficulties=[1, 2, 4])


def test_grid_shape_csv_and_single_pass_equals_per_budget_calls(tmp_path):
    model = tiny_model()
    test = small_test_set()
    grid = evaluate_grid(model, test, [4, 1, 2], batch_size=5)
    assert grid.budgets == [1, 2, 4] and grid.difficulties == [1, 2, 4]
    assert grid.accuracy.shape == (3, 3) and grid.rows.tolist() == [6, 6, 6]
    assert ((grid.accuracy >= 0) & (grid.accuracy <= 1)).all()
    assert grid.gate_means is not None and len(grid.gate_means) == 4
    path = grid.write_csv(tmp_path / "grid.csv")
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 9 and set(rows[0]) == {"steps", "difficulty", "accuracy", "rows"}
    again = AccuracyGrid.read_csv(path)
    assert again.budgets == grid.budgets and np.allclose(again.accuracy, grid.accuracy, atol=1e-6)
    with torch.no_grad():  # the core's step t does not depend on the total budget
        fast = logits_by_budget(model, test, [1, 2, 4])
        for t in (1, 2, 4):
            assert torch.allclose(fast[t], model(test, t), atol=1e-5)


def test_heatmap_boundaries_sit_between_trained_and_untrained_cells():
    from looped.eval.reasoning import _boundary_positions
    assert _boundary_positions([1, 2, 4, 6, 8, 10, 12], 1, 5) == [2.5]  # difficulties 1-5 trained: after "4"
    assert _boundary_positions([1, 2, 4, 5, 8, 12], 5, 8) == [2.5, 4.5]  # T 5-8 trained: around "5" and "8"
    assert _boundary_positions([6, 8], 1, 5) == []  # nothing trained on the axis: no line


def test_fixed_depth_heatmap_has_one_row_named_by_its_depth(tmp_path):
    from looped.eval.reasoning import plot_heatmap
    from looped.experiments.reasoning_scores import fixed_depth_label
    assert fixed_depth_label("gnn", "graph") == "6 layers"
    assert fixed_depth_label("fixed_transformer", "logic") == "8 layers"
    assert fixed_depth_label("fixed_transformer", "graph_hard") == "6 layers"  # a recipe alias: its task's config
    assert fixed_depth_label("drt", "graph") is None
    assert fixed_depth_label("ut_act", "graph") is None
    grid = AccuracyGrid([1, 2, 4], [1, 6], np.array([[1.0, 0.5]] * 3), np.array([10, 10]))
    path = plot_heatmap(grid, tmp_path / "fixed.png", trained_difficulties=(1, 5), trained_steps=(1, 1),
                        fixed_depth="6 layers")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_reports_mean_sd_over_seeds_and_act_ponder_steps(tmp_path):
    from looped.eval.stats import format_mean_sd
    from looped.experiments.results import ResultTable
    assert format_mean_sd([0.5, 0.7, 0.9], 2) == "0.70 ± 0.20 (n=3)" and format_mean_sd([0.5], 1) == "0.5 (n=1)"
    table = ResultTable(tmp_path / "results.csv", drt_study.COLUMNS, drt_study.KEY)
    base = dict(task="graph", alpha="0.0", parameters="100", updates="2", train_seconds="1", trained_difficulties="1-5",
                trained_steps="5-8", best_by_difficulty="", val_accuracy="", diagnostic_max_change="", status="ok")
    table.add_many([{**base, "arch": "drt", "seed": s, "id_accuracy": a, "ood_accuracy": "0.5", "step1_12hop": "0.5",
                     "mean_ponder_ood": ""} for s, a in ((42, "1.0"), (43, "0.9"))]
                   + [{**base, "arch": "ut_act", "seed": 42, "id_accuracy": "0.8", "ood_accuracy": "0.5",
                       "step1_12hop": "0.5", "mean_ponder_ood": "3.25"}])
    text = drt_study.table_markdown(table, "cpu")
    drt_row = next(line for line in text.splitlines() if line.startswith("| graph | drt | 0.0 |"))
    act_row = next(line for line in text.splitlines() if line.startswith("| graph | ut_act | 0.0 |"))
    assert "95.0 ± 7.1 (n=2)" in drt_row and "3.25 (n=1)" in act_row and "ACT ponder steps" in text


def test_table_reports_accuracy_by_hop_count_for_every_graph_recipe(tmp_path):
    from looped.experiments.results import ResultTable
    table = ResultTable(tmp_path / "results.csv", drt_study.COLUMNS, drt_study.KEY)
    base = dict(alpha="0.0", parameters="100", updates="2", train_seconds="1", trained_difficulties="1-5",
                trained_steps="5-8", id_accuracy="1.0", ood_accuracy="0.5", val_accuracy="", step1_12hop="0.5",
                diagnostic_max_change="", mean_ponder_ood="", status="ok")
    table.add_many([{**base, "task": "graph", "arch": "gnn", "seed": s, "best_by_difficulty": f"1:1.0@1 6:{a}@1"}
                    for s, a in ((42, "0.5"), (43, "0.7"))]
                   + [{**base, "task": "graph_hard", "arch": "drt", "seed": 42, "step1_12hop": "0.52",
                       "best_by_difficulty": "1:1.0@1 6:1.0@8"},
                      {**base, "task": "logic", "arch": "drt", "seed": 42, "best_by_difficulty": "2:1.0@1"}]
                   + [{**base, "task": "graph", "arch": "drt", "alpha": a, "seed": 42, "best_by_difficulty": "1:1.0@1"}
                      for a in ("0.0", "1.0")])
    text = drt_study.table_markdown(table, "cpu")
    sweep = text.split("## Silent thinking vs intermediate supervision")[1].split("##")[0]
    assert "| drt | 1.0 |" in sweep and "gnn" not in sweep  # the alpha sweep is the core's alone
    lines = text.splitlines()
    assert "| recipe | arch | alpha | seeds | 1 | 6* |" in lines  # hop 6 is outside the trained 1-5
    assert "| graph | gnn | 0.0 | 2 | 100.0 | 60.0 |" in lines  # mean over the two seeds
    assert "| graph_hard | drt | 0.0 | 1 | 100.0 | 100.0 |" in lines
    assert not any(line.startswith("| logic | drt | 0.0 | 1 |") for line in lines)  # graph recipes only
    hard_row = next(line for line in lines if line.startswith("| graph_hard | drt | 0.0 | 100.0"))
    assert "52.0 (n=1)" in hard_row  # the shortcut detector applies to the hard-negative recipe too


def test_variants_are_set_against_their_recipe_seed_for_seed(tmp_path):
    """Issue 27 asks which of the logic recipe's four CPU changes matters: a variant's OOD was only shown beside
    the recipe's mean over three seeds (one of them 18 points below the others), not against its own seed."""
    from looped.experiments.results import ResultTable
    table = ResultTable(tmp_path / "results.csv", drt_study.COLUMNS, drt_study.KEY)
    base = dict(arch="drt", alpha="0.0", parameters="100", updates="2", train_seconds="1", trained_difficulties="1-8",
                trained_steps="4-16", best_by_difficulty="", val_accuracy="", step1_12hop="", id_accuracy="0.9",
                diagnostic_max_change="", mean_ponder_ood="", status="ok")
    table.add_many([{**base, "task": "logic", "seed": s, "ood_accuracy": a}
                    for s, a in ((42, "0.88"), (43, "0.90"), (44, "0.70"))]
                   + [{**base, "task": "logic_paper_lr", "seed": 42, "ood_accuracy": "0.763"},
                      {**base, "task": "logic_1.5x", "seed": 42, "ood_accuracy": "0.913"}])
    text = drt_study.table_markdown(table, "cpu")
    lines = text.split("## Variants: one CPU change reverted, or a longer budget")[1].split("##")[0].splitlines()
    assert ("| logic_paper_lr | drt | optim.lr as the paper's (not 0.002); optim.warmup_steps as the paper's (not 100)"
            " | 90.0 (n=1) | 76.3 (n=1) | -11.7 (n=1) |") in lines
    assert "| logic_1.5x | drt | 1.5x the rows seen | 90.0 (n=1) | 91.3 (n=1) | +3.3 (n=1) |" in lines


def test_sufficient_budgets_and_id_ood_on_a_hand_made_grid():
    budgets, difficulties = [1, 2, 4, 8], [1, 2, 4, 6, 10]
    accuracy = np.array([
        # d=1  d=2  d=4  d=6  d=10
        [0.9, 0.5, 0.5, 0.9, 0.5],  # T=1: d=6 looks great here, but 1 step is not sufficient for 6 hops
        [1.0, 0.8, 0.5, 0.5, 0.5],  # T=2
        [0.9, 1.0, 0.7, 0.9, 0.6],  # T=4
        [0.9, 0.9, 0.9, 0.7, 0.6],  # T=8
    ])
    grid = AccuracyGrid(budgets, difficulties, accuracy, np.full(5, 100))
    assert sufficient_budgets(4, budgets) == [4, 8] and sufficient_budgets(10, budgets) == [8]
    result = id_ood(grid, trained_difficulties=(1, 4))
    assert result["best"] == {1: 1.0, 2: 1.0, 4: 0.9, 6: 0.7, 10: 0.6}
    assert result["best_steps"] == {1: 2, 2: 4, 4: 8, 6: 8, 10: 8}
    assert result["id_difficulties"] == [1, 2, 4] and result["ood_difficulties"] == [6, 10]
    assert result["id"] == pytest.approx((1.0 + 1.0 + 0.9) / 3) and result["ood"] == pytest.approx(0.65)
    assert shortcut_accuracy(grid, difficulty=10) == 0.5 and shortcut_accuracy(grid, difficulty=12) is None


def test_depth_embedding_variants_change_only_untrained_rows():
    model = tiny_model()
    original = {k: v.clone() for k, v in model.state_dict().items()}
    rows = {}
    for variant in ("baseline", "zeros", "clamp", "reinit0", "reinit1"):
        copy_ = depth_embedding_variant(model, variant, trained_steps=4)
        state = copy_.state_dict()
        assert all(torch.equal(state[k], original[k]) for k in original if k != "depth_embedding.weight")
        table = state["depth_embedding.weight"]
        assert torch.equal(table[:4], original["depth_embedding.weight"][:4])
        rows[variant] = table[4:]
    assert torch.equal(rows["baseline"], original["depth_embedding.weight"][4:])
    assert torch.equal(rows["zeros"], torch.zeros_like(rows["zeros"]))
    assert torch.equal(rows["clamp"], original["depth_embedding.weight"][3].expand(4, -1))
    assert not torch.equal(rows["reinit0"], rows["reinit1"])
    assert torch.equal(rows["reinit0"], depth_embedding_variant(model, "reinit0", 4).depth_embedding.weight[4:])
    assert all(torch.equal(v, original[k]) for k, v in model.state_dict().items())  # the model itself untouched
    test = small_test_set()
    shared = beyond_range_grids(model, test, [6, 8], 4, ("baseline", "zeros", "reinit1"), batch_size=7)
    for variant, grid in shared.items():  # the shared-prefix shortcut equals evaluating each variant in full
        full = evaluate_grid(depth_embedding_variant(model, variant, 4), test, [6, 8], batch_size=7)
        assert np.array_equal(grid.accuracy, full.accuracy) and grid.difficulties == full.difficulties
    result = depth_embedding_diagnostic(model, test, [1, 2, 4, 6, 8], trained_steps=4,
                                        variants=("baseline", "zeros", "clamp"))
    assert result["budgets"] == [6, 8] and result["variants"]["baseline"]["change"] == 0.0
    assert set(result["variants"]) == {"baseline", "zeros", "clamp"} and result["max_abs_change"] >= 0.0


# ============================================================================ command line


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    from looped.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_think_prints_answer_and_confidence_per_budget(trained_run, capsys):
    code, out, err = run_cli(capsys, "think", trained_run, "--input", "nodes=5; A>B, B>C, D>E ? A C",
                             "--steps", "1,2,4")
    assert code == 0 and not err
    lines = out.strip().splitlines()
    assert "reference answer: reachable (difficulty 2)" in out and "trained with T in 2..4" in out
    table = lines[-3:]
    assert [int(line.split()[0]) for line in table] == [1, 2, 4]
    for line in table:
        steps, answer, confidence = line.split()
        assert answer in ("reachable", "unreachable")
    # the table is think()'s: confidence is the probability of the printed answer
    rows = reasoning_cli.think(str(trained_run), "nodes=5; A>B, B>C, D>E ? A C", [1, 2, 4])["rows"]
    for line, row in zip(table, rows):
        assert line.split()[1:] == [row["answer"], f"{row['confidence']:.3f}"]
        assert row["confidence"] == (row["p_yes"] if row["answer"] == "reachable" else 1 - row["p_yes"])
    code, default_out, _ = run_cli(capsys, "think", trained_run, "--input", "A>B ? A B")
    assert code == 0 and [int(l.split()[0]) for l in default_out.strip().splitlines()[3:]] == [1, 2, 4, 6]


def test_think_reads_a_boolean_expression(tmp_path, capsys):
    run = tmp_path / "boolean"
    trainer(tiny_config(model={"input_kind": "tokens", "vocab_size": 9, "max_length": 128, "steps_range": [1, 2]},
                        task={"name": "boolean", "train_difficulties": [1, 2], "test_difficulties": [1, 2],
                              "eval_steps": [1, 2]},
                        train={"max_steps": 2, "eval_every": 0}), run).run()
    code, out, err = run_cli(capsys, "think", run, "--input", "!(F|F&!F)", "--steps", "1,2")
    assert code == 0 and not err and "reference answer: T (difficulty 1)" in out
    assert [int(line.split()[0]) for line in out.strip().splitlines()[-2:]] == [1, 2]
    code, _, err = run_cli(capsys, "think", run, "--input", "(T&F")
    assert code != 0 and "unbalanced" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, needle", [
    (["--input", "A>b ? A b"], "unknown node 'b'"),
    (["--input", "A>B ? A A"], "source and target are the same node"),
    (["--input", "A>B ? A B", "--steps", "1,x"], "--steps: expected comma-separated integers"),
    (["--input", "A>B ? A B", "--steps", "99"], "depth_rows"),
])
def test_think_errors_are_one_line(trained_run, capsys, argv, needle):
    code, out, err = run_cli(capsys, "think", trained_run, *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and not out


def test_think_refuses_a_missing_or_non_reasoning_run(tmp_path, capsys):
    code, _, err = run_cli(capsys, "think", tmp_path / "nope", "--input", "A>B ? A B")
    assert code == 2 and "no such run" in err and len(err.strip().splitlines()) == 1


def test_data_show_prints_examples(capsys):
    code, out, _ = run_cli(capsys, "data", "show", "graph", "--n", "2", "--difficulty", "3", "--hard-negatives")
    assert code == 0 and out.count("--- graph example") == 2 and out.count("label:") == 2 and "bucket 3 hops" in out
    code, out, _ = run_cli(capsys, "data", "show", "boolean", "--n", "3")
    assert code == 0 and out.count("--- boolean example") == 3 and "depth" in out
    code, out, _ = run_cli(capsys, "data", "show", "family", "--n", "1", "--difficulty", "4")
    assert code == 0 and "query:" in out and "chain depth 4" in out
    code, out, _ = run_cli(capsys, "data", "show", "parity", "--n", "1", "--difficulty", "5")
    assert code == 0 and "--- parity example 1" in out
    code, out, err = run_cli(capsys, "data", "show", "boolean", "--hard-negatives")
    assert code == 2 and "graph task only" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, "data", "show", "graph", "--difficulty", "30")
    assert code == 2 and "hops must be in" in err and len(err.strip().splitlines()) == 1


def test_data_show_and_think_are_wired_into_the_looped_parser():
    from looped.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["data", "show", "family", "--n", "2"])
    assert args.func is data_cli.cmd_data_show and args.n == 2
    assert parser.parse_args(["data", "info", "x.yaml"]).config == ["x.yaml"]  # the other data sub-commands stay
    args = parser.parse_args(["think", "runs/x", "--input", "T&F", "--steps", "1,2"])
    assert args.func is reasoning_cli.cmd_think


# ============================================================================ benchmark


def test_live_tensor_bytes_counts_new_storages_once():
    a = torch.randn(50, 40)
    with torch.no_grad(), think_bench.LiveTensorBytes() as tracker:
        b = a @ a.t()  # new: 50 x 50 floats; a.t() is a view of a pre-existing tensor
        b.relu_()  # in place: nothing new
        c = b.view(-1)  # view: nothing new
        del b, c
        d = torch.ones(10)
    assert tracker.peak == 50 * 50 * 4 and tracker.live == 10 * 4


def test_think_bench_writes_json_and_plot(tmp_path, monkeypatch):
    out = tmp_path / "think.json"
    think_bench.run_think_bench(dim=16, heads=2, ffn_dim=32, length=8, layers=2, steps=(1, 2, 4), batches=(1, 3),
                                repeats=1, threads=1, out=out, log=lambda m: None)
    data = json.loads(out.read_text())
    assert {"bench", "shape", "core", "cot", "crossover", "goals", "method", "environment", "plot"} <= set(data)
    assert Path(data["plot"]).exists()
    assert {(r["batch"], r["steps"]) for r in data["core"]["runs"]} == {(b, t) for b in (1, 3) for t in (1, 2, 4)}
    for run in data["cot"]["runs"]:
        assert run["kv_cache_bytes"] == run["kv_cache_bytes_formula"] == 2 * run["batch"] * run["steps"] * 2 * 16 * 4
        assert run["median_s"] > 0 and run["peak_bytes"] > 0
    for run in data["core"]["runs"]:
        assert run["footprint_bytes"] == data["core"]["parameter_bytes"] + run["peak_bytes"] > 0
    assert set(data["crossover"]) == {"1", "3"} and data["goals"]["kv_cache_linear"]["met"] is True
    assert data["goals"]["core_memory_flat"]["met"] is True  # deterministic: counted bytes, not timings
    assert set(data["goals"]) == {"core_memory_flat", "core_latency_linear", "kv_cache_linear"}
    assert set(data["goals"]["core_memory_flat"]["relative_change_max_vs_second_smallest_steps"]) == {"1", "3"}
    # issue 29's plot list: the figure names both models and their sizes, and its title fits the figure
    kept = {}

    def keep(fig, path):
        text = fig._suptitle
        kept.update(title=text.get_text(), inside=fig.bbox.contains(*text.get_window_extent().p0) and
                    fig.bbox.contains(*text.get_window_extent().p1))

    monkeypatch.setattr(think_bench, "atomic_save_figure", keep)
    think_bench.plot_think(data, tmp_path / "again.png")
    assert f"{data['core']['parameters']:,} parameters" in kept["title"] and "transformer" in kept["title"]
    assert kept["inside"], "the title is cut at the figure's edges"


def test_bench_cli_options():
    parser = argparse.ArgumentParser()
    think_bench.add_arguments(parser)
    args = parser.parse_args(["--steps", "1,4", "--batches", "2"])
    assert args.steps == [1, 4] and args.batches == [2] and args.layers == 24


# ============================================================================ study


def test_study_scores_both_generators_backfills_and_takes_alphas_from_the_command_line(tmp_path, monkeypatch, capsys):
    tiny = {"model": {"dim": 16, "heads": 2, "ffn_dim": 32},
            "task": {"train_size": 128, "val_size": 16, "test_per_bucket": 8, "test_difficulties": [1, 2, 6, 12],
                     "eval_steps": [1, 2, 8, 12]},
            "train": {"max_targets": 128, "eval_every": 0}}
    out, runs = tmp_path / "results", tmp_path / "runs"
    kwargs = dict(select={"task": ("graph",), "seed": (42,), "alpha": ("0.0", "1.0")}, overrides=tiny,
                  progress=False, log=lambda m: None, diagnostic_per_bucket=4)
    run_study("drt", out, runs, **kwargs)
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["alpha"], r["status"]) for r in rows] == [("0.0", "ok"), ("1.0", "ok")]
    assert all(r["updates"] == "2" and r["step1_12hop"] and r["id_accuracy"] and r["ood_accuracy"] for r in rows)
    for name in ("table.md", "heatmap_graph_drt.png", "heatmap_graph_drt_a1.png", "gates.csv", "gates.png",
                 "diagnostic.csv", "grids/graph_drt_seed42.csv", "grids/graph_drt_a1_seed42.csv"):
        assert (out / name).exists(), name
    table = (out / "table.md").read_text()
    assert "| graph | drt | 0.0 |" in table and "100 / 75" in table and "Table 4" in table
    variants = {r["variant"] for r in csv.DictReader(open(out / "diagnostic.csv"))}
    assert variants == {"baseline", "zeros", "clamp", "reinit0", "reinit1", "reinit2"}
    grid = AccuracyGrid.read_csv(out / "grids/graph_drt_seed42.csv")
    assert grid.budgets == [1, 2, 8, 12] and grid.difficulties == [1, 2, 6, 12]
    # graph runs are also scored on hard negatives; rows from before that evaluation are backfilled
    cross = AccuracyGrid.read_csv(out / "grids/graph_drt_seed42_cross.csv")
    assert cross.budgets == grid.budgets and cross.difficulties == grid.difficulties
    assert all(r["cross_id_accuracy"] and r["cross_ood_accuracy"] for r in rows)
    assert "both negative generators" in table and "| paper negatives | drt | 0.0 |" in table
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*drt_study.COLUMNS, "overrides"], lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "cross_id_accuracy": "", "cross_ood_accuracy": ""} for r in rows)
    run_study("drt", out, runs, **kwargs)
    again = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["cross_id_accuracy"], r["cross_ood_accuracy"]) for r in again] == \
        [(r["cross_id_accuracy"], r["cross_ood_accuracy"]) for r in rows]

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    before = (out / "results.csv").read_text()
    from looped.experiments import study as engine
    monkeypatch.setattr(engine, "Trainer", no_training)
    # the same study through `looped reproduce drt`: --alphas 0 1 are the keys "0.0" and "1.0"
    from looped.cli import main

    argv = ["reproduce", "drt", "--seeds", "42", "--alphas", "0", "1", "--out", str(out), "--runs", str(runs),
            "--no-progress", *[f"--set={k}.{f}={v}" for k, fields in tiny.items() for f, v in fields.items()]]
    assert main([*argv, "--tasks", "graph"]) == 0
    assert (out / "results.csv").read_text() == before
    assert main([*argv, "--tasks", "parity"]) == 2


def test_reproduce_defaults_to_the_papers_tasks_and_its_help_names_every_recipe(capsys):
    from looped.cli import build_parser
    from looped.experiments import drt, rlt
    from looped.experiments.study import get_study, plan_keys

    assert {key["task"] for key in plan_keys(get_study("drt"), "full")} == {"graph", "logic", "family"} \
        == set(drt.PAPER_TASKS)
    parser = build_parser()
    for paper, names in (("drt", drt.TASKS), ("rlt", rlt.TASKS)):  # each study's own --tasks help names its recipes
        with pytest.raises(SystemExit):
            parser.parse_args(["reproduce", paper, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(name in help_text for name in [*drt.TASKS, *rlt.TASKS]), help_text


def test_hard_negative_recipe_is_the_graph_recipe_with_hard_negatives():
    from looped.experiments import drt
    hard, paper = drt.run_config("graph_hard", "cpu"), drt.run_config("graph", "cpu")
    assert hard.task.hard_negatives and not paper.task.hard_negatives
    assert hard.model == paper.model and hard.train == paper.train and hard.optim == paper.optim


def _flat(config: dict) -> dict:
    return {(section, k): v for section, values in config.items() for k, v in values.items()}


@pytest.mark.parametrize("name", sorted(drt.VARIANTS))
def test_a_variant_differs_from_its_recipe_in_exactly_what_it_names(name):
    """An ablation that silently equals its recipe (or changes more than it says) would attribute an effect to the
    wrong change (issue 27 §2.2-2.3)."""
    variant = drt.VARIANTS[name]
    ours, theirs = _flat(drt.recipe(name, "cpu")), _flat(drt.recipe(variant.of, "cpu"))
    changed = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    expected = set(variant.revert)
    if variant.budget != 1:
        expected |= {("train", "max_targets"), ("train", "eval_every")}
        assert ours[("train", "max_targets")] == round(theirs[("train", "max_targets")] * variant.budget)
    assert changed == expected, name
    # reverted = the paper's value (a task option the paper lacks: absent), not some third one
    paper = _flat({"optim": drt.OPTIM, "model": drt.model_section(variant.of, **drt.CPU_WIDTH), "task": {}})
    for key in variant.revert:
        assert ours.get(key) == paper.get(key), key
    with pytest.raises(ValueError, match="no full-scale recipe"):
        drt.recipe(name, "full")


def test_a_heatmap_spans_the_whole_accuracy_range_marks_chance_and_names_its_size(tmp_path, monkeypatch):
    # the heatmaps began their colours at 0.4 (a 0.5 cell looked like a failure far below chance) and did not say
    # how large the model was
    import looped.eval.reasoning as reasoning
    from looped.experiments.reasoning_scores import mean_heatmap

    kept = {}

    def keep(fig, path):
        heat, bar = fig.axes
        kept.update(limits=heat.images[0].get_clim(), title=heat.get_title(),
                    ticks=[t.get_text() for t in bar.get_yticklabels()])

    monkeypatch.setattr(reasoning, "atomic_save_figure", keep)
    grid = AccuracyGrid([1, 2, 4], [1, 6], np.array([[1.0, 0.5]] * 3), np.array([10, 10]))
    grid.write_csv(tmp_path / "g.csv")
    mean_heatmap([tmp_path / "g.csv"], tmp_path / "h.png", {"trained_difficulties": "1-5", "trained_steps": "1-2",
                                                            "parameters": "205441"}, "graph_drt")
    assert kept["limits"] == (0.0, 1.0)
    assert "0.5 chance" in kept["ticks"]
    assert kept["title"].startswith("graph_drt, 205,441 parameters")


def test_the_gate_figure_names_the_size_of_its_cores(tmp_path, monkeypatch):
    # gates.png said what it plots but not how large the cores were
    import looped.eval.reasoning as reasoning
    from looped.experiments.reasoning_scores import plot_gates

    kept = {}
    monkeypatch.setattr(reasoning, "atomic_save_figure", lambda fig, path: kept.update(title=fig._suptitle.get_text()))
    gates = [{"task": "graph", "arch": "drt", "seed": "42", "step": str(t), "gate_mean": "0.5"} for t in (1, 2)]
    results = [{"task": task, "arch": "drt", "seed": "42", "parameters": count, "trained_steps": "5-8", "status": "ok"}
               for task, count in (("graph", "205441"), ("logic", "65089"))]
    plot_gates(gates, results, tmp_path / "gates.png", name=lambda r: f"drt_seed{r['seed']}", core="drt")
    assert kept["title"].startswith("Depth-recurrent core (65,089–205,441 parameters)")


def test_a_model_without_a_gate_writes_no_gate_rows():
    """The fixed Transformer, GNN and UT+ACT have no update gate: their grid's gate_means is None, and scoring
    one crashed the study after training (graph fixed_transformer seed 43 lost its evaluation)."""
    from looped.experiments.reasoning_scores import gate_rows

    key = {"task": "graph", "arch": "fixed_transformer", "alpha": 0.0, "seed": 43}
    grid = AccuracyGrid([1, 2], [3], np.array([[0.5], [0.6]]), np.array([10]))
    assert grid.gate_means is None and gate_rows(key, grid) == []
    gated = AccuracyGrid([1, 2], [3], np.array([[0.5], [0.6]]), np.array([10]), gate_means=[0.25, 0.5])
    assert [r["gate_mean"] for r in gate_rows(key, gated)] == ["0.250000", "0.500000"]


def test_table_lines_follow_the_recipes_and_architectures_not_the_order_runs_finished():
    # the table listed its lines in results.csv order: graph, family, graph alpha 1.0, graph baselines, graph alpha
    # 0.5, ... as the sessions happened to run them
    finished = [("graph", "drt", "0.0"), ("family", "drt", "0.0"), ("graph", "drt", "1.0"),
                ("graph", "gnn", "0.0"), ("logic_1.5x", "drt", "0.0"), ("graph", "drt", "0.1"),
                ("logic", "fixed_transformer", "0.0"), ("graph", "drt_tied", "0.0"), ("logic", "drt", "0.0")]
    rows = [dict(zip(drt_study.GROUP, line), seed=seed) for line in finished for seed in (42, 43)]
    assert drt_study.line_order(rows) == [
        ("graph", "drt", "0.0"), ("graph", "drt", "0.1"), ("graph", "drt", "1.0"), ("graph", "drt_tied", "0.0"),
        ("graph", "gnn", "0.0"), ("logic", "drt", "0.0"), ("logic", "fixed_transformer", "0.0"),
        ("family", "drt", "0.0"), ("logic_1.5x", "drt", "0.0")]
