"""exit_gate_loop (the Ouro LoopLM, arXiv 2510.25741): the exit distribution, the stage-I objective through the
trainer's normal path, the q-threshold exit (causal, incremental == forward), the trace, the paper's 1.4B
configuration and the CPU recipe. The shared drivers (tests/lm_drivers.py, test_ledger.py, test_lens.py) cover
causality, incremental decoding at depths 1, 4, 6, the ledger and the trace contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from looped.models import build_model, get_arch
from looped.models.exit_gate import ExitSteps, exit_distribution
from looped.train import load_run_config
from looped.train.tasks import LMTrainTask

from lm_drivers import tiny_model

REPO = Path(__file__).resolve().parents[1]


def tiny(**overrides):
    return tiny_model("exit_gate_loop", **overrides)


def set_gate(model, bias: float) -> None:
    """A gate that ignores the state: lambda_t = sigmoid(bias) at every step and position."""
    with torch.no_grad():
        model.gate.weight.zero_()
        model.gate.bias.fill_(bias)


# --- the exit distribution --------------------------------------------------------------------------------
def test_exit_distribution_gives_the_last_step_the_remaining_mass():
    lam = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64)
    # p(1) = 0.2, p(2) = 0.5 * 0.8, p(3) = what is left (0.8 * 0.5), not 0.9 * 0.4
    torch.testing.assert_close(exit_distribution(lam), torch.tensor([[0.2, 0.4, 0.4]], dtype=torch.float64))
    halves = exit_distribution(torch.full((4,), 0.5, dtype=torch.float64))
    torch.testing.assert_close(halves, torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64))


# --- the stage-I objective ----------------------------------------------------------------------------------
def hand_objective(model, tokens: torch.Tensor, beta: float) -> torch.Tensor:
    """sum_t p(t) L^(t) - beta H(p), per position, from the trace (another code path than `objective`)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    entries = list(model.trace(inputs))
    loss = torch.stack([F.cross_entropy(e.logits.transpose(1, 2), targets, reduction="none") for e in entries], -1)
    p = torch.stack([e.stats["exit mass"] for e in entries], -1)
    entropy = -(p * p.log()).sum(-1)
    return ((p * loss).sum(-1) - beta * entropy).mean()


def test_the_trainers_loss_is_the_expected_loss_minus_the_entropy_bonus():
    model = tiny(entropy_weight=0.3)
    tokens = torch.randint(0, model.config.vocab_size, (2, 12))
    loss = LMTrainTask.loss(model, tokens)
    torch.testing.assert_close(loss, hand_objective(model, tokens, 0.3).float())
    last_step_only = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    assert abs(loss.item() - last_step_only.item()) > 1e-3  # not the plain loss of forward's logits


def test_a_sequence_task_averages_the_objective_over_its_scored_targets_only():
    """Task kind "sequence" (seed 003's masked targets): the same objective, per-example mean over scored positions;
    unscored targets may be placeholder ids outside the vocabulary."""
    from looped.data.tasks import SequenceBatch
    from looped.train.sequence import SequenceTrainTask
    model = tiny()
    vocab = model.config.vocab_size
    tokens = torch.randint(0, vocab, (2, 8))
    targets = torch.randint(0, vocab, (2, 8))
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, 5:], mask[1, 2:4] = True, True
    batch = SequenceBatch(tokens=tokens, targets=torch.where(mask, targets, -100), loss_mask=mask,
                          lengths=torch.tensor([8, 8]), difficulty=torch.tensor([1, 1]))
    loss = SequenceTrainTask.loss(model, batch)
    terms = model.position_objective(model(tokens, with_exits=True), targets)
    expected = (terms[0, 5:].mean() + terms[1, 2:4].mean()) / 2
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert model.gate.weight.grad.abs().sum() > 0


def test_a_gate_that_always_exits_trains_the_first_step_only():
    model = tiny(entropy_weight=0.5)
    set_gate(model, 50.0)  # lambda = 1: p = (1, 0, 0, 0), entropy 0
    tokens = torch.randint(0, model.config.vocab_size, (2, 12))
    first = F.cross_entropy(model(tokens[:, :-1], rounds=1).flatten(0, 1), tokens[:, 1:].flatten())
    torch.testing.assert_close(LMTrainTask.loss(model, tokens), first.float())


def test_the_objective_trains_the_gate():
    """Through the trainer's loss the gate gets a gradient; the cross-entropy of forward's logits gives it none."""
    model = tiny()
    tokens = torch.randint(0, model.config.vocab_size, (2, 12))
    LMTrainTask.loss(model, tokens).backward()
    assert model.gate.weight.grad.abs().sum() > 0 and model.gate.bias.grad.abs() > 0


def test_with_exits_returns_every_steps_readout():
    model = tiny()
    x = torch.randint(0, model.config.vocab_size, (2, 9))
    with torch.no_grad():
        steps = model(x, rounds=3, with_exits=True)
        assert isinstance(steps, ExitSteps) and len(steps.logits) == 3 and steps.exit_probs.shape == (2, 9, 3)
        for depth, logits in enumerate(steps.logits, 1):
            torch.testing.assert_close(logits, model(x, rounds=depth))


# --- inference exit ----------------------------------------------------------------------------------------
def test_threshold_one_never_exits_early_and_zero_exits_after_the_first_step():
    model = tiny()
    x = torch.randint(0, model.config.vocab_size, (2, 14))
    with torch.no_grad():
        logits, used = model.forward_early_exit(x, 1.0)
        torch.testing.assert_close(logits, model(x))
        assert (used == model.config.rounds).all()
        logits, used = model.forward_early_exit(x, 0.0)
        torch.testing.assert_close(logits, model(x, rounds=1))
        assert (used == 1).all()


def test_the_exit_step_is_the_first_whose_cumulative_probability_exceeds_q():
    model = tiny()
    set_gate(model, 0.0)  # lambda = 0.5: the CDF after steps 1, 2, 3 is 0.5, 0.75, 0.875
    x = torch.randint(0, model.config.vocab_size, (1, 6))
    with torch.no_grad():
        for q, step in ((0.49, 1), (0.5, 2), (0.7, 2), (0.8, 3), (0.9, 4)):
            assert (model.forward_early_exit(x, q)[1] == step).all(), q


def test_early_exit_is_causal_and_incremental():
    model = tiny()
    vocab, q = model.config.vocab_size, 0.6
    x = torch.randint(0, vocab, (2, 24))
    y = x.clone()
    y[:, 12:] = torch.randint(0, vocab, (2, 12))
    with torch.no_grad():
        full, used = model.forward_early_exit(x, q, rounds=5)
        assert used.unique().numel() > 1, "the check needs positions that exit at different steps"
        other, _ = model.forward_early_exit(y, q, rounds=5)
        assert (full[:, :12] - other[:, :12]).abs().max() <= 1e-9
        for chunk in (1, 5):
            state = model.init_state(2, rounds=5, exit_threshold=q)
            parts = [model.decode(x[:, i:i + chunk], state) for i in range(0, 24, chunk)]
            assert (torch.cat(parts, 1) - full).abs().max() <= 1e-9, chunk
            assert torch.equal(torch.cat(state.rounds_used, 1), used)


def test_a_negative_threshold_is_refused_in_one_line():
    model = tiny()
    with pytest.raises(ValueError, match="exit threshold q must be >= 0"):
        model.forward_early_exit(torch.zeros(1, 2, dtype=torch.long), -0.1)
    with pytest.raises(ValueError, match="exit threshold q must be >= 0"):
        model.init_state(1, exit_threshold=-0.1)


def test_trace_exit_masses_are_the_exit_distribution():
    model = tiny()
    x = torch.randint(0, model.config.vocab_size, (2, 7))
    with torch.no_grad():
        entries = list(model.trace(x, rounds=3))
        lam = torch.stack([e.stats["exit probability"] for e in entries], -1)
        mass = torch.stack([e.stats["exit mass"] for e in entries], -1)
        torch.testing.assert_close(mass, exit_distribution(lam))
        torch.testing.assert_close(mass.sum(-1), torch.ones(2, 7, dtype=mass.dtype))


# --- the paper's configuration ------------------------------------------------------------------------------
def test_ouro_1_4b_configuration_gives_1_43_billion_parameters():
    """Ouro 1.4B: 24 layers shared over 4 steps, width 2048, 16 heads (MHA), SwiGLU 5632, vocabulary 49,152, an
    untied head (the released config.json; the paper's model table gives the layers, width and steps). The paper
    states "1.4B" and no exact count; ours is 1,434,652,673, of which the exit gate is 2,049."""
    config = get_arch("exit_gate_loop").config(dim=2048, heads=16, ffn_dim=5632, layers=24, rounds=4,
                                               vocab_size=49152, context_length=65536, rope_base=1e6)
    with torch.device("meta"):
        counts = build_model(config).parameter_counts()
    layer = 4 * 2048 * 2048 + 3 * 2048 * 5632 + 4 * 2048  # attention, SwiGLU, four RMSNorm gains
    assert counts["layers"] == 24 * layer
    assert counts["embed"] == counts["head"] == 49152 * 2048
    assert counts["gate"] == 2049
    assert counts["total"] == 1_434_652_673


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="model.entropy_weight"):
        get_arch("exit_gate_loop").config(entropy_weight=-1.0)
    with pytest.raises(ValueError, match="RoPE needs an even head width"):
        get_arch("exit_gate_loop").config(dim=12, heads=4)


# --- the CPU recipe ----------------------------------------------------------------------------------------
def test_one_update_of_the_recipe_trains_every_part(tmp_path):
    """configs/examples/exit_gate_kjv.yaml through the normal config path (shrunk): one update moves the gate."""
    from looped.train import Trainer
    config = load_run_config(REPO / "configs/examples/exit_gate_kjv.yaml",
                             overrides=["model.dim=16", "model.heads=2", "model.ffn_dim=24", "model.context_length=16",
                                        "data.block_size=17", "train.batch_size=2", "train.max_steps=1",
                                        "train.eval_every=1", "train.eval_batches=1"])
    torch.manual_seed(0)
    trainer = Trainer(config, tmp_path / "run", progress=False, log=lambda m: None)
    trainer.run()
    assert trainer.model.arch_name == "exit_gate_loop"
    from safetensors.torch import load_file
    weights = load_file(str(tmp_path / "run/checkpoints/last/model.safetensors"))
    torch.manual_seed(config.train.seed)
    initial = build_model(config.model).state_dict()
    assert not torch.equal(weights["gate.weight"], initial["gate.weight"])


def test_held_out_scoring_with_the_exit_rule_reports_the_steps_used():
    """`looped eval --exit-threshold q` goes through evaluate_lm: q = 0 scores step 1 only, q = 1 all T steps."""
    from looped.eval import evaluate_lm
    model = tiny().float()
    blocks = torch.randint(0, model.config.vocab_size, (3, 17))
    first = evaluate_lm(model, blocks, exit_threshold=0.0)
    assert first["mean_rounds_used"] == 1.0
    assert first["nll"] == pytest.approx(evaluate_lm(model, blocks, rounds=1)["nll"], rel=1e-6)
    every = evaluate_lm(model, blocks, exit_threshold=1.0)
    assert every["mean_rounds_used"] == model.config.rounds
    assert every["nll"] == pytest.approx(evaluate_lm(model, blocks)["nll"], rel=1e-6)
