"""The Chomsky-hierarchy suite end to end: every task trains through the `sequence` kind, and `looped lengths`
scores a run on the suite's grid with the paper's figures beside it."""

from __future__ import annotations

import json
import math

import pytest
import torch

from looped.config import from_dict
from looped.data.tasks.chomsky import SUITE
from looped.models import build_model
from looped.train import Trainer, load_run_config
from looped.train import checkpoint as ckpt
from looped.train.config import RunConfig

TINY_RLT = dict(arch="rlt", dim=16, heads=2, ffn_dim=16, encoder_layers=1, decoder_layers=1, window=4,
                context_length=128)


def tiny_run(name: str) -> dict:
    return {"model": dict(TINY_RLT),
            "task": {"kind": "sequence", "name": name, "train_lengths": [1, 8], "validation_lengths": [8],
                     "validation_size": 8},
            "optim": {"lr": 1e-2, "warmup_steps": 1},
            "train": {"batch_size": 8, "max_steps": 2, "eval_every": 2, "log_every": 1, "threads": 1,
                      "eval_batch_size": 8}}


@pytest.mark.parametrize("name", SUITE)
def test_two_updates_on_every_suite_task(tmp_path, name):
    Trainer(load_run_config(base=tiny_run(name)), tmp_path, progress=False, log=lambda m: None).run()
    events = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if "loss" in e] == [1, 2]
    (evaluation,) = [e for e in events if "val_loss" in e]
    assert evaluation["step"] == 2 and math.isfinite(evaluation["val_loss"])
    assert "val_final_state_accuracy_8" in evaluation  # validated on the task's own rows of length 8


def write_checkpoint(folder, name: str, **model):
    config = from_dict(RunConfig, {**tiny_run(name), "model": {**TINY_RLT, **model}})
    torch.manual_seed(0)
    ckpt.write_folder_atomically(folder, {"config.json": ckpt.config_json(config),
                                          "model.safetensors": build_model(config.model).state_dict()})
    return folder


def test_lengths_reports_the_suite_score_beside_the_published_figures(tmp_path, capsys):
    from looped.cli import main
    from looped.experiments.chomsky import PUBLISHED

    run = write_checkpoint(tmp_path / "run", "parity_check", context_length=512)
    assert main(["lengths", str(run), "--lengths", "50", "100", "--n", "6", "--quiet", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    accuracies = [r["prefix_token_accuracy"] for r in report["lengths"]]
    assert [r["length"] for r in report["lengths"]] == [50, 100]
    assert report["score"] == pytest.approx(sum(accuracies) / 2)  # equal weight per test length
    assert report["metric"] == "prefix_token_accuracy" and report["level"] == "R" and report["chance"] == 0.5
    assert report["paper_task"] == "Parity Check"
    assert report["published_percent"] == PUBLISHED["parity_check"] and "2207.02098" in report["citation"]


def test_lengths_of_other_tasks_carry_no_suite_fields(tmp_path, capsys):
    from looped.cli import main

    run = write_checkpoint(tmp_path / "run", "parity", context_length=512)
    assert main(["lengths", str(run), "--lengths", "32", "--n", "4", "--quiet", "--json"]) == 0
    assert "score" not in json.loads(capsys.readouterr().out)


def test_a_grid_longer_than_the_context_is_refused_in_one_line(tmp_path, capsys):
    from looped.cli import main

    run = write_checkpoint(tmp_path / "run", "duplicate_string")  # context 128; the default grid reaches 500
    assert main(["lengths", str(run)]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("looped: error:")
    assert "duplicate_string rows of length 500 take 1501 positions" in err and "context_length 128" in err
