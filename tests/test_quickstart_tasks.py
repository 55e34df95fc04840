"""Issue 29 §3: `looped quickstart --task ...` (plumbing only: tiny budgets, not the learning), the one-line
validation report, the ETA line and a Ctrl-C hint that resumes the command the user ran."""

from __future__ import annotations

import dataclasses
import types
import json
import signal
from pathlib import Path

import pytest
import yaml

from looped.cli import main
from looped.experiments import quickstart as quick
from looped.train import Trainer
from looped.train.validation_line import validation_line

from helpers import tiny_run_config, write_text_corpus

REPO = Path(__file__).resolve().parents[1]
TINY_SEQUENCE = ["--set", "train.max_steps=2", "--set", "train.eval_every=1", "--set", "task.validation_size=4",
                 "--set", "model.dim=16", "--set", "model.heads=2", "--set", "model.ffn_dim=16"]


def test_validation_line_states_accuracy_beside_chance():
    line = validation_line(400, {"loss": 0.7, "final_state_accuracy": 0.52, "final_state_accuracy_16": 0.55,
                                 "final_state_accuracy_32": 0.49}, 0.5)
    assert line == "val @400: accuracy 0.52 (chance 0.50); by length 16: 0.55, 32: 0.49"
    assert validation_line(750, {"loss": 0.4, "accuracy": 0.81}, 0.5) == "val @750: accuracy 0.81 (chance 0.50)"
    assert validation_line(500, {"loss": 1.3, "bits_per_byte": 1.876}, None) == \
        "val @500: loss 1.3000 (1.876 bits/byte)"


def test_training_prints_one_line_per_evaluation(tmp_path):
    config = tiny_run_config(write_text_corpus(tmp_path / "c.txt", 30_000), data={"block_size": 65})
    from looped.config import from_dict
    from looped.train import RunConfig

    lines = []
    Trainer(from_dict(RunConfig, config), tmp_path / "run", progress=True, log=lines.append).run()
    assert [line.split(":")[0] for line in lines if line.startswith("val @")] == ["val @4", "val @8"]


def interrupt_after_first_update(monkeypatch):
    """Make the trainer receive SIGINT during its first update (as a Ctrl-C would)."""
    real_update = Trainer._update

    def update(self):
        result = real_update(self)
        signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(Trainer, "_update", update)


def test_ctrl_c_in_a_task_quickstart_names_the_quickstart_itself(tmp_path, monkeypatch, capsys):
    """The hint named `looped train --out RUN --resume`, which skips the quickstart's table (and, for the text
    quickstart, the compressors and the sample)."""
    monkeypatch.setattr(quick, "QUICK_RECIPES", {**quick.QUICK_RECIPES, "parity": dataclasses.replace(
        quick.QUICK_RECIPES["parity"], columns=(4, 32), test_rows=4)})
    interrupt_after_first_update(monkeypatch)
    out = tmp_path / "qs"
    code = main(["quickstart", "--task", "parity", "--out", str(out), "--record", str(tmp_path / "p.json"),
                 "--no-progress", *TINY_SEQUENCE])
    err = capsys.readouterr().err
    assert code == 130
    assert (f"continue with: looped quickstart --task parity --out {out} --record {tmp_path / 'p.json'} "
            f"--set train.max_steps=2") in err
    assert "looped train" not in err


def test_minutes_of_an_interrupted_call_count_in_the_resumed_quickstarts_total(tmp_path, monkeypatch):
    """minutes_all_calls was read back from RUN/quickstart.json, which only a call that reaches its table writes:
    the minutes a call trained before Ctrl-C were lost (the logic quickstart recorded 21 of its 74 minutes)."""
    import types

    from looped.cli import quickstart as cli_quick

    monkeypatch.setattr(quick, "QUICK_RECIPES", {**quick.QUICK_RECIPES, "parity": dataclasses.replace(
        quick.QUICK_RECIPES["parity"], columns=(4, 32), test_rows=4)})
    ticks = iter(range(0, 10_000, 30))  # each reading of the quickstart's clock is 30 s after the last
    cpu_ticks = iter(range(0, 10_000, 6))  # and its CPU clock 6 s (a fifth of a core: a loaded machine)
    monkeypatch.setattr(cli_quick, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks)),
                                                                 process_time=lambda: float(next(cpu_ticks))))
    out = tmp_path / "qs"
    argv = ["quickstart", "--task", "parity", "--out", str(out), "--no-progress", *TINY_SEQUENCE]
    with monkeypatch.context() as interrupted:
        interrupt_after_first_update(interrupted)
        assert main(argv) == 130  # 0.5 min, then Ctrl-C
    assert main(argv) == 0  # resumed: another 0.5 min
    result = json.loads((out / "quickstart.json").read_text())
    assert result["minutes_this_call"] == 0.5 and result["minutes_all_calls"] == 1.0
    assert result["cpu_minutes_all_calls"] == 0.2


def test_seed_trains_every_row_with_it_beside_the_default_run(tmp_path, monkeypatch, capsys):
    """A second seed of a quickstart (how often does parity learn?) needs its own folder and must say which seed
    it trained; the resume hint keeps the seed, or a resumed run would continue under another one."""
    monkeypatch.setattr(quick, "QUICK_RECIPES", {**quick.QUICK_RECIPES, "parity": dataclasses.replace(
        quick.QUICK_RECIPES["parity"], columns=(4, 32), test_rows=4)})
    monkeypatch.chdir(tmp_path)
    assert main(["quickstart", "--task", "parity", "--seed", "43", "--no-progress", *TINY_SEQUENCE]) == 0
    folder = tmp_path / "runs" / "quickstart_parity_seed43"
    assert json.loads((folder / "quickstart.json").read_text())["seed"] == {"RLT-1": 43, "Transformer": 43}
    assert yaml.safe_load((folder / "rlt1" / "config.yaml").read_text())["train"]["seed"] == 43
    interrupt_after_first_update(monkeypatch)
    assert main(["quickstart", "--task", "parity", "--seed", "44", "--no-progress", *TINY_SEQUENCE]) == 130
    assert "continue with: looped quickstart --task parity --out runs/quickstart_parity_seed44 --seed 44 " \
        in capsys.readouterr().err


def test_ctrl_c_in_the_text_quickstart_names_the_quickstart(tmp_path, monkeypatch, capsys):
    interrupt_after_first_update(monkeypatch)
    out = tmp_path / "qs"
    code = main(["quickstart", "--out", str(out), "--no-progress", "--set", "train.max_steps=3"])
    captured = capsys.readouterr()
    assert code == 130 and f"continue with: looped quickstart --out {out} --set train.max_steps=3" in captured.err
    assert captured.out.startswith("quickstart (KJV bytes): ~5 min on 2 idle cores; with one thread ~14; here at")


def test_parity_quickstart_prints_eta_first_then_the_table_and_records_the_result(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(quick, "QUICK_RECIPES", {**quick.QUICK_RECIPES, "parity": dataclasses.replace(
        quick.QUICK_RECIPES["parity"], columns=(4, 16, 32), test_rows=4)})
    out, record = tmp_path / "qs", tmp_path / "results" / "parity.json"
    argv = ["quickstart", "--task", "parity", "--out", str(out), "--record", str(record), *TINY_SEQUENCE]
    assert main(argv) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("quickstart --task parity (trains RLT-1 and Transformer): ~2 min on 2 idle cores")
    assert sum(line.startswith("val @1: accuracy") and "(chance 0.50)" in line for line in lines) == 2
    assert "| model | 4* | 16* | 32 |" in captured.out and "| RLT-1 |" in captured.out
    assert "| Transformer |" in captured.out and "chance 0.50" in captured.out
    assert "NOT shown in this run: at 32, beyond the trained lengths" in captured.out  # 2 updates learn nothing
    assert "did not show its point" in captured.err
    result = json.loads(record.read_text())
    assert result == json.loads((out / "quickstart.json").read_text())
    assert result["shown"] is False and set(result["accuracy_by_length"]) == {"RLT-1", "Transformer"}
    assert result["trained_lengths"] == [3, 16] and result["updates"] == {"RLT-1": 2, "Transformer": 2}
    assert main(argv) == 0  # finished: scored and printed again, nothing retrained
    again = capsys.readouterr().out
    assert "--- RLT-1" not in again and "| RLT-1 |" in again
    rescored = json.loads((out / "quickstart.json").read_text())  # the training time is not lost by rescoring
    assert rescored["minutes_all_calls"] == pytest.approx(result["minutes_all_calls"]
                                                          + rescored["minutes_this_call"], abs=0.011)


def test_graph_quickstart_prints_accuracy_by_steps_and_hops(tmp_path, capsys):
    out = tmp_path / "qs"
    tiny = ["--set", "train.max_steps=2", "--set", "train.eval_every=1", "--set", "task.val_size=16",
            "--set", "task.test_per_bucket=4", "--set", "task.train_size=64", "--set", "model.dim=16",
            "--set", "model.heads=2", "--set", "model.ffn_dim=16", "--set", "train.batch_size=8"]
    assert main(["quickstart", "--task", "graph", "--out", str(out), "--no-progress", *tiny]) == 0
    printed = capsys.readouterr().out
    assert "| steps \\ hops |" in printed and "\n| 1 |" in printed and "\n| 20 |" in printed
    assert "* = trained hops (1-5)" in printed
    result = json.loads((out / "quickstart.json").read_text())
    assert result["task"] == "graph" and set(result["accuracy_by_steps_and_difficulty"]) >= {"1", "20"}


def test_unknown_task_is_one_line(capsys):
    assert main(["quickstart", "--task", "nope"]) == 2  # argparse errors are one line too (looped.cli.common)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'nope'" in err[0]


def test_eta_states_the_idle_condition_and_scales_with_the_load(monkeypatch):
    idle = quick.eta_line("(KJV bytes)", 5, 14, threads=2, load=0.0, cores=2)
    assert idle == ("quickstart (KJV bytes): ~5 min on 2 idle cores; with one thread ~14; here at least ~5 min "
                    "(load average 0.0 on 2 core(s), 2 torch thread(s): a guess that assumes an even share of the "
                    "cores; the time measured here follows the first evaluation)")
    assert "here at least ~14 min" in quick.eta_line("(KJV bytes)", 5, 14, threads=1, load=0.0, cores=2)
    # two other busy threads on 2 cores: a one-thread run gets ~2/3 of a core at best
    assert "here at least ~3 min" in quick.task_eta_line("parity", threads=1, load=2.0, cores=2)  # 2 idle x 1.5
    monkeypatch.setattr(quick, "QUICK_RECIPES", {**quick.QUICK_RECIPES, "logic": dataclasses.replace(
        quick.QUICK_RECIPES["logic"], idle_minutes=None)})
    assert quick.task_eta_line("logic", threads=1).endswith("its time is not measured yet")


def test_after_the_first_evaluation_the_eta_is_measured_from_the_run_itself(monkeypatch):
    """Session 14: the load rule was ~3x optimistic when jobs of higher priority shared the cores. The quickstart
    now follows its first evaluation with the time left at the rate this call actually trained at."""
    clock = iter([0.0, 120.0])  # the trainer's start line at 0 s, the first evaluation 2 minutes later
    monkeypatch.setattr(quick.time, "perf_counter", lambda: next(clock))
    printed = []
    log = quick.MeasuredEta(printed.append)
    log.trainer = types.SimpleNamespace(step=100, total_steps=900)  # resumed at update 100 of 900
    log("training rlt (14,188 parameters) on parity ...")
    log.trainer.step = 250
    log("val @250: accuracy 0.55 (chance 0.50)")
    log("val @400: accuracy 0.60 (chance 0.50)")  # one measured line only
    # (250 - 100) updates in 2 min = 75 updates/min; 650 left = ~9 min
    assert printed[1:] == ["val @250: accuracy 0.55 (chance 0.50)",
                           "ETA measured here: ~9 min left for this run (75 updates/min since update 100)",
                           "val @400: accuracy 0.60 (chance 0.50)"]


def test_graph_verdict_counts_the_hops_each_budget_solves():
    """The first verdict looked at the hardest test difficulty only (12 hops, beyond this core at any budget) and
    called a run 'NOT shown' whose 20 steps solved 8 hops where 2 steps solved 1 (the session's graph run)."""
    import numpy as np

    from looped.eval.reasoning import AccuracyGrid

    accuracy = np.array([[0.86, 0.60, 0.57, 0.52], [0.94, 0.93, 0.84, 0.49], [0.90, 0.96, 0.94, 0.57]])
    grid = AccuracyGrid([1, 3, 20], [1, 2, 8, 12], accuracy, np.full(4, 200))
    shown, verdict = quick.grid_verdict(grid, 0.5, trained_max=5)
    assert shown and "1 step -> 1, 3 steps -> 8, 20 steps -> 8" in verdict
    flat = AccuracyGrid([1, 20], [1, 8], np.array([[0.9, 0.5], [0.9, 0.5]]), np.full(2, 200))
    assert quick.grid_verdict(flat, 0.5, trained_max=5)[0] is False


@pytest.mark.parametrize("task", quick.TASKS)
def test_shipped_quickstart_configs_are_the_recipes(task):
    path = REPO / "configs" / "quickstart" / f"{task}.yaml"
    assert yaml.safe_load(path.read_text()) == quick.QUICK_RECIPES[task].config


def test_text_quickstart_records_its_result_where_asked(tmp_path, capsys):
    """results/quickstart.json is written by the command (README quoted minutes with no file behind them)."""
    out, record = tmp_path / "qs", tmp_path / "results" / "quickstart.json"
    tiny = ["--set", "train.max_steps=1", "--set", "train.eval_every=0", "--set", "model.dim=16",
            "--set", "model.heads=2", "--set", "model.layers=1", "--set", "model.ffn_dim=16"]
    assert main(["quickstart", "--out", str(out), "--record", str(record), "--sample-bytes", "4", "--no-progress",
                 *tiny]) == 0
    result = json.loads(record.read_text())
    assert result == json.loads((out / "quickstart.json").read_text())
    assert result["bits_per_byte"] > 0 and result["torch_threads"] >= 1 and "minutes" in result


def test_readme_quickstart_table_is_generated_from_the_recorded_results(tmp_path):
    """The README's quickstart table was typed by hand: its numbers and verdicts could drift from the JSON files
    (logic was 'run with 1,000 updates' in prose only). It must be the block the committed files give, and a
    recorded change (a verdict that flips, a new CPU time) must change it."""
    import shutil

    from looped.experiments.quickstart_table import quickstart_block

    results = REPO / "results"
    assert quickstart_block(results) in (REPO / "README.md").read_text(), \
        "README's quickstart table is stale: python -m looped.experiments.summary README.md"
    copy = tmp_path / "results"
    shutil.copytree(results / "quickstart", copy / "quickstart")
    path = copy / "quickstart" / "graph.json"
    flipped = {**json.loads(path.read_text()), "shown": False, "minutes_all_calls": 7.0, "cpu_minutes_all_calls": 3.5,
               "load_average_this_call": [2.0, 3.0]}
    path.write_text(json.dumps(flipped))
    line = next(row for row in quickstart_block(copy).splitlines() if row.startswith("| `graph` |"))
    assert "**NOT shown** (seed 42, `graph.json`)" in line
    assert "7.0 min wall (load average 2 → 3 in its last call); **3.5 min of CPU time**" in line
