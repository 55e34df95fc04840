"""The protocol every autoregressive model implements (family "lm").

    logits = model(tokens)                      # (batch, length) -> (batch, length, vocab)
    logits = model(tokens, rounds=8)            # looped models: depth is a call argument
    state  = model.init_state(batch)            # empty incremental state (per-round caches inside)
    logits = model.decode(prompt, state)        # prefill: consumes (batch, n) tokens, advances state
    logits = model.decode(next_token, state)    # then one (or a chunk of) token(s) at a time
    model.parameter_counts()                    # {"component": count, ..., "total": count}
    model.ledger(context, depth)                # optional: FLOPs and decoding-state bytes (models/ledger.py)
    model.trace(tokens, rounds=8)               # optional: per-round states and readouts (models/trace.py)
    model.objective(model(tokens, with_exits=True), targets)  # optional (has_objective): the training loss

Incremental decoding must equal the full forward pass (tests/drivers check it for every registered arch).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .trace import RoundTrace, no_trace


# Test-time depth beyond this many times the trained one is refused (as `looped depth --max-factor` is capped).
MAX_ROUNDS_FACTOR = 100


@dataclass
class LMConfig:
    """Fields shared by every byte-level LM config; subclasses add their own and call super().validate()."""

    arch: str = ""
    vocab_size: int = 257
    context_length: int = 512

    def validate(self) -> None:
        if self.vocab_size < 2:
            raise ValueError(f"model.vocab_size must be >= 2, got {self.vocab_size}")
        if self.context_length < 1:
            raise ValueError(f"model.context_length must be >= 1, got {self.context_length}")

    def require_positive(self, *names: str) -> None:
        """One-line error naming the first of these integer fields below 1."""
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")

    def require_rope_heads(self) -> None:
        """One-line error unless `dim` splits over `heads` into an even head width (RoPE rotates pairs)."""
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise ValueError(f"model.dim: width {self.dim} over {self.heads} heads must give an even head width "
                             f"(RoPE)")


@dataclass
class DecodeState:
    """Base incremental state: how many positions were consumed, and the depth it was built for."""

    batch: int
    position: int = 0
    rounds: int | None = None


class CausalLM(nn.Module):
    """Base class: input checks and parameter accounting shared by every LM."""

    arch_name: str = ""
    config: Any
    saves_state: bool = False  # True where state_to_tensors / state_from_tensors are implemented
    # Methods holding pure tensor arithmetic that `train.compile` compiles (looped/models/compile.py):
    # no token validation, no incremental state, no loop over a depth that changes between calls.
    compiled_methods: tuple[str, ...] = ()

    def decode_at_depth(self, tokens: torch.Tensor, state, run, run_early_exit) -> torch.Tensor:
        """`decode` of a model with a test-time depth and a per-position early exit: `run(tokens, rounds, state)`
        at the state's fixed depth, or with `state.exit_threshold` set `run_early_exit(tokens, rounds, state,
        threshold)`, whose rounds used per position (batch, n) are appended to `state.rounds_used`."""
        self.check_tokens(tokens, start=state.position)
        if state.exit_threshold is None:
            logits = run(tokens, state.rounds, state)
        else:
            logits, used = run_early_exit(tokens, state.rounds, state, state.exit_threshold)
            state.rounds_used.append(used)
        state.position += tokens.shape[1]
        return logits
    # The update the trainer is about to make (0-based; it sets this before every update): what a training depth
    # schedule that changes over training reads (models/depth_schedule.py). 0 outside the trainer.
    training_update: int = 0
    # True where training minimises `model.objective(model(inputs, with_exits=True), targets)` rather than the
    # cross-entropy of forward's logits (exit_gate_loop: an expected loss over exit steps); LMTrainTask.loss reads it
    has_objective: bool = False

    # --- protocol (subclasses implement) ---------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        raise NotImplementedError

    def init_state(self, batch: int, *, rounds: int | None = None) -> DecodeState:
        raise NotImplementedError

    def decode(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        raise NotImplementedError

    # --- optional capabilities: declared, with one-line errors where a model lacks them -----------------------
    def forward_early_exit(self, tokens: torch.Tensor, threshold: float, *,
                           rounds: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, rounds used per position) under the early-exit rule (looped rows of seed 000)."""
        raise ValueError(f"{self.arch_name or type(self).__name__} has no early exit (looped rows of seed 000 do)")

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        """Per-round states and readouts of a full forward (models/trace.py)."""
        raise no_trace(self)

    def state_to_tensors(self, state: DecodeState) -> tuple[dict[str, torch.Tensor], dict]:
        """(tensors, JSON-able metadata) of a decode state, to save it (`looped continue`)."""
        raise ValueError(f"{self.arch_name or type(self).__name__} cannot save its decode state "
                         "(rlt, rlt0 and mixture_of_recursions can)")

    def state_from_tensors(self, tensors: dict[str, torch.Tensor], meta: dict) -> DecodeState:
        """The decode state state_to_tensors saved; ValueError naming the first field that does not fit."""
        raise ValueError(f"{self.arch_name or type(self).__name__} cannot restore a decode state "
                         "(rlt, rlt0 and mixture_of_recursions can)")

    STATE_FIELDS: tuple[str, ...] = ()  # config fields a saved decode state must share with the model reading it

    def check_state_fits(self, meta: dict) -> None:
        """ValueError naming the first of STATE_FIELDS a saved state's metadata disagrees on, or a position past
        the context length (used by state_from_tensors of the models that save their state)."""
        for name in self.STATE_FIELDS:
            if name not in meta or meta[name] != getattr(self.config, name):
                raise ValueError(f"state does not fit this model: {name} is {meta.get(name)!r} in the state, "
                                 f"{getattr(self.config, name)!r} here")
        if int(meta["position"]) > self.config.context_length:
            raise ValueError(f"state does not fit this model: it holds {meta['position']} positions, more than "
                             f"model.context_length {self.config.context_length}")

    @property
    def default_rounds(self) -> int | None:
        """Depth used when `rounds` is not given; None for models with a fixed depth."""
        return None

    # --- shared helpers --------------------------------------------------------------------------
    def check_tokens(self, tokens: torch.Tensor, start: int = 0) -> None:
        """One-line errors for token ids out of range and sequences longer than the context."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, length), got shape {tuple(tokens.shape)}")
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"tokens must be integer ids, got {tokens.dtype}")
        end = start + tokens.shape[1]
        if end > self.config.context_length:
            raise ValueError(f"sequence too long: {end} positions > context_length {self.config.context_length}")
        if tokens.numel():
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.config.vocab_size:
                bad = low if low < 0 else high
                raise ValueError(f"token id {bad} out of range [0, {self.config.vocab_size})")

    def resolve_rounds(self, rounds: int | None) -> int | None:
        if rounds is None:
            return self.default_rounds
        if self.default_rounds is None:
            raise ValueError(f"{self.arch_name} has a fixed depth; `rounds` is not supported")
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        if rounds > MAX_ROUNDS_FACTOR * self.default_rounds:  # `--rounds 1000000000` ran for ever, silently
            raise ValueError(f"rounds {rounds} is more than {MAX_ROUNDS_FACTOR} x the trained depth "
                             f"({self.default_rounds}); `looped depth` sweeps up to that")
        return int(rounds)

    def parameter_components(self) -> dict[str, list[str]]:
        """Component -> parameter-name prefixes; default: one component per top-level child/parameter."""
        return {name: [name] for name, _ in self.named_children()} | {
            name: [name] for name, _ in self.named_parameters(recurse=False)}

    def parameter_counts(self) -> dict[str, int]:
        """Trainable parameters by component plus 'total'; every parameter lands in exactly one component."""
        counts, claimed = {}, set()
        for component, prefixes in self.parameter_components().items():
            total = 0
            for name, p in self.named_parameters():
                if any(name == pre or name.startswith(pre + ".") for pre in prefixes):
                    if name in claimed:
                        raise RuntimeError(f"parameter {name} counted in two components")
                    claimed.add(name)
                    total += p.numel()
            counts[component] = total
        missing = [n for n, _ in self.named_parameters() if n not in claimed]
        if missing:
            raise RuntimeError(f"parameters in no component: {missing[:3]}")
        counts["total"] = sum(p.numel() for p in self.parameters())
        return counts
