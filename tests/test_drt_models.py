"""Depth-recurrent reasoning core (seed 002) and its baselines: SPEC §2 sizes, equations and properties."""

import math

import pytest
import torch

from looped.config import ConfigError
from looped.data.tasks import ReasoningBatch, get_task, rng_for
from looped.models import build_model, get_arch
from looped.models.reasoning_baselines import MeanAggregationLayer, in_neighbour_mean
from looped.models.reasoning import attention_mask, reasoning_loss

GRAPH_LENGTH = 20  # node slots of the graph task


def tiny(arch: str, input_kind: str = "tokens", **overrides):
    """A small model in float64 eval mode (no dropout); graph: the paper's graph settings at tiny width."""
    spec = get_arch(arch)
    if input_kind == "graph":
        config = spec.config_cls.for_task("graph", **{**spec.test_overrides, **overrides})
    else:
        config = spec.tiny_config(**overrides)
    return build_model(config).double().eval()


def graph_batch(edges: list[list[tuple[int, int]]], queries: list[tuple[int, int]], nodes: int = 12,
                tokens: torch.Tensor | None = None) -> ReasoningBatch:
    """Rows of `nodes`-node graphs in the task's layout: node i is token i+1 at position i, PAD after."""
    n = len(edges)
    if tokens is None:
        tokens = torch.zeros(n, GRAPH_LENGTH, dtype=torch.int64)
        tokens[:, :nodes] = torch.arange(1, nodes + 1)
    adjacency = torch.eye(GRAPH_LENGTH, dtype=torch.bool).repeat(n, 1, 1)
    for row, row_edges in enumerate(edges):
        for u, v in row_edges:
            adjacency[row, v, u] = True  # v attends to u for the edge u -> v
    return ReasoningBatch(tokens=tokens, labels=torch.ones(n), padding=tokens == 0,
                          difficulty=torch.ones(n, dtype=torch.int64),
                          extras={"adjacency": adjacency, "query": torch.tensor(queries)})


def chain(nodes: int) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(nodes - 1)]


def sequence_batch(lengths: list[int], max_length: int = 24, vocab: int = 9) -> ReasoningBatch:
    """[CLS] (id 1) + random symbols (ids 2..vocab-1), PAD (0) after each row's length."""
    tokens = torch.zeros(len(lengths), max_length, dtype=torch.int64)
    for row, length in enumerate(lengths):
        tokens[row, 0] = 1
        tokens[row, 1:length] = torch.randint(2, vocab, (length - 1,))
    return ReasoningBatch(tokens=tokens, labels=(torch.arange(len(lengths)) % 2).double(), padding=tokens == 0,
                          difficulty=torch.ones(len(lengths), dtype=torch.int64))


# ============================================================================ sizes


@pytest.mark.parametrize("task, expected", [("graph", 205_441), ("boolean", 998_145), ("family", 1_007_617)])
def test_core_parameter_counts_match_spec(task, expected):
    with torch.device("meta"):
        counts = build_model(get_arch("drt").config_cls.for_task(task)).parameter_counts()
    assert counts["total"] == expected
    assert sum(v for k, v in counts.items() if k != "total") == expected


def test_fixed_transformer_sizes_match_the_papers_rounded_sizes():
    """SPEC §2 reports 0.8M / 6.4M / 4.0M: 6, 8 and 5 layers."""
    for task, millions in [("graph", 0.8), ("boolean", 6.4), ("family", 4.0)]:
        with torch.device("meta"):
            total = build_model(get_arch("fixed_transformer").config_cls.for_task(task)).parameter_counts()["total"]
        assert round(total / 1e6, 1) == millions


# ============================================================================ the core


def test_gate_bias_starts_at_minus_two_and_keeps_most_of_the_state():
    model = tiny("drt", "graph")
    assert torch.all(model.gate.bias == -2.0)
    batch = graph_batch([chain(6)], [(0, 5)])
    _, trace = model(batch, steps=3, return_trace=True)
    means = trace.gate_means
    assert means.shape == (3,)
    assert torch.all((means > 0.05) & (means < 0.25))  # sigmoid(-2) = 0.119 plus W_z noise at init
    torch.nn.init.zeros_(model.gate.weight)
    _, trace = model(batch, steps=3, return_trace=True)
    torch.testing.assert_close(trace.gate_means, torch.full((3,), 1 / (1 + math.exp(2)), dtype=torch.float64))


def test_steps_are_a_call_argument():
    model = tiny("drt", "graph", depth_rows=20)
    batch = graph_batch([chain(8), chain(5)], [(0, 7), (0, 4)])
    finals = {}
    for steps in (1, 4, 20):
        every, trace = model(batch, steps=steps, return_all=True, return_trace=True)
        assert every.shape == (steps, 2)
        assert trace.gate_means.shape == (steps,)
        finals[steps] = model(batch, steps=steps)
        torch.testing.assert_close(every[-1], finals[steps])  # return_all's final row is the plain forward
    assert not torch.allclose(finals[1], finals[4]) and not torch.allclose(finals[4], finals[20])


def test_beyond_table_error_is_one_line():
    model = tiny("drt", "graph")  # depth_rows 6
    batch = graph_batch([chain(4)], [(0, 3)])
    model(batch, steps=6)
    with pytest.raises(ValueError, match="depth_rows 6") as err:
        model(batch, steps=7)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        model(batch, steps=0)


def test_beyond_table_clamp_reuses_the_last_row():
    clamped = tiny("drt", "tokens", beyond_table="clamp")  # depth_rows 6
    longer = tiny("drt", "tokens", depth_rows=8)
    state = clamped.state_dict()
    table = state.pop("depth_embedding.weight")
    longer.load_state_dict({**state, "depth_embedding.weight": torch.cat((table, table[-1:], table[-1:]))})
    batch = sequence_batch([10, 24, 7])
    torch.testing.assert_close(clamped(batch, steps=8, return_all=True), longer(batch, steps=8, return_all=True))


@pytest.mark.parametrize("arch", ["drt", "drt_tied"])
def test_information_moves_exactly_one_hop_per_step(arch):
    """On the chain 0 -> 1 -> ... -> 9 the target's state after k steps depends on nodes <= k hops back only."""
    model = tiny(arch, "graph", depth_rows=8)
    nodes, target = 10, 9
    batch = graph_batch([chain(nodes)], [(0, target)], nodes=nodes)
    mask = attention_mask("graph", batch)
    for k in range(1, 7):
        start = model.perception(batch).detach().requires_grad_()
        h = start
        for t in range(k):
            h, _ = model.step(h, t, mask)
        (grad,) = torch.autograd.grad(h[0, target].sum(), start)
        reach = grad[0].abs().sum(dim=-1)  # (L,) influence of each node's initial state
        assert torch.all(reach[target - k:target + 1] > 0), (k, reach)
        assert torch.all(reach[:target - k] == 0), (k, reach)  # k+1 hops and further: exactly nothing
        assert torch.all(reach[target + 1:] == 0)  # padding slots


def test_padding_never_reaches_real_positions():
    model = tiny("drt", "tokens")
    batch = sequence_batch([10, 24, 7])
    reference = model(batch, steps=3, return_all=True)
    noisy = batch.tokens.clone()
    noisy[batch.padding] = torch.randint(1, 9, (int(batch.padding.sum()),))  # new ids, still flagged PAD
    changed = ReasoningBatch(noisy, batch.labels, batch.padding, batch.difficulty)
    torch.testing.assert_close(model(changed, steps=3, return_all=True), reference, rtol=0, atol=0)
    rows = torch.tensor([0, 2])  # the two short rows alone, trimmed to 10 columns
    short = ReasoningBatch(batch.tokens[rows, :10], batch.labels[rows], batch.padding[rows, :10],
                           batch.difficulty[rows])
    torch.testing.assert_close(model(short, steps=3, return_all=True), reference[:, [0, 2]])


def test_tied_ablation_is_the_plain_block_update():
    model = tiny("drt_tied", "tokens")
    assert model.gate is None and not any("scale" in name for name, _ in model.named_parameters())
    batch = sequence_batch([12, 24])
    h = model.perception(batch)
    mask = attention_mask("tokens", batch)
    for t in range(5):
        h = model.block(h + model.depth_embedding.weight[t], mask)  # H <- block(H + E[t])
    logits, trace = model(batch, steps=5, return_trace=True)
    torch.testing.assert_close(logits, model.readout(h, batch))
    assert trace.gate_means is None


def test_gated_step_follows_the_equations():
    model = tiny("drt", "tokens")
    batch = sequence_batch([9, 24])
    h = model.perception(batch)
    mask = attention_mask("tokens", batch)
    new, z = model.step(h, 2, mask)
    h_block = model.block(h + model.depth_embedding.weight[2], mask)
    gate = torch.sigmoid(torch.cat((h_block, h), dim=-1) @ model.gate.weight.T + model.gate.bias)
    torch.testing.assert_close(z, gate)
    torch.testing.assert_close(new, gate * h_block + (1 - gate) * h)


def test_reasoning_loss_mixes_final_and_mean_step_losses():
    logits = torch.tensor([[0.5, -1.0], [2.0, 0.3], [-0.2, 1.5]])
    labels = torch.tensor([1.0, 0.0])
    bce = [torch.nn.functional.binary_cross_entropy_with_logits(row, labels) for row in logits]
    torch.testing.assert_close(reasoning_loss(logits, labels, 0.0), bce[-1])
    torch.testing.assert_close(reasoning_loss(logits, labels, 0.25), 0.75 * bce[-1] + 0.25 * sum(bce) / 3)
    torch.testing.assert_close(reasoning_loss(logits[-1], labels), bce[-1])


def test_config_errors_name_the_field():
    drt = get_arch("drt")
    with pytest.raises(ConfigError, match="model.steps_range"):
        drt.config(steps_range=[5, 30])
    with pytest.raises(ConfigError, match="model.beyond_table"):
        drt.config(beyond_table="wrap")
    with pytest.raises(ConfigError, match="model.input_kind"):
        get_arch("gnn").config(input_kind="tokens")
    with pytest.raises(ValueError, match="adjacency"):
        tiny("drt", "graph")(ReasoningBatch(torch.ones(1, 20, dtype=torch.int64), torch.ones(1),
                                            torch.zeros(1, 20, dtype=torch.bool), torch.ones(1)), steps=1)


# ============================================================================ baselines


@pytest.mark.parametrize("arch", ["fixed_transformer", "gnn"])
def test_fixed_depth_graph_models_see_one_hop_per_layer(arch):
    """Two layers: the target (node 7 of a chain from source 0) feels node 5, never node 4."""
    model = tiny(arch, "graph")
    assert len(model.blocks if arch == "fixed_transformer" else model.layers) == 2
    base = graph_batch([chain(8)], [(0, 7)], nodes=8)
    reference = model(base)
    for node, moves in [(4, False), (5, True)]:
        tokens = base.tokens.clone()
        tokens[0, node] = 26  # a letter no node uses
        changed = model(graph_batch([chain(8)], [(0, 7)], nodes=8, tokens=tokens))
        assert (changed != reference).item() == moves, node


def test_gnn_averages_over_in_neighbours():
    # edges 0 -> 2, 1 -> 2, 2 -> 0, 3 -> 3 is only the self-loop; node 1 and 3 have no in-neighbours
    adjacency = torch.eye(4, dtype=torch.bool)
    for u, v in [(0, 2), (1, 2), (2, 0)]:
        adjacency[v, u] = True
    h = torch.tensor([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0], [7.0, 8.0]])
    expected = torch.tensor([[5.0, 6.0], [0.0, 0.0], [2.0, -1.0], [0.0, 0.0]])
    torch.testing.assert_close(in_neighbour_mean(h[None], adjacency[None]), expected[None])
    # a mean, not a sum: two in-neighbours with equal states update v exactly like one of them alone
    layer = MeanAggregationLayer(get_arch("gnn").tiny_config(dropout=0.0)).double()
    x = torch.randn(1, 3, 32, dtype=torch.float64)
    x[0, 1] = x[0, 0]
    both = torch.eye(3, dtype=torch.bool)[None].clone()
    both[0, 2, 0] = both[0, 2, 1] = True
    one = torch.eye(3, dtype=torch.bool)[None].clone()
    one[0, 2, 0] = True
    torch.testing.assert_close(layer(x, both)[0, 2], layer(x, one)[0, 2])


def test_act_halts_with_weights_summing_to_one():
    model = tiny("ut_act", "graph")  # max_steps 6
    batch = graph_batch([chain(8), chain(4)], [(0, 7), (1, 3)])
    logits, trace = model(batch, steps=5, return_trace=True)
    stats = trace.ponder
    torch.testing.assert_close(stats.weight_sum, torch.ones_like(stats.weight_sum))
    assert torch.all((stats.steps >= 1) & (stats.steps <= 5))
    assert torch.all((stats.remainders > 0) & (stats.remainders <= 1))
    assert 1 <= stats.mean_steps() <= 5
    with pytest.raises(ValueError, match="return_trace"):
        model.loss(logits, batch.labels)  # the ponder cost comes with the trace of the call, not from the model
    loss = model.loss(logits, batch.labels, trace=trace)
    (grad,) = torch.autograd.grad(loss - reasoning_loss(logits, batch.labels), model.halting.weight)
    assert grad.abs().sum() > 0  # the ponder cost reaches the halting unit through R
    for bias, steps in [(20.0, 1), (-20.0, 5)]:  # p ~ 1 halts at once; p ~ 0 runs the whole budget
        torch.nn.init.constant_(model.halting.bias, bias)
        _, trace = model(batch, steps=5, return_trace=True)
        assert torch.all(trace.ponder.steps == steps)
        torch.testing.assert_close(trace.ponder.weight_sum, torch.ones_like(stats.weight_sum))
    with pytest.raises(ValueError, match="max_steps=6"):
        model(batch, steps=7)


# ============================================================================ training smoke test


def test_graph_core_learns_short_hops():
    """60 updates on fresh 1-2 hop graphs: the loss leaves chance (0.69); about 250 more reach 100 %."""
    torch.manual_seed(0)
    config = get_arch("drt").config_cls.for_task("graph", dim=64, heads=4, ffn_dim=128, depth_rows=4,
                                                 steps_range=[2, 3], dropout=0.0)
    model = build_model(config)
    data = get_task("graph").sample_mixed(rng_for(0), 60 * 64, [1, 2])
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=1e-2)
    losses = []
    for step in range(60):
        rows = slice(64 * step, 64 * (step + 1))
        batch = ReasoningBatch(data.tokens[rows], data.labels[rows], data.padding[rows], data.difficulty[rows],
                               {name: value[rows] for name, value in data.extras.items()})
        lo, hi = model.config.steps_range  # T ~ U{lo..hi} per batch, as the reasoning trainer draws it
        loss = model.loss(model(batch, steps=int(torch.randint(lo, hi + 1, (1,)))), batch.labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, last = sum(losses[:15]) / 15, sum(losses[-15:]) / 15
    assert last < first - 0.04, (first, last)
