"""Streaming early exit (looped/models/loop_stream.py): rows of a batch at different rounds of different tokens share
each block call, and still every row gets what it gets decoded alone, one token per `decode` call, under the
dense rule of before (tests/test_loop_exit.py has the oracle)."""

import pytest
import torch

from looped.nn import MultiHeadAttention, stacked_caches

from lm_drivers import tiny_model
from test_loop_exit import (LOOPED, PREFILL, ROUNDS, check_each_row, close, decode_all, dense_rule,
                            varied_threshold)

LENGTH = 20


def teacher(tokens):
    """next_token that feeds each row its own text (the prediction is ignored)."""
    return lambda rows, index, logits: tokens[rows, PREFILL + index]


def streamed(model, tokens, threshold):
    """Prefill, then stream the rest: (logits (b, LENGTH - PREFILL, vocab), rounds used, state)."""
    state = model.init_state(tokens.shape[0], rounds=ROUNDS, exit_threshold=threshold)
    model.decode(tokens[:, :PREFILL], state)
    logits, used = model.stream_decode(state, tokens[:, PREFILL], tokens.shape[1] - PREFILL, teacher(tokens))
    return logits, used, state


def stepped(model, tokens, threshold, *, dense=False):
    """The same with one call per token (decode_all: `decode` in lockstep, or the dense rule of before): the
    logits of the tokens after the prefill, and the state."""
    logits, _, state = decode_all(model, tokens, threshold, dense=dense_rule if dense else None)
    return logits[:, PREFILL:], state


@pytest.mark.parametrize("arch", LOOPED)
def test_streaming_a_batch_gives_each_row_its_decode_and_its_caches(arch):
    model = tiny_model(arch)
    x = torch.randint(0, model.config.vocab_size, (4, LENGTH), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        threshold = varied_threshold(model, x)
        logits, used, state = streamed(model, x, threshold)
        dense_logits, dense_state = stepped(model, x, threshold, dense=True)
        assert used.float().mean(1).unique().numel() > 1, "rows should run different numbers of rounds"
        close(logits, dense_logits)
        _, lock_state = stepped(model, x, threshold)
        assert torch.equal(used, torch.cat(lock_state.rounds_used[1:], 1))
        assert state.position == LENGTH and all(cache.length == LENGTH for cache in state.caches)
        check_each_row(x, logits, used, state, dense_state, lambda rows: streamed(model, rows, threshold))
        # the state goes on as decode's would: the next token sees the same caches
        close(model.decode(x[:, -1:], state), model.decode(x[:, -1:], lock_state))


def test_a_row_that_exits_early_is_not_held_back_by_a_slow_row():
    """The point of streaming: the block calls number about the slowest row's total rounds, not R per token."""
    model = tiny_model("shared_loop")
    x = torch.randint(0, model.config.vocab_size, (4, LENGTH), generator=torch.Generator().manual_seed(7))
    calls = []
    hook = model.block.mlp.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    with torch.no_grad():
        threshold = varied_threshold(model, x)
        state = model.init_state(4, rounds=ROUNDS, exit_threshold=threshold)
        model.decode(x[:, :PREFILL], state)
        calls.clear()
        _, used = model.stream_decode(state, x[:, PREFILL], LENGTH - PREFILL, teacher(x))
    hook.remove()
    assert len(calls) == int(used.sum(1).max()) < (LENGTH - PREFILL) * ROUNDS
    assert sum(calls) == int(used.sum())  # every call runs each live row once: no row idles in a call


def test_sampling_from_the_stream_feeds_back_the_rows_own_predictions():
    """next_token sees each row's logits: greedy streaming equals greedy decoding token by token."""
    model = tiny_model("anchored_loop")
    prompt = torch.randint(0, model.config.vocab_size, (3, PREFILL), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        threshold = varied_threshold(model, torch.cat((prompt, prompt), 1))
        state = model.init_state(3, rounds=ROUNDS, exit_threshold=threshold)
        first = model.decode(prompt, state)[:, -1].argmax(-1)
        logits, _ = model.stream_decode(state, first, 10, lambda rows, index, out: out.argmax(-1))
        lock = model.init_state(3, rounds=ROUNDS, exit_threshold=threshold)
        token, expected = model.decode(prompt, lock)[:, -1].argmax(-1), []
        for _ in range(10):
            expected.append(model.decode(token[:, None], lock)[:, 0])
            token = expected[-1].argmax(-1)
    close(logits, torch.stack(expected, 1))


def test_workspace_rows_stream_by_decoding_every_row_each_call():
    model = tiny_model("workspace")
    x = torch.randint(0, model.config.vocab_size, (4, LENGTH), generator=torch.Generator().manual_seed(6))
    calls = []
    hook = model.block.mlp.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    with torch.no_grad():
        threshold = varied_threshold(model, x)
        calls.clear()
        logits, used, _ = streamed(model, x, threshold)
        close(logits, stepped(model, x, threshold, dense=True)[0])
    hook.remove()
    assert len(calls) >= (LENGTH - PREFILL) * 2  # one decode call per token, two rounds at least each


@pytest.mark.parametrize("call, message", [
    (lambda m, s: m.stream_decode(m.init_state(2, rounds=ROUNDS), torch.zeros(2, dtype=torch.long), 3, None),
     "make the state with init_state"),
    (lambda m, s: m.stream_decode(s, torch.zeros(3, dtype=torch.long), 3, None), r"first tokens must be \(2,\)"),
    (lambda m, s: m.stream_decode(s, torch.full((2,), 300), 3, None), "token id 300 out of range"),
    (lambda m, s: m.stream_decode(s, torch.zeros(2, dtype=torch.long), 41, None), "sequence too long"),
    (lambda m, s: m.stream_decode(s, torch.zeros(2, dtype=torch.long), 3, lambda r, i, o: r * 0 - 1),
     r"next_token gave an id outside \[0, 257\)"),
])
def test_bad_stream_input_is_one_line(call, message):
    model = tiny_model("shared_loop")
    with torch.no_grad(), pytest.raises(ValueError, match=message):
        call(model, model.init_state(2, rounds=ROUNDS, exit_threshold=1.0))


def test_stacked_attention_reads_each_querys_own_cache_and_prefix():
    """Per-entry cache, row and position, with RoPE and QK-norm: each query equals the ordinary cached forward of
    its own cache at its own position (a shorter prefix included); a key-only entry writes what that forward
    writes."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, bias=False, rope=True, qk_norm=True).double()
    caches, keys, values = stacked_caches(3, 2, 2, 8, 12, dtype=torch.double)
    prefixes = torch.randn(3, 2, 5, 16, dtype=torch.double)
    for cache, prefix in zip(caches, prefixes):
        attn(prefix, cache=cache)
    keys[:, :, :, 5:], values[:, :, :, 5:] = 0.0, 0.0  # masked slots must be finite (stream_decode zeroes them)
    x = torch.randn(3, 16, dtype=torch.double)

    def alone(entry: int, slot: int, length: int):
        """The ordinary forward of x[entry] for both rows after the first `length` positions of cache `slot`."""
        cache = attn.new_cache(2, 12)
        attn(prefixes[slot, :, :length], cache=cache)
        return attn(x[entry].expand(2, 1, 16), cache=cache)[:, 0], cache

    # entry 0: cache 2, row 0 after 5 positions; entry 1: cache 0, row 1 at position 3 (sees 0..3 only);
    # entry 2: cache 1, row 1, position 5, keys only
    out = attn.attend_stacked(x, 2, keys, values, torch.tensor([2, 0, 1]), torch.tensor([0, 1, 1]),
                              torch.tensor([5, 3, 5]))
    close(out[0], alone(0, 2, 5)[0][0])
    close(out[1], alone(1, 0, 3)[0][1])
    _, reference = alone(2, 1, 5)
    close(keys[1, 1, :, 5], reference.keys[1, :, 5])
    close(values[1, 1, :, 5], reference.values[1, :, 5])


def test_an_exit_state_fills_its_whole_context_with_gradients_on():
    """The stacked store's per-round views must accept writes that carry gradients, up to the last slot (a view
    taken before the store held such a tensor would count as a leaf and refuse them)."""
    model = tiny_model("adaptive_exit")
    x = torch.randint(0, model.config.vocab_size, (2, model.config.context_length))
    logits = model.decode(x, model.init_state(2, rounds=ROUNDS, exit_threshold=0.05))
    assert logits.requires_grad
    with torch.no_grad():
        close(logits.detach(), model.forward_early_exit(x, 0.05, rounds=ROUNDS)[0])
