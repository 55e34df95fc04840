"""Shared drivers for every registered architecture of family "lm".

A per-family test file only chooses architectures; registering an architecture is enough for the
test_lm_registry.py sweep to pick it up; a built-in one also adds its parameter formula to
parameter_formulas.py (a plugin is held to the formulas of what it inherits).
"""

from __future__ import annotations

import json

import torch

import parameter_formulas
from looped.config import from_dict, to_dict
from looped.models import build_model, get_arch


def tiny_model(arch: str, **overrides):
    torch.manual_seed(1)
    model = build_model(get_arch(arch).tiny_config(**overrides)).double().eval()
    _perturb_zero_inits(model)
    return model


def _perturb_zero_inits(model):
    # Zero-initialised gates/scales would hide whole code paths from the equivalence checks.
    with torch.no_grad():
        for p in model.parameters():
            if p.abs().max() == 0:
                p.normal_(0, 0.3)


def depths(arch: str) -> list:
    return list(get_arch(arch).test_depths) or [None]


def check_causality(arch: str, cut: int = 9, length: int = 24, tol: float = 1e-6, **overrides):
    """Changing tokens after position `cut` leaves logits at positions <= cut unchanged.
    `overrides` change the tiny config (e.g. a family-specific setting such as RLT's feedback_interval)."""
    model = tiny_model(arch, **overrides)
    vocab = model.config.vocab_size
    for rounds in depths(arch):
        x = torch.randint(0, vocab, (3, length))
        y = x.clone()
        y[:, cut + 1:] = torch.randint(0, vocab, (3, length - cut - 1))
        with torch.no_grad():
            a, b = model(x, rounds=rounds), model(y, rounds=rounds)
        diff = (a[:, :cut + 1] - b[:, :cut + 1]).abs().max().item()
        assert diff <= tol, f"{arch} rounds={rounds}: future tokens changed past logits by {diff}"
        assert (a[:, cut + 1:] - b[:, cut + 1:]).abs().max() > 0, "perturbation had no effect at all"


def check_incremental(arch: str, prefixes=(1, 5, 17), length: int = 30, tol: float = 1e-5, **overrides):
    """prefill(prefix) + step-by-step decoding == full forward, and chunked decoding likewise."""
    model = tiny_model(arch, **overrides)
    vocab = model.config.vocab_size
    x = torch.randint(0, vocab, (2, length))
    for rounds in depths(arch):
        with torch.no_grad():
            full = model(x, rounds=rounds)
            for prefix in prefixes:
                state = model.init_state(2, rounds=rounds)
                parts = [model.decode(x[:, :prefix], state)]
                parts += [model.decode(x[:, i:i + 1], state) for i in range(prefix, length)]
                diff = (torch.cat(parts, 1) - full).abs().max().item()
                assert diff <= tol, f"{arch} rounds={rounds} prefix={prefix}: |Δlogit| {diff}"
            state = model.init_state(2, rounds=rounds)
            chunks = [model.decode(x[:, i:i + 7], state) for i in range(0, length, 7)]
            diff = (torch.cat(chunks, 1) - full).abs().max().item()
            assert diff <= tol, f"{arch} rounds={rounds} chunked: |Δlogit| {diff}"


def check_incremental_fp32(arch: str, tol: float = 1e-5, **overrides):
    """The same equivalence in float32 (the dtype users decode in)."""
    model = tiny_model(arch, **overrides).float()
    x = torch.randint(0, model.config.vocab_size, (2, 20))
    for rounds in depths(arch):
        with torch.no_grad():
            full = model(x, rounds=rounds)
            state = model.init_state(2, rounds=rounds)
            steps = torch.cat([model.decode(x[:, :4], state)] +
                              [model.decode(x[:, i:i + 1], state) for i in range(4, 20)], 1)
        diff = (steps - full).abs().max().item()
        assert diff <= tol, f"{arch} fp32 rounds={rounds}: |Δlogit| {diff}"


def check_config_roundtrip(arch: str):
    spec = get_arch(arch)
    config = spec.tiny_config()
    again = from_dict(spec.config_cls, json.loads(json.dumps(to_dict(config))), "model")
    assert again == config


def check_parameter_counts(arch: str):
    """Each component's count equals its formula from the equations (parameter_formulas.py), at the tiny config
    and at the settings that add or drop parameters; the total is what the optimiser sees."""
    spec = get_arch(arch)
    for overrides in [{}, *parameter_formulas.VARIANTS.get(arch, [])]:
        config = spec.tiny_config(**overrides)
        model = build_model(config)
        counts = model.parameter_counts()
        if arch in parameter_formulas.FORMULAS:
            assert counts == parameter_formulas.expected_counts(arch, config), f"{arch} {overrides}"
        else:  # a plugin: what it inherits
            assert not type(model).__module__.startswith("looped."), f"{arch}: add its formula to parameter_formulas"
            inherited = parameter_formulas.inherited_counts(model)
            assert {name: counts.get(name) for name in inherited} == inherited, arch
        assert counts["total"] == sum(p.numel() for p in model.parameters())


def check_bad_input(arch: str):
    model = tiny_model(arch)
    cfg = model.config
    import pytest
    with pytest.raises(ValueError, match="out of range"):
        model(torch.full((1, 4), cfg.vocab_size))
    with pytest.raises(ValueError, match="sequence too long"):
        model(torch.zeros(1, cfg.context_length + 1, dtype=torch.long))
    state = model.init_state(1)
    model.decode(torch.zeros(1, cfg.context_length, dtype=torch.long), state)
    with pytest.raises(ValueError, match="sequence too long"):
        model.decode(torch.zeros(1, 1, dtype=torch.long), state)


ALL_CHECKS = [check_causality, check_incremental, check_incremental_fp32, check_config_roundtrip,
              check_parameter_counts, check_bad_input]
