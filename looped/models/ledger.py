"""Compute ledger: analytic forward / training FLOPs and decoding-state bytes of a model, from its config.

Every architecture describes its own compute (`model.ledger(context, depth)`, a method of the model class, so a
new architecture registers its own); this module holds the shared record, the counting conventions and the
renderer that `looped params` prints.

Conventions
  FLOPs        a multiply-add counts 2. Only matrix products are counted: linear layers, attention's
               scores (Q K^T) and values (A V), and the parameter-only products a forward call does once
               (e.g. the workspace fold). Elementwise work (norms, activations, softmax, residual adds, RoPE,
               gate nonlinearities) and embedding lookups are left out: they are O(d) per token against the
               O(d^2) of the products. That is what torch.utils.flop_counter.FlopCounterMode counts, which the
               tests hold the ledger to (within 2 %).
  attention    counted dense, as the kernels compute it: 2 k d for the scores plus 2 k d for the values per
               query and layer, k = the keys the kernel is given. In a forward of L tokens every query is given
               all L keys: a causal mask does not halve the count (nor does a sliding-window mask).
  per token    at context L: the FLOPs of one forward over a sequence of L tokens, divided by L.
  shared       a block applied R times counts R times (FLOPs are work done, not parameters held).
  training     per update = 3 x forward FLOPs at the trained depth x batch x tokens per sequence (the
               backward pass costs about twice the forward: one product for the input gradient and one for the
               weight gradient per forward product). Truncated backprop through time (RLT `truncate_bptt`)
               cuts the gradient between spans but still back-propagates through every step, so the factor
               stays 3. A sampled depth or truncated backprop through depth (the looped rows' `depth_schedule`,
               prelude_coda's draw) sets `training_rounds` = (E[R], E[k]): a training forward runs R rounds and
               back-propagates through the last k of them, so per token it costs 3 x the work outside the
               rounds + (E[R] + 2 E[k]) x a round's (once-per-call work: 3 x, it is done with gradients).
               stable_loop draws a depth per sequence and runs the batch for the longest: `per_sequence_depth`
               (mean, backprop) makes (E[R], E[k]) those of the max over a micro-batch. Where the training
               forward reads out differently from the inference one (exit_gate_loop: a head and an exit gate
               after every step), `training_outside` replaces `outside` in the training figure.
  state bytes  the tensors incremental decoding keeps per sequence after L tokens (batch 1): KV caches
               grow by `state_per_token` bytes a position, the rest (workspace sums, RLT windows and feedback,
               LSTM h and c) is `state_fixed`. Caches that preallocate the whole context hold more memory than
               this; the ledger counts the entries written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from ..nn import KVCache
from .depth_schedule import per_sequence_depth

TRAINING_FACTOR = 3  # forward + backward (about 2 x forward)


def linear_flops(d_in: int, d_out: int) -> int:
    """One token through a d_in -> d_out matrix."""
    return 2 * d_in * d_out


def attention_flops(keys: float, dim: int) -> float:
    """One query against `keys` keys over all heads of total width `dim`: scores plus weighted values."""
    return 4 * keys * dim


def block_flops(dim: int, ffn_dim: int, keys: float, *, mlp: str = "gelu") -> dict[str, float]:
    """Per token through one pre-norm block (looped.nn.PreNormBlock or the RLT block): fused QKV and output
    projections, dense attention over `keys` keys, and a two-matrix (GELU / ReLU) or three-matrix (SwiGLU) MLP."""
    mlp_matrices = 3 if mlp == "swiglu" else 2
    return {"attention projections": linear_flops(dim, 3 * dim) + linear_flops(dim, dim),
            "attention scores+values": attention_flops(keys, dim),
            "mlp": mlp_matrices * linear_flops(dim, ffn_dim)}


def add_parts(total: dict[str, float], more: dict[str, float]) -> dict[str, float]:
    for name, flops in more.items():
        total[name] = total.get(name, 0.0) + flops
    return total


@dataclass
class Ledger:
    """Forward FLOPs per token at one context length and depth, split by part and by round, and decoding state."""

    arch: str
    context: int  # L: the sequence length the per-token figures are for
    depth: int | None  # rounds / steps the figures are for; None = a fixed-depth model
    outside: dict[str, float]  # per-token FLOPs outside the repeated unit (embedding/head, encoder, router, ...)
    rounds: list[dict[str, float]]  # per-token FLOPs of each round / step / layer, by part
    round_name: str = "round"  # what one entry of `rounds` is: "round", "layer", ...
    per_call: dict[str, float] = field(default_factory=dict)  # FLOPs once per forward call, whatever its length
    state_per_token: dict[str, int] = field(default_factory=dict)  # decoding bytes per sequence and position
    state_fixed: dict[str, int] = field(default_factory=dict)  # decoding bytes per sequence, any position
    notes: list[str] = field(default_factory=list)  # what the count leaves out or treats specially
    decodes: bool = True  # False: the model reads whole inputs (reasoning rows) and keeps no decoding state
    # a training depth schedule: the rounds a training forward runs and back-propagates through, in expectation
    # (None: those of `rounds`, every one back-propagated)
    training_rounds: tuple[float, float] | None = None
    # stable_loop: (mean, backprop) of per-sequence Poisson depths; training_rounds then depends on the micro-batch
    per_sequence_depth: tuple[int, int] | None = None
    # per-token FLOPs outside the rounds of a training forward, where its readout differs from `outside`'s
    training_outside: dict[str, float] | None = None

    @property
    def parts(self) -> dict[str, float]:
        """Per-token forward FLOPs by part, summed over rounds."""
        total = dict(self.outside)
        for one in self.rounds:
            add_parts(total, one)
        return total

    @property
    def per_token(self) -> float:
        return sum(self.parts.values())

    def forward_flops(self, batch: int, calls: int = 1) -> float:
        """Forward over `batch` sequences of `context` tokens, in `calls` forward calls (micro-batches)."""
        return self.per_token * batch * self.context + calls * sum(self.per_call.values())

    def training_flops(self, batch: int, calls: int = 1) -> float:
        """One update on `batch` sequences of `context` tokens in `calls` micro-batches (module docstring)."""
        outside = sum((self.outside if self.training_outside is None else self.training_outside).values())
        rounds = sum(sum(r.values()) for r in self.rounds)
        ran_backpropagated = self.training_rounds
        if self.per_sequence_depth is not None:
            ran_backpropagated = per_sequence_depth(max(1, batch // calls), *self.per_sequence_depth)
        if ran_backpropagated is None:
            per_token = TRAINING_FACTOR * (outside + rounds)
        else:
            ran, backpropagated = ran_backpropagated
            per_round = rounds / len(self.rounds)  # the rounds of a looped model are all equal
            per_token = TRAINING_FACTOR * outside + (ran + (TRAINING_FACTOR - 1) * backpropagated) * per_round
        return per_token * batch * self.context + calls * TRAINING_FACTOR * sum(self.per_call.values())

    def state_bytes(self, context: int | None = None) -> int:
        """Decoding state of one sequence after `context` tokens (default: this ledger's context)."""
        context = self.context if context is None else context
        return sum(self.state_per_token.values()) * context + sum(self.state_fixed.values())

    def to_dict(self, *, batch: int = 1, state_contexts: tuple[int, ...] = ()) -> dict:
        out = dataclasses.asdict(self)
        out.update(parts=self.parts, forward_flops_per_token=self.per_token,
                   round_flops_per_token=[sum(r.values()) for r in self.rounds],
                   training_flops_per_update={"batch": batch, "tokens": batch * self.context,
                                              "flops": self.training_flops(batch)},
                   state_bytes={str(L): self.state_bytes(L) for L in (*state_contexts, self.context)}
                   if self.decodes else None)
        return out


def model_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """`model.ledger(context, depth)`, or a ValueError naming the architecture that does not describe one."""
    method = getattr(model, "ledger", None)
    if method is None:
        raise ValueError(f"{getattr(model, 'arch_name', type(model).__name__)} has no compute ledger")
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    return method(context, depth)


def call_ledger(model, tokens: torch.Tensor, depth: int | None = None) -> Ledger:
    """The ledger of the call `model(tokens, rounds=depth)`: a model whose compute follows a router (MoR) describes
    the routing these tokens get (`model.routed_ledger`); every other model's depends on the length and depth only."""
    routed = getattr(model, "routed_ledger", None)
    if routed is not None:
        return routed(tokens, depth)
    return model_ledger(model, tokens.shape[1], depth)


def item_bytes(model) -> int:
    """Bytes of one element of the model's floating-point state (its parameters' dtype; float32 if none)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.element_size()
    return 4


# --- what a decode state holds --------------------------------------------------------------------------
def held_state_bytes(state) -> int:
    """Bytes of the tensors a decode state holds, walking its fields: a KV cache counts the entries written
    (not its preallocated capacity); fields a state class lists in `cached_fields` (parameter-derived caches,
    not per-sequence state) are skipped."""
    return _held(state, set())


def _held(obj, seen: set[int]) -> int:
    if obj is None or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, KVCache):
        written = obj.length if obj.window is None else obj.kept
        per_slot = obj.keys[:, :, :1].numel() * obj.keys.element_size()
        return 2 * written * per_slot
    if isinstance(obj, (list, tuple)):
        return sum(_held(item, seen) for item in obj)
    if dataclasses.is_dataclass(obj):
        skip = set(getattr(obj, "cached_fields", ()))
        return sum(_held(getattr(obj, f.name), seen) for f in dataclasses.fields(obj) if f.name not in skip)
    return 0


# --- rendering ------------------------------------------------------------------------------------------
def _si(value: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} "


def _render_state(ledger: Ledger, state_contexts: tuple[int, ...]) -> list[str]:
    per_token, fixed = sum(ledger.state_per_token.values()), sum(ledger.state_fixed.values())
    parts = ", ".join(f"{name} {size:,}" for name, size in {**ledger.state_per_token, **ledger.state_fixed}.items())
    lines = [f"decoding state per sequence: {per_token:,} bytes per token + {fixed:,} bytes ({parts})"]
    for L in dict.fromkeys((*state_contexts, ledger.context)):
        lines.append(f"  at context {L:,}: {ledger.state_bytes(L):,} bytes")
    return lines


def render(ledger: Ledger, *, batch: int, state_contexts: tuple[int, ...] = ()) -> str:
    """The ledger as text: per part, per round, training FLOPs per update, state bytes."""
    depth = "" if ledger.depth is None else f", depth {ledger.depth}"
    lines = [f"forward FLOPs per token at context {ledger.context:,}{depth}: {_si(ledger.per_token)}FLOP"]
    total = ledger.per_token or 1.0
    for name, flops in ledger.parts.items():
        lines.append(f"  {name:<28} {_si(flops):>10}FLOP  {100 * flops / total:5.1f} %")
    if ledger.rounds:
        sums = [_si(sum(r.values())).strip() for r in ledger.rounds]
        per_round = f"{len(sums)} x {sums[0]}" if len(set(sums)) == 1 else ", ".join(sums)
        lines.append(f"per {ledger.round_name}: {per_round} FLOP per token")
    for name, flops in ledger.per_call.items():
        lines.append(f"once per forward call: {name} {_si(flops)}FLOP")
    how = "3 x forward" if ledger.training_outside is None else "3 x forward with the training readout"
    if ledger.per_sequence_depth is not None:
        how = "per-sequence depths: the longest of each micro-batch runs"
    elif ledger.training_rounds is not None:
        ran, backpropagated = ledger.training_rounds
        how = f"depth schedule: {ran:.3g} rounds forward, {backpropagated:.3g} back-propagated on average"
    lines.append(f"training FLOPs per update ({batch} x {ledger.context:,} tokens, {how}): "
                 f"{_si(ledger.training_flops(batch))}FLOP")
    lines += _render_state(ledger, state_contexts) if ledger.decodes else ["no decoding state (reads whole inputs)"]
    lines += [f"note: {note}" for note in ledger.notes]
    return "\n".join(lines)
