"""Looped byte LMs of seed 000: one shared pre-norm block applied for `rounds` rounds.

Rows (registry names) and what each round feeds the shared block T (seed 000 §3, §5.1, Appendix B):
  shared_loop         h^{r+1} = T(h^r)
  adaptive_exit       the same loop; output = sum_r pi_{i,r} h_i^{r+1}, pi_i = softmax(W_exit e_i + b_exit)
  anchored_loop       u^r = LN_a(h^r + F_a([e; h^r]))  (eq. 2);   h^{r+1} = T(u^r)
  conditioned_dense   h^{r+1} = T((1 + sigma_r) * u^r + tau_r);  readout eq. 14 with tanh(beta_r)
  workspace           h^{r+1} = T(LN_b(u^r + c^r)), c^r read from a gated causal prefix workspace (eqs. 3-7),
                      recomputed every round
  workspace_retention the same with M^r = rho_r M^{r-1} + (1 - rho_r) M~^r (eq. 5)
then o_i = W_LM LN_f(h_i^R) (eq. 8). The anchor is e_i = E(x_i) + p_i (eq. 1).

Test-time depth: `rounds` is a call argument. Per-round parameters trained for R rounds are reused for
rounds r >= R as those of round R-1 (conditioning sigma/tau, retention logits). The readouts that mix
exits keep the *final* exit in the last slot: adaptive exit weights exits 1..R-1 with pi_0..pi_{R-2} and
the final state h^{R'} with the remaining mass; conditioned-dense applies beta_r to exits r+1 <= R-1 only.
With R' = R both are exactly the trained readouts.

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

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import KVCache, LayerNorm, PreNormBlock
from .base import CausalLM, DecodeState, LMConfig
from .ledger import Ledger, block_flops, item_bytes, linear_flops
from .loop_exit import run_early_exit
from .loop_stream import NextToken, stream_decode
from .registry import register
from .trace import RoundTrace


@dataclass
class LoopConfig(LMConfig):
    arch: str = "shared_loop"
    dim: int = 256
    heads: int = 8
    ffn_dim: int = 1024
    rounds: int = 4  # training depth R (a call argument can change it at test time)
    slots: int = 4  # workspace slots S (workspace rows only)
    slot_dim: int = 32  # coordinates per slot m (workspace rows only)
    norm_eps: float = 1e-5
    workspace_eps: float = 1e-6  # epsilon in sqrt(max(D, eps)), eq. 4
    gamma_init: float = 0.5  # workspace read gain, eq. 7
    retention_init: float = 0.2  # rho_r at init: l_r = log(0.2 / 0.8), eq. 5

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "ffn_dim", "rounds", "slots", "slot_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ValueError(f"model.dim: width {self.dim} is not divisible by heads {self.heads}")
        if not 0 < self.retention_init < 1:
            raise ValueError(f"model.retention_init must be in (0, 1), got {self.retention_init}")


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


# A logit whose tanh is exactly 1.0 in float16, bfloat16, float32 and float64 (and finite in all of them)
ONE_LOGIT = 1000.0


class Workspace(nn.Module):
    """Gated causal writes into S slots of m coordinates, read by content address (eqs. 3-7).

    The path is memory-bound (its tensors are as large as the residual stream, its matmuls small), so it is
    written to touch each large tensor as few times as possible:
      * LN_w and LN_q normalise the same u: u is normalised once and each norm's gain and offset fold into
        the projection after it, W (g * x + b) + b' = (W diag g) x + (W b + b'), so the gates, the values
        and the query come from one matmul (exact up to rounding);
      * gated values and gate masses are stacked as (..., S, m+1) so one cumulative sum gives N and D;
      * the recomputed workspace never materialises M~ = N / sqrt(D): the normalisation folds into the
        (batch, length, S) slot weights, sum_s alpha_s N_s / sqrt(D_s).
    """

    def __init__(self, dim: int, slots: int, slot_dim: int, rounds: int, eps: float, ws_eps: float,
                 gamma_init: float, retention_init: float):
        super().__init__()
        self.slots, self.slot_dim, self.ws_eps = slots, slot_dim, ws_eps
        self.write_norm = LayerNorm(dim, eps)  # LN_w
        self.write = nn.Linear(dim, slots + slots * slot_dim)  # [W_g; W_v], [b_g; b_v]
        self.query_norm = LayerNorm(dim, eps)  # LN_q (same eps as LN_w: they share one normalisation)
        self.query = nn.Linear(dim, slot_dim)  # W_q, b_q
        self.keys = nn.Parameter(torch.randn(slots, slot_dim) / math.sqrt(slot_dim))  # k_s ~ N(0, 1/m)
        self.out = nn.Linear(slot_dim, dim)  # W_o, b_o
        self.gamma = nn.Parameter(torch.full((1,), float(gamma_init)))  # 1-D: FSDP cannot shard 0-d
        # R retention logits l_r; the recomputed variant carries but does not use them (Appendix B)
        logit = math.log(retention_init / (1 - retention_init))
        self.retention = nn.Parameter(torch.full((rounds,), logit))
        self.combine_norm = LayerNorm(dim, eps)  # LN_b

    def folded_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[W_g; W_v; W_q] with LN_w's and LN_q's gains and offsets folded in: weight (S + S m + m, d), bias."""
        weight = torch.cat((self.write.weight * self.write_norm.weight, self.query.weight * self.query_norm.weight))
        bias = torch.cat((torch.addmv(self.write.bias, self.write.weight, self.write_norm.bias),
                          torch.addmv(self.query.bias, self.query.weight, self.query_norm.bias)))
        return weight, bias

    def fold(self) -> tuple[torch.Tensor, ...]:
        """Parameter-only work of the fused read (`read_recomputed`), done once per forward / decode call
        because every round shares it: the projection to *slot logits* (the query's rows multiplied by
        k_s / sqrt(m): q . k_s / sqrt(m) = x . (W_q^T k_s) / sqrt(m) + b_q . k_s / sqrt(m)), gates and values,
        and the output projection scaled by gamma. Returns (weight^T (d, S + S + S (m+1)), bias, W_o'^T, b_o');
        the projection's columns are [slot logits | gates | values], so one `split` cuts them."""
        weight, bias = self.folded_projection()
        gv = self.slots + self.slots * self.slot_dim
        keys = self.keys / math.sqrt(self.slot_dim)  # (S, m)
        # each slot's m value rows get a constant row (weight 0, bias ONE_LOGIT): tanh of it is exactly 1, so
        # the projection's tanh yields [v | 1] per slot and one multiply by the gate gives [g v | g]
        S, m, d = self.slots, self.slot_dim, weight.shape[1]
        value_w = torch.cat((weight[S:gv].view(S, m, d), weight.new_zeros(S, 1, d)), dim=1).view(-1, d)
        value_b = torch.cat((bias[S:gv].view(S, m), bias.new_full((S, 1), ONE_LOGIT)), dim=1).view(-1)
        weight = torch.cat((keys @ weight[gv:], weight[:S], value_w))
        bias = torch.cat((keys @ bias[gv:], bias[:S], value_b))
        # stored transposed (views): each round's addmm then needs no transpose of its own
        return weight.t(), bias, (self.gamma * self.out.weight).t(), self.gamma * self.out.bias

    def read_recomputed(self, u: torch.Tensor, carry: torch.Tensor | None, folded: tuple[torch.Tensor, ...],
                        mass_settled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """u + c, with c = gamma (W_o sum_s alpha_s N_s / sqrt(max(D_s, eps)) + b_o), for u (b, l, dim), in as
        few operator calls as the equations allow (a token of decoding pays per call, views included);
        returns u + c (what LN_b normalises) and the sums [N | D] (b, l, S, m+1). The same arithmetic as
        project -> prefix_sums -> slot_weights -> read, regrouped. `mass_settled`: the carry's every D is
        already >= eps, so no D of this call can be below it and the clamp is skipped (decoding)."""
        weight_t, bias, out_weight_t, out_bias = folded
        S, m = self.slots, self.slot_dim
        b, n, d = u.shape
        rows = b * n
        # 2-D matmuls (batch * length rows): a 3-D F.linear costs several more dispatches per call
        flat_u = u.reshape(rows, d)
        x = torch.layer_norm(flat_u, (d,), None, None, self.write_norm.eps)
        logits, gates, values = torch.addmm(bias, x, weight_t).split((S, S, S * (m + 1)), 1)
        gate = torch.sigmoid(gates).unsqueeze(-1)  # (b n, S, 1)
        # [v | 1] (see fold): one multiply by the gate gives [g v | g] (g * 1 is exact), no concatenation
        value_one = torch.tanh(values).view(rows, S, m + 1)
        if n == 1 and carry is not None:  # one position: carry + g [v | 1] in one kernel
            flat = torch.addcmul(carry, gate, value_one)  # (b, S, m+1)
        else:
            flat = gate * value_one
            if n > 1:  # a running sum over one position is the position itself
                flat = flat.view(b, n, S, m + 1).cumsum(dim=1)
                if carry is not None:
                    flat = flat + carry.unsqueeze(1)
                flat = flat.view(rows, S, m + 1)
            elif carry is not None:
                flat = flat + carry
        mass = flat[..., m]  # D (b n, S), a view of the sums
        if mass_settled and carry is not None:
            inverse_norm = mass.rsqrt()
        else:
            inverse_norm = mass.clamp_min(self.ws_eps).rsqrt_()  # in place on the clamp's own output
        if torch.is_grad_enabled():  # autograd keeps softmax's output: no in-place update of it
            weights = torch.softmax(logits, dim=-1) * inverse_norm  # (b n, S)
        else:  # decoding: the same in place, one allocation fewer
            weights = torch.softmax(logits, dim=-1).mul_(inverse_norm)
        if n == 1:  # one position per row: a batched (1 x S) @ (S x m) product is one kernel
            mixed = torch.bmm(weights.unsqueeze(1), flat[..., :m]).view(rows, m)
        else:  # many positions: a broadcast multiply-sum is faster than b n tiny matmuls
            mixed = (weights.unsqueeze(-1) * flat[..., :m]).sum(dim=-2)
        # (u + b_o') + W_o' mixed accumulated in place: no bias copy and no separate residual add
        return (flat_u + out_bias).addmm_(mixed, out_weight_t).view(b, n, d), flat.view(b, n, S, m + 1)

    def project(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch, length, dim) -> gates g (b, l, S), values v (b, l, S, m), query q (b, l, m)  (eqs. 3, 6)."""
        x = F.layer_norm(u, u.shape[-1:], eps=self.write_norm.eps)
        projected = F.linear(x, *self.folded_projection())
        S, m = self.slots, self.slot_dim
        gate = torch.sigmoid(projected[..., :S])
        value = torch.tanh(projected[..., S:S + S * m]).unflatten(-1, (S, m))
        return gate, value, projected[..., S + S * m:]

    def prefix_sums(self, gate: torch.Tensor, value: torch.Tensor, carry: torch.Tensor | None) -> torch.Tensor:
        """Running [N | D] per slot, (batch, length, S, m+1): N = sum_{j<=i} g v, D = sum_{j<=i} g (eq. 4).

        `carry` (batch, S, m+1) holds the sums over earlier chunks (incremental decoding)."""
        gate = gate.unsqueeze(-1)
        sums = torch.cat((gate * value, gate), dim=-1).cumsum(dim=1)
        return sums if carry is None else sums + carry.unsqueeze(1)

    def inverse_norm(self, sums: torch.Tensor) -> torch.Tensor:
        """1 / sqrt(max(D, eps)) per position and slot, (batch, length, S)."""
        return sums[..., -1].clamp_min(self.ws_eps).rsqrt()

    def memory(self, sums: torch.Tensor) -> torch.Tensor:
        """M~ = N / sqrt(max(D, eps)), (batch, length, S, m)  (eq. 4)."""
        return sums[..., :-1] * self.inverse_norm(sums).unsqueeze(-1)

    def slot_weights(self, query: torch.Tensor) -> torch.Tensor:
        """alpha = softmax_s(q . k_s / sqrt(m)), (batch, length, S)  (eq. 6)."""
        return torch.softmax(query @ self.keys.t() / math.sqrt(self.slot_dim), dim=-1)

    def read(self, weights: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """c = gamma (W_o sum_s w_s slots_s + b_o)  (eq. 7); weights (b, l, S), slots (b, l, S, m).

        A broadcast multiply and sum: a batched (1 x S) @ (S x m) matmul per position is 3x slower here."""
        return self.gamma * self.out((weights.unsqueeze(-1) * slots).sum(dim=-2))

    def rho(self, r: int) -> torch.Tensor:
        return torch.sigmoid(self.retention[min(r, len(self.retention) - 1)])


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

    def __init__(self, config: LoopConfig):
        super().__init__()
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
                      state_fixed=self.fixed_state_bytes(rounds, size))

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
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.run_rounds(tokens, rounds, None)

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
