"""Early exit in a batch: a position that stopped refining stops paying for the rounds it skips, so a batch no
longer costs its slowest row at every position. One lockstep driver (`run_lockstep`) serves three exit families,
each with its own rule, unchanged from its single-row path:

  looped rows of seed 000 (loop.py)   after round r >= 1, stop where the next-byte distribution moved by less than
                                      the threshold in total variation (`TotalVariation`, `LoopRounds`)
  exit_gate_loop (exit_gate.py)       stop at the first step whose cumulative exit probability exceeds q
                                      (`CumulativeGate`, exit_gate.GateSteps)
  prelude_coda (prelude_coda.py)      after iteration i >= 2, stop where KL(p_i || p_{i-1}) < threshold
                                      (`KLConvergence`, prelude_coda.CodaSteps)

An exited position's state is frozen, its output is the distribution of its exit round, and in every later round it
still offers the keys/values (and workspace writes) that its frozen state produces, so later positions and later
tokens read a complete cache. What this module changes is only what gets computed in a round:

  active position   the whole round (queries, keys/values, attention, MLPs) and the readout (final norm, head,
                    softmax or gate) that decides whether it stops;
  exited position   what others read from it. In the seed-000 rows that is its block input and its key/value
                    projections, nothing else. Where the block input depends on the position's (e, h) alone
                    (`static_block_input`: shared loop, adaptive exit, anchored loop) it is the same in every round
                    after the exit, so its keys/values are computed once, in the first round after the exit, and
                    written unchanged into each later round's cache (`FrozenKeys`). The conditioned and workspace
                    rows recompute it every round (per-round scale and shift; workspace reads and writes that change
                    with the round). In a stack of blocks (the LoopLM's L layers a step, Huginn's core and coda) the
                    keys/values of block l > 1 at an exited position depend on what block l - 1 read this round,
                    so every block but the last still runs there, and the last only offers its keys
                    (`stack_selected`).

Without a decode state (scoring whole sequences) nothing reads a round in which every position has exited, so the
loop stops there; with a state, the later rounds' caches are still filled.

A row's logits, rounds used and caches are those of running that row alone, and those of the dense rule that runs
every position through every round, up to floating-point rounding (tests/test_loop_exit.py,
tests/test_exit_families.py).

Layout: a call holds (batch, n) new positions; position i of row b has the flat index b n + i. A round in which
some positions are active and others not runs the block on the active ones, laid out per row (`Selection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class Selection:
    """The active positions of a (batch, n) call, laid out for a block's forward_selected (nn/block.py)."""

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


# --- the lockstep driver, shared by every family with a per-position exit ---------------------------------------
class ExitSteps(Protocol):
    """One call's rounds for `run_lockstep`, holding the call's states between rounds."""

    def refine(self, r: int, select: Selection | None, active: torch.Tensor) -> None:
        """Round r: refine the positions in `select` (None: every position), keep the others' states, and write
        every position's keys/values of the round into the decode state's caches."""

    def read(self, r: int, select: Selection | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(logits, exit gate or None) of round r at the refined positions, (batch n | s, vocab) and (batch n | s,);
        (None, None) when `select` holds no position (after writing any caches the readout keeps)."""


def run_lockstep(steps: ExitSteps, rule, rounds: int, shape: torch.Size, device, *,
                 decoding: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (batch, n, vocab) and rounds used (batch, n) of a (batch, n) call under an exit `rule` (a
    TotalVariation, KLConvergence or CumulativeGate): each round refines the active positions only. Without a
    decode state nothing reads a round in which every position has exited, so the loop stops there."""
    batch, n = shape
    active = torch.ones(batch, n, dtype=torch.bool, device=device)
    used = torch.zeros(batch, n, dtype=torch.long, device=device)
    logits = None  # (batch n, vocab): each position's output so far
    for r in range(rounds):
        count = int(active.sum())
        if count == 0 and not decoding:
            break
        select = None if count == active.numel() else Selection.of(active)
        steps.refine(r, select, active)
        used += active
        round_logits, gate = steps.read(r, select)
        if count == 0:
            continue
        flat = None if select is None else select.flat
        stop = rule.stops(round_logits, gate, flat)  # (batch n | s,)
        if flat is None:  # every position refined (always so in round 0)
            logits, active = round_logits, ~stop.view(batch, n)
        else:
            logits.index_copy_(0, flat, round_logits)
            active.view(-1)[flat] = ~stop
    return logits.view(batch, n, -1), used


class TotalVariation:
    """The seed-000 rule: after round r >= 1 stop where the next-byte distribution moved by less than the
    threshold in total variation (distributions in float32)."""

    def __init__(self, threshold: float):
        self.threshold, self.probs = threshold, None  # probs (batch n, vocab): each position's latest

    def stops(self, logits: torch.Tensor, gate, flat: torch.Tensor | None) -> torch.Tensor:
        probs = logits.float().softmax(-1)
        if self.probs is None:  # round 0: nothing to compare with
            self.probs = probs
            return torch.zeros(len(probs), dtype=torch.bool, device=probs.device)
        moved = 0.5 * (probs - pick(self.probs, flat)).abs().sum(-1)
        self.probs = put(self.probs, flat, probs)
        return moved < self.threshold


class KLConvergence:
    """Huginn's rule (prelude_coda): after iteration i >= 2 stop where KL(p_i || p_{i-1}) < threshold."""

    def __init__(self, threshold: float):
        self.threshold, self.log_probs = threshold, None  # (batch n, vocab), float32

    def stops(self, logits: torch.Tensor, gate, flat: torch.Tensor | None) -> torch.Tensor:
        log_probs = logits.float().log_softmax(-1)
        if self.log_probs is None:
            self.log_probs = log_probs
            return torch.zeros(len(log_probs), dtype=torch.bool, device=log_probs.device)
        kl = (log_probs.exp() * (log_probs - pick(self.log_probs, flat))).sum(-1)
        self.log_probs = put(self.log_probs, flat, log_probs)
        return kl < self.threshold


class CumulativeGate:
    """Ouro's rule (exit_gate_loop): stop at the first step whose cumulative exit probability 1 - S_t, S_t =
    prod_{j<=t} (1 - lambda_j) (float32), exceeds the threshold q."""

    def __init__(self, threshold: float):
        self.threshold, self.survive = threshold, None  # S_t (batch n,)

    def stops(self, logits, gate: torch.Tensor, flat: torch.Tensor | None) -> torch.Tensor:
        before = torch.ones_like(gate, dtype=torch.float32) if self.survive is None else pick(self.survive, flat)
        survive = before * (1 - gate.float())
        self.survive = survive if self.survive is None else put(self.survive, flat, survive)
        return 1 - survive > self.threshold


def pick(whole: torch.Tensor, flat: torch.Tensor | None) -> torch.Tensor:
    return whole if flat is None else whole.index_select(0, flat)


def put(whole: torch.Tensor, flat: torch.Tensor | None, part: torch.Tensor) -> torch.Tensor:
    return part if flat is None else whole.index_copy_(0, flat, part)


# --- the selected positions of a block or a stack of blocks -----------------------------------------------------
def selected_outputs(block, x: torch.Tensor, kv: torch.Tensor, select: Selection, cache) -> torch.Tensor:
    """The block's outputs (s, dim) at select.flat, from block inputs x (batch, n, dim) and every position's
    key/value projections kv (batch, n, 2 dim), all of which reach `cache` (nn/block.py SelectedPositions)."""
    if not len(select.flat):  # nobody asks a query: only the cache is written
        block.attn.offer(kv, cache)
        return x.new_empty(0, x.shape[-1])
    out = block.forward_selected(x[select.rows[:, None], select.slots], kv, select.rows, select.slots, select.valid,
                                 cache)
    return out.reshape(-1, x.shape[-1])


def stack_selected(layers, x: torch.Tensor, select: Selection, caches) -> torch.Tensor:
    """A stack of blocks run for the selected positions: outputs (s, dim) at select.flat. Every layer but the last
    runs at every position, because the next layer's keys/values at an exited position depend on what its
    attention reads this round; the last runs at the selected positions and only offers the others' keys."""
    caches = caches if caches is not None else [None] * len(layers)
    for layer, cache in zip(layers[:-1], caches[:-1]):
        x = layer(x, cache)
    return selected_outputs(layers[-1], x, layers[-1].keys_values(x), select, caches[-1])


def scatter(h: torch.Tensor, select: Selection, refined: torch.Tensor) -> torch.Tensor:
    """States h (batch, n, dim) with the selected positions' replaced by refined (s, dim)."""
    return h.reshape(-1, h.shape[-1]).index_copy(0, select.flat, refined).view_as(h)


# --- the looped rows of seed 000 ----------------------------------------------------------------------------------
def run_early_exit(model, tokens: torch.Tensor, rounds: int, state, threshold: float) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """Logits (batch, n, vocab) and rounds used (batch, n) of `tokens` (batch, n) under the early-exit rule, for a
    looped row `model` (loop.LoopedLM), appending to `state`'s per-round caches when one is given."""
    return run_lockstep(LoopRounds(model, tokens, state), TotalVariation(threshold), rounds, tokens.shape,
                        tokens.device, decoding=state is not None)


class LoopRounds:
    """ExitSteps of a looped row: the shared block on its per-round block input, read out through the row's
    readout (which may mix every round's exit)."""

    def __init__(self, model, tokens: torch.Tensor, state):
        self.model, self.state = model, state
        self.e = model.anchor_embedding(tokens, state.position if state is not None else 0)  # (batch, n, dim)
        self.h, self.exits, self.aux = self.e, [], {}
        self.frozen = None  # FrozenKeys, from the first round with an exited position (static block inputs only)

    def refine(self, r: int, select: Selection | None, active: torch.Tensor) -> None:
        model, state = self.model, self.state
        cache = state.caches[r] if state is not None else None
        if select is None:  # every position refines: the plain round
            self.h = model.block(model.block_input(r, self.e, self.h, state, self.aux), cache=cache)
        else:
            if self.frozen is None and model.static_block_input:
                self.frozen = FrozenKeys(self.h)
            self.h = self.partial_round(r, select, active, cache)
        self.exits.append(self.h)

    def partial_round(self, r: int, select: Selection, active: torch.Tensor, cache) -> torch.Tensor:
        """Round r when only the positions in `select` refine: every position offers keys/values, the block runs
        at the selected ones only. Returns the new states (batch, n, dim); exited positions keep theirs."""
        model = self.model
        if self.frozen is None:  # the block input can change between rounds: every position's, every round
            x = model.block_input(r, self.e, self.h, self.state, self.aux)
            kv = model.block.keys_values(x)
        else:
            x, kv = self.frozen.inputs_and_keys(model, r, self.e, self.h, active)
        return scatter(self.h, select, selected_outputs(model.block, x, kv, select, cache))

    def read(self, r: int, select: Selection | None) -> tuple[torch.Tensor | None, None]:
        """The readout mixes exits per position, so it runs on whole tensors, the head on the active positions."""
        if select is not None and not len(select.flat):
            return None, None
        z = self.model.readout(self.e, self.exits)  # (batch, n, dim)
        if select is None:
            return self.model.head(self.model.final_norm(z)).flatten(0, 1), None
        return self.model.head(self.model.final_norm(z.flatten(0, 1).index_select(0, select.flat))), None
