"""The recurrent-depth LM (prelude / recurrent core / coda, looped/models/prelude_coda.py): the paper's parameter
count, the choices its docstring states (initial state, sampled depth, truncated backprop, convergence exit) and
one update of its CPU recipe. The shared drivers (tests/lm_drivers.py, test_ledger.py, test_lens.py) cover the
rest through the registry."""

from __future__ import annotations

from pathlib import Path

import torch

from looped.models import build_model, get_arch
from looped.models.prelude_coda import sample_rounds
from looped.train import load_run_config

import lm_drivers
from helpers import recipe_losses

REPO = Path(__file__).resolve().parents[1]


def paper_config():
    """huginn-0125 (the paper's released config.json): d 5,280, 55 heads, 2 / 4 / 2 layers, SwiGLU 17,920."""
    return get_arch("prelude_coda").config(vocab_size=65536, dim=5280, heads=55, ffn_dim=17920, prelude_layers=2,
                                           core_layers=4, coda_layers=2, rounds=32, backprop_rounds=8,
                                           context_length=4096)


def test_the_papers_model_has_3_56_billion_parameters():
    """The paper says 3.5B and gives no exact count: embedding 346,030,080 (tied head) + 8 sandwich blocks of
    395,387,520 + adapter 55,756,800 + final norm 5,280."""
    with torch.device("meta"):
        counts = build_model(paper_config()).parameter_counts()
    assert counts["total"] == 3_564_892_320
    assert counts["embed"] == 65536 * 5280 and counts["adapter"] == 2 * 5280 * 5280
    assert counts["core"] == 4 * (4 * 5280 ** 2 + 3 * 5280 * 17920 + 4 * 5280)


def tiny(**overrides):
    return lm_drivers.tiny_model("prelude_coda", **overrides)


def tokens(model, length: int = 20) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (2, length), generator=torch.Generator().manual_seed(0))


def test_the_initial_state_is_zero_in_eval_and_truncated_noise_in_training():
    model = tiny(dim=64, heads=2, state_std=None)
    e = torch.ones(4, 50, 64, dtype=torch.float64)
    assert not model.initial_state(e).any()
    model.train()
    s0 = model.initial_state(e)
    std = model.config.initial_std()
    assert std == (2 / (5 * 64)) ** 0.5
    assert s0.abs().max() <= 3 * std and abs(s0.std().item() / std - 0.9866) < 0.03  # N truncated at 3 sigma: sd 0.9866 sigma


def test_training_draws_the_depth_from_the_log_normal_poisson():
    torch.manual_seed(0)
    draws = torch.tensor([sample_rounds(32, 0.5) for _ in range(4000)], dtype=torch.float64)
    assert draws.min() >= 1
    assert abs(draws.mean().item() - 33) < 1  # E[Poisson(e^tau)] = r_bar, plus 1
    assert (draws > 64).float().mean() > 0.02  # the heavy tail: about 5 % beyond twice the mean
    model = tiny(rounds=6)
    calls = []
    model.adapter.register_forward_hook(lambda *args: calls.append(1))
    torch.manual_seed(5)
    expected = sample_rounds(6, 0.5)
    model.train()
    torch.manual_seed(5)
    model(tokens(model))
    assert len(calls) == expected
    model.eval()
    calls.clear()
    model(tokens(model))
    assert len(calls) == 6


def test_training_backpropagates_through_the_last_k_iterations_only():
    model = tiny(rounds=5, backprop_rounds=2, sample_rounds=False).train()
    tracked = []
    model.adapter.register_forward_hook(lambda module, args, out: tracked.append(out.requires_grad))
    model(tokens(model)).sum().backward()
    assert tracked == [False, False, False, True, True]
    assert model.prelude[0].attn.qkv.weight.grad.abs().sum() > 0  # the prelude learns through the injection


def test_the_convergence_exit_is_causal_and_decodes_as_the_forward():
    model = tiny()
    x = tokens(model, 30)
    with torch.no_grad():
        never, used = model.forward_early_exit(x, 0.0, rounds=5)
        torch.testing.assert_close(never, model(x, rounds=5), rtol=0, atol=1e-12)
        assert (used == 5).all()
        always, used = model.forward_early_exit(x, float("inf"), rounds=5)
        torch.testing.assert_close(always, model(x, rounds=2), rtol=0, atol=1e-12)  # the first test is after 2
        assert (used == 2).all()
        mixed = [t for t in (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
                 if len(model.forward_early_exit(x, t, rounds=5)[1].unique()) > 1]
        assert mixed, "no threshold left some positions iterating longer than others"
        full, used = model.forward_early_exit(x, mixed[0], rounds=5)
        state = model.init_state(2, rounds=5, exit_threshold=mixed[0])
        steps = [model.decode(x[:, :7], state)] + [model.decode(x[:, i:i + 1], state) for i in range(7, 30)]
        assert (torch.cat(steps, 1) - full).abs().max() <= 1e-10
        assert torch.equal(torch.cat(state.rounds_used, 1), used)


def test_the_cpu_recipe_trains_through_the_config_path(tmp_path):
    recipe = REPO / "configs/examples/prelude_coda.yaml"
    config = load_run_config(recipe)
    assert config.model.arch == "prelude_coda" and config.model.sample_rounds
    losses = recipe_losses(recipe, tmp_path)
    assert len(losses) == 1 and 5.0 < losses[0] < 6.5  # about log(257) = 5.55 at initialisation
