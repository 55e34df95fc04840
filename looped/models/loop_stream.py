"""Decoding a batch with per-row early exit where no row waits for another (looped rows of seed 000, loop.py).

The looped block has the same weights in every round, so one block call can serve rows that are in different
rounds of different tokens. Here every call runs the block once on every live row, each at its own round and
position; a row whose token exits starts its next token in the next call instead of idling until the batch's
slowest row has finished its rounds. At fixed depth a batch makes R block calls per token; here it makes about
max over rows of (rounds used, summed over the row's tokens) calls, each on all B rows.

Against running the block on the still-active rows only (loop_exit.py, what `decode` does): that saves the
arithmetic of exited rows but still makes R calls per token whenever one row needs R rounds, and where a matrix
product on 4 rows costs nearly what it costs on 8 (a small batch bound by reading the weights or by launching
kernels, as on a GPU) it saves little time. `looped bench exit` measures both against fixed depth.

The rule, and what a later token reads, are loop.py's: a token that exits after round r keeps its frozen state,
and its keys/values for rounds r+1 .. R-1 are those of its frozen state's block input (`Upkeep`: computed in the
projections of the next call, or at the end, before the row's next token can reach round 1). Each row's logits,
rounds used and caches are those of `decode` one token at a time, and of the row decoded alone
(tests/test_loop_stream.py).

Per-row bookkeeping (`Rows`, B rows): the position, round and anchor e (B, dim) of the token in flight, its
state h (B, dim), its exits so far (B, R, dim; rows that mix exits in their readout), the previous round's
distribution (B, vocab), how many tokens the row has consumed. The caches are the state's stacked store
(R, B, heads, capacity, head_dim), so one indexing op reads each row's own round.

The workspace rows keep per-round running sums that their block input reads and writes: they decode one token
per call for every row (`decode`), with the same results and no streaming.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# next_token(rows (k,), index (k,) of the token each row consumes next, logits (k, vocab) after its last one) -> ids
NextToken = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Rows:
    """What every row of the stream is doing (module docstring); index tensors are (B,)."""

    position: torch.Tensor  # absolute position of the token in flight
    round: torch.Tensor  # the round it runs in the next call
    consumed: torch.Tensor  # tokens finished so far
    live: torch.Tensor  # bool: the row has tokens left
    e: torch.Tensor  # (B, dim) anchor of the token in flight
    h: torch.Tensor  # (B, dim) its state
    exits: torch.Tensor | None  # (B, R, dim) its states after each round so far (readouts that mix exits)
    previous: torch.Tensor  # (B, vocab) float32 distribution after its last round
    logits: torch.Tensor  # (B, steps, vocab) the output of every finished token
    used: torch.Tensor  # (B, steps) rounds each finished token used


@dataclass
class Upkeep:
    """Keys/values still owed for the rounds that the tokens exited in the last call skip (module docstring):
    entries (e, h frozen, the round their block input is for) and the writes (cache slot, row, position, entry).
    They ride along in the next call's projections: the row's next token reads them from round 1 on, a call later
    at the earliest. Where the block input is static an entry serves every skipped round; else one per round."""

    e: torch.Tensor  # (k, dim)
    h: torch.Tensor  # (k, dim)
    round: torch.Tensor  # (k,)
    slot: torch.Tensor  # (W,) the cache (round) of each write
    row: torch.Tensor  # (W,)
    position: torch.Tensor  # (W,)
    source: torch.Tensor  # (W,) its entry

    @classmethod
    def of(cls, model, rounds: int, e, h, rnd, row, position) -> Upkeep:
        """What tokens that exited after rounds rnd (k,) owe: rounds rnd+1 .. R-1 each."""
        owed = rounds - 1 - rnd
        source = torch.repeat_interleave(torch.arange(len(rnd), device=rnd.device), owed)  # (W,)
        first = torch.cumsum(owed, 0) - owed
        slot = rnd[source] + 1 + torch.arange(len(source), device=rnd.device) - first[source]
        if model.static_block_input:  # one entry per token: the same keys/values for all its skipped rounds
            return cls(e, h, rnd + 1, slot, row[source], position[source], source)
        return cls(e[source], h[source], slot, slot, row[source], position[source],
                   torch.arange(len(source), device=rnd.device))


def stream_decode(model, state, first: torch.Tensor, steps: int, next_token: NextToken) -> tuple[torch.Tensor,
                                                                                                  torch.Tensor]:
    """Consume `steps` tokens per row: first (B,), then next_token(...) of each finished token's logits. Returns
    the logits after every consumed token (B, steps, vocab) and the rounds each used (B, steps), as `steps`
    one-token `decode` calls would; afterwards `state` is where those calls leave it."""
    check_stream(model, state, first, steps)
    if model.uses_workspace or steps == 0:
        return lockstep(model, state, first, steps, next_token)
    rows, upkeep = start_rows(model, state, first, steps), None
    keys, values = state.kv_storage
    # a row ahead reads (masked out) the slots that rows behind have not written yet: make them finite, since
    # a masked score of garbage that happens to be NaN or inf would still poison the softmax
    end = state.position + steps
    keys[:, :, :, state.position:end].zero_()
    values[:, :, :, state.position:end].zero_()
    every = torch.arange(state.batch, device=first.device)
    live = None  # indices of the rows with tokens left; None while that is every row (no gathers then)
    while True:
        rnd = take(rows.round, live)  # (M,)
        h = block_call(model, rows, every if live is None else live, rnd, upkeep, keys, values)  # (M, dim)
        put(rows, "h", live, h)
        if rows.exits is not None:
            rows.exits[every if live is None else live, rnd] = h
        logits = model.head(model.final_norm(read_out(model, rows, live, rnd, h)))  # (M, vocab)
        probs = logits.float().softmax(-1)
        moved = 0.5 * (probs - take(rows.previous, live)).abs().sum(-1)
        put(rows, "previous", live, probs)
        stop = (rnd == state.rounds - 1) | ((rnd >= 1) & (moved < state.exit_threshold))
        put(rows, "round", live, rnd + (~stop).long())
        at = stop.nonzero().squeeze(1)  # the stopping rows' places among the live ones
        upkeep = None
        if len(at):
            done = at if live is None else live.index_select(0, at)
            upkeep, finished = finish(model, rows, state.rounds, done, rnd.index_select(0, at),
                                      logits.index_select(0, at), next_token)
            if finished:
                live = rows.live.nonzero().squeeze(1)
                if not len(live):
                    break
    if upkeep is not None:  # the last tokens' skipped rounds, with no call left to ride along
        kv = model.block.keys_values(block_inputs(model, upkeep.round, upkeep.e, upkeep.h))
        model.block.attn.write_stacked(kv[upkeep.source], keys, values, upkeep.slot, upkeep.row, upkeep.position)
    for cache in state.caches:  # every row has consumed `steps` tokens: one length again
        cache.length = state.position + steps
    state.position += steps
    state.rounds_used.append(rows.used)
    return rows.logits, rows.used


def take(t: torch.Tensor, live: torch.Tensor | None) -> torch.Tensor:
    return t if live is None else t.index_select(0, live)


def put(rows: Rows, name: str, live: torch.Tensor | None, value: torch.Tensor) -> None:
    """rows.<name>[live] = value; with every row live, the new tensor replaces the old (no copy)."""
    if live is None:
        setattr(rows, name, value)
    else:
        getattr(rows, name).index_copy_(0, live, value)


def block_call(model, rows: Rows, live: torch.Tensor, rnd: torch.Tensor, upkeep: Upkeep | None, keys: torch.Tensor,
               values: torch.Tensor) -> torch.Tensor:
    """One block call: every live row (M) at its own round and position, plus the keys/values `upkeep` owes."""
    whole = len(live) == rows.e.shape[0]
    e, h, position = (rows.e, rows.h, rows.position) if whole else (
        rows.e[live], rows.h[live], rows.position[live])
    slot, row, source = rnd, live, None
    if upkeep is not None:
        count = len(live)
        e, h = torch.cat((e, upkeep.e)), torch.cat((h, upkeep.h))
        slot, row = torch.cat((rnd, upkeep.slot)), torch.cat((live, upkeep.row))
        position = torch.cat((position, upkeep.position))
        source = torch.cat((torch.arange(count, device=live.device), upkeep.source + count))
        rnd = torch.cat((rnd, upkeep.round))
    x = block_inputs(model, rnd, e, h)
    return model.block.forward_stacked(x, len(live), keys, values, slot, row, position, source)


def check_stream(model, state, first: torch.Tensor, steps: int) -> None:
    if state.exit_threshold is None:
        raise ValueError("stream_decode runs the early exit: make the state with init_state(..., exit_threshold=T)")
    if first.shape != (state.batch,):
        raise ValueError(f"first tokens must be ({state.batch},), one per row, got shape {tuple(first.shape)}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if steps:  # the ids of the first tokens, and room for `steps` positions
        model.check_tokens(first[:, None], start=state.position + steps - 1)


def lockstep(model, state, first: torch.Tensor, steps: int, next_token: NextToken) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """The same contract with one `decode` call per token for every row (rows whose block input reads the state)."""
    token, outputs, every = first, [], torch.arange(state.batch, device=first.device)
    for i in range(steps):
        outputs.append(model.decode(token[:, None], state)[:, 0])
        if i + 1 < steps:
            token = next_token(every, torch.full_like(every, i + 1), outputs[-1])
    vocab = model.config.vocab_size
    logits = torch.stack(outputs, 1) if outputs else first.new_zeros(state.batch, 0, vocab, dtype=torch.float)
    used = torch.cat(state.rounds_used[-steps:], 1) if steps else first.new_zeros(state.batch, 0)
    return logits, used


def start_rows(model, state, first: torch.Tensor, steps: int) -> Rows:
    batch, device = state.batch, first.device
    position = torch.full((batch,), state.position, dtype=torch.long, device=device)
    e = model.embed(first) + model.positions(position)  # the anchor, as anchor_embedding makes it
    param = model.head.weight
    vocab, rounds = model.config.vocab_size, state.rounds
    exits = param.new_zeros(batch, rounds, e.shape[-1]) if model.readout_mixes_exits else None
    return Rows(position=position, round=torch.zeros_like(position), consumed=torch.zeros_like(position),
                live=torch.ones(batch, dtype=torch.bool, device=device), e=e, h=e.clone(), exits=exits,
                previous=torch.zeros(batch, vocab, device=device), logits=param.new_zeros(batch, steps, vocab),
                used=torch.zeros(batch, steps, dtype=torch.long, device=device))


def by_round(rnd: torch.Tensor, fn: Callable[[int, torch.Tensor], torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """fn(r, indices of the entries at round r) for each round present, gathered into a tensor shaped like `like`."""
    out = torch.empty_like(like)
    for r in rnd.unique().tolist():
        pick = (rnd == r).nonzero().squeeze(1)
        out[pick] = fn(r, pick)
    return out


def block_inputs(model, rnd: torch.Tensor, e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Block inputs (M, dim) of rows at rounds rnd (M,): one call when the input does not depend on the round."""
    if model.static_block_input:
        return model.block_input(0, e[:, None], h[:, None], None, {})[:, 0]
    return by_round(rnd, lambda r, pick: model.block_input(r, e[pick, None], h[pick, None], None, {})[:, 0], h)


def read_out(model, rows: Rows, live: torch.Tensor | None, rnd: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """What the final norm reads (M, dim): the row's readout over its exits so far (rounds 0 .. rnd)."""
    if rows.exits is None:  # the readout is the last exit itself
        return h
    exits, e = take(rows.exits, live), take(rows.e, live)

    def mix(r: int, pick: torch.Tensor) -> torch.Tensor:
        return model.readout(e[pick, None], [exits[pick, j, None] for j in range(r + 1)])[:, 0]
    return by_round(rnd, mix, h)


def finish(model, rows: Rows, rounds: int, done: torch.Tensor, rnd: torch.Tensor, logits: torch.Tensor,
           next_token: NextToken) -> tuple[Upkeep | None, bool]:
    """Rows `done` (k,) whose token exited after round rnd (k,) (or ran every round) with `logits` (k, vocab):
    record the output, start the row's next token. Returns the keys/values its skipped rounds still owe, and
    whether some row has now consumed all its tokens."""
    position, index = rows.position[done], rows.consumed[done]
    rows.logits[done, index] = logits
    rows.used[done, index] = rnd + 1
    owing = (rnd < rounds - 1).nonzero().squeeze(1)
    upkeep = None
    if len(owing):
        whole = len(owing) == len(done)
        pick = (lambda t: t) if whole else (lambda t: t.index_select(0, owing))
        upkeep = Upkeep.of(model, rounds, rows.e.index_select(0, pick(done)), rows.h.index_select(0, pick(done)),
                           pick(rnd), pick(done), pick(position))
    index, steps = index + 1, rows.logits.shape[1]
    rows.consumed.index_copy_(0, done, index)
    finished = int(index.max()) == steps
    if finished:  # some rows are through: only the others go on
        rows.live.index_fill_(0, done[index == steps], False)
        going = (index < steps).nonzero().squeeze(1)
        done, index, position, logits = (t.index_select(0, going) for t in (done, index, position, logits))
        if not len(done):
            return upkeep, True
    token = next_token(done, index, logits)
    if bool(((token < 0) | (token >= rows.logits.shape[-1])).any()):
        raise ValueError(f"next_token gave an id outside [0, {rows.logits.shape[-1]}): {token.tolist()}")
    rows.position.index_copy_(0, done, position + 1)
    e = model.embed(token) + model.positions(position + 1)  # the anchor of the next token, as anchor_embedding
    rows.e.index_copy_(0, done, e)
    rows.h.index_copy_(0, done, e)
    rows.round.index_fill_(0, done, 0)
    return upkeep, finished
