"""Early exit in a batch (looped/models/loop_exit.py): positions that exited stop computing later rounds, and nothing
a row reads changes.

The oracle is the dense rule the looped rows ran before: every position through every round, exited ones held
frozen by a mask (`dense_rule`, written out from the model's own hooks). The batched path must give the same
logits, rounds used and per-round caches, row by row, as that rule and as the same row run alone."""

import dataclasses

import pytest
import torch

from looped.models.loop_exit import Selection
from looped.nn import KVCache, MultiHeadAttention

from lm_drivers import tiny_model

LOOPED = ["shared_loop", "adaptive_exit", "anchored_loop", "conditioned_dense", "workspace", "workspace_retention"]
ROUNDS, LENGTH, PREFILL = 5, 18, 5


def where_active(active: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """The dense rules' mask: `new` (b, n, ...) at active positions (b, n), `old` (frozen) at exited ones."""
    return torch.where(active.unsqueeze(-1), new, old)


def dense_rule(model, tokens, state, threshold):
    """The single-row rule as loop.py ran it before batching: logits (b, n, vocab), rounds used (b, n). With a
    state it appends to its caches; the caller advances its position."""
    e = model.anchor_embedding(tokens, state.position if state is not None else 0)
    h, exits, aux = e, [], {}
    active = torch.ones(tokens.shape, dtype=torch.bool)
    used = torch.zeros(tokens.shape, dtype=torch.long)
    logits = probs = None
    for r in range(ROUNDS):
        refined = model.block(model.block_input(r, e, h, state, aux), cache=state.caches[r] if state else None)
        h = where_active(active, refined, h)
        exits.append(h)
        used += active.long()
        round_logits = model.head(model.final_norm(model.readout(e, exits)))
        round_probs = round_logits.float().softmax(-1)
        if logits is not None:
            moved = 0.5 * (round_probs - probs).abs().sum(-1)
            round_logits = where_active(active, round_logits, logits)
            round_probs = where_active(active, round_probs, probs)
            active = active & (moved >= threshold)
        logits, probs = round_logits, round_probs
    return logits, used


TV_THRESHOLDS = (0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005)


def varied_threshold(model, tokens, dense=dense_rule, thresholds=TV_THRESHOLDS) -> float:
    """A threshold at which positions exit after different rounds (else a test of skipping proves nothing)."""
    for threshold in thresholds:
        used = dense(model, tokens, None, threshold)[1]
        if len(used.unique()) >= 3 and len(used.float().mean(1).unique()) > 1:
            return threshold
    raise AssertionError("no threshold makes the rows exit after different rounds")


def batch_and_threshold(model, seed: int, dense=dense_rule, thresholds=TV_THRESHOLDS):
    """Four rows of LENGTH random ids and a threshold at which they exit after different rounds."""
    x = torch.randint(0, model.config.vocab_size, (4, LENGTH), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return x, varied_threshold(model, x, dense, thresholds)


def decode_all(model, tokens, threshold, *, dense=None):
    """Prefill PREFILL tokens, then one token per call: (logits (b, LENGTH, vocab), rounds used, state). With
    `dense` (a rule like dense_rule) each call runs that rule on a state made without a threshold instead."""
    state = model.init_state(tokens.shape[0], rounds=ROUNDS, exit_threshold=None if dense else threshold)
    def step(chunk):
        if not dense:
            return model.decode(chunk, state)
        logits = dense(model, chunk, state, threshold)[0]
        state.position += chunk.shape[1]
        return logits

    chunks = [tokens[:, :PREFILL]] + [tokens[:, i:i + 1] for i in range(PREFILL, tokens.shape[1])]
    logits = torch.cat([step(chunk) for chunk in chunks], 1)
    used = None if dense else torch.cat(state.rounds_used, 1)
    return logits, used, state


def row_state(state, row: int) -> list[torch.Tensor]:
    """Everything a later token reads from row `row` of a decode state: the keys and values of every KV cache
    (in lists of any depth: per round, per layer) and every per-row tensor (the workspace sums); not the
    records and parameter caches of `cached_fields`."""
    out = []

    def walk(item):
        if isinstance(item, KVCache):
            out.extend((item.keys[row, :, :item.length], item.values[row, :, :item.length]))
        elif isinstance(item, torch.Tensor):
            out.append(item[row])
        elif isinstance(item, list):
            for part in item:
                walk(part)

    for field in dataclasses.fields(state):
        if field.name not in getattr(state, "cached_fields", ()):
            walk(getattr(state, field.name))
    assert out, "the state holds nothing a later token reads"
    return out


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def check_each_row(tokens, logits, used, state, dense_state, alone) -> None:
    """Every row of a batched exit run has the dense rule's caches, and the logits, rounds used and caches it
    gets decoded alone (`alone(rows)` -> (logits, used, state) of a one-row batch)."""
    for row in range(tokens.shape[0]):
        for mine, dense in zip(row_state(state, row), row_state(dense_state, row), strict=True):
            close(mine, dense)
        alone_logits, alone_used, alone_state = alone(tokens[row:row + 1])
        close(logits[row:row + 1], alone_logits)
        assert torch.equal(used[row:row + 1], alone_used)
        for mine, by_itself in zip(row_state(state, row), row_state(alone_state, 0), strict=True):
            close(mine, by_itself)


@torch.no_grad()
def check_scoring(model, dense=dense_rule, thresholds=TV_THRESHOLDS) -> None:
    """Scoring a batch gives each row the dense rule's logits and rounds used, and those it gets alone."""
    x, threshold = batch_and_threshold(model, 3, dense, thresholds)
    logits, used = model.forward_early_exit(x, threshold, rounds=ROUNDS)
    dense_logits, dense_used = dense(model, x, None, threshold)
    close(logits, dense_logits)
    assert torch.equal(used, dense_used)
    for row in range(4):
        alone, used_alone = model.forward_early_exit(x[row:row + 1], threshold, rounds=ROUNDS)
        close(logits[row:row + 1], alone)
        assert torch.equal(used[row:row + 1], used_alone)


@torch.no_grad()
def check_decoding(model, dense=dense_rule, thresholds=TV_THRESHOLDS) -> None:
    """Decoding a batch (a prefill, then a token per call) leaves each row the dense rule's caches and the logits,
    rounds used and caches it gets alone."""
    x, threshold = batch_and_threshold(model, 4, dense, thresholds)
    logits, used, state = decode_all(model, x, threshold)
    dense_logits, _, dense_state = decode_all(model, x, threshold, dense=dense)
    close(logits, dense_logits)
    assert torch.equal(used, model.forward_early_exit(x, threshold, rounds=ROUNDS)[1])
    assert len(used[:, PREFILL:].unique()) > 1, "decoded tokens should exit after different rounds"
    check_each_row(x, logits, used, state, dense_state, lambda rows: decode_all(model, rows, threshold))


@pytest.mark.parametrize("arch", LOOPED)
def test_scoring_a_batch_gives_each_row_the_dense_rule_and_its_own_alone(arch):
    check_scoring(tiny_model(arch))


@pytest.mark.parametrize("arch", LOOPED)
def test_decoding_a_batch_leaves_each_row_the_logits_and_caches_it_has_alone(arch):
    check_decoding(tiny_model(arch))


@pytest.mark.parametrize("arch", ["shared_loop", "workspace"])
def test_an_exited_position_runs_no_more_of_the_block_than_its_keys(arch):
    """The saving itself: the MLP sees each position once per round it refined (sum of rounds used), not once per
    round of the loop; the dense rule ran every position through all of them."""
    model = tiny_model(arch)
    x, threshold = batch_and_threshold(model, 5)
    seen = []
    hook = model.block.mlp.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[:-1].numel()))
    with torch.no_grad():
        _, used = model.forward_early_exit(x, threshold, rounds=ROUNDS)
        assert sum(seen) == int(used.sum()) < x.numel() * ROUNDS
        seen.clear()
        _, used, _ = decode_all(model, x, threshold)
        assert sum(seen) == int(used.sum()) < x.numel() * ROUNDS
    hook.remove()


def test_selection_lays_out_each_rows_active_positions_padded_to_the_longest_row():
    active = torch.tensor([[False, True, False, True],
                           [False, False, False, False],
                           [True, False, False, False]])
    s = Selection.of(active)
    assert s.rows.tolist() == [0, 2]
    assert s.slots[0].tolist() == [1, 3] and s.slots[1, 0] == 0
    assert s.valid.tolist() == [[True, True], [True, False]]
    assert s.flat.tolist() == [1, 3, 8] == active.view(-1).nonzero().squeeze(1).tolist()
    one = Selection.of(torch.tensor([[True], [False], [True]]))  # decoding: one position per row, no padding
    assert one.rows.tolist() == [0, 2] and one.slots.tolist() == [[0], [0]] and one.valid is None


@pytest.mark.parametrize("new", [1, 4])
def test_attention_at_selected_positions_is_the_full_attention_there(new):
    """With RoPE and QK-norm (the exit-gate and prelude-coda blocks use them): each selected query sees its own
    row's keys up to its own position, rotated at its absolute position, after a cached prefix."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, bias=False, rope=True, qk_norm=True).double()
    prefix, x = torch.randn(3, 5, 16, dtype=torch.double), torch.randn(3, new, 16, dtype=torch.double)
    caches = [attn.new_cache(3, 16), attn.new_cache(3, 16)]
    for cache in caches:
        attn(prefix, cache=cache)
    full = attn(x, cache=caches[0])
    active = torch.rand(3, new, generator=torch.Generator().manual_seed(1)) < 0.6
    active[1] = False
    active[0, -1] = True
    s = Selection.of(active)
    out = attn.attend_selected(x[s.rows[:, None], s.slots], attn.keys_values(x), s.rows, s.slots, caches[1])
    picked = out if s.valid is None else out[s.valid]
    close(picked.reshape(-1, 16), full.reshape(-1, 16)[s.flat])
    close(caches[1].keys[:, :, :5 + new], caches[0].keys[:, :, :5 + new])  # every position reached the cache
    close(caches[1].values[:, :, :5 + new], caches[0].values[:, :, :5 + new])
