"""Training depth schedules of the looped LM rows (models/depth_schedule.py, issue 30 §2.2): each test is the
failure it prevents. The draws cover what they say and nothing else, with the stated mean; truncated backprop
leaves the early rounds' contributions without gradient; the progressive depth follows the update; eval mode runs
the configured depth whatever the schedule (so the shared drivers stay exact); a resumed run draws the same
depths; the compute ledger charges what the schedule runs and back-propagates."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import lm_drivers
from helpers import tiny_run_config, write_text_corpus
from looped.config import ConfigError, from_dict
from looped.models import build_model, get_arch
from looped.models.depth_schedule import DepthSchedule, poisson_tail_means
from looped.models.ledger import model_ledger

LOOP_ROWS = ["shared_loop", "adaptive_exit", "anchored_loop", "conditioned_dense", "workspace", "workspace_retention"]
KINDS = ["uniform", "poisson_lognormal", "progressive"]


def tiny(arch: str, rounds: int = 4, **schedule):
    """The registry's tiny row at `rounds` rounds with this depth schedule, in float64."""
    torch.manual_seed(0)
    return build_model(get_arch(arch).tiny_config(rounds=rounds, depth_schedule=schedule)).double()


def tokens(model, batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(3))


def block_calls(model) -> list:
    """Appends one entry per application of the shared block."""
    calls = []
    model.block.register_forward_hook(lambda module, args, out: calls.append(out.requires_grad))
    return calls


# --- the draws -----------------------------------------------------------------------------------------------
def test_the_uniform_draw_covers_its_range_and_nothing_else():
    schedule = DepthSchedule(kind="uniform", min_rounds=2, max_rounds=6)
    torch.manual_seed(0)
    draws = torch.tensor([schedule.draw(4, 0)[0] for _ in range(5000)])
    assert set(draws.tolist()) == {2, 3, 4, 5, 6}
    frequencies = torch.bincount(draws, minlength=7)[2:].double() / len(draws)
    assert (frequencies - 0.2).abs().max() < 0.02  # 5 equally likely depths (3 standard errors: 0.017)
    # the default range is centred on the configured depth: 1 .. 2 R - 1
    assert DepthSchedule(kind="uniform").uniform_range(4) == (1, 7)
    assert DepthSchedule(kind="uniform").expected(4) == (4.0, 4.0)


def test_a_training_forward_runs_the_drawn_depth_and_eval_the_configured_one():
    model = tiny("anchored_loop", kind="uniform", min_rounds=5, max_rounds=7).train()
    calls = block_calls(model)
    torch.manual_seed(4)
    expected = DepthSchedule(kind="uniform", min_rounds=5, max_rounds=7).draw(4, 0)[0]
    torch.manual_seed(4)
    model(tokens(model))
    assert len(calls) == expected and 5 <= expected <= 7
    calls.clear()
    model(tokens(model), rounds=2)  # a given depth is run as given, in training too
    assert len(calls) == 2
    model.eval()
    calls.clear()
    model(tokens(model))
    assert len(calls) == 4


def test_the_heavy_tailed_draw_has_the_stated_mean_and_tail():
    """E[R] = rounds (the log-normal rate has mean rounds - 1, plus 1); P(R > 2 rounds) and E[min(R, k)] as the
    quadrature the ledger uses says."""
    rounds, sigma, k = 4, 0.5, 3
    schedule = DepthSchedule(kind="poisson_lognormal", sigma=sigma, backprop_rounds=k)
    torch.manual_seed(0)
    draws = [schedule.draw(rounds, 0) for _ in range(20000)]
    depths = torch.tensor([d for d, _ in draws], dtype=torch.float64)
    assert depths.min() >= 1
    # sd of R: sqrt(3 + 9 (e^0.25 - 1)) = 2.36, so the mean of 20,000 has a standard error of 0.017
    assert abs(depths.mean().item() - rounds) < 0.05
    beyond = poisson_tail_means(rounds - 1, sigma, 2 * rounds)[-1]  # P(N >= 8) = P(R > 8)
    assert 0.01 < beyond and abs((depths > 2 * rounds).double().mean().item() - beyond) < 0.004
    backpropagated = torch.tensor([d - first for d, first in draws], dtype=torch.float64)
    assert torch.equal(backpropagated, depths.clamp(max=k))
    ran, mean_k = schedule.expected(rounds)
    assert ran == rounds and abs(backpropagated.mean().item() - mean_k) < 0.01


def test_the_progressive_depth_grows_with_the_update_as_specified():
    schedule = DepthSchedule(kind="progressive", min_rounds=1, ramp_updates=9)
    # 1 + floor(3 u / 9): three updates at each of depths 1, 2, 3, then the configured depth 4 from update 9 on
    assert [schedule.draw(4, u)[0] for u in range(13)] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4]
    assert schedule.settled_update() == 9 and schedule.expected(4, 4) == (2.0, 2.0)
    model = tiny("shared_loop", kind="progressive", min_rounds=2, ramp_updates=4).train()
    calls = block_calls(model)
    for update, depth in [(0, 2), (2, 3), (4, 4), (100, 4)]:
        model.training_update = update
        calls.clear()
        model(tokens(model))
        assert len(calls) == depth, update


# --- truncated backprop ----------------------------------------------------------------------------------------
def test_only_the_last_k_rounds_give_their_parameters_gradients():
    """conditioned_dense has per-round parameters (sigma_r, tau_r): with k = 2 of 4 rounds, those of rounds 0 and 1
    get exactly zero gradient and those of rounds 2 and 3 do not; without truncation all four do."""
    for k, expect in [(2, [False, False, True, True]), (None, [True] * 4)]:
        model = tiny("conditioned_dense", backprop_rounds=k).train()
        lm_drivers._perturb_zero_inits(model)
        calls = block_calls(model)
        model(tokens(model)).square().mean().backward()
        assert [bool(g.abs().sum() > 0) for g in model.scale.grad] == expect, k
        assert [bool(g.abs().sum() > 0) for g in model.shift.grad] == expect, k
        assert calls == expect  # the block's output carries gradients in the last k rounds only


def test_truncated_backprop_equals_the_last_k_rounds_from_a_constant_state():
    """The anchored loop's gradients under k = 2 of 5 rounds are those of 2 rounds started from the state after 3,
    treated as a constant; they differ from full backprop."""
    model = tiny("anchored_loop", rounds=5, backprop_rounds=2).train()
    x = tokens(model)

    def gradients(loss) -> dict[str, torch.Tensor]:
        model.zero_grad()
        loss.square().mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    truncated = gradients(model(x))
    e = model.anchor_embedding(x, 0)
    with torch.no_grad():
        h = e
        for r in range(3):
            h = model.block(model.anchor(e, h))
    for r in range(3, 5):
        h = model.block(model.anchor(e, h))
    by_hand = gradients(model.head(model.final_norm(h)))
    assert truncated.keys() == by_hand.keys() and "embed.weight" in truncated
    for name in truncated:
        torch.testing.assert_close(truncated[name], by_hand[name], rtol=0, atol=1e-12, msg=name)
    model.config.depth_schedule.backprop_rounds = None
    full = gradients(model(x))
    assert not torch.allclose(full["block.attn.qkv.weight"], truncated["block.attn.qkv.weight"])


def test_the_workspace_still_learns_its_query_under_truncation():
    """The recomputed workspace's query projection enters only through its fold, done once per call: computed in
    a round without gradients it would be detached and never learn."""
    model = tiny("workspace", backprop_rounds=1).train()
    model(tokens(model)).sum().backward()
    assert model.workspace.query.weight.grad.abs().sum() > 0


def test_rows_without_input_injection_refuse_truncated_backprop():
    with pytest.raises(ValueError, match=r"^model\.depth_schedule\.backprop_rounds: shared_loop feeds the embedding"):
        tiny("shared_loop", backprop_rounds=2)


# --- eval mode: the configured depth, so the shared drivers stay exact -------------------------------------------
@pytest.mark.parametrize("arch", LOOP_ROWS)
def test_eval_mode_runs_the_configured_depth_whatever_the_schedule(arch):
    fixed = tiny(arch).eval()
    x = tokens(fixed)
    with torch.no_grad():
        expected = fixed(x)
    for kind in KINDS:
        model = tiny(arch, kind=kind, min_rounds=2, backprop_rounds=None if arch in ("shared_loop", "adaptive_exit")
                     else 1).eval()
        model.load_state_dict(fixed.state_dict())
        model.training_update = 0  # progressive at update 0 would train at depth 2
        rng = torch.get_rng_state()
        with torch.no_grad():
            assert torch.equal(model(x), expected), kind
        assert torch.equal(torch.get_rng_state(), rng), kind  # no draw at all


@pytest.mark.parametrize("arch, kind", [(arch, KINDS[i % len(KINDS)]) for i, arch in enumerate(LOOP_ROWS)])
def test_shared_drivers_hold_under_a_schedule(arch, kind):
    """Every row under one of the schedules (each schedule twice): the test above shows eval mode ignores it."""
    lm_drivers.check_incremental(arch, depth_schedule={"kind": kind, "min_rounds": 2})
    lm_drivers.check_causality(arch, depth_schedule={"kind": kind, "min_rounds": 2})


# --- the config: one key, one-line errors --------------------------------------------------------------------
@pytest.mark.parametrize("schedule, rounds, message", [
    ({"kind": "random"}, 4, "model.depth_schedule.kind: 'random' is not one of"),
    ({"kind": "fixed", "max_rounds": 6}, 4, "model.depth_schedule.max_rounds applies to kind uniform only"),
    ({"kind": "uniform", "min_rounds": 5, "max_rounds": 3}, 4, "model.depth_schedule.max_rounds 3 is below min"),
    ({"kind": "uniform", "min_rounds": 0}, 4, "model.depth_schedule.min_rounds must be >= 1"),
    ({"kind": "poisson_lognormal"}, 1, "model.depth_schedule: poisson_lognormal needs model.rounds >= 2"),
    ({"kind": "poisson_lognormal", "sigma": -1}, 4, "model.depth_schedule.sigma must be a finite number >= 0"),
    ({"kind": "progressive", "min_rounds": 6}, 4, "model.depth_schedule.min_rounds 6 is above model.rounds 4"),
    ({"kind": "progressive", "ramp_updates": 0}, 4, "model.depth_schedule.ramp_updates must be >= 1"),
    ({"backprop_rounds": 0}, 4, "model.depth_schedule.backprop_rounds must be >= 1"),
    ({"sigmaa": 1}, 4, "model.depth_schedule.sigmaa: unknown key"),
])
def test_bad_schedules_are_one_line_errors(schedule, rounds, message):
    with pytest.raises(ConfigError) as err:
        get_arch("anchored_loop").tiny_config(rounds=rounds, depth_schedule=schedule)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_config_show_explains_the_schedule(capsys):
    from looped.cli import main
    assert main(["config", "show", "anchored_loop", "--set", "model.depth_schedule.kind=uniform"]) == 0
    out = capsys.readouterr().out
    assert "\n  depth_schedule:\n    kind: \"uniform\"" in out
    line = next(line for line in out.splitlines() if line.startswith("    backprop_rounds: "))
    assert "# k: back-propagate through the last k rounds" in line


# --- compute: the ledger charges what the schedule runs -----------------------------------------------------------
@pytest.mark.parametrize("arch", ["anchored_loop", "conditioned_dense"])
def test_training_flops_follow_the_truncated_backprop(arch):
    """FlopCounterMode's count of a training forward and backward (5 rounds, the last 2 back-propagated) equals
    the ledger's training FLOPs: 5 forward rounds, 2 backward ones at twice a forward round, 3 x the head."""
    model = tiny(arch, rounds=5, backprop_rounds=2).train()
    x = tokens(model, batch=2, length=16)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    ledger = model_ledger(model, 16)
    assert ledger.training_rounds == (5.0, 2.0)
    assert counter.get_total_flops() == pytest.approx(ledger.training_flops(2), rel=0.02)
    full = model_ledger(tiny(arch, rounds=5), 16)
    assert ledger.training_flops(2) < 0.75 * full.training_flops(2)  # 3 x forward would overcharge by 40 %


def test_a_random_depth_is_charged_its_expectation():
    """Uniform over 1 .. 7 with k = 3: the mean over the seven depths of a fixed-depth-d, k = 3 update."""
    model = tiny("anchored_loop", kind="uniform", backprop_rounds=3)
    per_depth = [model_ledger(tiny("anchored_loop", rounds=d, backprop_rounds=3), 16).training_flops(4)
                 for d in range(1, 8)]
    assert model_ledger(model, 16).training_flops(4) == pytest.approx(sum(per_depth) / 7, rel=1e-12)


def test_per_sequence_depths_are_charged_the_expected_longest_sequence():
    """stable_loop runs a batch for its longest sequence: E[max_b (T_b - k_b)] + E[max_b k_b] and E[max_b k_b],
    against the mean of many seeded schedules."""
    from looped.models.depth_schedule import per_sequence_depth, per_sequence_schedule, sample_depths
    torch.manual_seed(0)
    for batch, mean, backprop in ((1, 8, 4), (4, 8, 4), (3, 3, 2)):
        plans = torch.tensor([per_sequence_schedule(*sample_depths(batch, mean, backprop))[:2]
                              for _ in range(10000)]).double()
        ran, with_grad = per_sequence_depth(batch, mean, backprop)
        assert ran == pytest.approx(plans[:, 0].mean().item(), rel=0.01), (batch, mean, backprop)
        assert with_grad == pytest.approx((plans[:, 0] - plans[:, 1]).mean().item(), rel=0.01)
    assert per_sequence_depth(1, 8, 4)[0] == pytest.approx(8 + math.exp(-8), rel=1e-12)  # E[max(1, N)]


# --- the trainer: progressive depth by update, cumulative FLOPs, resume --------------------------------------------
def schedule_run(tmp_path, schedule: dict, **train) -> dict:
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    config = tiny_run_config(corpus, data={"block_size": 17},
                             train={"max_steps": 4, "eval_every": 2, "eval_batches": 1, "batch_size": 2, **train})
    config["model"] = {"arch": "anchored_loop", "dim": 16, "heads": 2, "ffn_dim": 24, "rounds": 3,
                       "context_length": 16, "depth_schedule": schedule}
    return config


def recorded_draws(monkeypatch) -> list:
    draws = []
    draw = DepthSchedule.draw

    def recording(self, rounds, update):
        out = draw(self, rounds, update)
        draws.append((update, *out))
        return out

    monkeypatch.setattr(DepthSchedule, "draw", recording)
    return draws


def run(config: dict, out, **kw):
    from looped.train import RunConfig, Trainer
    return Trainer(from_dict(RunConfig, config), out, progress=False, log=lambda m: None, **kw)


def test_the_trainer_grows_a_progressive_depth_and_counts_its_flops(tmp_path, monkeypatch):
    draws = recorded_draws(monkeypatch)
    config = schedule_run(tmp_path, {"kind": "progressive", "min_rounds": 1, "ramp_updates": 3},
                          micro_batch_size=1)
    run(config, tmp_path / "run").run()
    # two micro-batches per update, each drawing; depth 1 + floor(2 u / 3)
    assert [(u, d) for u, d, _ in draws] == [(0, 1), (0, 1), (1, 1), (1, 1), (2, 2), (2, 2), (3, 3), (3, 3)]
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    flops = [e["flops"] for e in logged if "loss" in e]
    fields = {**config["model"], "depth_schedule": {}}
    per_depth = {d: model_ledger(build_model(get_arch("anchored_loop").config(**{**fields, "rounds": d})),
                                 16).training_flops(2, calls=2) for d in (1, 2, 3)}  # fixed depth d, 2 micro-batches
    steps = [per_depth[1], per_depth[1], per_depth[2], per_depth[3]]
    assert flops == pytest.approx([sum(steps[:n]) for n in range(1, 5)], rel=1e-12)


def test_a_resumed_run_draws_the_same_depths(tmp_path, monkeypatch):
    draws = recorded_draws(monkeypatch)
    config = schedule_run(tmp_path, {"kind": "uniform", "backprop_rounds": 2})
    run(config, tmp_path / "straight").run()
    straight = list(draws)
    draws.clear()
    run(config, tmp_path / "split").run(stop_after=2)
    run(config, tmp_path / "split", resume=True).run()
    assert len(straight) == 4 and len({d for _, d, _ in straight}) > 1  # the depths vary
    assert draws == straight
    from safetensors.torch import load_file
    a, b = (load_file(str(tmp_path / name / "checkpoints/last/model.safetensors")) for name in ("straight", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- the study's plot: two sweeps on one axis ---------------------------------------------------------------------
def sweep(bits: list[float], trained: int = 4) -> dict:
    fixed = [{"depth": d, "bits_per_byte": b, "nll": b} for d, b in enumerate(bits, 1)]
    return {"kind": "lm", "arch": "anchored_loop", "parameters": 10, "depth_name": "rounds", "trained_depth": trained,
            "score": "bits_per_byte", "sources": [{"corpus": "kjv", "targets": 100, "fixed": fixed,
                                                   "early_exit": [], "summary": {}}]}


def test_two_sweeps_share_one_plot_each_under_its_label(tmp_path):
    from looped.eval.depth import combined_record, plot_depth_sweep, source_name
    both = combined_record({"fixed": sweep([3.0, 2.5]), "random": sweep([2.9, 2.6])})
    assert [source_name(e) for e in both["sources"]] == ["fixed", "random"]
    assert [p["bits_per_byte"] for p in both["sources"][1]["fixed"]] == [2.9, 2.6]
    plot_depth_sweep(both, tmp_path / "both.png")
    assert (tmp_path / "both.png").stat().st_size > 0
    with pytest.raises(ValueError, match="^other: a lm anchored_loop sweep trained at depth 8 does not share"):
        combined_record({"fixed": sweep([3.0]), "other": sweep([3.0], trained=8)})
