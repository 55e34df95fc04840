"""Causal latent workspace family (seed 000): equations, Appendix D toy, row-specific properties."""

import math

import pytest
import torch

from looped.config import ConfigError
from looped.models import build_model, get_arch


def model_of(arch, **kw):
    torch.manual_seed(0)
    return build_model(get_arch(arch).tiny_config(**kw)).double()


# --- Appendix D: the fully specified numerical toy, through the real model class ------------------------
def appendix_d_model():
    m = build_model(get_arch("workspace").config(dim=2, heads=1, ffn_dim=1, rounds=4, slots=2, slot_dim=2,
                                                 context_length=8)).double()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        for name, p in m.named_parameters():  # LayerNorm gains one, offsets zero
            if name.endswith("weight") and "norm" in name:
                p.fill_(1.0)
        m.embed.weight[:] = torch.tensor([0.3, -0.1], dtype=torch.float64)  # identical embeddings, zero positions
        ws = m.workspace
        ws.write.bias[:] = torch.tensor([math.log(1 / 3), 0.0, math.atanh(0.4), math.atanh(0.2), math.atanh(0.2),
                                         math.atanh(-0.4)], dtype=torch.float64)
        ws.query.bias[:] = torch.tensor([1.0, 0.0])
        ws.keys[:] = torch.eye(2)
        ws.out.weight[:] = torch.eye(2)
        ws.gamma.fill_(0.5)
    return m


def test_appendix_d_numerical_toy():
    m = appendix_d_model()
    tokens = torch.tensor([[116, 104, 101, 32, 99, 97, 116, 32]])  # "the cat "
    a_star = math.exp(1 / math.sqrt(2)) / (math.exp(1 / math.sqrt(2)) + 1)
    with torch.no_grad():
        e = m.anchor_embedding(tokens, 0)
        u0 = m.anchor(e, e)
        ws = m.workspace
        gate, value, q = ws.project(u0)
        memory = ws.memory(ws.prefix_sums(gate, value, None))
        alpha = torch.softmax(q @ ws.keys.t() / math.sqrt(2), -1)
        read = (alpha.unsqueeze(-2) @ memory).squeeze(-2)
        residual = ws.read(ws.slot_weights(q), memory)
        exits = []
        handle = m.block.register_forward_hook(lambda mod, inp, out: exits.append(out))
        logits = m(tokens)
        handle.remove()
        # head rows of the walkthrough: logit 3 for 's', 1 for 'a', 0 for space, -5 otherwise
        c_f = m.final_norm(exits[-1])[0, 7, 0].item()
        rows = torch.full((257, 2), 0.0, dtype=torch.float64)
        rows[:] = torch.tensor([-5 / (2 * c_f), 5 / (2 * c_f)])
        rows[ord("s")] = torch.tensor([3 / (2 * c_f), -3 / (2 * c_f)])
        rows[ord("a")] = torch.tensor([1 / (2 * c_f), -1 / (2 * c_f)])
        rows[ord(" ")] = 0.0
        m.head.weight[:] = rows
        logits = m(tokens)
    tol = 1e-4
    assert alpha[0, 7, 0].item() == pytest.approx(a_star, abs=tol)
    assert memory[0, 7].flatten().tolist() == pytest.approx([0.5657, 0.2828, 0.4, -0.8], abs=tol)
    assert alpha[0, 7].tolist() == pytest.approx([0.6698, 0.3302], abs=tol)
    assert read[0, 7].tolist() == pytest.approx([0.5110, -0.0748], abs=tol)
    assert residual[0, 7].tolist() == pytest.approx([0.2555, -0.0374], abs=tol)
    f64 = dict(dtype=torch.float64)
    c_star = 0.5 * (a_star * torch.tensor([0.8, 0.4], **f64) / math.sqrt(2) + (1 - a_star) * torch.tensor([0.4, -0.8], **f64))
    assert residual[0, 7].tolist() == pytest.approx(c_star.tolist(), abs=1e-9)
    assert u0[0, 7].tolist() == pytest.approx([0.999875, -0.999875], abs=tol)
    assert exits[0][0, 7].tolist() == pytest.approx([0.999996, -0.999996], abs=tol)
    probs = torch.softmax(logits[0, 7], -1)
    assert probs[ord("s")].item() == pytest.approx(0.7872, abs=tol)
    assert -math.log(probs[ord("s")].item()) == pytest.approx(0.2393, abs=tol)


# --- equations ------------------------------------------------------------------------------------------
def test_workspace_cumsum_equals_the_quadratic_definition():
    """M~_{i,s} = sum_{j<=i} g_js v_js / sqrt(max(sum_{j<=i} g_js, eps)) (eq. 4), written out per position."""
    ws = model_of("workspace").workspace
    u = torch.randn(2, 9, ws.write_norm.normalized_shape[0], dtype=torch.float64)
    gate, value, _ = ws.project(u)
    sums = ws.prefix_sums(gate, value, None)
    memory, carry = ws.memory(sums), sums[:, -1]
    gv = ws.write(ws.write_norm(u))  # the unfused modules as the reference
    g = torch.sigmoid(gv[..., :ws.slots])
    v = torch.tanh(gv[..., ws.slots:]).unflatten(-1, (ws.slots, ws.slot_dim))
    for i in range(9):
        numer = (g[:, :i + 1, :, None] * v[:, :i + 1]).sum(1)
        mass = g[:, :i + 1].sum(1)
        torch.testing.assert_close(memory[:, i], numer / mass.clamp_min(1e-6).sqrt()[..., None])
    torch.testing.assert_close(carry[..., -1], g.sum(1))


def test_fused_projection_equals_the_separate_norms_and_linears():
    """project() folds LN_w / LN_q gains and offsets into one matmul; compare with the modules applied in turn."""
    ws = model_of("workspace").workspace
    with torch.no_grad():
        for norm in (ws.write_norm, ws.query_norm):
            norm.weight.normal_()
            norm.bias.normal_()
    u = torch.randn(2, 7, ws.write_norm.normalized_shape[0], dtype=torch.float64)
    gate, value, query = ws.project(u)
    gv = ws.write(ws.write_norm(u))
    torch.testing.assert_close(gate, torch.sigmoid(gv[..., :ws.slots]))
    torch.testing.assert_close(value, torch.tanh(gv[..., ws.slots:]).unflatten(-1, (ws.slots, ws.slot_dim)))
    torch.testing.assert_close(query, ws.query(ws.query_norm(u)))


def test_workspace_read_folds_the_normalisation_into_slot_weights():
    """The recomputed row reads sum_s alpha_s N_s / sqrt(D_s) without M~; equal to reading M~ (eq. 4, 7)."""
    ws = model_of("workspace").workspace
    u = torch.randn(2, 7, ws.write_norm.normalized_shape[0], dtype=torch.float64)
    gate, value, query = ws.project(u)
    sums = ws.prefix_sums(gate, value, None)
    alpha = ws.slot_weights(query)
    torch.testing.assert_close(ws.read(alpha * ws.inverse_norm(sums), sums[..., :-1]),
                               ws.read(alpha, ws.memory(sums)))


@pytest.mark.parametrize("length, with_carry", [(7, False), (7, True), (1, True), (1, False)])
def test_fused_read_equals_the_equations_applied_in_turn(length, with_carry):
    """read_recomputed (slot keys and gamma folded into the projections, 2-D matmuls, a bmm for one position)
    computes project -> prefix_sums -> slot_weights -> memory -> read."""
    ws = model_of("workspace").workspace
    with torch.no_grad():
        ws.gamma.fill_(0.7)
        for norm in (ws.write_norm, ws.query_norm):
            norm.bias.normal_()
    u = torch.randn(2, length, ws.write_norm.normalized_shape[0], dtype=torch.float64)
    carry = torch.rand(2, ws.slots, ws.slot_dim + 1, dtype=torch.float64) if with_carry else None
    gate, value, query = ws.project(u)
    sums = ws.prefix_sums(gate, value, carry)
    want = ws.read(ws.slot_weights(query), ws.memory(sums))
    got, got_sums = ws.read_recomputed(u, carry, ws.fold())  # u + c: the residual LN_b normalises
    torch.testing.assert_close(got_sums, sums)
    torch.testing.assert_close(got, u + want)


def test_a_decode_state_refolds_after_a_parameter_changes():
    """Decoding reuses the workspace fold across calls; an in-place update (an optimizer step) must renew it."""
    model = model_of("workspace").float().eval()
    state = model.init_state(1)
    tokens = torch.randint(0, 257, (1, 4))
    with torch.no_grad():
        model.decode(tokens[:, :2], state)
        first = state.folded[1]
        model.decode(tokens[:, 2:3], state)
        assert state.folded[1] is first  # reused
        model.workspace.gamma.mul_(2.0)
        model.decode(tokens[:, 3:4], state)
    for cached, fresh in zip(state.folded[1], model.workspace.fold()):
        torch.testing.assert_close(cached, fresh)


def test_retention_blends_previous_round():
    m = model_of("workspace_retention")
    assert torch.sigmoid(m.workspace.retention).tolist() == pytest.approx([0.2] * m.config.rounds)
    assert m.workspace.retention.numel() == m.config.rounds


def test_zero_initialised_additions_preserve_the_anchored_control():
    """sigma, tau, beta start at zero, so conditioned-dense computes exactly the anchored loop at init."""
    anchored, dense = model_of("anchored_loop"), model_of("conditioned_dense")
    dense.load_state_dict(anchored.state_dict(), strict=False)
    x = torch.randint(0, 257, (2, 12))
    torch.testing.assert_close(dense(x), anchored(x))
    assert dense.scale.abs().sum() == 0 and dense.shift.abs().sum() == 0 and dense.exit_mix.abs().sum() == 0


def test_workspace_with_zero_gain_is_anchored_plus_renorm():
    ws_model, anchored = model_of("workspace"), model_of("anchored_loop", dim=24, ffn_dim=40)
    anchored.load_state_dict({k: v for k, v in ws_model.state_dict().items() if not k.startswith("workspace")})
    with torch.no_grad():
        ws_model.workspace.gamma.zero_()
        ws_model.workspace.combine_norm.weight.fill_(1.0)
        ws_model.workspace.combine_norm.bias.zero_()
    x = torch.randint(0, 257, (2, 12))
    # with c = 0, LN_b(u) = u up to LayerNorm's eps (u already has zero mean and unit variance), hence 1e-4
    with torch.no_grad():
        anchored.anchor.norm.weight.fill_(1.0)
        anchored.anchor.norm.bias.zero_()
        ws_model.anchor.norm.weight.fill_(1.0)
        ws_model.anchor.norm.bias.zero_()
    torch.testing.assert_close(ws_model(x), anchored(x), atol=1e-4, rtol=1e-4)


def test_adaptive_exit_mixture():
    m = model_of("adaptive_exit")
    x = torch.randint(0, 257, (1, 6))
    exits = []
    handle = m.block.register_forward_hook(lambda mod, inp, out: exits.append(out))
    with torch.no_grad():
        logits = m(x)
        pi = torch.softmax(m.router(m.anchor_embedding(x, 0)), -1)
        mixed = sum(pi[..., r:r + 1] * exits[r] for r in range(m.config.rounds))
        torch.testing.assert_close(logits, m.head(m.final_norm(mixed)))
    handle.remove()


def test_every_row_runs_four_block_applications_by_default():
    for arch in ("shared_loop", "adaptive_exit", "anchored_loop", "conditioned_dense", "workspace",
                 "workspace_retention"):
        m = build_model(get_arch(arch).config(dim=16, heads=2, ffn_dim=16, slots=2, slot_dim=4))
        calls = []
        m.block.register_forward_hook(lambda *a: calls.append(1))
        m(torch.zeros(1, 5, dtype=torch.long))
        assert len(calls) == 4, arch
    plain = build_model(get_arch("transformer").config())
    assert len(plain.blocks) == 4


@pytest.mark.parametrize("field,value", [("rounds", 0), ("slots", 0), ("slot_dim", 0), ("heads", 5)])
def test_bad_shapes_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"model.{'dim' if field == 'heads' else field}"):
        get_arch("workspace").config(dim=24, **{field: value})


def test_rounds_argument_errors():
    m = model_of("shared_loop")
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        m(torch.zeros(1, 3, dtype=torch.long), rounds=0)
    with pytest.raises(ValueError, match="fixed depth"):
        build_model(get_arch("transformer").tiny_config())(torch.zeros(1, 3, dtype=torch.long), rounds=2)


# --- early exit -------------------------------------------------------------------------------------------
LOOPED = ["shared_loop", "adaptive_exit", "anchored_loop", "conditioned_dense", "workspace", "workspace_retention"]


@pytest.mark.parametrize("arch", LOOPED)
def test_early_exit_threshold_zero_is_the_full_loop(arch):
    m = model_of(arch).eval()
    x = torch.randint(0, 257, (2, 14))
    with torch.no_grad():
        logits, used = m.forward_early_exit(x, 0.0)
        torch.testing.assert_close(logits, m(x))
    assert (used == m.config.rounds).all()


@pytest.mark.parametrize("arch", LOOPED)
def test_early_exit_is_causal_and_incremental(arch):
    from lm_drivers import _perturb_zero_inits
    m = model_of(arch).eval()
    _perturb_zero_inits(m)
    x = torch.randint(0, 257, (2, 16))
    with torch.no_grad():
        full, used = m.forward_early_exit(x, 0.02, rounds=5)
        y = x.clone()
        y[:, 9:] = torch.randint(0, 257, (2, 7))
        other, used_y = m.forward_early_exit(y, 0.02, rounds=5)
        torch.testing.assert_close(other[:, :9], full[:, :9], atol=1e-9, rtol=0)
        assert torch.equal(used[:, :9], used_y[:, :9])
        state = m.init_state(2, rounds=5, exit_threshold=0.02)
        steps = torch.cat([m.decode(x[:, :6], state)] + [m.decode(x[:, i:i + 1], state) for i in range(6, 16)], 1)
    torch.testing.assert_close(steps, full, atol=1e-9, rtol=0)
    assert torch.equal(torch.cat(state.rounds_used, 1), used)


def test_early_exit_saves_rounds_with_a_loose_threshold():
    m = model_of("shared_loop").eval()
    with torch.no_grad():
        _, used = m.forward_early_exit(torch.randint(0, 257, (2, 20)), 1.0)  # TV is always < 1
    assert (used == 2).all()  # round 0, then round 1 is compared and every position stops
    with pytest.raises(ValueError, match="threshold"):
        m.forward_early_exit(torch.zeros(1, 2, dtype=torch.long), -1.0)


def test_a_checkpoint_of_one_row_is_refused_as_another(tmp_path):
    from looped.train.checkpoint import CheckpointError, load_weights, model_file, write_folder_atomically
    ws = model_of("workspace")
    write_folder_atomically(tmp_path / "ckpt", {"model.safetensors": model_file(ws)})
    retention = model_of("workspace_retention")  # the same keys and shapes
    with pytest.raises(CheckpointError, match="'workspace' checkpoint cannot be loaded as 'workspace_retention'"):
        load_weights(retention, tmp_path / "ckpt")
    load_weights(model_of("workspace"), tmp_path / "ckpt")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_folds_constant_value_row_reads_as_exactly_one(dtype):
    """The fold's extra row per slot must give tanh == 1 exactly, or D (the gate mass) would be scaled by it."""
    ws = model_of("workspace").workspace.to(dtype)
    with torch.no_grad():
        weight_t, bias, _, _ = ws.fold()
        S, m = ws.slots, ws.slot_dim
        u = torch.randn(3, ws.write_norm.normalized_shape[0], dtype=dtype)
        values = torch.tanh(u @ weight_t + bias)[:, 2 * S:2 * S + S * (m + 1)].view(3, S, m + 1)
    assert torch.equal(values[..., -1], torch.ones(3, S, dtype=dtype))


def test_decoding_clamps_the_gate_mass_until_every_slot_reaches_eps():
    """Decoding skips eq. 4's max(D, eps) once every D of the running sums is >= eps (D never decreases);
    with gates of 1e-7 each D crosses eps = 1e-6 only at the 10th token, and until then the clamp must hold."""
    model = model_of("workspace").double().eval()
    ws = model.workspace
    with torch.no_grad():
        ws.write.weight[:ws.slots].zero_()  # gate logits = bias only: g = sigmoid(b) = 1e-7 at every position
        ws.write.bias[:ws.slots].fill_(math.log(1e-7 / (1 - 1e-7)))
    tokens = torch.randint(0, 257, (1, 24))
    state = model.init_state(1)
    settled_at = None
    with torch.no_grad():
        full = model(tokens)
        for t in range(tokens.shape[1]):
            step = model.decode(tokens[:, t:t + 1], state)
            torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-10, atol=1e-10)
            if settled_at is None and all(state.mass_settled):
                settled_at = t
    assert settled_at is not None and 8 <= settled_at <= 10  # D = (t + 1) 1e-7 reaches 1e-6 at t = 9
