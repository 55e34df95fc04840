"""`train.compile`: the compiled training forward equals the eager one, has no graph break, and a new depth
(rounds / steps) reuses the compiled graphs.

Inductor's cold compile costs 10-40 s per architecture on a small CPU, so the every-architecture tests are
marked `compile` (excluded from the default suite; CI runs `pytest -m compile` after it). The default suite
keeps one representative with the `aot_eager` backend: the same Dynamo capture and AOT autograd, no codegen.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from looped.data.tasks import ReasoningBatch
from looped.models import arch_names, build_model, get_arch
from looped.models.compile import compile_model
from looped.train.config import load_run_config
from looped.train.trainer import Trainer

from helpers import tiny_run_config, write_text_corpus

LENGTH = 12  # tokens / nodes of the test inputs
REASONING_GRAPH_ONLY = {"gnn"}


# --- inputs and a training loss for each family -----------------------------------------------------
def reasoning_batch(graph: bool, n: int = 3, vocab: int = 9) -> ReasoningBatch:
    """Random rows: a graph (random adjacency with self-loops, a query pair) or [CLS] + symbols with padding."""
    tokens = torch.randint(1, vocab, (n, LENGTH))
    if graph:
        adjacency = (torch.rand(n, LENGTH, LENGTH) < 0.2) | torch.eye(LENGTH, dtype=torch.bool)
        return ReasoningBatch(tokens=tokens, labels=torch.tensor([0.0, 1.0, 1.0]), padding=tokens == 0,
                              difficulty=torch.ones(n, dtype=torch.int64),
                              extras={"adjacency": adjacency, "query": torch.tensor([[0, 5], [1, 2], [3, 9]])})
    tokens[:, 0], tokens[0, 8:] = 1, 0  # [CLS] first; the first row padded after 8 tokens
    return ReasoningBatch(tokens=tokens, labels=torch.tensor([0.0, 1.0, 1.0]), padding=tokens == 0,
                          difficulty=torch.ones(n, dtype=torch.int64))


def tiny_model(name: str):
    """The registry's tiny config in fp32 without dropout (compiled dropout draws other random numbers)."""
    arch = get_arch(name)
    if arch.family == "lm":
        return build_model(arch.tiny_config())
    if name in REASONING_GRAPH_ONLY:
        return build_model(arch.config_cls.for_task("graph", **arch.test_overrides, dropout=0.0))
    return build_model(arch.tiny_config(dropout=0.0))


def training_loss(model, inputs, depth: int | None = None) -> torch.Tensor:
    """The loss the trainer differentiates: next-token cross-entropy (LMs) or the reasoning loss."""
    if isinstance(inputs, ReasoningBatch):
        logits, trace = model(inputs, depth, return_trace=True)
        return model.loss(logits, inputs.labels, trace=trace)
    logits = model(inputs[:, :-1], rounds=depth)
    return F.cross_entropy(logits.flatten(0, 1), inputs[:, 1:].flatten())


def make_inputs(name: str, model):
    if get_arch(name).family == "lm":
        return torch.randint(0, model.config.vocab_size, (2, LENGTH + 1))
    return reasoning_batch(graph=model.config.input_kind == "graph", vocab=model.config.vocab_size)


def loss_and_grads(model, inputs, depth=None):
    model.zero_grad(set_to_none=True)
    loss = training_loss(model, inputs, depth)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def depths(name: str) -> tuple[int, int, int]:
    """A training depth and two other depths the compiled regions must serve without recompiling."""
    arch = get_arch(name)
    if arch.family == "lm":
        return (3, 5, 1) if arch.test_depths else (None, None, None)
    if name == "ut_act":
        return (3, 5, 2)
    return (3, 5, 2) if arch.model_cls.depth_mode != "fixed" else (None, None, None)


def check_compiled_matches_eager(name: str, backend: str) -> None:
    torch.manual_seed(0)
    eager = tiny_model(name)
    compiled = tiny_model(name)
    compiled.load_state_dict(eager.state_dict())
    compile_model(compiled, backend=backend)
    inputs = make_inputs(name, eager)
    train_depth, other, third = depths(name)
    torch._dynamo.reset()
    counters.clear()
    want_loss, want_grads = loss_and_grads(eager, inputs, train_depth)
    got_loss, got_grads = loss_and_grads(compiled, inputs, train_depth)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
    assert got_grads.keys() == want_grads.keys()
    for key in want_grads:
        torch.testing.assert_close(got_grads[key], want_grads[key], rtol=1e-5, atol=1e-5, msg=key)
    if other is None:
        return
    # another depth once (it may add the dynamic-index graph), then a third: nothing new may compile
    loss_and_grads(compiled, inputs, other)
    graphs = counters["stats"]["unique_graphs"]
    want_loss, _ = loss_and_grads(eager, inputs, third)
    got_loss, _ = loss_and_grads(compiled, inputs, third)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == graphs, f"depth {third} recompiled"
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


def test_a_looped_row_compiles_without_graph_breaks_or_recompiles_per_depth():
    """The default suite's representative: Dynamo capture + AOT autograd (no inductor codegen)."""
    check_compiled_matches_eager("conditioned_dense", "aot_eager")


def test_a_model_without_compiled_regions_is_refused():
    class Bare(torch.nn.Module):
        pass

    with pytest.raises(ValueError, match="declares no compiled_methods"):
        compile_model(Bare())


@pytest.mark.compile
@pytest.mark.parametrize("name", arch_names())
def test_every_architecture_compiles_exactly(name):
    check_compiled_matches_eager(name, "inductor")


@pytest.mark.compile
@pytest.mark.parametrize("interval", [1, 4])
def test_rlt_compiles_at_the_bench_shape_and_new_lengths_reuse_the_graphs(interval):
    """At `looped bench rlt`'s shape (window 8), where compiling the growing attention failed; the compiled
    unit is the whole per-chunk decoder step. A second length may compile once more (the memory span and
    chunk size become dynamic); after that a new length (the length curriculum) compiles nothing new."""
    torch.manual_seed(0)
    shape = dict(dim=64, heads=4, ffn_dim=170, encoder_layers=2, decoder_layers=2, window=8, context_length=64,
                 feedback_interval=interval)
    eager = build_model(get_arch("rlt").config(**shape))
    model = build_model(get_arch("rlt").config(**shape))
    model.load_state_dict(eager.state_dict())
    compile_model(model, backend="inductor")
    torch._dynamo.reset()
    counters.clear()
    for length in (12, 21, 34, 30):
        tokens = torch.randint(0, 50, (2, length))
        want_loss, want_grads = loss_and_grads(eager, tokens)
        got_loss, got_grads = loss_and_grads(model, tokens)
        torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
        for key in want_grads:
            torch.testing.assert_close(got_grads[key], want_grads[key], rtol=1e-5, atol=1e-5, msg=key)
        if length == 34:
            graphs = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == graphs
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


@pytest.mark.compile
def test_trainer_with_compile_trains_like_eager(tmp_path):
    corpus = write_text_corpus(tmp_path / "corpus.txt")
    losses = {}
    for flag in (False, True):
        base = tiny_run_config(corpus, train=dict(max_steps=3, compile=flag))
        base["model"] = dict(arch="anchored_loop", dim=32, heads=4, ffn_dim=48, rounds=2)
        config = load_run_config(base=base)
        summary = Trainer(config, tmp_path / f"run_{flag}", progress=False, log=lambda _: None).run()
        losses[flag] = summary["eval"]["loss"]
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
