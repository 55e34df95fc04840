"""mixture_of_recursions (Bae et al. 2025, arXiv 2507.10524; looped/models/mor.py): the paper's parameter counts,
token-choice routing against a reference written from Eq. 2.2, the recursion-wise cache rule, the test-time depth
rule, the objective through the trainer's path, the ledger's balanced figures (the paper's Table 2), the decode
state saved and restored, and one update of the CPU recipe. The shared drivers (tests/lm_drivers.py,
test_ledger.py, test_lens.py) cover causality, incremental decoding at depths 1, 2, 3, 5, the routed ledger and the
trace through the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from looped.models import build_model, get_arch
from looped.models.ledger import model_ledger
from looped.models.mor import effective_depth
from looped.train import Trainer, load_run_config
from looped.train.tasks import LMTrainTask

import lm_drivers

REPO = Path(__file__).resolve().parents[1]
ARCH = "mixture_of_recursions"


def tiny(**overrides):
    return lm_drivers.tiny_model(ARCH, **overrides)


def tokens(model, length: int = 24, batch: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


def routing(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(H^1, chosen depth i_t (1-based), g^{i_t}) from the first layer and the router's weights directly."""
    with torch.no_grad():
        _, h1 = model.front(x, None)
        scores = (h1 @ model.router.weight.T).softmax(-1)  # g_t = softmax(theta^T H^1_t)
        depth = scores.argmax(-1) + 1
        return h1, depth, scores.gather(-1, (depth - 1)[..., None])


# --- the paper's configurations ----------------------------------------------------------------------------
def layer_parameters(d: int, heads: int, kv_heads: int, ffn: int) -> int:
    """One Llama layer: q and o (d x d), k and v (d x kv width), SwiGLU (3 d x ffn), two RMSNorm gains."""
    kv_width = kv_heads * d // heads
    return 2 * d * d + 2 * d * kv_width + 3 * d * ffn + 2 * d


# (base, d, heads, kv heads, SwiGLU, shared layers K, N_r, the paper's non-embedding count as it prints it): Table
# 6's bases with Table 9's 1 + K + 1 layers at N_r = 3, and Table 3's 360M-base rows at N_r = 2, 3, 4
PAPER_ROWS = [("135M", 576, 9, 3, 1536, 10, 3, "42M"), ("360M", 960, 15, 5, 2560, 10, 3, "118M"),
              ("360M", 960, 15, 5, 2560, 15, 2, "167M"), ("360M", 960, 15, 5, 2560, 8, 4, "98M"),
              ("730M", 1536, 24, 8, 4096, 8, 3, "252M"), ("1.7B", 2048, 32, 32, 8192, 8, 3, "0.67B")]


def as_printed(count: int, like: str) -> str:
    """`count` in the paper's style: whole millions, or billions to two decimals."""
    return f"{count / 1e9:.2f}B" if like.endswith("B") else f"{round(count / 1e6)}M"


@pytest.mark.parametrize("base, d, heads, kv, ffn, shared, experts, paper", PAPER_ROWS,
                         ids=[f"{r[0]}-Nr{r[6]}" for r in PAPER_ROWS])
def test_the_papers_models_have_the_papers_non_embedding_parameter_counts(base, d, heads, kv, ffn, shared, experts,
                                                                          paper):
    config = get_arch(ARCH).config(vocab_size=49152, dim=d, heads=heads, kv_heads=kv, ffn_dim=ffn,
                                   shared_layers=shared, recursions=experts, context_length=2048)
    with torch.device("meta"):
        counts = build_model(config).parameter_counts()
    layer = layer_parameters(d, heads, kv, ffn)
    assert counts["first"] == counts["last"] == layer and counts["block"] == shared * layer
    assert counts["router"] == d * experts and counts["embed"] == 49152 * d  # tied: the head adds nothing
    non_embedding = counts["total"] - counts["embed"]
    assert non_embedding == (2 + shared) * layer + d + d * experts  # + the final RMSNorm and the router
    assert as_printed(non_embedding, paper) == paper, base


def test_the_smallest_mor_is_42_million_non_embedding_parameters():
    """Table 9's 135M-based MoR (1 + 10 + 1 layers, N_r = 3): the paper's "42M"; ours exactly 42,483,456, and
    70,795,008 with the tied embedding (vocabulary 49,152)."""
    config = get_arch(ARCH).config(vocab_size=49152, dim=576, heads=9, kv_heads=3, ffn_dim=1536, shared_layers=10,
                                   recursions=3, context_length=2048)
    with torch.device("meta"):
        counts = build_model(config).parameter_counts()
    assert counts["total"] - counts["embed"] == 42_483_456
    assert counts["total"] == 70_795_008


def test_bad_configs_are_refused_in_one_line():
    for overrides, key in ((dict(kv_heads=3), "model.kv_heads"), (dict(dim=36, heads=4), "even head width"),
                           (dict(recursions=0), "model.recursions"), (dict(balance_weight=-1.0), "balance_weight")):
        with pytest.raises(ValueError, match=key) as err:
            get_arch(ARCH).tiny_config(**overrides)
        assert "\n" not in str(err.value)


# --- token-choice routing and the recursion-wise rule ---------------------------------------------------------
def reference_forward(model, x: torch.Tensor, rounds: int, keys: str = "active") -> torch.Tensor:
    """Eq. 2.2 with recursion-wise caching, row by row without padding: recursion r runs the shared block on the
    row's active tokens alone (depth >= r), as one sequence at their own positions; the exit adds g^i f(H^i).
    keys="all" is the rule broken: the block runs on the whole row and the active tokens keep their results."""
    h1, depth, gate = routing(model, x)
    depth = effective_depth(depth, model.config.recursions, rounds)
    s = h1.clone()
    with torch.no_grad():
        for r in range(1, rounds + 1):
            for b in range(x.shape[0]):
                active = torch.nonzero(depth[b] >= r).flatten()
                if not active.numel():
                    continue
                if keys == "all":
                    row = model.recursion_block(s[b][None], torch.arange(x.shape[1])[None],
                                                torch.ones(1, x.shape[1], dtype=torch.bool))
                    s[b, active] = row[0, active]
                else:
                    everyone = torch.ones(1, active.numel(), dtype=torch.bool)
                    s[b, active] = model.recursion_block(s[b, active][None], active[None], everyone)[0]
        positions = torch.arange(x.shape[1]).expand(x.shape)
        return model.readout(h1 + gate * s, positions, None)


@pytest.mark.parametrize("rounds", [1, 2, 3, 5])
def test_the_forward_is_eq_2_2_with_attention_among_the_active_tokens(rounds):
    model = tiny()
    x = tokens(model)
    _, depth, _ = routing(model, x)
    assert set(depth.unique().tolist()) == {1, 2, 3}, "the check needs every depth"
    with torch.no_grad():
        forward = model(x, rounds=rounds)
        torch.testing.assert_close(forward, reference_forward(model, x, rounds), rtol=0, atol=1e-12)
        if rounds > 1:  # the rule is not vacuous here: exited tokens as keys would give other logits
            assert (forward - reference_forward(model, x, rounds, keys="all")).abs().max() > 1e-6


def test_f_is_the_layer_map_with_its_residuals_so_the_exit_adds_g_times_the_whole_state():
    """With every shared layer's output projections zero, each layer is the identity h -> h, so f(H) = H and the
    exit is H^1 + g H^1 = (1 + g) H^1 (reading f as the residual branch alone would leave H^1)."""
    model = tiny()
    with torch.no_grad():
        for layer in model.block:
            layer.attn.out.weight.zero_()
            layer.mlp.down.weight.zero_()
        x = tokens(model)
        h1, _, gate = routing(model, x)
        for entry in model.trace(x):
            torch.testing.assert_close(entry.state, (1 + gate) * h1, rtol=0, atol=1e-12)


def test_initialisation_and_defaults_follow_the_smollm_base():
    model = build_model(get_arch(ARCH).config(dim=256, heads=4, kv_heads=2, ffn_dim=512))
    for weight in (model.embed.weight, model.router.weight, model.block[0].mlp.down.weight):
        assert abs(weight.std().item() / 0.02 - 1) < 0.1
    config = model.config
    assert (config.norm_eps, config.rope_base, config.balance_weight, config.z_weight) == (1e-5, 1e4, 0.1, 1e-3)


def test_a_token_writes_keys_only_at_the_recursions_it_runs():
    """Recursion r's cache holds, row by row, exactly the tokens routed to r or deeper, whether prefilled at once or
    decoded token by token; the first and last layers hold every position."""
    model = tiny()
    x = tokens(model, length=20, batch=2)
    _, depth, _ = routing(model, x)
    with torch.no_grad():
        whole, steps = model.init_state(2), model.init_state(2)
        model.decode(x, whole)
        for i in range(20):
            model.decode(x[:, i:i + 1], steps)
    for state in (whole, steps):
        for b in range(2):
            assert state.first.keys[b].shape[1] == state.last.keys[b].shape[1] == 20
            for r, caches in enumerate(state.recursions, 1):
                assert {cache.keys[b].shape[1] for cache in caches} == {int((depth[b] >= r).sum())}
    for r in range(3):
        for j in range(2):
            for b in range(2):
                torch.testing.assert_close(whole.recursions[r][j].keys[b], steps.recursions[r][j].keys[b],
                                           rtol=0, atol=1e-12)


def test_the_test_time_depth_caps_every_token_and_extends_the_deepest_expert():
    routed = torch.tensor([1, 2, 3])
    for rounds, expected in ((1, [1, 1, 1]), (2, [1, 2, 2]), (3, [1, 2, 3]), (5, [1, 2, 5])):
        assert effective_depth(routed, 3, rounds).tolist() == expected
    model = tiny()  # tokens routed to depth 1 or 2 only: budgets 2, 3 and 5 are the same forward
    x = tokens(model)
    with torch.no_grad():
        model.router.weight[2] = model.router.weight[0]  # expert 3 ties expert 1 and argmax takes the first
        _, depth, _ = routing(model, x)
        assert depth.max() == 2 and depth.min() == 1
        torch.testing.assert_close(model(x, rounds=5), model(x, rounds=2), rtol=0, atol=0)
        assert (model(x, rounds=1) - model(x, rounds=2)).abs().max() > 1e-3


# --- training objective ------------------------------------------------------------------------------------
def test_the_trainers_loss_is_cross_entropy_plus_the_balancing_and_z_losses():
    model = tiny(balance_weight=0.3, z_weight=0.05)
    x = tokens(model, length=13)
    inputs, targets = x[:, :-1], x[:, 1:]
    with torch.no_grad():
        _, h1 = model.front(inputs, None)
        logits = h1 @ model.router.weight.T  # (B, T, N_r)
    scores, choice = logits.softmax(-1), logits.argmax(-1)
    f = torch.stack([3 * (choice == i).double().mean() for i in range(3)])  # f_i = N_r / T sum_t 1(token -> i)
    p = scores.mean((0, 1))  # P_i = 1 / T sum_t g_t^i
    z = torch.logsumexp(logits, -1).square().mean()
    cross_entropy = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    expected = cross_entropy + 0.3 * (f * p).sum() + 0.05 * z
    torch.testing.assert_close(LMTrainTask.loss(model, x), expected.float(), rtol=1e-6, atol=1e-6)


def test_a_sequence_task_adds_the_router_losses_once_to_its_masked_average():
    """Task kind "sequence": the per-example mean over scored targets of the cross-entropy, plus the router losses
    of the whole micro-batch once; unscored targets may be placeholder ids outside the vocabulary."""
    from looped.data.tasks import SequenceBatch
    from looped.train.sequence import SequenceTrainTask
    model = tiny()
    x, targets = tokens(model, length=8, batch=2), tokens(model, length=8, batch=2, seed=1)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, 5:], mask[1, 2:4] = True, True
    batch = SequenceBatch(tokens=x, targets=torch.where(mask, targets, -100), loss_mask=mask,
                          lengths=torch.tensor([8, 8]), difficulty=torch.tensor([1, 1]))
    out = model(x, with_exits=True)
    ce = F.cross_entropy(out.logits.transpose(1, 2), targets, reduction="none")
    expected = (ce[0, 5:].mean() + ce[1, 2:4].mean()) / 2 + model.router_loss(out.router_logits, out.choice)
    torch.testing.assert_close(SequenceTrainTask.loss(model, batch), expected.float(), rtol=1e-6, atol=1e-6)


def test_balanced_routing_minimises_the_balancing_term_at_one():
    model = tiny()
    uniform = torch.zeros(1, 6, 3, dtype=torch.float64)
    assert model.router_loss(uniform, torch.tensor([[0, 1, 2, 0, 1, 2]])).item() == pytest.approx(
        0.1 * 1.0 + 1e-3 * torch.log(torch.tensor(3.0)).item() ** 2)
    one_sided = torch.tensor([[[9.0, 0, 0]] * 6], dtype=torch.float64)
    assert model.router_loss(one_sided, torch.zeros(1, 6, dtype=torch.long)) > 0.1 * 2.9


def test_the_router_learns_through_the_exit_gate_alone():
    """argmax passes no gradient: with both auxiliary losses off, g^i on the exit still trains the router."""
    model = tiny(balance_weight=0.0, z_weight=0.0)
    LMTrainTask.loss(model, tokens(model, length=13)).backward()
    assert model.router.weight.grad.abs().sum() > 0


# --- ledger: the paper's Table 2 under balanced routing -----------------------------------------------------
def test_balanced_ledger_has_the_papers_cache_and_attention_ratios():
    model = tiny()
    c, context = model.config, 30
    ledger = model_ledger(model, context, 3)
    kv = 2 * c.kv_heads * c.dim // c.heads * 8  # float64 bytes of one layer's key + value per position
    every_token = 3 * c.shared_layers * kv  # caching every token at every recursion
    assert ledger.state_per_token["kv cache (recursions)"] == pytest.approx(every_token * (3 + 1) / (2 * 3))
    full = ledger.rounds[0]["attention scores+values"]
    for r, share in ((1, 2 / 3), (2, 1 / 3)):  # recursion r runs on k = share x N_ctx tokens: (k / N_ctx)^2
        assert ledger.rounds[r]["attention scores+values"] == pytest.approx(full * share ** 2)
        assert ledger.rounds[r]["mlp"] == pytest.approx(ledger.rounds[0]["mlp"] * share)


# --- decode state: save and restore --------------------------------------------------------------------------
def test_a_saved_state_continues_like_uninterrupted_decoding(tmp_path):
    from safetensors.torch import load_file, save_file
    model = tiny()
    x = tokens(model, length=16, batch=2)
    with torch.no_grad():
        full = model(x, rounds=5)
        state = model.init_state(2, rounds=5)
        model.decode(x[:, :9], state)
        tensors, meta = model.state_to_tensors(state)
        save_file(tensors, tmp_path / "state.safetensors")
        (tmp_path / "meta.json").write_text(json.dumps(meta))
        restored = model.state_from_tensors(load_file(tmp_path / "state.safetensors"),
                                            json.loads((tmp_path / "meta.json").read_text()))
        torch.testing.assert_close(model.decode(x[:, 9:], restored), full[:, 9:], rtol=0, atol=1e-10)
    for name, value in (("kv_heads", 4), ("recursions", 2), ("shared_layers", 1), ("context_length", 8)):
        with pytest.raises(ValueError, match=name):
            tiny(**{name: value}).state_from_tensors(tensors, meta)


# --- the CPU recipe -----------------------------------------------------------------------------------------
def test_one_update_of_the_cpu_recipe_trains_the_router(tmp_path):
    config = load_run_config(REPO / "configs/examples/mor_kjv.yaml",
                             overrides=["train.max_steps=1", "train.eval_every=0", "train.batch_size=2",
                                        "train.threads=1", "model.context_length=32", "data.block_size=33"])
    assert config.model.arch == ARCH and config.model.recursions == 3
    torch.manual_seed(config.train.seed)
    initial = build_model(config.model).router.weight.detach().clone()
    trainer = Trainer(config, tmp_path, progress=False, log=lambda m: None)
    trainer.run()
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert len(losses) == 1 and 5.0 < losses[0] < 6.5  # about log(257) = 5.55 at initialisation, plus ~0.1
    assert not torch.equal(trainer.model.router.weight.detach(), initial)
