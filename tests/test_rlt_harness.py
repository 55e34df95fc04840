"""Seed 003 harness: the `sequence` task kind through the real Trainer, the objectives (masked SFT, replayed
policy gradients), length-grid evaluation, saved-state continuation, the bench and the study runner."""

import argparse
import csv
import json
import math

import numpy as np
import pytest
import torch
import yaml

import study_drivers

from looped.config import ConfigError
from looped.data.tasks.s5 import PERMUTATION_TOKEN_BASE, _THEN
from looped.data.tasks.vocabulary import BOS, EOS, ZERO
from looped.models import build_model, get_arch
from looped.train import Trainer, load_model, load_run_config
from looped.train import checkpoint as ckpt
from looped.train.objectives import (leave_one_out_baseline, masked_sequence_loss, policy_gradient_loss,
                                     pretraining_loss, replay_logprobs, sample_rollout)
from looped.train.sequence import SequenceTrainTask, curriculum_cap
from looped.train.tasks import make_train_task

TINY_RLT = dict(arch="rlt", dim=16, heads=2, ffn_dim=16, encoder_layers=1, decoder_layers=1, window=4,
                context_length=128)


def tiny_run(**task) -> dict:
    return {"model": dict(TINY_RLT),
            "task": {"kind": "sequence", "name": "parity", "train_lengths": [3, 8], "same_length_batches": True,
                     "validation_lengths": [8], "validation_size": 32, **task},
            "optim": {"lr": 1e-2, "warmup_steps": 2, "schedule": "cosine"},
            "train": {"batch_size": 16, "micro_batch_size": 8, "max_steps": 24, "eval_every": 8, "select": "best",
                      "log_every": 1, "threads": 1, "eval_batch_size": 32}}


def quiet(message):
    pass


# --- the sequence task kind ----------------------------------------------------------------------------------
def test_sequence_task_trains_through_the_trainer_and_resumes_bit_identically(tmp_path):
    config = load_run_config(base=tiny_run())
    Trainer(config, tmp_path / "straight", progress=False, log=quiet).run()
    events = [json.loads(line) for line in (tmp_path / "straight/metrics.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in events if "loss" in e]
    assert len(losses) == 24 and np.mean(losses[-4:]) < np.mean(losses[:4]) - 1.0  # from 5.6 (277-way) down
    evals = [e for e in events if "val_loss" in e]
    assert [e["step"] for e in evals] == [8, 16, 24]
    assert all(e["val_sequence_accuracy"] <= e["val_final_state_accuracy"] for e in evals)  # whole row right => end right
    best = min(evals, key=lambda e: (e["val_loss"], e["step"]))
    assert json.loads((tmp_path / "straight/checkpoints/last/trainer.json").read_text())["best_step"] == best["step"]

    Trainer(config, tmp_path / "split", progress=False, log=quiet).run(stop_after=11)  # killed mid-way
    Trainer(config, tmp_path / "split", resume=True, progress=False, log=quiet).run()
    a, _ = load_model(tmp_path / "straight/checkpoints/last")
    b, _ = load_model(tmp_path / "split/checkpoints/last")
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    split_losses = [json.loads(line)["loss"] for line in (tmp_path / "split/metrics.jsonl").read_text().splitlines()
                    if "loss" in json.loads(line)]
    assert split_losses == losses


def test_masked_targets_leave_the_loss_but_masked_tokens_update_the_state():
    torch.manual_seed(0)
    model = build_model(get_arch("rlt").config(**{k: v for k, v in TINY_RLT.items() if k != "arch"}))
    config = load_run_config(base=tiny_run())
    task = make_train_task(config, log=quiet)
    batch = task.to(task.batch_at(0, 8), "cpu")  # parity: only the '=' position is scored
    assert int(batch.loss_mask.sum()) == 8
    loss = SequenceTrainTask.loss(model, batch)
    scrambled = batch.targets.clone()
    scrambled[~batch.loss_mask] = torch.randint(0, 256, (int((~batch.loss_mask).sum()),))
    assert torch.equal(masked_sequence_loss(model(batch.tokens), scrambled, batch.loss_mask), loss)
    # flipping the first bit (an unscored token) changes the later logits through the state, and the loss
    flipped = batch.tokens.clone()
    flipped[:, 1] = 2 * ZERO + 1 - flipped[:, 1]
    with torch.no_grad():
        before, after = model(batch.tokens), model(flipped)
    assert torch.equal(before[:, 0], after[:, 0])  # causal: position 0 never sees position 1
    assert (before[:, -1] - after[:, -1]).abs().max() > 1e-6
    # a gradient from the one scored target reaches the embedding of the unscored first bit
    model.zero_grad()
    SequenceTrainTask.loss(model, batch).backward()
    assert model.embed.weight.grad[int(batch.tokens[0, 1])].abs().sum() > 0
    # eq. 24 normalises per example: rows with 1 and 3 targets weigh the same
    logits = torch.randn(2, 4, 5)
    targets = torch.randint(0, 5, (2, 4))
    mask = torch.tensor([[0, 0, 0, 1], [0, 1, 1, 1]], dtype=torch.bool)
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    expected = (nll[0, 3] + nll[1, 1:].mean()) / 2
    assert torch.allclose(masked_sequence_loss(logits, targets, mask), expected)
    tokens = torch.randint(0, 277, (3, 9))
    full = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    assert torch.allclose(pretraining_loss(model, tokens), full, atol=1e-6)  # eq. 23, equal lengths
    # padded rows: a row of length 5 scores its 4 targets, (1 / 4) each, whatever follows it
    lengths = torch.tensor([9, 5, 9])
    padded = tokens.clone()
    padded[1, 5:] = 258  # PAD
    per_row = [torch.nn.functional.cross_entropy(model(row[None, :n - 1])[0], row[1:n]) for row, n in
               zip(padded, lengths.tolist())]
    assert torch.allclose(pretraining_loss(model, padded, lengths), torch.stack(per_row).mean(), atol=1e-6)


def test_length_curriculum_and_batch_composition():
    assert [curriculum_cap(s, 1000, 8, 40, 0.5) for s in (0, 250, 499, 500, 999)] == [8, 24, 39, 40, 40]
    assert curriculum_cap(0, 1000, None, 40, 0.5) == 40
    config = load_run_config(base=tiny_run(train_lengths=None, curriculum_start=8, validation_lengths=[32]))
    task = make_train_task(config, log=quiet)  # parity 3..40, 24 updates, ramp over the first 12
    for step in (0, 6, 12, 23):
        cap = curriculum_cap(step, 24, 8, 40, 0.5)
        batch = task.batch_at(step, 16)
        assert batch.difficulty.max() <= cap and batch.difficulty.min() >= 3
        for group in (batch.difficulty[:8], batch.difficulty[8:]):  # one length per micro-batch
            assert group.unique().numel() == 1
        assert torch.equal(batch.tokens, task.batch_at(step, 16).tokens)  # a pure function of the step
    mixed_run = tiny_run(name="mod5_flat", train_lengths=None, same_length_batches=False, validation_lengths=[33])
    mixed = make_train_task(load_run_config(base=mixed_run), log=quiet)
    lengths = torch.cat([mixed.batch_at(s, 16).difficulty for s in range(4)])
    assert lengths.unique().numel() > 4 and bool((lengths % 2 == 1).all())  # per-row, odd lengths only
    row = mixed.batch_at(0, 16)
    assert torch.equal(row.loss_mask.sum(1), torch.ones(16, dtype=torch.long))
    with pytest.raises(ConfigError, match="variant"):
        load_run_config(base=tiny_run(name="s5", variant="rotations"))
    with pytest.raises(ConfigError, match="train_lengths"):
        load_run_config(base=tiny_run(train_lengths=[9, 3]))


def test_a_curriculum_that_cannot_shorten_a_batch_is_refused():
    # S5 trains on 32 operations only: a curriculum without a wider train_lengths silently did nothing
    with pytest.raises(ConfigError, match=r"curriculum_start: 3 has no effect: s5-swaps trains on length 32 only"):
        load_run_config(base=tiny_run(name="s5", variant="swaps", train_lengths=None, curriculum_start=3,
                                      validation_lengths=[32]))
    with pytest.raises(ConfigError, match="curriculum_start: 40 has no effect"):  # starts at the longest already
        load_run_config(base=tiny_run(train_lengths=None, curriculum_start=40, validation_lengths=[32]))
    config = load_run_config(base=tiny_run(name="s5", variant="swaps", train_lengths=[2, 32], curriculum_start=2,
                                           validation_lengths=[32]))
    task = make_train_task(config, log=quiet)
    assert int(task.batch_at(0, 8).difficulty.max()) == 2  # the recipe's curriculum now takes effect


@pytest.mark.parametrize("same_length", [True, False])
def test_training_batches_never_contain_a_test_row(same_length):
    def parity_task(test_lengths):
        task = make_train_task(load_run_config(base=tiny_run(train_lengths=[3, 4], same_length_batches=same_length,
                                                       validation_lengths=[32])), log=quiet)
        task.task.test_lengths, task.task.test_rows_per_length = test_lengths, 4  # 4 of the 8 three-bit strings
        return task

    filtered, plain = parity_task((3, 32)), parity_task((32,))
    held = filtered.test_keys(3)
    assert len(held) == 4 and filtered.test_keys(4) == frozenset()
    seen_three_bit, redrawn = set(), 0
    for step in range(12):
        batch, reference = filtered.batch_at(step, 16), plain.batch_at(step, 16)
        keys = filtered.task.keys(batch)
        assert not held & set(keys) and len(batch) == 16
        seen_three_bit |= {k for k, d in zip(keys, batch.difficulty.tolist()) if d == 3}
        if not held & set(plain.task.keys(reference)):
            assert torch.equal(batch.tokens, reference.tokens)  # batches that met no test row are untouched
        else:
            redrawn += 1
    assert redrawn > 0 and len(seen_three_bit) == 4  # collisions happened, and only the other four strings train


# --- length-grid evaluation --------------------------------------------------------------------------------
class Oracle(torch.nn.Module):
    """A fake LM that puts all its mass on the right answer of parity ('=' -> running parity) and S5
    (running product): the evaluator must then report exactly 1.0."""

    def forward(self, tokens):
        logits = torch.full((*tokens.shape, 277), -10.0)
        for i, row in enumerate(tokens.tolist()):
            ones, state = 0, 0
            for t, token in enumerate(row):
                if token == BOS:
                    continue
                if PERMUTATION_TOKEN_BASE <= token < PERMUTATION_TOKEN_BASE + 120:
                    state = int(_THEN[state, token - PERMUTATION_TOKEN_BASE])
                    logits[i, t, PERMUTATION_TOKEN_BASE + state] = 10.0
                else:
                    ones += token == ZERO + 1
                    if token in (ZERO, ZERO + 1):  # the running parity; the task scores it at the last bit
                        logits[i, t, ZERO + ones % 2] = 10.0
        return logits


def whole_rows_of(fraction: float, rows: int) -> bool:
    """An accuracy over `rows` rows is k / rows for a whole k (a pooled or mis-normalised count is not)."""
    return abs(fraction * rows - round(fraction * rows)) < 1e-9 and 0 <= round(fraction * rows) <= rows


def test_length_grid_evaluation(tmp_path):
    from looped.eval.lengths import aggregate_over_seeds, evaluate_lengths, length_grid, plot_length_curves

    assert length_grid("parity") == (32, 40, 48, 64, 96, 128, 192, 256)
    assert length_grid("s5", variant="swaps")[-1] == 512 and length_grid("mod5_flat")[3] == 63
    torch.manual_seed(0)
    model = build_model(get_arch("rlt").config(**{k: v for k, v in TINY_RLT.items() if k != "arch"}))
    records = evaluate_lengths(model, "parity", lengths=[32, 40], n=12, batch_size=5)
    assert [r["length"] for r in records] == [32, 40] and all(r["sequences"] == 12 for r in records)
    for r in records:
        assert r["sequence_accuracy"] <= r["final_state_accuracy"]  # a row right everywhere is right at its end
        assert all(whole_rows_of(r[m], 12) for m in ("final_state_accuracy", "sequence_accuracy"))
    for name, variant in (("parity", None), ("s5", "swaps")):
        perfect = evaluate_lengths(Oracle(), name, variant=variant, lengths=[32, 48], n=8, batch_size=3)
        assert all(r[m] == 1.0 for r in perfect for m in ("final_state_accuracy", "prefix_token_accuracy",
                                                          "sequence_accuracy"))
    s5 = evaluate_lengths(Oracle(), "s5", variant="swaps", lengths=[48], n=4)[0]
    assert s5["scored_tokens"] == 4 * 48  # every prefix state scored
    table = aggregate_over_seeds([{"row": "a", "length": 32, "final_state_accuracy": x} for x in (0.5, 0.7, 0.9)])
    assert table[0]["n"] == 3 and math.isclose(table[0]["final_state_accuracy"], 0.7)
    assert math.isclose(table[0]["final_state_accuracy_sd"], 0.2)  # sample SD (n - 1)
    assert plot_length_curves(table, "parity", tmp_path / "p.png").exists()


# --- policy gradients with replay --------------------------------------------------------------------------
def test_replayed_policy_gradient_raises_a_toy_reward():
    torch.manual_seed(0)
    model = build_model(get_arch("rlt").config(**{**{k: v for k, v in TINY_RLT.items() if k != "arch"},
                                                   "vocab_size": 8}))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    target, prompts = 3, torch.tensor([[1, 2]]).repeat(32, 1)

    def reward(rollout):  # fraction of the sampled tokens equal to the target symbol
        return ((rollout.tokens == target) & rollout.action_mask).sum(1) / rollout.action_mask.sum(1)

    def mean_reward():
        rollout = sample_rollout(model, prompts.repeat(4, 1), 6, generator=torch.Generator().manual_seed(99))
        return float(reward(rollout).mean())

    before = mean_reward()
    generator = torch.Generator().manual_seed(0)
    for _ in range(6):
        rollout = sample_rollout(model, prompts, 6, generator=generator)
        rewards = reward(rollout)
        for epoch in range(2):  # the second pass is off-policy: ratios != 1, replayed under the new weights
            loss, stats = policy_gradient_loss(replay_logprobs(model, rollout), rollout, rewards)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if epoch == 0:  # the behaviour log-probs are the current policy's: every ratio is 1
                assert abs(stats["mean_sequence_ratio"] - 1) < 1e-4
    after = mean_reward()
    assert after > before + 0.2, (before, after)
    assert torch.equal(leave_one_out_baseline(torch.tensor([1.0, 0.0, 0.0])), torch.tensor([0.0, 0.5, 0.5]))


# --- saved states through the CLI ----------------------------------------------------------------------------
def write_checkpoint(folder, seed=0, **model):
    from looped.train.config import RunConfig
    from looped.config import from_dict

    config = from_dict(RunConfig, {**tiny_run(), "model": {**TINY_RLT, **model}})
    torch.manual_seed(seed)
    net = build_model(config.model)
    ckpt.write_folder_atomically(folder, {"config.json": ckpt.config_json(config),
                                          "model.safetensors": net.state_dict()})
    return folder


def test_state_save_resume_and_refusal_through_the_cli(tmp_path, capsys):
    from looped.cli.rlt import add_commands

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    run = write_checkpoint(tmp_path / "run")
    state = tmp_path / "chat.safetensors"

    def call(*argv):
        args = parser.parse_args(["continue", str(run), "--state", str(state), "--temperature", "0", *argv])
        return args.func(args)

    assert call("--prompt", "0110<EOS>", "--max-new-tokens", "3") == 0  # parity's query ends with EOS
    assert state.exists() and not list(tmp_path.glob(".chat*"))  # written atomically, no temporary left
    assert call("--prompt", "1<EOS>", "--max-new-tokens", "2") == 0
    from looped.infer.state import load_state
    model, _ = load_model(run)
    saved, history, pending, _ = load_state(state, model)
    assert history[0, :6].tolist() == [BOS, *b"0110", EOS] and saved.position == history.shape[1]
    h = history[0].tolist()
    assert any(h[i:i + 2] == [ord("1"), EOS] for i in range(6, len(h))) and pending.shape == (1, 1)  # 2nd turn
    with torch.no_grad():  # the resumed state is the state of one uninterrupted pass over the history
        full = model(torch.cat((history, pending), 1))[:, -1]
        assert torch.allclose(model.decode(pending, saved)[:, -1], full, atol=1e-5)
    out = capsys.readouterr()
    assert "position" in out.err

    other = write_checkpoint(tmp_path / "chunk4", feedback_interval=4)
    args = parser.parse_args(["continue", str(other), "--state", str(state), "--prompt", "1"])
    with pytest.raises(ValueError, match="feedback_interval") as err:
        args.func(args)
    assert "\n" not in str(err.value)
    retrained = write_checkpoint(tmp_path / "retrained", seed=1)
    args = parser.parse_args(["continue", str(retrained), "--state", str(state), "--prompt", "1"])
    with pytest.raises(ValueError, match="weights"):
        args.func(args)


def test_lengths_command_through_the_cli(tmp_path, capsys):
    from looped.cli import main

    run = write_checkpoint(tmp_path / "run")
    out = tmp_path / "lengths.json"
    assert main(["lengths", str(run), "--lengths", "32", "48", "--n", "8", "--out", str(out), "--quiet",
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) and printed["task"] == "parity"
    assert [r["length"] for r in printed["lengths"]] == [32, 48]
    for record in printed["lengths"]:
        assert record["sequences"] == 8 and whole_rows_of(record["final_state_accuracy"], 8)
    assert main(["lengths", str(tmp_path / "missing")]) != 0
    assert "missing" in capsys.readouterr().err


def test_the_lengths_table_marks_additions_prefix_token_accuracy_as_its_headline():
    """Addition's final "state" is its EOS, right for any model: the table stated chance for it."""
    from looped.cli.rlt import lengths_table

    records = [{"length": 9, "final_state_accuracy": 1.0, "prefix_token_accuracy": 0.39, "sequence_accuracy": 0.0,
                "sequences": 256}]
    text = lengths_table(records, (1, 8), 0.1, "prefix_token_accuracy")
    assert "| final state | **prefix token** |" in text and "0.100 for the prefix token;" in text


def test_lengths_prints_a_table_with_trained_lengths_and_chance_and_writes_the_plot(tmp_path, capsys, monkeypatch):
    """Issue 29 §3: `looped lengths` printed the JSON on stdout (twice with --out) and drew nothing."""
    from looped.cli import main

    run = tmp_path / "run"
    write_checkpoint(run / "checkpoints" / "last")
    monkeypatch.chdir(tmp_path)
    assert main(["lengths", str(run), "--lengths", "4", "16", "--n", "8", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "| 4* |" in out and "| 16 |" in out  # tiny_run trains lengths 3-8
    assert "trained lengths (3-8); bold: the task's headline; chance (uniform prediction) 0.500 for the final " \
           "state" in out and "| **final state** |" in out
    assert "{" not in out  # no JSON unless --json
    assert (run / "lengths.png").stat().st_size > 0 and not (tmp_path / "lengths.png").exists()
    checkpoint_only = write_checkpoint(tmp_path / "loose")  # a checkpoint outside a run: ./lengths.png
    assert main(["lengths", str(checkpoint_only), "--lengths", "4", "--n", "8", "--quiet"]) == 0
    assert (tmp_path / "lengths.png").exists() and not (checkpoint_only / "lengths.png").exists()


# --- bench, recipes, study ----------------------------------------------------------------------------------
def test_bench_writes_json_at_tiny_size(tmp_path):
    from looped.bench import rlt

    parser = argparse.ArgumentParser()
    rlt.add_arguments(parser)
    out = tmp_path / "rlt.json"
    args = parser.parse_args(["--intervals", "1", "4", "--dim", "16", "--heads", "2", "--ffn-dim", "16",
                              "--encoder-layers", "1", "--decoder-layers", "1", "--batch", "2", "--seq", "8",
                              "--rounds", "2", "--warmup", "1", "--prefill-lengths", "4", "8", "--contexts", "4",
                              "--generation-steps", "2", "--out", str(out)])
    assert rlt.main(args) == 0
    result = json.loads(out.read_text())
    assert set(result["rows"]) == {"B=1", "B=4", "RLT-0"}
    assert set(result["ratios"]) == {"rlt1_over_rlt0", "chunk4_over_rlt0"}
    memory = result["rows"]["B=1"]["memory"]
    assert memory["peak_step_bytes"] >= memory["saved_for_backward_bytes"] > 0  # the peak also holds temporaries
    assert result["profile_rlt1"]["top_ops"] and out.with_suffix(".png").exists()


def test_shipped_recipes_carry_the_papers_settings():
    root = ckpt.Path(__file__).resolve().parents[1] / "configs/rlt"
    full = load_run_config(root / "full/parity_rlt1.yaml")
    assert (full.train.batch_size, full.train.micro_batch_size, full.optim.lr) == (512, 32, 1e-4)
    assert load_run_config(root / "full/mod5_flat_rlt0.yaml").train.max_steps == 5000
    cpu = yaml.safe_load((root / "cpu/parity_chunk4.yaml").read_text())
    assert cpu["task"]["curriculum_start"] == 3 and cpu["model"]["feedback_interval"] == 4


def test_study_scores_every_length_and_shuffled_feedback_for_feedback_rows_only(tmp_path):
    from looped.experiments import study

    toy = study_drivers.toy("rlt", tmp_path)  # parity, RLT-1 and the Transformer, 2 updates, lengths 32 and 64
    out, runs = tmp_path / "results", tmp_path / "runs"
    study.run_study("rlt", out, runs, select=toy["select"], overrides=toy["overrides"], progress=False, log=quiet,
                    **toy["options"])
    results = list(csv.DictReader(open(out / "results.csv")))
    assert {(r["row"], r["status"]) for r in results} == {("rlt1", "ok"), ("baseline", "ok")}
    lengths = list(csv.DictReader(open(out / "lengths.csv")))
    assert sorted((r["row"], int(r["length"])) for r in lengths) == [("baseline", 32), ("baseline", 64),
                                                                    ("rlt1", 32), ("rlt1", 64)]
    table = (out / "table.md").read_text()
    assert "RLT-1 2+2" in table and "same-length batches" in table and "100.00 ± 0.00" in table  # paper column
    shuffled = {r["row"]: r["shuffled_feedback_accuracy"] for r in lengths if int(r["length"]) == 32}
    assert shuffled["baseline"] == "" and shuffled["rlt1"] != ""  # measured for feedback rows only
    assert "| 40, shuffled feedback |" in table
    assert (out / "parity.png").exists() and (out / "feedback.png").exists()


def test_shuffled_feedback_hands_each_row_its_neighbours_register():
    torch.manual_seed(0)
    model = build_model(get_arch("rlt").tiny_config(feedback_interval=1)).double().eval()
    tokens = torch.randint(0, 200, (3, 9))
    plain, shuffled = model(tokens), model(tokens, shuffle_feedback=True)
    # position 0 reads s*, the same for every row: identical; later positions read another row's state
    assert torch.equal(plain[:, 0], shuffled[:, 0])
    assert (plain[:, 1:] - shuffled[:, 1:]).abs().max() > 1e-3
    # rows that are all the same sequence: a neighbour's register is the row's own, so nothing changes
    same = tokens[:1].expand(3, -1)
    assert torch.allclose(model(same), model(same, shuffle_feedback=True), atol=1e-12)
    # the ablation is exactly a roll of the register: row 1 step 1 merges row 0's s_0
    state = model.init_state(3)
    first = model.decode(tokens[:, :1], state)
    registers = state.feedback.clone()
    state.feedback = registers.roll(1, 0)
    assert torch.allclose(model.decode(tokens[:, 1:2], state)[:, 0], shuffled[:, 1], atol=1e-12)
    assert torch.allclose(first[:, 0], plain[:, 0], atol=1e-12)


def test_table_lists_tasks_and_rows_by_the_plan_not_the_order_runs_finished(tmp_path):
    # the table listed RLT-0 and the Transformer above RLT-1 and addition first: the order of results.csv
    from looped.experiments import rlt_study
    from looped.experiments.results import ResultTable
    results = ResultTable(tmp_path / "results.csv", rlt_study.COLUMNS, ["task", "row", "seed"])
    lengths = ResultTable(tmp_path / "lengths.csv", ["task", "row", "seed", "length", *rlt_study.METRICS],
                          ["task", "row", "seed", "length"])
    finished = [("addition", "rlt0"), ("addition", "baseline"), ("parity", "lstm"), ("parity", "rlt0"),
                ("parity", "rlt1"), ("addition", "rlt1"), ("parity", "chunk4")]
    results.add_many([dict(task=task, row=row, arch=row, seed=42, parameters=100, updates=10, best_step=10,
                           status="ok") for task, row in finished])
    text = rlt_study.table_markdown(results, lengths, "cpu")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h.split()[1] for h in headings] == ["parity", "addition"]
    parity = text[text.index("## parity"):text.index("## addition")]
    labels = [line.split(" | ")[0].lstrip("| ") for line in parity.splitlines() if line.startswith("| ") and
              not line.startswith("| row")]
    assert labels == ["RLT-1 2+2", "RLT-2 chunk4 2+2", "RLT-0 2+2", "LSTM 1"]
    assert rlt_study.plan_order(["z", "b", "a", "b"], ["a", "b"]) == ["a", "b", "z"]
