"""Early exit in a batch for the looped rows of seed 000 (loop.py): a position that stopped refining stops paying
for the rounds it skips, so a batch no longer costs its slowest row at every position.

The rule is loop.py's (its module docstring), unchanged: after round r >= 1 a position whose next-byte
distribution moved by less than the threshold in total variation stops; its state is frozen, its output is the
distribution of its exit round, and in every later round it still offers the keys/values (and workspace writes)
that its frozen state's block input produces, so later positions and later tokens read a complete cache. What
this module changes is only what gets computed in a round:

  active position   the whole block (query, keys/values, attention, output projection, MLP) and the readout
                    (final norm, head, softmax) that decides whether it stops;
  exited position   what others read from it: its block input and its key/value projections, nothing else.
                    Where the block input depends on the position's (e, h) alone (`static_block_input`: shared
                    loop, adaptive exit, anchored loop) it is the same in every round after the exit, so its
                    keys/values are computed once, in the first round after the exit, and written unchanged into
                    each later round's cache (`FrozenKeys`). The conditioned and workspace rows recompute it every
                    round (per-round scale and shift; workspace reads and writes that change with the round).

Without a decode state (scoring whole sequences) nothing reads a round in which every position has exited, so the
loop stops there; with a state, the later rounds' caches are still filled.

A row's logits, rounds used and caches are those of running that row alone, and those of the dense rule that runs
every position through every round, up to floating-point rounding (tests/test_loop_exit.py).

Layout: a call holds (batch, n) new positions; position i of row b has the flat index b n + i. A round in which
some positions are active and others not runs the block on the active ones, laid out per row (`Selection`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Selection:
    """The active positions of a (batch, n) call, laid out for PreNormBlock.forward_selected."""

    rows: torch.Tensor  # (k,) the rows holding at least one active position, ascending
    slots: torch.Tensor  # (k, m) each row's active positions, ascending, padded to the longest row
    valid: torch.Tensor | None  # (k, m) True at real (not padding) entries; None when there is no padding
    flat: torch.Tensor  # (s,) flat indices b n + i of the active positions, ascending (valid entries, row-major)

    @classmethod
    def of(cls, active: torch.Tensor) -> Selection:
        batch, n = active.shape
        if n == 1:  # one new position per row (decoding a token): no padding
            rows = active[:, 0].nonzero().squeeze(1)
            return cls(rows, rows.new_zeros(len(rows), 1), None, rows)
        counts = active.sum(1)
        rows = counts.nonzero().squeeze(1)
        width = int(counts.max()) if len(rows) else 0
        # a stable sort of "not active" puts each row's active positions first, in order; the rest is padding
        slots = torch.sort((~active[rows]).to(torch.uint8), dim=1, stable=True).indices[:, :width]
        valid = torch.arange(width, device=active.device) < counts[rows, None]
        flat = (rows[:, None] * n + slots)[valid]
        return cls(rows, slots, None if bool(valid.all()) else valid, flat)


class FrozenKeys:
    """Key/value projections of exited positions of a row with a static block input (module docstring).

    kv (batch n, 2 dim) holds every position's latest projections; `saved` (batch n,) marks the final ones: those
    of positions that had already exited when they were computed."""

    def __init__(self, h: torch.Tensor):
        batch, n, dim = h.shape
        self.kv = h.new_empty(batch * n, 2 * dim)
        self.saved = torch.zeros(batch * n, dtype=torch.bool, device=h.device)

    def inputs_and_keys(self, model, r: int, e: torch.Tensor, h: torch.Tensor,
                        active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(block inputs (batch, n, dim), key/value projections (batch, n, 2 dim)) of round r. Only the positions
        without saved projections are computed: the active ones and those that exited at the end of the last
        round; the other inputs are left unset (nobody reads them: they run no block)."""
        batch, n, dim = h.shape
        fresh = (~self.saved).nonzero().squeeze(1)
        x = h.new_empty(batch * n, dim)
        if len(fresh):
            pick_e, pick_h = e.reshape(-1, dim).index_select(0, fresh), h.reshape(-1, dim).index_select(0, fresh)
            fresh_x = model.block_input(r, pick_e[None], pick_h[None], None, {})[0]  # (fresh, dim)
            x.index_copy_(0, fresh, fresh_x)
            self.kv.index_copy_(0, fresh, model.block.keys_values(fresh_x))
        self.saved |= ~active.view(-1)  # an exited position's projections now come from its frozen state
        return x.view(batch, n, dim), self.kv.view(batch, n, 2 * dim)


def run_early_exit(model, tokens: torch.Tensor, rounds: int, state, threshold: float) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """Logits (batch, n, vocab) and rounds used (batch, n) of `tokens` (batch, n) under the early-exit rule, for a
    looped row `model` (loop.LoopedLM), appending to `state`'s per-round caches when one is given."""
    start = state.position if state is not None else 0
    e = model.anchor_embedding(tokens, start)  # (batch, n, dim)
    batch, n, _ = e.shape
    h, exits, aux = e, [], {}
    active = torch.ones(batch, n, dtype=torch.bool, device=tokens.device)
    used = torch.zeros(batch, n, dtype=torch.long, device=tokens.device)
    frozen = None  # FrozenKeys, from the first round with an exited position (static block inputs only)
    logits = probs = None  # (batch n, vocab): each position's output so far, and its distribution in float32
    for r in range(rounds):
        cache = state.caches[r] if state is not None else None
        count = int(active.sum())
        if count == 0 and state is None:  # no query reads this round or a later one
            break
        if count == active.numel():  # every position refines: the plain round
            h, select = model.block(model.block_input(r, e, h, state, aux), cache=cache), None
        else:
            select = Selection.of(active)
            if frozen is None and model.static_block_input:
                frozen = FrozenKeys(h)
            h = partial_round(model, r, e, h, select, active, state, aux, frozen, cache)
        exits.append(h)
        used += active
        if count == 0:
            continue
        round_logits = read_out(model, e, exits, select)  # (batch n | s, vocab): active positions only
        round_probs = round_logits.float().softmax(-1)
        if logits is None:
            logits, probs = round_logits, round_probs
            continue
        flat = None if select is None else select.flat
        moved = 0.5 * (round_probs - (probs if flat is None else probs.index_select(0, flat))).abs().sum(-1)
        if flat is None:
            logits, probs, active = round_logits, round_probs, (moved >= threshold).view(batch, n)
        else:
            logits.index_copy_(0, flat, round_logits)
            probs.index_copy_(0, flat, round_probs)
            active.view(-1)[flat] = moved >= threshold
    return logits.view(batch, n, -1), used


def partial_round(model, r: int, e: torch.Tensor, h: torch.Tensor, select: Selection, active: torch.Tensor, state,
                  aux: dict, frozen: FrozenKeys | None, cache) -> torch.Tensor:
    """Round r when only the positions in `select` refine: every position offers keys/values, the block runs at
    the selected ones only. Returns the new states (batch, n, dim); exited positions keep theirs."""
    batch, n, dim = h.shape
    if frozen is None:  # the block input can change between rounds: every position's, every round
        x = model.block_input(r, e, h, state, aux)
        kv = model.block.keys_values(x)
    else:
        x, kv = frozen.inputs_and_keys(model, r, e, h, active)
    if not len(select.flat):  # every position has exited: only the cache of this round is written
        model.block.attn.offer(kv, cache)
        return h
    refined = model.block.forward_selected(x[select.rows[:, None], select.slots], kv, select.rows, select.slots,
                                           select.valid, cache)
    return h.reshape(-1, dim).index_copy(0, select.flat, refined.reshape(-1, dim)).view(batch, n, dim)


def read_out(model, e: torch.Tensor, exits: list[torch.Tensor], select: Selection | None) -> torch.Tensor:
    """Logits after the latest round: (batch n, vocab) when every position is active (select None), else
    (s, vocab) at select.flat. The readout mixes exits per position, so it runs on whole tensors, the head on the
    active positions only."""
    z = model.readout(e, exits)
    if select is None:
        return model.head(model.final_norm(z)).flatten(0, 1)
    return model.head(model.final_norm(z.flatten(0, 1).index_select(0, select.flat)))
