"""RLT (seed 003): the model against a token-by-token reference written from the paper's equations, chunking
and split invariance (Appendix I, Proposition B.1), saved states, truncated BPTT, parameter counts.

The shared drivers (tests/lm_drivers.py) already check causality and incremental == full for the registered
rows; this file adds what is specific to the feedback interval B.
"""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from looped.config import ConfigError
from looped.models import build_model, get_arch

import lm_drivers

TINY = dict(dim=32, heads=2, ffn_dim=48, encoder_layers=1, decoder_layers=2, window=3, context_length=24)


# The equivalences hold exactly in fp64 (1e-10) and to the 1e-5 in fp32, relative to the scale of the
# reference (max |diff| <= tol * max(1, max |reference|)): fp32 logits of a random model reach ~10.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])


def assert_equivalent(out, reference, what=""):
    tol = TOLERANCE[reference.dtype] * max(1.0, reference.abs().max().item())
    diff = (out - reference).abs().max().item()
    assert diff <= tol, f"{what}: max |diff| {diff:.3g} > {tol:.3g}"


def tiny(arch="rlt", dtype=torch.float64, **overrides):
    torch.manual_seed(1)
    model = build_model(get_arch(arch).config(**{**TINY, **overrides})).to(dtype).eval()
    with torch.no_grad():  # make the zero-initialised gate bias count
        for p in model.parameters():
            if p.abs().max() == 0:
                p.normal_(0, 0.3)
    return model


# --- reference: one token at a time, straight from eqs. 2, 9-16 and 17-19 (positions from 0) ------------
def reference_logits(model, tokens):
    c = model.config
    heads, hd = c.heads, c.dim // c.heads
    batch, length = tokens.shape
    inv_freq = model.rotary.inv_freq  # base ** (-2i / hd), rounded to float32 like every looped.nn RoPE

    def rope(x, t):  # x (batch, heads, hd) at position t, half-split pairs (i, i + hd/2)
        cos, sin = (t * inv_freq).cos().to(x), (t * inv_freq).sin().to(x)
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def norm(x, module):
        return F.rms_norm(x, (x.shape[-1],), module.weight, module.eps)

    def split(x):  # (batch, dim) -> (batch, heads, hd)
        return x.view(batch, heads, hd)

    def attend(q, keys, values):  # q (batch, heads, hd); keys/values: lists of (batch, heads, hd)
        k, v = torch.stack(keys, 2), torch.stack(values, 2)
        w = torch.softmax((q[:, :, None] * k).sum(-1) / hd ** 0.5, dim=-1)
        return (w[..., None] * v).sum(2).reshape(batch, c.dim)

    def ffn(x, mlp):
        gate, up = F.linear(x, mlp.gate_up.weight).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, mlp.down.weight)

    e = model.embed(tokens)
    for block in model.encoder:  # the causal encoder is the shared looped.nn block, run in parallel
        e = block(e)
    memory = []  # per group: keys, values for every position
    for group in getattr(model, "memory", []):
        keys, values = [], []
        for t in range(length):
            k, v = F.linear(norm(e[:, t], model.memory_norm), group.kv.weight).chunk(2, dim=-1)
            keys.append(rope(norm(split(k), group.k_norm), t))
            values.append(split(v))
        memory.append((keys, values))
    h = model.merge.initial_state.expand(batch, -1) if c.feedback else None
    swa = [([], []) for _ in model.decoder]
    logits = []
    for t in range(length):
        z = e[:, t]
        if c.feedback:
            m = model.merge
            r = norm(h, m.state_norm)
            g = torch.sigmoid(F.linear(torch.cat((e[:, t], r), -1), m.gate.weight, m.gate.bias))
            z = e[:, t] + c.merge_scale * g * F.linear(r, m.state_proj.weight)
        for i, layer in enumerate(model.decoder):
            q, k, v = F.linear(norm(z, layer.swa_norm), layer.swa.qkv.weight).chunk(3, dim=-1)
            swa[i][0].append(rope(norm(split(k), layer.swa.k_norm), t))
            swa[i][1].append(split(v))
            first = max(0, t - c.window + 1)
            q = rope(norm(split(q), layer.swa.q_norm), t)
            z = z + F.linear(attend(q, swa[i][0][first:], swa[i][1][first:]), layer.swa.out.weight)
            q = rope(norm(split(F.linear(norm(z, layer.cross_norm), layer.cross.query.weight)), layer.cross.q_norm), t)
            keys, values = memory[i * len(memory) // len(model.decoder)]
            z = z + F.linear(attend(q, keys[:t + 1], values[:t + 1]), layer.cross.out.weight)
            z = z + ffn(norm(z, layer.ffn_norm), layer.ffn)
        if c.feedback and (t + 1) % c.feedback_interval == 0:
            h = z  # a complete chunk hands its last output to the next chunk
        logits.append(F.linear(norm(z, model.out_norm), model.embed.weight))
    return torch.stack(logits, 1)


CASES = [
    ("rlt", dict(feedback_interval=1)),  # RLT-2 code with B = 1 is the RLT-1 recurrence
    ("rlt", dict(feedback_interval=3)),
    ("rlt", dict(feedback_interval=4, memory_groups=2)),
    ("rlt", dict(feedback_interval=2, window=1, encoder_layers=2, tie_encoder_decoder=True)),
    ("rlt", dict(decoder_layers=0)),  # 8+0-style split: merge only
    ("rlt0", dict()),
]


@DTYPES
@pytest.mark.parametrize("arch,overrides", CASES, ids=lambda v: str(v))
def test_forward_and_gradients_match_reference(arch, overrides, dtype):
    model = tiny(arch, dtype, **overrides)
    x = torch.randint(0, 277, (2, 11))
    weights = torch.randn(2, 11, 277, dtype=dtype)
    out = model(x)
    ref = reference_logits(model, x)
    assert_equivalent(out, ref, "logits")
    params = [p for p in model.parameters()]
    grads = torch.autograd.grad((out * weights).sum(), params)
    ref_grads = torch.autograd.grad((ref * weights).sum(), params)
    for (name, _), g, r in zip(model.named_parameters(), grads, ref_grads):
        assert_equivalent(g, r, name)
    if model.merge is not None:  # full BPTT reaches s* through every chunk
        assert dict(zip([n for n, _ in model.named_parameters()], grads))["merge.initial_state"].abs().max() > 0


def decode_in_pieces(model, x, pieces):
    state = model.init_state(x.shape[0])
    outs, start = [], 0
    for n in pieces:
        outs.append(model.decode(x[:, start:start + n], state))
        start += n
    assert start == x.shape[1]
    return torch.cat(outs, 1), state


@pytest.mark.parametrize("arch,overrides", [("rlt", dict(feedback_interval=1)), ("rlt", dict(feedback_interval=3)),
                                            ("rlt", dict(feedback_interval=4)),
                                            ("rlt", dict(feedback_interval=3, decoder_layers=0)), ("rlt0", dict())],
                         ids=lambda v: str(v))
@DTYPES
def test_tokenwise_chunkwise_and_full_agree(arch, overrides, dtype):
    model = tiny(arch, dtype, **overrides)
    x = torch.randint(0, 277, (2, 17))
    with torch.no_grad():
        full = model(x)
        for pieces in ([1] * 17, [6, 1, 1, 9], [2, 5, 3, 7], [4, 4, 4, 5], [17], [5, 12]):
            out, _ = decode_in_pieces(model, x, pieces)
            assert_equivalent(out, full, str(pieces))


@pytest.mark.parametrize("interval", [2, 4])
def test_shared_drivers_hold_for_chunked_feedback(interval):
    # the registry sweep runs the registered tiny config (B = 1); RLT-2 gets the same drivers here. The causality
    # cut (position 9) falls inside a chunk for both B, so perturbed positions share the chunk's register.
    lm_drivers.check_causality("rlt", feedback_interval=interval)
    lm_drivers.check_incremental("rlt", feedback_interval=interval)
    lm_drivers.check_incremental_fp32("rlt", feedback_interval=interval)


@DTYPES
def test_six_token_prompt_keeps_the_boundary_state(dtype):
    # Appendix I.3: B = 4, prompt of six tokens; tokens 5-8 (positions 4-7) all merge h_1 = y_4
    model = tiny(dtype=dtype, feedback_interval=4)
    x = torch.randint(0, 277, (2, 12))
    with torch.no_grad():
        full = model(x)
        after_four = model.init_state(2)
        model.decode(x[:, :4], after_four)
        state = model.init_state(2)
        prompt = model.decode(x[:, :6], state)
        assert_equivalent(state.feedback, after_four.feedback, "register")  # y_6 did not replace it
        steps = [model.decode(x[:, t:t + 1], state) for t in range(6, 12)]
    assert_equivalent(torch.cat([prompt, *steps], 1), full, "logits")


@DTYPES
def test_state_is_invariant_to_the_prompt_response_split(dtype):
    # Proposition B.1: every split of the same history leaves the same state
    model = tiny(dtype=dtype, feedback_interval=3)
    x = torch.randint(0, 277, (2, 14))
    with torch.no_grad():
        states = [decode_in_pieces(model, x, [split] + [1] * (14 - split))[1] for split in (1, 5, 6, 14)]
    reference, _ = model.state_to_tensors(states[0])
    for state in states[1:]:
        tensors, meta = model.state_to_tensors(state)
        assert meta["position"] == 14
        assert tensors.keys() == reference.keys()
        for name in reference:
            assert_equivalent(tensors[name], reference[name], name)


@DTYPES
def test_saved_state_continues_like_uninterrupted_decoding(tmp_path, dtype):
    model = tiny(dtype=dtype, feedback_interval=4)
    x = torch.randint(0, 277, (2, 15))
    with torch.no_grad():
        full, _ = decode_in_pieces(model, x, [7, 8])
        state = model.init_state(2)
        model.decode(x[:, :7], state)
        tensors, meta = model.state_to_tensors(state)
        save_file(tensors, tmp_path / "state.safetensors", metadata={"rlt": json.dumps(meta)})
        restored = model.state_from_tensors(load_file(tmp_path / "state.safetensors"), meta)
        assert_equivalent(model.decode(x[:, 7:], restored), full[:, 7:], "continuation")
    for field, value in (("window", 4), ("feedback_interval", 2), ("dim", 16), ("norm_eps", 1e-5),
                         ("context_length", 6)):  # the state holds 7 positions
        other = tiny(dtype=dtype, **{"feedback_interval": 4, field: value})
        with pytest.raises(ValueError, match=field):
            other.state_from_tensors(tensors, meta)
    with pytest.raises(ValueError, match="arch"):
        tiny("rlt0", dtype).state_from_tensors(tensors, meta)


def test_a_state_saved_with_short_windows_still_loads():
    """States saved before the windows became fixed W-1-slot buffers hold only the positions seen so far; the
    missing slots lie before position 0 and must come back as masked padding, not shift the window."""
    model = tiny(window=5)  # buffers of 4 slots; after 2 positions the old format kept 2
    x = torch.randint(0, 277, (2, 9))
    with torch.no_grad():
        full = model(x)
        state = model.init_state(2)
        model.decode(x[:, :2], state)
        tensors, meta = model.state_to_tensors(state)
        for name in [n for n in tensors if n.startswith("window.")]:
            assert tensors[name].shape[2] == 4
            tensors[name] = tensors[name][:, :, 2:]  # the old format: the last min(W-1, position) slots
        restored = model.state_from_tensors(tensors, meta)
        assert_equivalent(model.decode(x[:, 2:], restored), full[:, 2:], "continuation")


@pytest.mark.parametrize("arch", ["rlt0", "rlt"])
def test_a_prefilled_window_owns_only_its_own_slots(arch):
    """The window kept after a long prompt must not be a view into the prompt's keys/values: a view would keep
    the whole chunk's storage (W-1+n slots, n = the prompt for RLT-0) alive for as long as the state lives."""
    model = tiny(arch, window=3)
    with torch.no_grad():
        state = model.init_state(2)
        model.decode(torch.randint(0, 277, (2, 20)), state)
    for keys, values in state.windows:
        for kept in (keys, values):
            assert kept.shape[2] == 2  # W-1 slots
            assert kept.untyped_storage().nbytes() == kept.numel() * kept.element_size()


def test_truncated_bptt_keeps_values_and_cuts_gradients():
    torch.manual_seed(0)
    x = torch.cat((torch.randint(0, 100, (2, 6)), torch.randint(100, 277, (2, 6))), 1)  # early ids never recur
    untied = dict(feedback_interval=2, tie_embeddings=False)  # tied, the readout would use every embedding row
    full, cut = tiny(**untied), tiny(**untied, truncate_bptt=6)
    a, b = full(x), cut(x)
    assert (a - b).abs().max() < 1e-12
    late = lambda logits: logits[:, 6:].pow(2).sum()  # noqa: E731
    full_grads = torch.autograd.grad(late(a), [full.merge.initial_state, full.embed.weight])
    cut_grads = torch.autograd.grad(late(b), [cut.merge.initial_state, cut.embed.weight])
    assert full_grads[0].abs().max() > 0 and full_grads[1][:100].abs().max() > 0
    assert cut_grads[0].abs().max() == 0  # s* reaches the late loss only through the detached register
    # early token rows reach the late loss only through the detached encoder/memory/decoder caches
    early_rows = torch.zeros(277, dtype=torch.bool)
    early_rows[x[:, :6].unique()] = True
    assert cut_grads[1][early_rows].abs().max() == 0


def test_activation_checkpointing_gives_the_same_gradients():
    x = torch.randint(0, 277, (2, 9))
    grads = []
    for flag in (False, True):
        model = tiny(feedback_interval=2, checkpoint_activations=flag).train()
        model(x).pow(2).mean().backward()
        grads.append([p.grad for p in model.parameters()])
    for g, h in zip(*grads):
        assert (g - h).abs().max() < 1e-12


def full_size_count(arch, **overrides):
    with torch.device("meta"):
        return build_model(get_arch(arch).config(**overrides)).parameter_counts()


def test_parameter_counts_at_the_paper_shape():
    d, f, head_dim = 512, 1365, 128
    block = 4 * d * d + 3 * d * f + 2 * d + 2 * head_dim  # attention, SwiGLU, two pre-norms, QK-norm gains
    decoder_layer = block + 2 * d * d + d + head_dim  # + cross-attention query/output, its pre-norm, q-norm gain
    memory = 2 * d * d + d + head_dim  # W_K, W_V, RMSNorm_E, key norm gain
    merge = 3 * d * d + 3 * d  # W_g (2d -> d) + b_g, W_s, RMSNorm_s, s*
    embed_and_readout = 277 * d + d
    assert merge == 787_968
    baseline = full_size_count("rlt_baseline")["total"]
    assert baseline == 8 * block + embed_and_readout == 25_314_304  # SPEC's 25,312,256 omits the 8 * 256 QK gains
    rlt0 = full_size_count("rlt0", encoder_layers=4, decoder_layers=4)
    assert rlt0["total"] == 4 * block + 4 * decoder_layer + memory + embed_and_readout == 27_938_944  # paper J.3
    for encoder in range(4, 9):
        split = dict(encoder_layers=encoder, decoder_layers=8 - encoder)
        with_feedback, without = full_size_count("rlt", **split), full_size_count("rlt0", **split)
        assert with_feedback["total"] - without["total"] == 787_968
        assert with_feedback["merge"] == 787_968
    eight_zero = full_size_count("rlt", encoder_layers=8, decoder_layers=0)
    assert eight_zero["total"] == baseline + merge == 26_102_272 and eight_zero["memory"] == 0
    tied = full_size_count("rlt", tie_encoder_decoder=True)  # decoder keeps its norms and cross-attention only
    assert tied["decoder"] == 4 * (decoder_layer - block + 2 * d + 2 * head_dim)


@pytest.mark.parametrize("field,value", [("encoder_layers", 0), ("window", 0), ("feedback_interval", 0),
                                         ("decoder_layers", -1), ("memory_groups", 3), ("truncate_bptt", 0)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"model.{field}"):
        get_arch("rlt").config(**{**TINY, field: value})


def test_rlt0_refuses_feedback():
    with pytest.raises(ConfigError, match="model.feedback"):
        get_arch("rlt0").config(feedback=True)
