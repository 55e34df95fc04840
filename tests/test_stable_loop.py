"""The stable-injection looped LM (Parcae, looped/models/stable_loop.py): the paper's smallest released configuration's
parameter count, its injection equations, the stability they buy (spectral norm below 1 for any parameters, a
bounded state far past the trained depth where an unconstrained injection grows), the per-sequence depth sampling
with truncated backprop, and one update of the CPU recipe. The shared drivers (tests/lm_drivers.py, test_ledger.py,
test_lens.py) cover causality, incremental decoding at every depth, the ledger and the trace through the registry."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lm_drivers
from helpers import recipe_losses
from looped.config import ConfigError
from looped.models import build_model, get_arch
from looped.models import stable_loop
from looped.models.stable_loop import StableInjection, per_sequence_schedule, sample_depths
from looped.train import load_run_config
from looped.train.trainer import param_groups

REPO = Path(__file__).resolve().parents[1]


def tiny(**overrides):
    return lm_drivers.tiny_model("stable_loop", **overrides)


def tokens(model, length: int = 20, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))


# --- the paper's configuration ---------------------------------------------------------------------------------
def test_the_papers_smallest_model_is_its_140m():
    """parcae-small-140m (released config.json): d 768, 6 heads, ReLU^2 3,072, vocabulary 32,768, 2 / 2 / 2 layers,
    tied head, value tables on unique layers 1, 3, 5. Counted from the equations, component by component."""
    V, d, heads, f = 32768, 768, 6, 3072
    config = get_arch("stable_loop").config(vocab_size=V, dim=d, heads=heads, ffn_dim=f, prelude_layers=2,
                                            core_layers=2, coda_layers=2, rounds=8, backprop_rounds=4,
                                            context_length=2048)
    assert config.value_layers() == [1, 3, 5]
    block = 4 * d * d + 2 * d * f + 2 * d + 2 * (d // heads)  # QKV + out, MLP, two norms, the QK-norm gains
    expected = {"embed": V * d, "value_embeds": 3 * V * d, "prelude": 2 * block + 32 * heads, "prelude_norm": d,
                "injection": d * d + 2 * d, "core": 2 * block + 32 * heads, "readout_proj": d * d,
                "coda": 2 * block + 32 * heads, "final_norm": d}  # the value gates: 32 -> heads on layers 1, 3, 5
    with torch.device("meta"):
        counts = build_model(config).parameter_counts()
    assert counts.pop("total") == sum(expected.values()) == 144_324_672
    assert counts == expected
    assert abs(sum(expected.values()) / 140e6 - 1) < 0.035  # the paper's "140M"


def test_bad_settings_are_one_line_errors():
    for setting, message in (("init_decay=1.0", "model.init_decay must be in"), ("dim=30", "even head width"),
                             ("backprop_rounds=0", "model.backprop_rounds must be >= 1")):
        with pytest.raises(ConfigError, match=message) as err:
            load_run_config(REPO / "configs/examples/stable_loop_kjv.yaml", overrides=[f"model.{setting}"])
        assert "\n" not in str(err.value)


# --- the injection's equations and its stability ---------------------------------------------------------------
def test_the_injection_is_the_discretised_negative_diagonal_system():
    """u = A_bar h + B_bar e, A_bar = exp(Delta A), A = Diag(-exp(log A)), B_bar = Delta B, Delta = softplus(delta);
    at initialisation A = -1, A_bar = sqrt(1/5) in every channel and B = I."""
    torch.manual_seed(0)
    injection = StableInjection(8, math.sqrt(0.2)).double()
    torch.testing.assert_close(injection.transition(), torch.full((8,), math.sqrt(0.2), dtype=torch.float64))
    assert torch.equal(injection.B.weight, torch.eye(8, dtype=torch.float64)) and not injection.log_a.any()
    with torch.no_grad():
        for p in injection.parameters():
            p.normal_(0, 1.5)
    h, e = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    delta = F.softplus(injection.delta)
    A = torch.diag(-injection.log_a.exp())
    A_bar, B_bar = torch.linalg.matrix_exp(torch.diag(delta) @ A), torch.diag(delta) @ injection.B.weight
    torch.testing.assert_close(injection(h, e), h @ A_bar.T + e @ B_bar.T)


@pytest.mark.parametrize("scale", [0.1, 1.0, 5.0, 30.0])
def test_the_spectral_norm_is_below_one_for_any_parameters(scale):
    """rho(A_bar) = ||A_bar||_2 < 1 for random parameters of any size; A_bar is diagonal with entries in (0, 1).
    In float64 an entry only rounds to 1 once Delta exp(log A) < ~1e-16 (log A, delta < -18): up to scale 30 the
    draws below reach that, and even then it is never above 1."""
    torch.manual_seed(int(scale * 10))
    for _ in range(20):
        injection = StableInjection(64, math.sqrt(0.2)).double()
        with torch.no_grad():
            injection.log_a.uniform_(-scale, scale)
            injection.delta.uniform_(-scale, scale)
        A_bar = torch.diag(injection.transition())
        norm = torch.linalg.matrix_norm(A_bar, ord=2)
        torch.testing.assert_close(norm, injection.spectral_norm(), rtol=1e-12, atol=0)
        assert norm <= 1
        if scale <= 5:
            assert norm < 1 and (torch.linalg.eigvals(A_bar).abs() < 1).all()
    with torch.no_grad():  # very large parameters: a decay of 0, never an explosion
        injection.log_a.fill_(50.0)
        injection.delta.fill_(50.0)
    assert injection.spectral_norm() == 0


def test_without_the_core_branches_the_loop_is_the_linear_system():
    """Silence R_bar (zero the core's output projections): from h_0 = 0 the state after t rounds is
    sum_{j<t} A_bar^j B_bar e = (1 - A_bar^t) / (1 - A_bar) * Delta B e, converging to (1 - A_bar)^-1 B_bar e."""
    model = tiny()
    with torch.no_grad():
        for block in model.core:
            block.attn.out.weight.zero_()
            block.mlp.down.weight.zero_()
        model.injection.log_a.normal_(0, 0.5)
    x = tokens(model)
    with torch.no_grad():
        prelude_values, _, _ = model.layer_values(x)
        e = model.prelude_output(x, prelude_values, None)
        A_bar, drive = model.injection.transition(), model.injection.step_size() * model.injection.B(e)
        for entry in model.trace(x, rounds=6):
            torch.testing.assert_close(entry.state, (1 - A_bar ** entry.depth) / (1 - A_bar) * drive)


def state_norms(model, x, rounds: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack([entry.state.norm(dim=-1).mean() for entry in model.trace(x, rounds=rounds)])


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0])
def test_the_state_stays_bounded_far_past_the_trained_depth_and_an_unconstrained_one_grows(scale):
    """64 rounds (8x the trained mean of 8) with random parameters of growing size (rho(A_bar) from about 0.6 to
    0.9): the stable loop's state has settled, growing by less than a quarter over the last 32 rounds. The same
    weights with A_bar forced to I (the additive injection of prior looped models, rho = 1) drift linearly: the
    norm about doubles from round 32 to 64. (The bound (|B_bar e| + K) / (1 - rho) is reached more slowly as rho
    nears 1: at rho 0.999 the state still climbs after 64 rounds, bounded but far off.)"""
    model = tiny(dim=32, heads=2, ffn_dim=64, rounds=8)
    torch.manual_seed(int(scale * 10))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale * p.std().clamp(min=0.1))
    x = tokens(model, 24)
    stable = state_norms(model, x, 64)
    assert torch.isfinite(stable).all() and model.injection.spectral_norm() < 0.95
    assert stable[-1] < 1.25 * stable[31]
    model.injection.transition = lambda: torch.ones(32, dtype=torch.float64)  # the constraint removed
    unconstrained = state_norms(model, x, 64)
    assert unconstrained[-1] > 1.8 * unconstrained[31] and unconstrained[-1] > 4 * stable.max()


def test_the_prelude_output_is_rms_normalised_and_b_and_c_are_not_decayed():
    model = tiny()
    x = tokens(model)
    with torch.no_grad():
        model.prelude_norm.weight.fill_(1.0)
        values = model.layer_values(x)[0]
        e = model.prelude_output(x, values, None)
        p = stable_loop.run_blocks(model.prelude, model.embed(x), values, None)  # P(x), before the norm
    eps = model.config.norm_eps
    torch.testing.assert_close(e, p * (p.pow(2).mean(-1, keepdim=True) + eps).rsqrt(), rtol=0, atol=1e-12)
    decay, no_decay = (set(map(id, group["params"])) for group in param_groups(model, 0.1))
    assert {id(model.injection.B.weight), id(model.readout_proj.weight)} <= no_decay
    assert id(model.core[0].attn.qkv.weight) in decay


# --- training depth: per sequence, truncated backprop ----------------------------------------------------------
def test_training_draws_each_sequences_depth_from_a_poisson_truncated_at_one():
    torch.manual_seed(0)
    no_grad, with_grad = sample_depths(8000, 8, 4)
    total = (no_grad + with_grad).double()
    assert total.min() >= 1 and abs(total.mean().item() - 8) < 0.15 and abs(total.var().item() - 8) < 0.5
    assert torch.equal(with_grad, total.long().clamp(max=4))
    torch.manual_seed(0)
    assert sample_depths(3, 1, 4)[0].sum() == 0  # mu_rec below mu_bwd: every round with gradients


def test_each_sequence_of_a_batch_runs_its_own_depth():
    """Depths 2 and 5 in one batch give each sequence its own forward at that depth."""
    model = tiny()
    x = tokens(model)
    rounds, first_with_grad, updates = per_sequence_schedule(torch.tensor([0, 3]), torch.tensor([2, 2]))
    assert (rounds, first_with_grad) == (5, 3)
    assert updates.T.tolist() == [[False, False, False, True, True], [True] * 5]
    with torch.no_grad():
        mixed = model.run(x, rounds, None, first_with_grad, updates)
        torch.testing.assert_close(mixed[0], model(x, rounds=2)[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(mixed[1], model(x, rounds=5)[1], rtol=0, atol=1e-12)


def test_training_backpropagates_through_each_sequences_last_rounds_only(monkeypatch):
    model = tiny().train()
    monkeypatch.setattr(stable_loop, "sample_depths", lambda *args: (torch.tensor([1, 3]), torch.tensor([2, 1])))
    tracked = []
    model.injection.register_forward_hook(lambda module, args, out: tracked.append(out.requires_grad))
    model(tokens(model)).sum().backward()
    assert tracked == [False, False, False, True, True]  # 3 rounds without gradients, then 2 with
    assert model.prelude[0].attn.qkv.weight.grad.abs().sum() > 0  # the prelude learns through B_bar e
    model.eval()
    tracked.clear()
    model(tokens(model))
    assert tracked == [True] * 3  # eval: mu_rec rounds for every sequence


def test_the_cpu_recipe_trains_through_the_config_path(tmp_path):
    recipe = REPO / "configs/examples/stable_loop_kjv.yaml"
    config = load_run_config(recipe)
    assert config.model.arch == "stable_loop" and config.model.sample_rounds and config.model.value_embeddings
    losses = recipe_losses(recipe, tmp_path)
    assert len(losses) == 1 and 5.0 < losses[0] < 6.5  # about log(257) = 5.55 at initialisation
