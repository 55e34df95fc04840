"""`looped depth` (looped/eval/depth.py, cli/depth.py): every test-time depth scored, its summary, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CORE, LOOP, core_config, train_tiny, write_text_corpus

from looped.cli import main
from looped.config import from_dict
from looped.eval.depth import curve_summary
from looped.train import RunConfig, Trainer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_text_corpus(tmp_path_factory.mktemp("text") / "corpus.txt", 12_000)


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory, corpus) -> Path:
    return train_tiny(tmp_path_factory.mktemp("loop") / "run", corpus, LOOP)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ============================================================================ the summary of a curve


def test_summary_of_a_curve_that_worsens_past_training():
    depths = [1, 2, 3, 4, 5, 6]
    bits = [3.0, 2.5, 2.2, 2.4, 2.9, 3.2]  # best at 3, trained at 3; past it +0.5, +0.3 per round
    summary = curve_summary(depths, bits, trained_depth=3, lower_is_better=True)
    assert summary["best_depth"] == 3 and summary["best_score"] == 2.2 and summary["score_at_trained_depth"] == 2.2
    assert summary["slope_past_trained"] == pytest.approx(0.4)  # least squares through (4, 2.4) (5, 2.9) (6, 3.2)
    assert summary["slope_depths"] == [4, 5, 6]
    assert summary["first_worse_than_depth_1"] == 6  # 3.2 > 3.0; depth 5's 2.9 is still better than depth 1


def test_summary_of_accuracy_is_higher_is_better_and_says_none():
    summary = curve_summary([1, 2, 3, 4], [0.5, 0.9, 0.9, 0.8], trained_depth=2, lower_is_better=False)
    assert summary["best_depth"] == 2  # tie with depth 3: the smaller depth
    assert summary["slope_past_trained"] == pytest.approx(-0.1)
    assert summary["first_worse_than_depth_1"] is None
    short = curve_summary([1, 2, 3], [0.5, 0.9, 0.8], trained_depth=2, lower_is_better=False)
    assert short["slope_past_trained"] is None and short["slope_depths"] == []


# ============================================================================ LM rows


def test_sweep_at_the_trained_depth_equals_eval_and_names_what_it_scored(loop_run, corpus, tmp_path, capsys):
    out = tmp_path / "depth.json"
    code, text, _ = run_cli(["depth", str(loop_run), "--max-factor", "2", "--exit-threshold", "0.05",
                             "--out", str(out), "--no-progress"], capsys)
    assert code == 0 and out.with_suffix(".png").stat().st_size > 0
    record = json.loads(out.read_text())
    assert record["trained_depth"] == 2 and record["depths"] == [1, 2, 3, 4]
    source = record["sources"][0]
    assert str(corpus) in source["corpus"] and "held-out" in source["heldout"]
    code, evaluated, _ = run_cli(["eval", str(loop_run), "--no-progress"], capsys)
    evaluated = json.loads(evaluated)
    assert evaluated["rounds"] == 2 and evaluated["trained_rounds"] == 2 and "held-out" in evaluated["heldout"]
    assert source["fixed"][1]["bits_per_byte"] == pytest.approx(evaluated["bits_per_byte"], rel=1e-7)
    code, deeper, _ = run_cli(["eval", str(loop_run), "--rounds", "4", "--exit-threshold", "0.05", "--no-progress"],
                              capsys)
    exit_point = source["early_exit"][0]["points"][3]
    assert exit_point["bits_per_byte"] == pytest.approx(json.loads(deeper)["bits_per_byte"], rel=1e-7)
    assert exit_point["mean_rounds_used"] == json.loads(deeper)["mean_rounds_used"]
    assert "best depth:" in text and "slope past the trained depth" in text and "worse than depth 1" in text


def test_sweep_of_files_scores_each_whole_and_names_it(loop_run, corpus, tmp_path, capsys):
    other = write_text_corpus(tmp_path / "other.txt", 3_000, seed=5)
    out = tmp_path / "d.json"
    assert run_cli(["depth", str(loop_run), "--file", str(other), str(corpus), "--max-factor", "1", "--out",
                    str(out), "--no-progress"], capsys)[0] == 0
    record = json.loads(out.read_text())
    assert [s["file"] for s in record["sources"]] == [str(other), str(corpus)]
    code, evaluated, _ = run_cli(["eval", str(loop_run), "--file", str(other), "--no-progress"], capsys)
    # 46 blocks of 65 bytes (64 targets each: a block's first byte is context) + a 10-byte tail (9 targets)
    assert record["sources"][0]["targets"] == json.loads(evaluated)["targets"] == 46 * 64 + 9
    assert record["sources"][0]["fixed"][-1]["bits_per_byte"] == pytest.approx(
        json.loads(evaluated)["bits_per_byte"], rel=1e-7)


@pytest.mark.parametrize("args,message", [
    (["--max-factor", "0"], "--max-factor must be a positive number"),
    (["--exit-threshold", "-1"], "--exit-threshold must be >= 0"),
    (["--file", "no/such/file.txt"], "no/such/file.txt"),
])
def test_bad_values_end_in_one_line(loop_run, tmp_path, capsys, args, message):
    code, _, err = run_cli(["depth", str(loop_run), "--out", str(tmp_path / "d.json"), "--no-progress", *args], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("looped: error: ") and message in err
    assert not (tmp_path / "d.json").exists()


def test_a_plain_transformer_run_has_no_depth_knob(corpus, tmp_path, capsys):
    run = train_tiny(tmp_path / "plain", corpus, {"arch": "transformer", "dim": 32, "heads": 4, "layers": 2,
                                                  "ffn_dim": 48, "context_length": 64})
    code, _, err = run_cli(["depth", str(run), "--out", str(tmp_path / "d.json"), "--no-progress"], capsys)
    assert code == 2 and err.count("\n") == 1 and "transformer has a fixed depth: no rounds to sweep" in err


def test_an_rlt_run_has_no_depth_knob(tmp_path, capsys):
    config = {"model": {"arch": "rlt", "dim": 16, "heads": 2, "ffn_dim": 16, "encoder_layers": 1, "decoder_layers": 1,
                        "window": 4, "context_length": 128},
              "task": {"kind": "sequence", "name": "parity", "train_lengths": [3, 8], "validation_lengths": [8],
                       "validation_size": 8},
              "train": {"batch_size": 4, "max_steps": 1, "eval_every": 0, "threads": 1}}
    Trainer(from_dict(RunConfig, config), tmp_path / "rlt", progress=False, log=lambda m: None).run()
    for command in ("depth", "lens"):
        code, _, err = run_cli([command, str(tmp_path / "rlt"), "--out", str(tmp_path / "d.json")], capsys)
        assert code == 2 and err.count("\n") == 1 and "no depth to vary for a rlt run" in err


# ============================================================================ reasoning cores


@pytest.fixture(scope="module")
def core_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("core") / "run"
    Trainer(from_dict(RunConfig, core_config(CORE)), out, progress=False, log=lambda m: None).run()
    return out


def test_a_core_is_swept_over_steps_by_difficulty_up_to_its_depth_table(core_run, tmp_path, capsys):
    import looped.train.reasoning as rtask
    from looped.eval.reasoning import evaluate_grid
    from looped.train import load_model
    from looped.train.checkpoint import resolve_checkpoint

    out = tmp_path / "depth.json"
    code, text, _ = run_cli(["depth", str(core_run), "--out", str(out), "--no-progress"], capsys)
    record = json.loads(out.read_text())
    assert code == 0 and record["kind"] == "reasoning" and record["trained_depth"] == 3
    assert record["capped_at"] == 10 and record["depths"] == list(range(1, 11))  # 4 x 3 = 12 > depth_rows 10
    assert record["sources"][0]["task"] == "graph" and "swept to 10 steps" in text
    model, config = load_model(resolve_checkpoint(str(core_run)))
    _, train, val = rtask.training_data(config.task)
    grid = evaluate_grid(model, rtask.test_rows(config.task, train, val), [3])
    at_trained = record["sources"][0]["fixed"][2]
    assert at_trained["by_difficulty"] == {str(d): grid.at(3, d) for d in grid.difficulties}


@pytest.mark.parametrize("args,message", [
    (["--file", "x.txt"], "--file: a reasoning run is scored on its task's test rows"),
    (["--exit-threshold", "0.1"], "--exit-threshold: early exit is a rule of the looped text rows"),
])
def test_a_core_refuses_text_options_in_one_line(core_run, tmp_path, capsys, args, message):
    code, _, err = run_cli(["depth", str(core_run), "--out", str(tmp_path / "d.json"), *args], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_a_fixed_depth_reasoning_run_has_no_depth_knob(tmp_path, capsys):
    model = {"arch": "gnn", "input_kind": "graph", "vocab_size": 27, "max_length": 20, "dim": 16, "ffn_dim": 32,
             "layers": 2}
    Trainer(from_dict(RunConfig, core_config(model)), tmp_path / "gnn", progress=False, log=lambda m: None).run()
    code, _, err = run_cli(["depth", str(tmp_path / "gnn"), "--out", str(tmp_path / "d.json")], capsys)
    assert code == 2 and err.count("\n") == 1 and "gnn has a fixed depth: the step budget changes nothing" in err
