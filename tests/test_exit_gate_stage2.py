"""exit_gate_loop's stage II (Ouro, arXiv 2510.25741): the gate alone learns when one more step stops paying,
with the LM frozen. The target against a hand computation, the frozen weights through the real trainer, and a
tiny stage-2 run whose gate loss falls."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from looped.models.exit_gate import ExitSteps, GateTarget, continuation_targets, gate_loss
from looped.train import Trainer, load_run_config

from lm_drivers import tiny_model

TINY = {"model": {"arch": "exit_gate_loop", "dim": 16, "heads": 2, "ffn_dim": 24, "layers": 1, "rounds": 3,
                  "context_length": 16},
        "data": {"corpus": "kjv", "block_size": 17},
        "optim": {"lr": 3e-3, "weight_decay": 0.1},
        "train": {"seed": 5, "batch_size": 4, "max_steps": 30, "eval_every": 0, "eval_batches": 1, "log_every": 1}}


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# --- the target -----------------------------------------------------------------------------------------------
def test_the_continuation_target_matches_a_hand_computation():
    """Losses 3.0, 2.0, 2.0, 2.5 over four steps: step 1 -> 2 improves by 1 nat, 2 -> 3 by nothing and 3 -> 4
    gets worse, which counts as no improvement (not as a negative one)."""
    losses = torch.tensor([3.0, 2.0, 2.0, 2.5], dtype=torch.float64)
    w = continuation_targets(losses, GateTarget(slope=50.0, margin=0.005))
    expected = [sigmoid(50 * (1.0 - 0.005)), sigmoid(50 * (0.0 - 0.005)), sigmoid(50 * (0.0 - 0.005))]
    torch.testing.assert_close(w, torch.tensor(expected, dtype=torch.float64))
    assert expected[2] == pytest.approx(0.4378, abs=1e-4)  # sigmoid(-0.25): clamped, not sigmoid(-25.25)


def test_the_gate_loss_is_the_cross_entropy_of_each_gate_but_the_last():
    """lambda = 0.2, 0.6, 0.9 with the targets above (slope 2, margin 0.5 keeps every w away from 0 and 1): the
    last gate's 0.9 must not enter (step T always exits)."""
    losses = torch.tensor([[3.0, 2.0, 2.0]], dtype=torch.float64)
    lam = torch.tensor([[0.2, 0.6, 0.9]], dtype=torch.float64)
    w1, w2 = sigmoid(2 * (1.0 - 0.5)), sigmoid(2 * (0.0 - 0.5))
    by_hand = -((w1 * math.log(0.8) + (1 - w1) * math.log(0.2)) + (w2 * math.log(0.4) + (1 - w2) * math.log(0.6))) / 2
    got = gate_loss(lam, losses, GateTarget(slope=2.0, margin=0.5))
    assert got.item() == pytest.approx(by_hand, rel=1e-12)


def test_stage_two_objective_reads_the_models_own_step_losses():
    """train_gate_only switches `objective` to the gate's loss on the model's own per-step losses."""
    model = tiny_model("exit_gate_loop")
    tokens = torch.randint(0, model.config.vocab_size, (2, 9))
    steps: ExitSteps = model(tokens[:, :-1], with_exits=True)
    stage_one = model.objective(steps, tokens[:, 1:])
    model.train_gate_only(GateTarget())
    stage_two = model.objective(steps, tokens[:, 1:])
    losses = torch.stack([torch.nn.functional.cross_entropy(lg.transpose(1, 2), tokens[:, 1:], reduction="none")
                          for lg in steps.logits], -1)
    torch.testing.assert_close(stage_two, gate_loss(steps.exit_probs, losses, GateTarget()).mean().float())
    assert abs(stage_two.item() - stage_one.item()) > 1e-3


# --- the config -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (["train.exit_gate_stage=3"], "train.exit_gate_stage must be 1 or 2"),
    (["train.exit_gate_stage=2"], "set train.init_from to a stage-1 run"),
    (["train.exit_gate_slope=0"], "train.exit_gate_slope must be > 0"),
])
def test_bad_stage_settings_are_one_line_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_run_config(base=TINY, overrides=overrides)


def test_a_stage_two_update_is_counted_as_the_forward_it_runs():
    """The LM is frozen, so an update back-propagates into the gate only: its FLOPs are one forward with the
    training readout (FlopCounterMode on the real objective), not the ledger's 3 x forward of a stage-I update."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from looped.train.compute import UpdateFlops

    model = tiny_model("exit_gate_loop")
    stage_one = UpdateFlops(model, context=16, batch=2).steady
    model.train_gate_only(GateTarget())
    tokens = torch.randint(0, model.config.vocab_size, (2, 17))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        steps = model(tokens[:, :-1], with_exits=True)
        model.objective(steps, tokens[:, 1:]).backward()
    assert UpdateFlops(model, context=16, batch=2).steady == pytest.approx(counter.get_total_flops(), rel=0.02)
    assert stage_one == pytest.approx(3 * UpdateFlops(model, context=16, batch=2).steady)


def test_stage_two_of_another_architecture_is_refused():
    transformer = {**TINY, "model": {"arch": "transformer", "context_length": 16}}
    with pytest.raises(ValueError, match="model.arch is 'transformer'"):
        load_run_config(base=transformer, overrides=["train.exit_gate_stage=2", "train.init_from=somewhere"])


# --- through the trainer ----------------------------------------------------------------------------------------
def train(folder, *extra: str, **train_keys) -> Trainer:
    overrides = [*extra, *(f"train.{k}={v}" for k, v in train_keys.items())]
    config = load_run_config(base=TINY, overrides=overrides)
    trainer = Trainer(config, folder, progress=False, log=lambda m: None)
    trainer.run()
    return trainer


@pytest.fixture(scope="module")
def stage_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages")
    train(root / "one")
    # the gate is one linear layer: a larger step size than the LM's
    trainer = train(root / "two", "optim.lr=0.03", exit_gate_stage=2, init_from=str(root / "one"), max_steps=40)
    return root, trainer


def test_stage_two_changes_the_gate_and_nothing_else(stage_runs):
    root, trainer = stage_runs
    before = load_file(str(root / "one/checkpoints/last/model.safetensors"))
    after = load_file(str(root / "two/checkpoints/last/model.safetensors"))
    assert set(before) == set(after)
    moved = {name for name in before if not torch.equal(before[name], after[name])}
    assert moved == {"gate.weight", "gate.bias"}
    optimised = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(trainer.model.gate.weight), id(trainer.model.gate.bias)}


def gate_loss_of(folder, blocks: torch.Tensor) -> float:
    """The stage-II objective of a run's last weights on fixed blocks (batch, block_size)."""
    from looped.models import build_model
    from looped.train.checkpoint import read_config

    model = build_model(read_config(folder / "checkpoints/last").model)
    model.load_state_dict(load_file(str(folder / "checkpoints/last/model.safetensors")))
    model.train_gate_only(GateTarget())
    with torch.no_grad():
        return model.objective(model(blocks[:, :-1], with_exits=True), blocks[:, 1:]).item()


def test_a_tiny_stage_two_run_lowers_the_gate_loss(stage_runs):
    """The same held-out blocks score a lower gate loss after stage 2 than with stage 1's gate (0.578 -> 0.535
    when written; the soft targets' own entropy is a floor no gate gets under)."""
    root, trainer = stage_runs
    blocks = trainer.task.heldout_blocks[:16].long()
    before, after = gate_loss_of(root / "one", blocks), gate_loss_of(root / "two", blocks)
    assert after < 0.95 * before, (before, after)
