"""The per-round trace (looped/models/trace.py) and the lens built on it (looped/eval/lens.py, `looped lens`)."""

from __future__ import annotations

import pytest
import torch

from looped.models import arch_names, get_arch
import lm_drivers
import reasoning_drivers

# rows without a depth to trace refuse in one line; every other registered row must trace to its forward
NO_TRACE = {"rlt", "rlt0", "rlt_baseline", "lstm"}


def lm_tokens(model, length: int = 24) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (2, length), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("arch", arch_names("lm"))
def test_last_traced_round_is_the_forward(arch):
    model = lm_drivers.tiny_model(arch)
    tokens = lm_tokens(model)
    if arch in NO_TRACE:
        with pytest.raises(ValueError, match="no per-round trace"):
            model.trace(tokens)
        return
    for depth in lm_drivers.depths(arch):
        with torch.no_grad():
            entries = list(model.trace(tokens, rounds=depth))
            forward = model(tokens, rounds=depth)
        assert len(entries) == (depth or model.config.layers)
        assert [e.depth for e in entries] == list(range(1, len(entries) + 1))
        torch.testing.assert_close(entries[-1].logits, forward, rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch", [a for a in arch_names("lm") if get_arch(a).test_depths])
def test_every_traced_round_of_a_loop_is_the_forward_at_that_depth(arch):
    """What `looped depth` relies on to score every depth in one pass."""
    model = lm_drivers.tiny_model(arch)
    tokens = lm_tokens(model)
    with torch.no_grad():
        entries = list(model.trace(tokens, rounds=5))
        for entry in entries:
            torch.testing.assert_close(entry.logits, model(tokens, rounds=entry.depth), rtol=0, atol=1e-5)


def test_adaptive_exit_weights_of_a_call_sum_to_one():
    model = lm_drivers.tiny_model("adaptive_exit")
    with torch.no_grad():
        for rounds in (2, 4, 6):
            weights = sum(e.stats["exit weight"] for e in model.trace(lm_tokens(model), rounds=rounds))
            torch.testing.assert_close(weights, torch.ones_like(weights))


@pytest.mark.parametrize("arch,kind", reasoning_drivers.cases(arch_names("reasoning")))
def test_last_traced_step_is_the_forward(arch, kind):
    model, batch = reasoning_drivers.tiny_model(arch, kind), reasoning_drivers.rows(kind)
    steps = reasoning_drivers.budgets(model)[1]
    with torch.no_grad():
        entries = list(model.trace(batch, steps))
        torch.testing.assert_close(entries[-1].logits, model(batch, steps), rtol=0, atol=1e-5)
        if model.depth_mode != "fixed":  # every step is the forward at that budget
            for entry in entries:
                torch.testing.assert_close(entry.logits, model(batch, entry.depth), rtol=0, atol=1e-5)
