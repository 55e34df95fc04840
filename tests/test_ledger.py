"""The compute ledger (looped/models/ledger.py) against what the model really does, for every registered LM:
the analytic forward FLOPs equal torch's FlopCounterMode count of the same forward within 2 % at two context
lengths and two depths (a shared block applied R times counts R times), and the decoding-state bytes equal the
tensors the incremental state holds after prefilling L tokens. A row whose compute follows a router (MoR) is held
to the ledger of the routing the test's tokens get (`call_ledger`)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from looped.models import arch_names, build_model, get_arch
from looped.models.ledger import call_ledger, held_state_bytes, model_ledger

LM_ARCHS = [a for a in arch_names("lm") if hasattr(get_arch(a).model_cls, "ledger")]


def builtin(family: str) -> list[str]:
    """The package's own rows (other tests register plugins into the same registry)."""
    return [a for a in arch_names(family) if get_arch(a).model_cls.__module__.startswith("looped.")]
TOLERANCE = 0.02


def tiny(arch: str, **overrides):
    torch.manual_seed(0)
    return build_model(get_arch(arch).tiny_config(**overrides)).eval()


def two_depths(arch: str) -> list[int | None]:
    depths = [d for d in get_arch(arch).test_depths if d > 1]
    return [depths[0], depths[-1]] if depths else [None]


def two_contexts(model) -> list[int]:
    return [8, model.config.context_length]


def counted_flops(model, tokens: torch.Tensor, depth) -> int:
    """FlopCounterMode's count of one forward. The math attention backend decomposes attention into the batched
    matmuls the counter sees: on CPU the fused kernel (`_scaled_dot_product_flash_attention_for_cpu`) is not
    in the counter's registry and would count 0."""
    # with gradients on: the counter's module hooks fail on a parameter fed to a module under no_grad (RLT s*)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens, rounds=depth)
    return counter.get_total_flops()


def test_every_lm_architecture_has_a_ledger():
    """A registered LM without a ledger would be skipped by every check below."""
    assert set(builtin("lm")) <= set(LM_ARCHS) and builtin("lm")


# RLT-2 (chunks of B) and truncated backprop (calls of K tokens) change which keys each kernel is given
VARIANTS = [(arch, {}) for arch in LM_ARCHS] + [("rlt", {"feedback_interval": 3}), ("rlt", {"truncate_bptt": 5}),
                                                ("rlt0", {"truncate_bptt": 5})]


@pytest.mark.parametrize("arch, overrides", VARIANTS, ids=[f"{a}{'-' if o else ''}{'-'.join(o)}" for a, o in VARIANTS])
def test_forward_flops_match_the_flop_counter(arch, overrides):
    assert_matches_the_counter(tiny(arch, **overrides), two_depths(arch))


def assert_matches_the_counter(model, depths) -> None:
    batch = 2
    for context in two_contexts(model):
        tokens = torch.randint(0, model.config.vocab_size, (batch, context))
        for depth in depths:
            ledger = call_ledger(model, tokens, depth)  # a routed row (MoR): the routing these tokens get
            expected = ledger.forward_flops(batch) - invisible_flops(model, ledger, batch)
            counted = counted_flops(model, tokens, depth)
            assert counted == pytest.approx(expected, rel=TOLERANCE), (model.arch_name, context, depth, ledger.parts)


def test_a_plugin_loop_inherits_a_true_ledger(monkeypatch):
    """examples/input_injection.py adds only elementwise work to LoopedLM: the inherited ledger holds for it."""
    from pathlib import Path
    example = Path(__file__).resolve().parents[1] / "examples" / "input_injection.py"
    monkeypatch.setenv("LOOPED_PLUGINS", str(example))
    assert "injected_loop" in arch_names("lm")
    assert_matches_the_counter(tiny("injected_loop"), two_depths("injected_loop"))


def invisible_flops(model, ledger, batch: int) -> float:
    """FLOPs the model does but the counter cannot see, each explained, so the comparison stays exact:
      * nn.LSTM runs as one fused aten.lstm operator that the counter's registry does not list (it counts 0),
        so for the LSTM it sees only the readout; the "lstm" part is checked against the recurrence's own
        shapes in test_lstm_part_is_the_gate_products;
      * the workspace read mixes S slots of m per position with a broadcast multiply-sum (no matmul operator:
        2 S m per round and token), and the recomputed read projects with an in-place addmm_ (the registry
        lists addmm, not addmm_: 2 m d per round and token)."""
    tokens = batch * ledger.context
    if model.arch_name == "lstm":
        return ledger.parts["lstm"] * tokens
    if getattr(model, "uses_workspace", False):
        c = model.config
        unseen = 2 * c.slots * c.slot_dim + (0 if model.retain else 2 * c.slot_dim * c.dim)
        return unseen * len(ledger.rounds) * tokens
    return 0.0


def test_lstm_part_is_the_gate_products():
    model = tiny("lstm")
    d = model.config.dim
    # four gates, each from the input (d) and the previous h (d): 2 x 4d x 2d per token
    assert model_ledger(model, 10).parts["lstm"] == 2 * (4 * d) * (2 * d)
    assert sum(p.numel() for n, p in model.lstm.named_parameters() if "weight" in n) == 4 * d * 2 * d


def test_shared_block_counts_once_per_round():
    """Depth scales the loop's work: generic counters that count a shared module once get this wrong."""
    model = tiny("shared_loop")
    one, six = model_ledger(model, 16, 1), model_ledger(model, 16, 6)
    head = one.parts["head"]
    assert six.per_token - head == pytest.approx(6 * (one.per_token - head))
    assert len(six.rounds) == 6


@pytest.mark.parametrize("arch, overrides", VARIANTS, ids=[f"{a}{'-' if o else ''}{'-'.join(o)}" for a, o in VARIANTS])
def test_state_bytes_match_the_decode_state(arch, overrides):
    model = tiny(arch, **overrides)
    batch = 2
    for context in (5, model.config.context_length - 3):
        for depth in two_depths(arch):
            state = model.init_state(batch, rounds=depth) if depth is not None else model.init_state(batch)
            tokens = torch.randint(0, model.config.vocab_size, (batch, context))
            with torch.no_grad():
                model.decode(tokens, state)
            ledger = call_ledger(model, tokens, depth)  # a routed row's state: the mean over rows of its entries
            assert held_state_bytes(state) == pytest.approx(batch * ledger.state_bytes(), rel=1e-12), (arch, context,
                                                                                                        depth)


# --- training: what an update really computes (forward + backward) ---------------------------------------------
def counted_update(model, tokens: torch.Tensor) -> int:
    """FlopCounterMode's count of one training update's forward and backward, through the trainer's loss."""
    from looped.train.tasks import LMTrainTask
    model.train()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        LMTrainTask.loss(model, tokens).backward()
    return counter.get_total_flops()


def calls_of(module) -> list:
    calls = []
    module.register_forward_hook(lambda mod, args, out: calls.append(out.requires_grad))
    return calls


def test_exit_gate_training_pays_a_head_and_a_gate_at_every_step():
    """The stage-I objective reads out all T steps: 3 x the inference forward (one head) would undercount."""
    model = tiny("exit_gate_loop")
    x = torch.randint(0, model.config.vocab_size, (2, 17))
    ledger = model_ledger(model, 16)
    assert counted_update(model, x) == pytest.approx(ledger.training_flops(2), rel=TOLERANCE)
    assert ledger.training_flops(2) > 1.1 * 3 * ledger.forward_flops(2)


@pytest.mark.parametrize("sampled", [False, True], ids=["fixed", "drawn"])
def test_prelude_coda_training_pays_the_drawn_depth_and_backprop_through_the_last_k(sampled):
    """At r_bar (sample_rounds off) the ledger's own figure; at a seeded draw r, the ledger's rule at (r, min(r,
    k)): r forward iterations, k of them back-propagated, 3 x the prelude, coda and head."""
    model = tiny("prelude_coda", rounds=5, backprop_rounds=2, sample_rounds=sampled)
    calls = calls_of(model.adapter)
    x = torch.randint(0, model.config.vocab_size, (2, 17))
    torch.manual_seed(11)
    counted = counted_update(model, x)
    ledger = model_ledger(model, 16)
    drawn = len(calls)
    assert calls == [False] * (drawn - 2) + [True] * 2 and drawn > 2
    if not sampled:
        assert ledger.training_rounds == (5.0, 2.0)
    at_draw = dataclasses.replace(ledger, training_rounds=(drawn, min(drawn, 2)))
    assert counted == pytest.approx(at_draw.training_flops(2), rel=TOLERANCE)
    assert at_draw.training_flops(2) < 0.8 * 3 * dataclasses.replace(ledger, rounds=ledger.rounds[:1] * drawn
                                                                      ).forward_flops(2)  # 3 x forward overcharges


def test_prelude_coda_charges_the_expected_draw():
    """E[r] = r_bar + 1 and E[min(r, k)] of the log-normal Poisson, against the mean of many draws."""
    from looped.models.depth_schedule import sample_rounds
    model = tiny("prelude_coda", rounds=5, backprop_rounds=3)
    torch.manual_seed(0)
    draws = torch.tensor([sample_rounds(5, model.config.rounds_sigma) for _ in range(20000)]).double()
    ran, backpropagated = model_ledger(model, 16).training_rounds
    assert ran == 6.0 and ran == pytest.approx(draws.mean().item(), rel=0.02)
    assert backpropagated == pytest.approx(draws.clamp(max=3).mean().item(), rel=0.01)


def test_stable_loop_training_pays_each_batchs_longest_sequence():
    """Per-sequence depths run the batch for max_b (T_b - k_b) rounds without gradients and max_b k_b with: at a
    seeded draw the count is the ledger's rule at those; the ledger's own figure is its expectation over draws."""
    from looped.models.depth_schedule import per_sequence_depth
    model = tiny("stable_loop", rounds=4, backprop_rounds=2)
    x = torch.randint(0, model.config.vocab_size, (4, 17))
    torch.manual_seed(5)
    ran, first_with_grad, _ = model.train().plan(4, None)
    torch.manual_seed(5)
    counted = counted_update(model, x)
    ledger = model_ledger(model, 16)
    at_draw = dataclasses.replace(ledger, per_sequence_depth=None, training_rounds=(ran, ran - first_with_grad))
    assert counted == pytest.approx(at_draw.training_flops(4), rel=TOLERANCE)
    expected = dataclasses.replace(ledger, per_sequence_depth=None, training_rounds=per_sequence_depth(4, 4, 2))
    assert ledger.training_flops(4) == expected.training_flops(4)
    # two micro-batches of 2 draw their longest sequence from fewer rows: fewer rounds per update
    assert ledger.training_flops(4, calls=2) < ledger.training_flops(4)


# --- reasoning rows (seed 002): a forward reads whole problems; no decoding state ----------------------------
def reasoning_cases() -> list[tuple[str, str]]:
    return [(arch, kind) for arch in arch_names("reasoning") for kind in get_arch(arch).config_cls.input_kinds]


def reasoning_model(arch: str, kind: str):
    from reasoning_drivers import TASK_OF_KIND
    torch.manual_seed(0)
    spec = get_arch(arch)
    # ACT halts a position once its halting mass passes the threshold; a far negative halting bias keeps every
    # position running to the budget, the computation the ledger counts
    extra = {"halting_bias_init": -30.0} if arch == "ut_act" else {}
    return build_model(spec.config_cls.for_task(TASK_OF_KIND[kind][0], **spec.test_overrides, **extra)).eval()


def problems(kind: str, length: int | None):
    """Three problems, cut to their first `length` positions (None: as sampled): the tasks pad every problem to
    one size, and FLOPs depend on the shapes only, so a cut gives the second shape."""
    from looped.data.tasks import ReasoningBatch
    from reasoning_drivers import rows
    batch = rows(kind, 3)
    if length is None:
        return batch
    extras = dict(batch.extras)
    if "adjacency" in extras:
        extras["adjacency"] = extras["adjacency"][:, :length, :length]
        extras["query"] = extras["query"].clamp_max(length - 1)
    return ReasoningBatch(tokens=batch.tokens[:, :length], labels=batch.labels, padding=batch.padding[:, :length],
                          difficulty=batch.difficulty, extras=extras)


def test_every_reasoning_architecture_has_a_ledger():
    assert all(hasattr(get_arch(a).model_cls, "ledger") for a in builtin("reasoning"))


@pytest.mark.parametrize("arch, kind", reasoning_cases())
def test_reasoning_forward_flops_match_the_flop_counter(arch, kind):
    model = reasoning_model(arch, kind)
    depths = [None] if model.depth_mode == "fixed" else [2, model.config.trained_steps()[1] if arch != "ut_act"
                                                         else model.config.max_steps]
    for length in (None, 12):
        batch = problems(kind, length)
        n, context = batch.tokens.shape
        for depth in depths:
            with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
                model(batch, depth)
            expected = model_ledger(model, context, depth).forward_flops(n)
            assert counter.get_total_flops() == pytest.approx(expected, rel=TOLERANCE), (arch, kind, context, depth)


# --- `looped params` ----------------------------------------------------------------------------------------
def test_params_prints_the_ledger_as_text_and_json(capsys):
    import json

    from looped.cli import main
    assert main(["params", "workspace", "--context", "256", "--batch", "4"]) == 0
    text = capsys.readouterr().out
    for line in ("forward FLOPs per token at context 256, depth 4", "workspace read", "per round: 4 x",
                 "training FLOPs per update (4 x 256 tokens", "at context 1,024:", "once per forward call"):
        assert line in text, line
    assert main(["params", "workspace", "--context", "256", "--depth", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = build_model(get_arch("workspace").config())
    expected = model_ledger(model, 256, 6)
    assert out["total"] == model.parameter_counts()["total"]
    assert out["ledger"]["forward_flops_per_token"] == expected.per_token
    assert len(out["ledger"]["round_flops_per_token"]) == 6
    assert out["ledger"]["state_bytes"] == {"1024": expected.state_bytes(1024), "256": expected.state_bytes(256)}


@pytest.mark.parametrize("argv, message", [
    (["params", "rlt", "--context", "0"], "looped: error: --context must be >= 1, got 0"),
    (["params", "transformer", "--depth", "3"], "looped: error: transformer has a fixed depth"),
    (["params", "gnn", "--depth", "3"], "looped: error: gnn has a fixed depth"),
    (["params", "fixed_transformer", "--depth", "3"], "looped: error: fixed_transformer has a fixed depth"),
    (["params", "drt", "--depth", "99"], "looped: error: steps 99 > model.depth_rows"),
])
def test_params_user_errors_are_one_line(capsys, argv, message):
    from looped.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err


# --- training: cumulative FLOPs in metrics.jsonl and the train.max_flops budget -------------------------------
def flop_run_config(tmp_path, **train) -> dict:
    from helpers import tiny_run_config, write_text_corpus
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    config = tiny_run_config(corpus, data={"block_size": 17},
                             train={"max_steps": None, "eval_every": 0, "eval_batches": 1, "batch_size": 2, **train})
    config["model"] = {"arch": "shared_loop", "dim": 16, "heads": 2, "ffn_dim": 24, "rounds": 3, "context_length": 16}
    return config


def one_update_flops() -> float:
    """3 x the forward of 2 blocks of 16 inputs at the trained depth, from the ledger."""
    model = build_model(get_arch("shared_loop").config(dim=16, heads=2, ffn_dim=24, rounds=3, context_length=16))
    return model_ledger(model, 16).training_flops(2)


def test_max_flops_stops_before_the_update_that_would_exceed_it(tmp_path):
    import json

    from looped.config import from_dict
    from looped.train import RunConfig, Trainer
    per_update = one_update_flops()
    config = from_dict(RunConfig, flop_run_config(tmp_path, max_flops=3.9 * per_update))
    summary = Trainer(config, tmp_path / "run", progress=False, log=lambda m: None).run()
    assert summary["total_steps"] == 3  # a 4th update would spend 4.0 x, past the 3.9 x budget
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    flops = [(e["step"], e["flops"]) for e in logged if "loss" in e]
    assert flops == [(1, per_update), (2, 2 * per_update), (3, 3 * per_update)]


def test_a_flop_budget_below_one_update_is_refused_in_one_line(tmp_path, capsys):
    from helpers import write_config

    from looped.cli import main
    config = write_config(tmp_path / "run.yaml", flop_run_config(tmp_path, max_flops=0.5 * one_update_flops()))
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("looped: error: train.max_flops:") and "do not pay for one update" in err
    assert "\n" not in err


def test_a_flop_budget_replaces_the_recipes_step_budget(tmp_path):
    from looped.train import load_run_config
    from helpers import write_config
    config = write_config(tmp_path / "run.yaml", flop_run_config(tmp_path, max_steps=8))
    train = load_run_config(config, ["train.max_flops=1e9"]).train
    assert (train.max_steps, train.max_targets, train.max_flops) == (None, None, 1e9)


def test_params_of_a_model_without_a_ledger_still_prints_its_counts(capsys):
    import argparse

    from torch import nn

    from looped.cli.run import print_params
    from looped.models.base import CausalLM, LMConfig

    class NoLedger(CausalLM):  # a plugin that does not describe its compute
        def __init__(self):
            super().__init__()
            self.config, self.proj = LMConfig(arch="no_ledger"), nn.Linear(2, 3)

    model = NoLedger()
    args = argparse.Namespace(context=None, depth=None, batch=None, json=False)
    print_params(model, model.parameter_counts(), None, args)
    out = capsys.readouterr().out
    assert "no_ledger: 9 parameters" in out and "no compute ledger: no_ledger does not describe its compute" in out


def test_per_call_work_is_paid_by_every_micro_batch(tmp_path):
    """The workspace fold runs once per forward call: an update in two micro-batches pays it twice."""
    import json

    from looped.config import from_dict
    from looped.train import RunConfig, Trainer
    model = {"arch": "workspace", "dim": 12, "heads": 2, "ffn_dim": 16, "rounds": 2, "slots": 2, "slot_dim": 3,
             "context_length": 16}
    config = flop_run_config(tmp_path, max_steps=1, micro_batch_size=1)
    config["model"] = model
    Trainer(from_dict(RunConfig, config), tmp_path / "run", progress=False, log=lambda m: None).run()
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    ledger = model_ledger(build_model(get_arch("workspace").config(**model)), 16)
    assert ledger.per_call
    assert [e["flops"] for e in logged if "loss" in e] == [ledger.training_flops(2, calls=2)]


# --- `looped plot --x flops` ----------------------------------------------------------------------------------
def test_plot_against_training_flops(tmp_path, capsys):
    import json

    from looped.cli import main
    from looped.eval.curves import series
    lines = [{"step": 1, "loss": 3.0, "flops": 5e9}, {"step": 2, "loss": 2.5, "flops": 1e10},
             {"step": 2, "val_loss": 2.6}]
    assert series(lines, "val_loss", "flops") == ([1e10], [2.6])  # an evaluation line takes its update's count
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert main(["plot", str(run), "--x", "flops", "--metrics", "loss", "--out", str(tmp_path / "p.png")]) == 0
    assert "@ flops 10,000,000,000" in capsys.readouterr().out
    old = tmp_path / "old"  # a run logged before the field: refused in one line, not drawn at 0
    old.mkdir()
    (old / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 3.0}) + "\n")
    assert main(["plot", str(old), "--x", "flops", "--out", str(tmp_path / "q.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "looped: error: old: its metrics carry no 'flops' to plot against (--x step works for every run)"
