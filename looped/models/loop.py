"""Looped byte LMs of seed 000: one shared pre-norm block applied for `rounds` rounds.

Rows (registry names) and what each round feeds the shared block T (seed 000 §3, §5.1, Appendix B):
  shared_loop         h^{r+1} = T(h^r)
  adaptive_exit       the same loop; output = sum_r pi_{i,r} h_i^{r+1}, pi_i = softmax(W_exit e_i + b_exit)
  anchored_loop       u^r = LN_a(h^r + F_a([e; h^r]))  (eq. 2);   h^{r+1} = T(u^r)
  conditioned_dense   h^{r+1} = T((1 + sigma_r) * u^r + tau_r);  readout eq. 14 with tanh(beta_r)
  workspace           h^{r+1} = T(LN_b(u^r + c^r)), c^r read from a gated causal prefix workspace (eqs. 3-7),
                      recomputed every round
  workspace_retention the same with M^r = rho_r M^{r-1} + (1 - rho_r) M~^r (eq. 5)
then o_i = W_LM LN_f(h_i^R) (eq. 8). The anchor is e_i = E(x_i) + p_i (eq. 1). The workspace itself is
models/workspace.py.

Test-time depth: `rounds` is a call argument. Per-round parameters trained for R rounds are reused for
rounds r >= R as those of round R-1 (conditioning sigma/tau, retention logits). The readouts that mix
exits keep the *final* exit in the last slot: adaptive exit weights exits 1..R-1 with pi_0..pi_{R-2} and
the final state h^{R'} with the remaining mass; conditioned-dense applies beta_r to exits r+1 <= R-1 only.
With R' = R both are exactly the trained readouts.

Training depth (`depth_schedule`, models/depth_schedule.py): in training mode a forward that is not given
`rounds` runs the depth its schedule draws (fixed: `rounds`; uniform, the log-normal Poisson, or a depth growing
over the updates), back-propagating through the last `backprop_rounds` of them when that is set (the earlier
ones run without gradients; only rows that inject e every round accept it). A draw beyond `rounds` reuses the
last round's parameters, as at test time. Eval mode and any given `rounds` run that depth, schedule or not.

Incremental decoding keeps, for every round, the shared block's KV cache and the workspace running sums
(N, D per slot), so a new token costs constant workspace work (seed 000 §7).

Early exit (inference only, `exit_threshold`): after each round r >= 1 a position whose next-byte
distribution moved by less than the threshold in total variation, 0.5 * sum |p_r - p_{r-1}|, stops
refining. Its state is frozen (h^{r'} = h^{r} for every later round r') and its output is the distribution
at its exit round. Policy for the rounds it skipped: the position still offers keys/values (and workspace
writes) to later positions, computed from the block input its frozen state produces in that round, so
later tokens see a complete, deterministic cache; only its own refinement is skipped. Every exit decision
at position i depends on positions <= i only, so decoding stays causal and incremental == full forward.
In a batch an exited position computes only that block input and its keys/values (loop_exit.py), so rows that
exit early stop paying for the rounds they skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import KVCache, LayerNorm, PreNormBlock
from .base import CausalLM, DecodeState, LMConfig
from .depth_schedule import DepthSchedule
from .ledger import Ledger, block_flops, item_bytes, linear_flops
from .loop_exit import run_early_exit
from .loop_stream import NextToken, stream_decode
from .registry import register
from .trace import RoundTrace
from .workspace import Workspace


@dataclass
class LoopConfig(LMConfig):
    arch: str = "shared_loop"
    dim: int = 256
    heads: int = 8
    ffn_dim: int = 1024
    # depth R: what eval runs by default (a call argument can change it at test time) and what training runs under
    # the fixed schedule (the mean depth drawn by uniform and poisson_lognormal, the final one of progressive)
    rounds: int = 4
    slots: int = 4  # workspace slots S (workspace rows only)
    slot_dim: int = 32  # coordinates per slot m (workspace rows only)
    norm_eps: float = 1e-5
    workspace_eps: float = 1e-6  # epsilon in sqrt(max(D, eps)), eq. 4
    gamma_init: float = 0.5  # workspace read gain, eq. 7
    retention_init: float = 0.2  # rho_r at init: l_r = log(0.2 / 0.8), eq. 5
    # how each training forward's depth is drawn and how many of its rounds back-propagate (models/depth_schedule.py)
    depth_schedule: DepthSchedule = field(default_factory=DepthSchedule)

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "ffn_dim", "rounds", "slots", "slot_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ValueError(f"model.dim: width {self.dim} is not divisible by heads {self.heads}")
        if not 0 < self.retention_init < 1:
            raise ValueError(f"model.retention_init must be in (0, 1), got {self.retention_init}")
        self.depth_schedule.check(self.rounds)


@dataclass
class LoopState(DecodeState):
    caches: list[KVCache] = field(default_factory=list)  # shared block's KV cache, one per round
    sums: list[torch.Tensor | None] = field(default_factory=list)  # workspace (batch, S, m+1) per round
    # per round: every gate mass D of the running sums is >= eps, so max(D, eps) = D at every later position
    # (D only grows: each write adds g >= 0) and the read skips the clamp
    mass_settled: list[bool] = field(default_factory=list)
    exit_threshold: float | None = None
    rounds_used: list[torch.Tensor] = field(default_factory=list)  # (batch, n) per decode call, with early exit
    # workspace rows, decoding without gradients: Workspace.fold() and the parameter versions it was made from
    folded: tuple[tuple, tuple[torch.Tensor, ...]] | None = None
    # with an exit threshold, the caches' keys and values as two (rounds, batch, heads, capacity, head_dim)
    # tensors: the same memory as `caches`, indexed across rounds at once by stream_decode (loop_stream.py)
    kv_storage: tuple[torch.Tensor, torch.Tensor] | None = None
    # not per-sequence state: a parameter cache, a record, and a second view of the caches
    cached_fields = ("folded", "rounds_used", "kv_storage")


# --- pieces ---------------------------------------------------------------------------------------------
class Anchor(nn.Module):
    """u = LN_a(h + A2 GELU(A1 [e; h] + a1) + a2)  (eq. 2)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.up = nn.Linear(2 * dim, dim)
        self.down = nn.Linear(dim, dim)
        self.norm = LayerNorm(dim, eps)

    def forward(self, e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.norm(h + self.down(F.gelu(self.up(torch.cat((e, h), dim=-1)))))


# --- the family -----------------------------------------------------------------------------------------
class LoopedLM(CausalLM):
    """Shared machinery: anchor embedding, shared block, per-round caches, final norm and head.

    Subclasses choose what enters the block each round (`block_input`) and how exits are read out
    (`readout`).
    """

    uses_workspace = False
    compiled_methods = ("round_step",)
    # block_input(r, e, h, state, aux) depends on the position's own e and h alone (not on r, the state or other
    # positions): an exited position's keys/values are then the same in every later round (loop_exit.py)
    static_block_input = False
    readout_mixes_exits = False  # the readout reads every round's exit, not only the last (adaptive, conditioned)
    # block_input reads the anchor e every round (input injection): required by truncated backprop through depth,
    # without which the embedding would enter only round 0, which runs without gradients
    injects_input = False

    def __init__(self, config: LoopConfig):
        super().__init__()
        if config.depth_schedule.backprop_rounds is not None and not self.injects_input:
            raise ValueError(f"model.depth_schedule.backprop_rounds: {self.arch_name} feeds the embedding to round 0 "
                             f"only, which truncated backprop runs without gradients, so the embedding would not "
                             f"learn; leave it null, or use a row that injects the input every round (anchored_loop)")
        self.config = config
        d = config.dim
        self.embed = nn.Embedding(config.vocab_size, d)
        self.positions = nn.Embedding(config.context_length, d)
        self.block = PreNormBlock(d, config.heads, config.ffn_dim, norm_eps=config.norm_eps)
        self.build_extras()
        self.final_norm = LayerNorm(d, config.norm_eps)
        self.head = nn.Linear(d, config.vocab_size, bias=False)

    def build_extras(self) -> None:
        """Row-specific parameters (anchor, workspace, router, conditioning)."""

    @property
    def default_rounds(self) -> int:
        return self.config.rounds

    # hooks ---------------------------------------------------------------------------------------------
    def block_input(self, r: int, e: torch.Tensor, h: torch.Tensor, state: LoopState | None,
                    aux: dict) -> torch.Tensor:
        return h

    def readout(self, e: torch.Tensor, exits: list[torch.Tensor]) -> torch.Tensor:
        return exits[-1]

    # compute ledger (looped/models/ledger.py) ------------------------------------------------------------
    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """Per-token FLOPs of a forward of `context` tokens at `depth` rounds (default: the trained depth),
        and the decoding state: every round keeps its own KV cache of the shared block."""
        c, rounds = self.config, self.resolve_rounds(depth)
        block = block_flops(c.dim, c.ffn_dim, context)
        per_round = [{**self.round_extra_flops(), **block} for _ in range(rounds)]
        outside = {"head": linear_flops(c.dim, c.vocab_size), **self.readout_flops()}
        size = item_bytes(self)
        return Ledger(self.arch_name, context, rounds, outside, per_round, per_call=self.call_flops(),
                      state_per_token={"kv cache": rounds * 2 * c.dim * size},
                      state_fixed=self.fixed_state_bytes(rounds, size), training_rounds=self.training_rounds())

    def training_rounds(self, update: int | None = None) -> tuple[float, float] | None:
        """(E[rounds run], E[rounds back-propagated]) of a training forward at `update` under the depth schedule
        (None: once the schedule has settled); None where training runs `rounds` rounds, every one back-propagated."""
        return self.config.depth_schedule.expected(self.config.rounds, update)

    @property
    def schedule_settles(self) -> int:
        """The first update from which `training_rounds` no longer changes (a progressive schedule's ramp)."""
        return self.config.depth_schedule.settled_update()

    def round_extra_flops(self) -> dict[str, float]:
        """Per-token FLOPs a round adds to the shared block (anchor, workspace)."""
        return {}

    def readout_flops(self) -> dict[str, float]:
        """Per-token FLOPs of the exit readout beyond the head (the adaptive-exit router)."""
        return {}

    def call_flops(self) -> dict[str, float]:
        """FLOPs done once per forward call whatever its length (the workspace fold)."""
        return {}

    def fixed_state_bytes(self, rounds: int, size: int) -> dict[str, int]:
        return {}

    # protocol ------------------------------------------------------------------------------------------
    def anchor_embedding(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        return self.embed(tokens) + self.positions(positions)

    def run_rounds(self, tokens: torch.Tensor, rounds: int, state: LoopState | None) -> torch.Tensor:
        start = state.position if state is not None else 0
        e = self.anchor_embedding(tokens, start)
        h, exits, aux = e, [], {}
        for r in range(rounds):
            if state is None:
                h = self.round_step(r, e, h, aux)
            else:
                h = self.block(self.block_input(r, e, h, state, aux), cache=state.caches[r])
            exits.append(h)
        return self.head(self.final_norm(self.readout(e, exits)))

    def round_step(self, r: int, e: torch.Tensor, h: torch.Tensor, aux: dict) -> torch.Tensor:
        """One round of the full forward, h^{r+1} = T(block input): what `train.compile` compiles, so that
        any number of rounds reuses one graph."""
        return self.block(self.block_input(r, e, h, None, aux))

    def run_rounds_early_exit(self, tokens: torch.Tensor, rounds: int, state: LoopState | None,
                              threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Rounds with per-position early exit (module docstring); returns logits and rounds used (b, l). Exited
        positions compute only what later queries read from them (loop_exit.py)."""
        return run_early_exit(self, tokens, rounds, state, threshold)

    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        self.check_tokens(tokens)
        if rounds is None and self.training:  # the training depth schedule (models/depth_schedule.py)
            rounds, first_with_grad = self.config.depth_schedule.draw(self.config.rounds, self.training_update)
            if first_with_grad:
                return self.run_truncated(tokens, rounds, first_with_grad)
        return self.run_rounds(tokens, self.resolve_rounds(rounds), None)

    def run_truncated(self, tokens: torch.Tensor, rounds: int, first_with_grad: int) -> torch.Tensor:
        """The full forward with truncated backprop through depth: rounds 0 .. first_with_grad - 1 run without
        gradients, so their state and exits reach the later rounds and the readout as constants; the parameters
        learn from the last rounds (and, through the anchor e, the embedding from every round that has
        gradients). Otherwise the same calls as run_rounds without a state."""
        e = self.anchor_embedding(tokens, 0)
        h, exits, aux = e, [], self.call_aux()
        grad = torch.is_grad_enabled()
        for r in range(rounds):
            with torch.set_grad_enabled(grad and r >= first_with_grad):
                h = self.round_step(r, e, h, aux)
            exits.append(h)
        return self.head(self.final_norm(self.readout(e, exits)))

    def call_aux(self) -> dict:
        """What a truncated forward computes before its rounds, with gradients on, so that the rounds without
        them do not compute it detached (the workspace fold)."""
        return {}

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        """Every round of the full forward (models/trace.py): the state h^{r+1} and the readout over the exits
        so far, which is the forward at depth r+1 (the last one is the forward itself)."""
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.traced_rounds(tokens, rounds)

    def traced_rounds(self, tokens: torch.Tensor, rounds: int) -> Iterator[RoundTrace]:
        e = self.anchor_embedding(tokens, 0)
        h, exits, aux = e, [], {}
        for r in range(rounds):  # the same calls, in the same order, as run_rounds without a state
            h = self.round_step(r, e, h, aux)
            exits.append(h)
            logits = self.head(self.final_norm(self.readout(e, exits)))
            yield RoundTrace(r + 1, h, logits, self.round_stats(e, r, rounds))

    def round_stats(self, e: torch.Tensor, r: int, rounds: int) -> dict[str, torch.Tensor]:
        """Per-position statistics of round r (0-based) of a `rounds`-round call; none by default."""
        return {}

    def forward_early_exit(self, tokens: torch.Tensor, threshold: float, *,
                           rounds: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, rounds used per position) with the early-exit rule; threshold 0 = never exit early."""
        if threshold < 0:
            raise ValueError(f"exit threshold must be >= 0, got {threshold}")
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.run_rounds_early_exit(tokens, rounds, None, threshold)

    def init_state(self, batch: int, *, rounds: int | None = None,
                   exit_threshold: float | None = None) -> LoopState:
        rounds = self.resolve_rounds(rounds)
        capacity, storage = self.config.context_length, None
        if exit_threshold is None:
            caches = [self.block.attn.new_cache(batch, capacity) for _ in range(rounds)]
        else:  # stream_decode reads a different round's cache for each row: one stacked store
            caches, *storage = self.block.attn.new_stacked_caches(rounds, batch, capacity)
        return LoopState(batch=batch, rounds=rounds, caches=caches, sums=[None] * rounds,
                         mass_settled=[False] * rounds, exit_threshold=exit_threshold,
                         kv_storage=tuple(storage) if storage else None)

    def decode(self, tokens: torch.Tensor, state: LoopState) -> torch.Tensor:
        return self.decode_at_depth(tokens, state, self.run_rounds, self.run_rounds_early_exit)

    def stream_decode(self, state: LoopState, first: torch.Tensor, steps: int,
                      next_token: NextToken) -> tuple[torch.Tensor, torch.Tensor]:
        """`steps` one-token early-exit decode calls where no row waits for another (loop_stream.py): first (B,)
        the tokens consumed first, next_token(rows, index, logits) -> the ids each row consumes next. Returns the
        logits after every consumed token (B, steps, vocab) and the rounds each used (B, steps)."""
        return stream_decode(self, state, first, steps, next_token)


@register("shared_loop", LoopConfig, test_overrides=dict(dim=32, heads=4, ffn_dim=48, rounds=4, context_length=40),
          test_depths=(1, 4, 6))
class SharedLoop(LoopedLM):
    """h^{r+1} = T(h^r), h^0 = e."""

    static_block_input = True


@register("adaptive_exit", LoopConfig, test_overrides=dict(dim=32, heads=4, ffn_dim=48, rounds=4, context_length=40),
          test_depths=(1, 4, 6))
class AdaptiveExit(LoopedLM):
    """Shared loop with a per-position softmax mixture of every round's exit (Appendix B)."""

    static_block_input = True
    readout_mixes_exits = True

    def build_extras(self) -> None:
        self.router = nn.Linear(self.config.dim, self.config.rounds)  # W_exit, b_exit

    def readout_flops(self) -> dict[str, float]:
        return {"exit router": linear_flops(self.config.dim, self.config.rounds)}  # once, on the anchor e

    def round_stats(self, e, r, rounds):
        """The weight the readout of a `rounds`-round call puts on round r's exit (the router's pi)."""
        pi = torch.softmax(self.router(e), dim=-1)
        keep = min(pi.shape[-1], rounds) - 1
        if r == rounds - 1:
            return {"exit weight": pi[..., keep:].sum(-1)}
        return {"exit weight": pi[..., r] if r < keep else torch.zeros_like(pi[..., 0])}

    def readout(self, e, exits):
        pi = torch.softmax(self.router(e), dim=-1)  # (b, l, R)
        trained, used = pi.shape[-1], len(exits)
        keep = min(trained, used) - 1  # slots 0..keep-1 weight exits 1..keep; the last slot the final exit
        out = exits[-1] * pi[..., keep:].sum(-1, keepdim=True)
        for r in range(keep):
            out = out + exits[r] * pi[..., r:r + 1]
        return out


class _Anchored(LoopedLM):
    injects_input = True  # the anchor reads [e; h^r] every round (eq. 2)

    def build_extras(self) -> None:
        self.anchor = Anchor(self.config.dim, self.config.norm_eps)

    def block_input(self, r, e, h, state, aux):
        return self.anchor(e, h)

    def round_extra_flops(self) -> dict[str, float]:
        d = self.config.dim
        return {"anchor": linear_flops(2 * d, d) + linear_flops(d, d)}  # F_a([e; h]) (eq. 2)


@register("anchored_loop", LoopConfig, test_overrides=dict(dim=32, heads=4, ffn_dim=48, rounds=4, context_length=40),
          test_depths=(1, 4, 6))
class AnchoredLoop(_Anchored):
    """u^r = LN_a(h^r + F_a([e; h^r])), h^{r+1} = T(u^r)."""

    static_block_input = True


@register("conditioned_dense", LoopConfig,
          test_overrides=dict(dim=32, heads=4, ffn_dim=48, rounds=4, context_length=40), test_depths=(1, 4, 6))
class ConditionedDense(_Anchored):
    """Anchored loop with per-round scale/shift before the block and a learned exit readout (eq. 14)."""

    readout_mixes_exits = True

    def build_extras(self) -> None:
        super().build_extras()
        rounds, d = self.config.rounds, self.config.dim
        self.scale = nn.Parameter(torch.zeros(rounds, d))  # sigma_r
        self.shift = nn.Parameter(torch.zeros(rounds, d))  # tau_r
        self.exit_mix = nn.Parameter(torch.zeros(max(rounds - 1, 0)))  # beta_r, r = 0..R-2

    def block_input(self, r, e, h, state, aux):
        r = min(r, self.config.rounds - 1)
        return (1 + self.scale[r]) * self.anchor(e, h) + self.shift[r]

    def readout(self, e, exits):
        final = exits[-1]
        out = final
        for r in range(min(len(self.exit_mix), len(exits) - 1)):  # exits r+1 <= R-1 only
            out = out + torch.tanh(self.exit_mix[r]) * (exits[r] - final)
        return out


@register("workspace", LoopConfig,
          test_overrides=dict(dim=24, heads=4, ffn_dim=40, rounds=4, slots=3, slot_dim=5, context_length=40),
          test_depths=(1, 4, 6))
class WorkspaceLoop(_Anchored):
    """Anchored loop whose block input adds a read from the causal prefix workspace, recomputed each round."""

    uses_workspace = True
    retain = False

    def build_extras(self) -> None:
        super().build_extras()
        c = self.config
        self.workspace = Workspace(c.dim, c.slots, c.slot_dim, c.rounds, c.norm_eps, c.workspace_eps,
                                   c.gamma_init, c.retention_init)

    def block_input(self, r, e, h, state, aux):
        u = self.anchor(e, h)
        ws = self.workspace
        carry = state.sums[r] if state is not None else None
        if not self.retain:  # sum_s alpha_s N_s / sqrt(D_s) without materialising M~
            if "folded" not in aux:  # once per call: every round shares it
                aux["folded"] = self.fold_for(state)
            settled = state is not None and state.mass_settled[r]
            combined, sums = ws.read_recomputed(u, carry, aux["folded"], mass_settled=settled)  # u + c
            self.keep_sums(state, r, sums)
            if state is not None and not settled and state.sums[r] is not None:  # one check until it holds
                state.mass_settled[r] = bool((state.sums[r][..., -1] >= ws.ws_eps).all())
            return ws.combine_norm(combined)
        gate, value, query = ws.project(u)
        sums = ws.prefix_sums(gate, value, carry)
        self.keep_sums(state, r, sums)
        alpha = ws.slot_weights(query)
        memory = ws.memory(sums)
        if r > 0:  # eq. 5: blend with the previous round's summary at the same position
            rho = ws.rho(r)
            memory = rho * aux["memory"] + (1 - rho) * memory
        aux["memory"] = memory
        return ws.combine_norm(u + ws.read(alpha, memory))

    def call_aux(self) -> dict:
        return {} if self.retain else {"folded": self.workspace.fold()}  # parameter-only: every round reads it

    def round_extra_flops(self) -> dict[str, float]:
        """The anchor plus the workspace: one projection to gates, values and the query side, then the read.
        Recomputed (read_recomputed): the projection yields slot logits, gates and [v | 1] per slot, S + S +
        S (m+1) columns; the read mixes S slots of m (2 S m) and projects m -> d. With retention (project /
        slot_weights / read): gates, values and the query (S + S m + m columns), the slot address q . k_s
        (2 m S), the mix (2 S m) and the output projection."""
        c = self.config
        d, S, m = c.dim, c.slots, c.slot_dim
        columns = S + S * m + m if self.retain else 2 * S + S * (m + 1)
        address = linear_flops(m, S) if self.retain else 0
        return {**super().round_extra_flops(), "workspace write+query": linear_flops(d, columns),
                "workspace read": address + linear_flops(S, m) + linear_flops(m, d)}

    def call_flops(self) -> dict[str, float]:
        c = self.config  # Workspace.fold: the slot keys times the query projection, k_s^T W_q (S x m x d)
        return {} if self.retain else {"workspace fold": c.slots * linear_flops(c.slot_dim, c.dim)}

    def fixed_state_bytes(self, rounds: int, size: int) -> dict[str, int]:
        c = self.config  # the running sums [N | D] of every round, (S, m+1) per sequence
        return {"workspace sums": rounds * c.slots * (c.slot_dim + 1) * size}

    def fold_for(self, state: LoopState | None) -> tuple[torch.Tensor, ...]:
        """Workspace.fold(), reused across the decode calls of one state while no parameter changed (the
        key holds each parameter's identity and in-place version counter); recomputed whenever gradients
        are on, so training never reads a stale or detached fold."""
        ws = self.workspace
        if state is None or torch.is_grad_enabled():
            return ws.fold()
        # the parameters' own dicts, not ws.parameters(): that generator walks the module tree each call
        key = tuple((id(p), p._version) for module in self.workspace_modules() for p in module._parameters.values()
                    if p is not None)
        if state.folded is None or state.folded[0] != key:
            state.folded = (key, ws.fold())
        return state.folded[1]

    def workspace_modules(self) -> list[nn.Module]:
        """The workspace's modules, listed once (the tree does not change after construction)."""
        if "_workspace_modules" not in self.__dict__:
            self.__dict__["_workspace_modules"] = list(self.workspace.modules())  # not a registered submodule
        return self.__dict__["_workspace_modules"]

    @staticmethod
    def keep_sums(state: LoopState | None, r: int, sums: torch.Tensor) -> None:
        """Round r's running sums after the last new position; a copy when the call had several positions,
        so the state does not pin the whole chunk's sums."""
        if state is not None and sums.shape[1]:  # an empty chunk leaves the running sums as they were
            state.sums[r] = sums[:, -1].clone() if sums.shape[1] > 1 else sums[:, -1]


@register("workspace_retention", LoopConfig,
          test_overrides=dict(dim=24, heads=4, ffn_dim=40, rounds=4, slots=3, slot_dim=5, context_length=40),
          test_depths=(1, 4, 6))
class RetentionWorkspace(WorkspaceLoop):
    """Workspace whose summaries blend with the previous round's: M^r = rho_r M^{r-1} + (1-rho_r) M~^r."""

    retain = True
