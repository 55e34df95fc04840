"""Tiny Recursive Model (looped/models/trm.py): the paper's parameter counts from the components, the recursion's
equations, deep supervision's detached carry, the no-gradient recursions, the halting head in training and at test
time, the MLP mixer, and the choices the module docstring lists. The shared reasoning drivers run on `trm` through
test_reasoning_registry.py."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from looped.config import ConfigError
from looped.data.tasks import ReasoningBatch, get_task, rng_for
from looped.models import build_model, get_arch
from looped.models.ledger import model_ledger
from looped.models.trm import TRMConfig, swiglu_width
from looped.train.reasoning import ReasoningTaskConfig, check_model_fits, data_task


def tiny(kind: str = "graph", **overrides):
    """The registry's tiny trm for the graph or the boolean task, float64, eval mode."""
    torch.manual_seed(0)
    spec = get_arch("trm")
    task = "graph" if kind == "graph" else "boolean"
    return build_model(spec.config_cls.for_task(task, **{**spec.test_overrides, **overrides})).double().eval()


def rows(kind: str = "graph", n: int = 6, difficulty: int = 3) -> ReasoningBatch:
    return get_task("graph" if kind == "graph" else "boolean").sample(rng_for(1), n, difficulty)


# ============================================================================ sizes


def network_count(config: TRMConfig) -> int:
    """The tiny network from its matrices alone: per block the mixer (attention: Q, K, V, O, each d x d; MLP: a
    SwiGLU of three L x m matrices over the positions) and the SwiGLU (three d x f matrices); no biases, no norm
    parameters."""
    d, f, L = config.dim, config.ffn_dim, config.max_length
    mixer = 4 * d * d if config.mixer == "attention" else 3 * L * config.mixer_dim
    return config.layers * (mixer + 3 * d * f)


@pytest.mark.parametrize("mixer, millions, papers_model", [("mlp", 5, 5_029_378), ("attention", 7, 6_828_546)])
def test_paper_sudoku_configuration_gives_the_papers_parameter_count(mixer, millions, papers_model):
    """The paper's Table: TRM-MLP 5M and TRM-Att 7M on Sudoku-Extreme (d 512, 2 layers, vocabulary 11)."""
    config = TRMConfig.paper_sudoku(mixer)
    d, vocab = config.dim, config.vocab_size
    assert (config.ffn_dim, config.mixer_dim, config.max_length) == (1536, 512, 97)  # SwiGLU rule; 81 cells + 16
    network = network_count(config)
    # the paper's model: network + token embedding + per-token output head + Q head (halt and continue logits,
    # with bias) + one puzzle identifier's embedding
    paper_total = network + vocab * d + d * vocab + (2 * d + 2) + d
    assert paper_total == papers_model
    assert round(paper_total / 1e6) == millions
    if mixer == "mlp":  # the public TRM-MLP checkpoint's count also holds the two initial states (2 x 512 values)
        assert paper_total + 2 * d == 5_030_402
    with torch.device("meta"):
        counts = build_model(config).parameter_counts()
    assert counts["network"] == network
    # ours swaps the paper's output head and puzzle embedding for the shared seed-002 perception and readout
    perception = vocab * d + 2 * d  # embedding + LayerNorm
    readout = 2 * d + (d * d + d) + (d + 1)  # LayerNorm, Linear(d, d), Linear(d, 1)
    assert counts["total"] == network + perception + readout + (d + 1)  # + the one-logit halting head
    assert round(counts["total"] / 1e6) == millions


def test_swiglu_width_rounds_two_thirds_of_four_times_up_to_256():
    assert [swiglu_width(w) for w in (512, 97, 81, 128, 32)] == [1536, 512, 256, 512, 256]


def test_initial_states_are_fixed_buffers_and_not_parameters():
    model = tiny()
    names = {name for name, _ in model.named_parameters()}
    assert "y_init" not in names and "z_init" not in names
    assert {"y_init", "z_init"} <= set(model.state_dict())
    assert model.y_init.abs().max() <= 2 and not torch.equal(model.y_init, model.z_init)


# ============================================================================ the recursion


def test_latent_recursion_and_block_follow_the_equations():
    """z <- f(x + y + z) n times, then y <- f(y + z); block: post-norm RMSNorm around attention and SwiGLU."""
    model = tiny("tokens", latent_steps=3)
    batch = rows("tokens")
    x, mask = model.perceive(batch)
    y, z = torch.randn_like(x), torch.randn_like(x)
    f = model.network
    z_want = z
    for _ in range(3):
        z_want = f(x + y + z_want, mask)
    y_new, z_new = model.latent_recursion(x, y, z, mask)
    torch.testing.assert_close(z_new, z_want, rtol=0, atol=0)
    torch.testing.assert_close(y_new, f(y + z_want, mask), rtol=0, atol=0)
    block, h = f.blocks[0], torch.randn_like(x)
    rms = lambda v: v / v.pow(2).mean(-1, keepdim=True).add(block.eps).sqrt()  # noqa: E731
    mid = rms(h + block.mix.attn(h, causal=False, mask=mask))
    torch.testing.assert_close(block(h, mask), rms(mid + block.mlp(mid)))


def test_no_gradient_recursions_keep_the_values_and_cut_the_gradient():
    """T - 1 recursions under no_grad then one with it: the same values as T recursions with gradient, and no
    gradient reaches the (y, z) the step started from (with T = 1 it does: the check can fail)."""
    for recursions, reaches in ((3, False), (1, True)):
        model = tiny(recursions=recursions)
        batch = rows()
        x, mask = model.perceive(batch)
        y0 = torch.randn_like(x).requires_grad_()
        z0 = torch.randn_like(x).requires_grad_()
        y, z = model.deep_recursion(x, y0, z0, mask)
        y_all, z_all = y0, z0
        for _ in range(recursions):
            y_all, z_all = model.latent_recursion(x, y_all, z_all, mask)
        torch.testing.assert_close(y, y_all, rtol=0, atol=0)
        torch.testing.assert_close(z, z_all, rtol=0, atol=0)
        grads = torch.autograd.grad((y.sum() + z.sum()), (y0, z0), allow_unused=True)
        assert all((g is not None) == reaches for g in grads), recursions
        assert y.requires_grad  # the last recursion keeps its graph: the weights and x still learn


def step_two_gradients(model, batch, detach: bool) -> dict:
    """Gradients of supervision step 2's answer, computed by hand from step 1's (y, z), detached or not."""
    model.zero_grad()
    x, mask = model.perceive(batch)
    y, z = model.y_init.expand_as(x), model.z_init.expand_as(x)
    y, z = model.deep_recursion(x, y, z, mask)
    if detach:
        y, z = y.detach(), z.detach()
    y, z = model.deep_recursion(x, y, z, mask)
    model.readout(y, batch).sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_deep_supervision_carries_detached_state_between_steps():
    """Step 2 starts from step 1's (y, z), detached: its gradient equals the hand-made detached one and differs
    from the one that flows back into step 1. T = 1, where the no-gradient recursions cut nothing."""
    model = tiny(recursions=1)
    batch = rows()
    model.zero_grad()
    _, trace = model(batch, steps=2, return_trace=True)
    trace.answer_logits[1].sum().backward()
    got = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    detached = step_two_gradients(model, batch, detach=True)
    flowing = step_two_gradients(model, batch, detach=False)
    assert got.keys() == detached.keys()
    for name in got:
        torch.testing.assert_close(got[name], detached[name], msg=name)
    assert any(not torch.allclose(detached[n], flowing[n]) for n in detached)  # the carry does matter here
    with torch.no_grad():  # and step 2 continues from step 1 rather than from the initial state
        every = model(batch, steps=2, return_all=True)
        assert not torch.allclose(every[1], model(batch, steps=1))


# ============================================================================ halting and the loss


def test_loss_is_the_mean_over_supervision_steps_of_answer_and_halting_bce():
    model = tiny(halt_loss_weight=0.7)
    batch = rows()
    logits, trace = model(batch, steps=3, return_trace=True)  # eval: no halting, every step runs
    answers, q = trace.answer_logits, trace.halt_logits
    assert answers.shape == q.shape == (3, len(batch)) and bool(trace.active.all())
    labels = batch.labels.double()
    want = 0.0
    for s in range(3):
        correct = ((answers[s] > 0) == (labels > 0.5)).double()
        want = want + F.binary_cross_entropy_with_logits(answers[s], labels) \
            + 0.7 * F.binary_cross_entropy_with_logits(q[s], correct)
    torch.testing.assert_close(model.loss(logits, labels, 0.0, trace), want / 3)
    with pytest.raises(ValueError, match="return_trace") as err:
        model.loss(logits, labels)
    assert "\n" not in str(err.value)


def set_halting(model, bias: float, weight: torch.Tensor | None = None):
    with torch.no_grad():
        model.halting.bias.fill_(bias)
        model.halting.weight.copy_(torch.zeros_like(model.halting.weight) if weight is None else weight)


def test_training_halts_rows_and_drops_their_later_terms():
    """In training a row whose head says 'right' after step 1 stops: one step runs, its terms alone count, and
    the mean is still over the budget's 3 steps."""
    model = tiny().train()
    batch = rows()
    set_halting(model, 30.0)  # sigmoid(q) = 1 > threshold: every row halts after step 1
    logits, trace = model(batch, steps=3, return_trace=True)
    assert trace.answer_logits.shape == (1, len(batch))
    assert torch.equal(trace.ponder.steps, torch.ones_like(trace.ponder.steps))
    labels = batch.labels.double()
    correct = ((trace.answer_logits[0] > 0) == (labels > 0.5)).double()
    want = F.binary_cross_entropy_with_logits(trace.answer_logits[0], labels) \
        + F.binary_cross_entropy_with_logits(trace.halt_logits[0], correct)
    torch.testing.assert_close(model.loss(logits, labels, 0.0, trace), want / 3)


def test_halting_head_at_test_time():
    """Default: evaluation runs every supervision step and the head changes nothing. With test_halting a row
    keeps the answer of its first step with sigmoid(q) > halt_threshold."""
    model, batch = tiny(), rows(n=8)
    with torch.no_grad():
        reference = model(batch, steps=4, return_all=True)
        set_halting(model, 30.0)
        torch.testing.assert_close(model(batch, steps=4, return_all=True), reference, rtol=0, atol=0)
        model.config.test_halting = True
        every, trace = model(batch, steps=4, return_all=True, return_trace=True)
        torch.testing.assert_close(every, reference[:1].expand(4, -1))  # all halted after step 1
        assert trace.ponder.mean_steps() == 1
        set_halting(model, -30.0)  # never halts: the full budget
        torch.testing.assert_close(model(batch, steps=4, return_all=True), reference, rtol=0, atol=0)
        torch.manual_seed(3)  # a head that halts some rows early and others late
        set_halting(model, 0.0, torch.randn_like(model.halting.weight))
        every, trace = model(batch, steps=4, return_all=True, return_trace=True)
    used = trace.active.sum(0)  # supervision steps each row ran
    assert 1 < len(set(used.tolist())), used  # the rows stopped at different steps
    for i, steps in enumerate(used.tolist()):
        torch.testing.assert_close(every[-1, i], reference[steps - 1, i])  # its answer at its halting step
        assert bool((torch.sigmoid(trace.halt_logits[:steps - 1, i]) <= 0.9).all())
        assert steps == 4 or torch.sigmoid(trace.halt_logits[steps - 1, i]) > 0.9


# ============================================================================ the MLP mixer and the ledger


def test_mlp_mixer_reads_sequences_of_any_length_up_to_max_length():
    model = tiny("tokens", mixer="mlp")
    assert model.network.blocks[0].mix.mlp.down.out_features == model.config.max_length
    batch = rows("tokens", n=5)
    short = batch.select(slice(0, 5)).trim()  # fewer columns: the mixer pads to max_length itself
    assert short.tokens.shape[1] < batch.tokens.shape[1]
    with torch.no_grad():
        torch.testing.assert_close(model(short, steps=2), model(batch, steps=2), rtol=0, atol=1e-12)


def test_mlp_ledger_matches_the_flop_counter():
    model = tiny("tokens", mixer="mlp").float()
    batch = rows("tokens", n=3)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(batch, 2)
    expected = model_ledger(model, batch.tokens.shape[1], 2).forward_flops(3)
    assert counter.get_total_flops() == pytest.approx(expected, rel=0.02)


# ============================================================================ configuration


@pytest.mark.parametrize("overrides, field", [
    (dict(mixer="mlp"), "model.mixer"),  # graph edges live in the attention mask
    (dict(mixer="conv"), "model.mixer"),
    (dict(latent_steps=0), "model.latent_steps"),
    (dict(recursions=0), "model.recursions"),
    (dict(supervision_steps=0), "model.supervision_steps"),
    (dict(halt_threshold=1.0), "model.halt_threshold"),
    (dict(halt_loss_weight=-1.0), "model.halt_loss_weight"),
])
def test_bad_config_is_one_line_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field) as err:
        TRMConfig.for_task("graph", **overrides)
    assert "\n" not in str(err.value)


def test_trainer_refuses_intermediate_supervision_alpha():
    """Deep supervision already supervises every step: task.alpha > 0 is refused in one line, 0 is accepted."""
    tc = ReasoningTaskConfig(name="graph", alpha=0.5)
    config = SimpleNamespace(model=TRMConfig.for_task("graph"), task=tc)
    with pytest.raises(ValueError, match="task.alpha") as err:
        check_model_fits(config, data_task(tc))
    assert "\n" not in str(err.value)
    tc.alpha = 0.0
    check_model_fits(config, data_task(tc))


def test_steps_are_supervision_steps_and_default_to_n_sup():
    model, batch = tiny(), rows()
    assert model.config.trained_steps() == (3, 3)
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(batch, steps=3))
        assert model(batch, steps=7, return_all=True).shape == (7, len(batch))  # beyond N_sup: still runs
    with pytest.raises(ValueError, match="supervision steps"):
        model(batch, steps=0)


# ============================================================================ training smoke test


def test_graph_answers_learn_short_hops():
    """60 updates on fresh 1-2 hop graphs (the trainer's clipping): the final step's answer loss leaves chance."""
    torch.manual_seed(0)
    config = TRMConfig.for_task("graph", dim=64, heads=4, ffn_dim=128, latent_steps=1, recursions=1,
                                supervision_steps=2)
    model = build_model(config)
    data = get_task("graph").sample_mixed(rng_for(0), 60 * 64, [1, 2])
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
    losses = []
    for step in range(60):
        batch = data.select(slice(64 * step, 64 * (step + 1)))
        logits, trace = model(batch, return_trace=True)
        loss = model.loss(logits, batch.labels, 0.0, trace)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(F.binary_cross_entropy_with_logits(logits, batch.labels.float()).item())
    first, last = sum(losses[:15]) / 15, sum(losses[-15:]) / 15
    assert last < first - 0.04, (first, last)
