"""Shared drivers for every registered architecture of family "reasoning" (seed 002's protocol,
looped/models/reasoning.py). Registering an architecture is enough for test_reasoning_registry.py to run
every check on it; test_plugins.py runs them on the worked example (examples/looped_encoder.py)."""

from __future__ import annotations

import pytest
import torch

from looped.data.tasks import ReasoningBatch, get_task, rng_for
from looped.models import build_model, get_arch
from looped.models.reasoning import ReasoningTrace

DEPTH_MODES = ("per_step", "halting", "fixed")


# one data task per perception interface: graph rows (adjacency, query) and token rows ([CLS] + symbols)
TASK_OF_KIND = {"graph": ("graph", 3), "tokens": ("boolean", 2)}  # (data task, difficulty)


def cases(archs) -> list[tuple[str, str]]:
    """(arch, task kind) for every kind each architecture declares it reads."""
    return [(arch, kind) for arch in archs for kind in get_arch(arch).config_cls.input_kinds]


def tiny_model(arch: str, kind: str = "graph"):
    """The architecture at its tiny test size with the paper's settings for `kind`, float64, eval mode."""
    torch.manual_seed(0)
    spec = get_arch(arch)
    return build_model(spec.config_cls.for_task(TASK_OF_KIND[kind][0], **spec.test_overrides)).double().eval()


def rows(kind: str = "graph", n: int = 6) -> ReasoningBatch:
    task, difficulty = TASK_OF_KIND[kind]
    return get_task(task).sample(rng_for(0), n, difficulty)


def budgets(model) -> tuple[int, int]:
    """Budget 1 and the top of the model's trained range (at least 2)."""
    return 1, max(2, model.config.trained_steps()[1])


def check_declares_its_capabilities(arch: str, kind: str = "graph"):
    model = tiny_model(arch, kind)
    assert model.depth_mode in DEPTH_MODES, f"{arch}: depth_mode {model.depth_mode!r} not in {DEPTH_MODES}"
    lo, hi = model.config.trained_steps()
    assert 1 <= lo <= hi, f"{arch}: trained_steps() {(lo, hi)}"


def check_depth_mode_is_true_to_behaviour(arch: str, kind: str = "graph"):
    """Evaluation trusts the declaration: "fixed" models run once for every budget, "per_step" models give every
    smaller budget's logits from one pass at the largest."""
    model, batch = tiny_model(arch, kind), rows(kind)
    lo, hi = budgets(model)
    with torch.no_grad():
        same = torch.equal(model(batch, steps=lo), model(batch, steps=hi))
        assert same == (model.depth_mode == "fixed"), f"{arch}: depth_mode {model.depth_mode!r}, budget " \
                                                      f"{'ignored' if same else 'used'}"
        if model.depth_mode == "per_step":
            every = model(batch, steps=hi, return_all=True)
            torch.testing.assert_close(every[lo - 1], model(batch, steps=lo))


def check_shapes_and_the_trace(arch: str, kind: str = "graph"):
    model, batch = tiny_model(arch, kind), rows(kind)
    _, hi = budgets(model)
    with torch.no_grad():
        logits = model(batch, steps=hi)
        every, trace = model(batch, steps=hi, return_all=True, return_trace=True)
    assert logits.shape == (len(batch),) and every.dim() == 2 and every.shape[1] == len(batch)
    torch.testing.assert_close(every[-1], logits)  # return_all's final row is the plain forward
    assert isinstance(trace, ReasoningTrace)


def check_loss_trains_every_parameter(arch: str, kind: str = "graph"):
    model, batch = tiny_model(arch, kind).train(), rows(kind)
    _, hi = budgets(model)
    logits, trace = model(batch, steps=hi, return_all=True, return_trace=True)
    loss = model.loss(logits, batch.labels.double(), 0.5, trace)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    silent = [name for name, p in model.named_parameters() if p.grad is None]
    assert not silent, f"{arch}: no gradient reaches {silent[:3]}"


def check_padding_slots_change_nothing(arch: str, kind: str = "graph"):
    """Tokens at PAD-flagged positions are invisible: new ids there leave every logit bit-identical."""
    model, batch = tiny_model(arch, kind), rows(kind)
    _, hi = budgets(model)
    noisy = batch.tokens.clone()
    noisy[batch.padding] = 1 + noisy[batch.padding] % (model.config.vocab_size - 1)
    changed = ReasoningBatch(noisy, batch.labels, batch.padding, batch.difficulty, dict(batch.extras))
    assert batch.padding.any()
    with torch.no_grad():
        torch.testing.assert_close(model(changed, steps=hi), model(batch, steps=hi), rtol=0, atol=0)


def check_bad_input_is_one_line(arch: str, kind: str = "graph"):
    model = tiny_model(arch, kind)
    empty = get_task(TASK_OF_KIND[kind][0]).sample(rng_for(0), 0, 2)
    with pytest.raises(ValueError, match="empty batch") as err:
        model(empty, steps=budgets(model)[0])
    assert "\n" not in str(err.value)


ALL_CHECKS = [check_declares_its_capabilities, check_depth_mode_is_true_to_behaviour, check_shapes_and_the_trace,
              check_loss_trains_every_parameter, check_padding_slots_change_nothing, check_bad_input_is_one_line]
