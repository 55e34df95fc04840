"""A looped LM with a learned exit gate (Zhu et al. 2025, "Scaling Latent Reasoning via Looped Language
Models", the Ouro LoopLM, arXiv 2510.25741): registry name `exit_gate_loop`.

A stack of L layers M^L is shared across T recurrent steps; after each step the exit gate gives the probability
of stopping there given no earlier stop:

    h^(0) = E(x);  h^(t) = M^L(h^(t-1))                                          t = 1 .. T
    logits^(t) = W_LM N_f(h^(t));  lambda_t = sigmoid(w_g . N_f(h^(t)) + b_g)
    S_t = prod_{j<=t} (1 - lambda_j);  p(t) = lambda_t S_{t-1} (t < T),  p(T) = S_{T-1}  (the remaining mass)

Each layer is the paper's: multi-head attention with RoPE, a SwiGLU FFN, and RMSNorm before *and* after each
sublayer ("sandwich" norm): x + N_2(Attn(N_1(x))), then the same around the FFN. No biases in the layers.

Training, stage I of the paper (`objective`): per position i the expected next-token loss under p minus beta
times the entropy of p, sum_t p_i(t) L_i^(t) - beta H(p_i), averaged over positions.

Stage II (`train.exit_gate_stage: 2`, from a stage-I run by `train.init_from`; `train_gate_only` switches the
model): the LM is frozen and only the gate learns, from how much the next step improves each position's loss:

    I_i^(t) = max(0, L_i^(t) - L_i^(t+1))              (detached: the LM is not trained)
    w_i^(t) = sigmoid(k (I_i^(t) - gamma))              the probability that continuing past step t is worth it
    loss_i  = mean_{t<T} -[w_i^(t) log(1 - lambda_i^(t)) + (1 - w_i^(t)) log lambda_i^(t)]

k = `train.exit_gate_slope` (default 50) and gamma = `train.exit_gate_margin` (default 0.005, in nats), the
paper's values as we read them. Choices where the paper leaves details open (tested in
tests/test_exit_gate_stage2.py):
  * the paper writes the improvement from step t-1 to t; it trains the gate read after step t-1 here, the gate
    that decides whether step t runs, so steps 1 .. T-1 get a target and step T's gate gets none (the last step
    always exits, its lambda is unused);
  * the per-step terms are averaged over the T-1 steps, then over positions (as stage I).

Inference: `forward` returns step T's logits (all steps; `rounds` changes T at test time). `forward_early_exit`
(and a decode state made with `exit_threshold`) applies the paper's rule: a position exits at the first step
whose cumulative exit probability 1 - S_t exceeds the threshold q (q >= 1: never early; the last step always
exits). An exited position's state is frozen and its output is its exit step's logits; it still runs through the
stack in later steps (from its frozen state) so that later positions find every step's keys and values, the
policy of the seed-000 early exit (loop.py). Every decision at position i depends on positions <= i only, so
incremental decoding equals the full forward with or without early exit. In a batch the steps run in lockstep
(loop_exit.py): an exited position skips its last layer's query and FFN, the head and the gate, which is all it
can skip while its keys/values stay what the single-row rule gives (tests/test_exit_families.py).

Choices where the paper leaves details open (each tested in tests/test_exit_gate.py):
  * the gate reads the state after the final norm N_f (what the head reads), per position;
  * the gate's bias starts at 0 (lambda = 0.5: p = 1/2, 1/4, ..., the last step the remainder);
  * the objective averages over positions (the paper writes it per sequence x);
  * a test-time depth T' != T uses T' as the last step (it takes the remaining mass);
  * the head is not tied to the embedding (`looped params` counts both).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import KVCache, MultiHeadAttention, RMSNorm, SwiGLU
from ..nn.block import SelectedPositions
from .base import CausalLM, DecodeState, LMConfig
from .ledger import Ledger, block_flops, item_bytes, linear_flops
from .loop_exit import CumulativeGate, Selection, run_lockstep, scatter, stack_selected
from .registry import register
from .trace import RoundTrace


@dataclass
class ExitGateConfig(LMConfig):
    arch: str = "exit_gate_loop"
    dim: int = 256
    heads: int = 8
    ffn_dim: int = 688  # SwiGLU hidden width
    layers: int = 2  # L: the shared stack
    rounds: int = 4  # T: recurrent steps at training
    entropy_weight: float = 0.05  # beta of the stage-I objective
    norm_eps: float = 1e-6
    rope_base: float = 10000.0  # Ouro's released configs use 1e6 (for a 64K context)

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "ffn_dim", "layers", "rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ValueError(f"model.dim: width {self.dim} is not divisible by heads {self.heads}")
        if (self.dim // self.heads) % 2:
            raise ValueError(f"model.dim / model.heads = {self.dim // self.heads}: RoPE needs an even head width")
        if not self.rope_base > 0:
            raise ValueError(f"model.rope_base must be > 0, got {self.rope_base}")
        if self.entropy_weight < 0:
            raise ValueError(f"model.entropy_weight must be >= 0, got {self.entropy_weight}")


@dataclass
class ExitGateState(DecodeState):
    caches: list[list[KVCache]] = field(default_factory=list)  # [step][layer]
    exit_threshold: float | None = None
    rounds_used: list[torch.Tensor] = field(default_factory=list)  # (batch, n) per decode call, with early exit
    cached_fields = ("rounds_used",)  # a record, not per-sequence state


@dataclass
class ExitSteps:
    """Every step's readout of one forward: what the training objective needs."""

    logits: list[torch.Tensor]  # T x (batch, length, vocab)
    exit_probs: torch.Tensor  # lambda_t, (batch, length, T)


@dataclass(frozen=True)
class GateTarget:
    """Stage II's target w = sigmoid(slope (improvement - margin)): k and gamma of the module docstring."""

    slope: float = 50.0
    margin: float = 0.005  # nats of loss improvement that make one more step worth it (w = 1/2 there)


def step_losses(steps: ExitSteps, targets: torch.Tensor) -> torch.Tensor:
    """L^(t) per position, float32: T x (batch, length, vocab) logits, (batch, length) targets -> (batch, length, T)."""
    return torch.stack([F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
                        for logits in steps.logits], dim=-1)


def continuation_targets(losses: torch.Tensor, target: GateTarget) -> torch.Tensor:
    """w^(t) = sigmoid(k (max(0, L^(t) - L^(t+1)) - gamma)) for t = 1 .. T-1: (..., T) -> (..., T-1)."""
    improvement = (losses[..., :-1] - losses[..., 1:]).clamp(min=0)
    return torch.sigmoid(target.slope * (improvement - target.margin))


def gate_loss(exit_probs: torch.Tensor, losses: torch.Tensor, target: GateTarget) -> torch.Tensor:
    """Stage II per position: the cross-entropy of lambda^(t) against exiting with probability 1 - w^(t),
    averaged over t = 1 .. T-1 (step T's gate has no next step to judge). (..., T), (..., T) -> (...)."""
    keep_going = continuation_targets(losses, target)
    lam = exit_probs[..., :-1]
    # written out (F.binary_cross_entropy refuses to run under autocast); logs floored at -100 as that loss does
    log_exit, log_stay = lam.log().clamp(min=-100), torch.log1p(-lam).clamp(min=-100)
    return -(keep_going * log_stay + (1 - keep_going) * log_exit).mean(-1)


def exit_distribution(exit_probs: torch.Tensor) -> torch.Tensor:
    """p(t) = lambda_t prod_{j<t} (1 - lambda_j), the last step taking the remaining mass; (..., T) -> (..., T)."""
    survive = torch.cumprod(1 - exit_probs, dim=-1)  # S_t
    before = torch.cat((torch.ones_like(survive[..., :1]), survive[..., :-1]), dim=-1)  # S_{t-1}
    return torch.cat((exit_probs[..., :-1] * before[..., :-1], before[..., -1:]), dim=-1)


class SandwichLayer(SelectedPositions, nn.Module):
    """x + N_2(Attn(N_1(x))), then y + N_4(SwiGLU(N_3(y))): RMSNorm before and after each sublayer."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, eps: float, rope_base: float):
        super().__init__()
        self.attn_in, self.attn_out = RMSNorm(dim, eps), RMSNorm(dim, eps)
        self.attn = MultiHeadAttention(dim, heads, bias=False, rope=True, rope_base=rope_base)
        self.mlp_in, self.mlp_out = RMSNorm(dim, eps), RMSNorm(dim, eps)
        self.mlp = SwiGLU(dim, ffn_dim, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.feed_forward(self.attention_residual(x, self.attn(self.attention_input(x), cache=cache)))

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn_in(x)

    def attention_residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        return x + self.attn_out(attended)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp_out(self.mlp(self.mlp_in(x)))


@register("exit_gate_loop", ExitGateConfig,
          test_overrides=dict(dim=32, heads=4, ffn_dim=40, layers=2, rounds=4, context_length=40),
          test_depths=(1, 4, 6))
class ExitGateLoop(CausalLM):
    """The Ouro LoopLM: a shared stack looped T times, an exit gate after every step (module docstring)."""

    compiled_methods = ("step",)
    has_objective = True  # trained by `objective` on forward(..., with_exits=True), not on forward's logits

    def __init__(self, config: ExitGateConfig):
        super().__init__()
        self.config = config
        d = config.dim
        self.embed = nn.Embedding(config.vocab_size, d)
        self.layers = nn.ModuleList(SandwichLayer(d, config.heads, config.ffn_dim, config.norm_eps, config.rope_base)
                                    for _ in range(config.layers))
        self.final_norm = RMSNorm(d, config.norm_eps)
        self.head = nn.Linear(d, config.vocab_size, bias=False)
        self.gate = nn.Linear(d, 1)
        nn.init.zeros_(self.gate.bias)
        self.gate_target: GateTarget | None = None  # set by train_gate_only: the objective is stage II's

    def train_gate_only(self, target: GateTarget) -> None:
        """Stage II: freeze every parameter but the gate's (an optimizer built afterwards sees only those) and
        make `objective` the gate's loss against `target`."""
        if self.config.rounds < 2:
            raise ValueError("train.exit_gate_stage 2 needs model.rounds >= 2 (the targets compare consecutive steps)")
        for name, p in self.named_parameters():
            p.requires_grad_(name.startswith("gate."))
        self.gate_target = target

    @property
    def default_rounds(self) -> int:
        return self.config.rounds

    # one step ------------------------------------------------------------------------------------------
    def step(self, h: torch.Tensor) -> torch.Tensor:
        """h^(t) = M^L(h^(t-1)) without a cache: the pure region `train.compile` compiles."""
        for layer in self.layers:
            h = layer(h)
        return h

    def cached_step(self, h: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
        if caches is None:
            return self.step(h)
        for layer, cache in zip(self.layers, caches):
            h = layer(h, cache)
        return h

    def readout(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, lambda (batch, length)) of a step's state."""
        normed = self.final_norm(h)
        return self.head(normed), torch.sigmoid(self.gate(normed)).squeeze(-1)

    # protocol ------------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None, with_exits: bool = False):
        """Step T's logits; with_exits=True: ExitSteps (every step's logits and exit probability) for training."""
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        h = self.embed(tokens)
        if with_exits:
            logits, lambdas = [], []
            for _ in range(rounds):
                h = self.step(h)
                step_logits, lam = self.readout(h)
                logits.append(step_logits)
                lambdas.append(lam)
            return ExitSteps(logits, torch.stack(lambdas, dim=-1))
        for _ in range(rounds):
            h = self.step(h)
        return self.head(self.final_norm(h))

    def objective(self, steps: ExitSteps, targets: torch.Tensor) -> torch.Tensor:
        """The training objective (stage I, or stage II after `train_gate_only`), averaged over every position
        (task kind "lm")."""
        return self.position_objective(steps, targets).mean()

    def position_objective(self, steps: ExitSteps, targets: torch.Tensor) -> torch.Tensor:
        """The objective per position in float32: (batch, length), so that a task that scores selected targets
        only (kind "sequence") can average it its own way. Targets must be valid ids.
        Stage I: sum_t p(t) L^(t) - beta H(p). Stage II: the gate's loss against the improvement targets."""
        losses = step_losses(steps, targets)  # (batch, length, T)
        if self.gate_target is not None:
            return gate_loss(steps.exit_probs.float(), losses.detach(), self.gate_target)
        p = exit_distribution(steps.exit_probs.float())
        entropy = -torch.special.xlogy(p, p).sum(-1)
        return (p * losses).sum(-1) - self.config.entropy_weight * entropy

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.traced_steps(tokens, rounds)

    def traced_steps(self, tokens: torch.Tensor, rounds: int) -> Iterator[RoundTrace]:
        """Each step's state and logits, with lambda_t ("exit probability") and p(t) ("exit mass")."""
        h, survive = self.embed(tokens), None
        for t in range(rounds):
            h = self.step(h)
            logits, lam = self.readout(h)
            before = torch.ones_like(lam) if survive is None else survive
            mass = before if t == rounds - 1 else lam * before
            survive = before * (1 - lam)
            yield RoundTrace(t + 1, h, logits, {"exit probability": lam, "exit mass": mass})

    def forward_early_exit(self, tokens: torch.Tensor, threshold: float, *,
                           rounds: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, steps used per position) under the exit rule: the first step with 1 - S_t > threshold."""
        check_threshold(threshold)
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.run_early_exit(tokens, rounds, None, threshold)

    def run_early_exit(self, tokens: torch.Tensor, rounds: int, state: ExitGateState | None,
                       threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, steps used) with exited positions computing only what later queries read (loop_exit.py)."""
        return run_lockstep(GateSteps(self, tokens, state), CumulativeGate(threshold), rounds, tokens.shape,
                            tokens.device, decoding=state is not None)

    def init_state(self, batch: int, *, rounds: int | None = None,
                   exit_threshold: float | None = None) -> ExitGateState:
        rounds = self.resolve_rounds(rounds)
        if exit_threshold is not None:
            check_threshold(exit_threshold)
        capacity = self.config.context_length
        caches = [[layer.attn.new_cache(batch, capacity) for layer in self.layers] for _ in range(rounds)]
        return ExitGateState(batch=batch, rounds=rounds, caches=caches, exit_threshold=exit_threshold)

    def run_cached(self, tokens: torch.Tensor, rounds: int, state: ExitGateState) -> torch.Tensor:
        """`rounds` steps on the state's per-step KV caches, read out after the last."""
        h = self.embed(tokens)
        for t in range(rounds):
            h = self.cached_step(h, state.caches[t])
        return self.head(self.final_norm(h))

    def decode(self, tokens: torch.Tensor, state: ExitGateState) -> torch.Tensor:
        return self.decode_at_depth(tokens, state, self.run_cached, self.run_early_exit)

    # compute ledger (looped/models/ledger.py) ------------------------------------------------------------
    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """The forward at `depth` steps: L layers per step, one head. Every step keeps every layer's KV cache.
        Training (`objective` on forward(with_exits=True)) reads out every step: a head and an exit gate each."""
        c, rounds = self.config, self.resolve_rounds(depth)
        layer = block_flops(c.dim, c.ffn_dim, context, mlp="swiglu")
        per_step = {name: c.layers * flops for name, flops in layer.items()}
        size = item_bytes(self)
        head = linear_flops(c.dim, c.vocab_size)
        readouts = {"heads": rounds * head, "exit gates": rounds * linear_flops(c.dim, 1)}
        return Ledger(self.arch_name, context, rounds, {"head": head}, [dict(per_step) for _ in range(rounds)],
                      round_name="step", state_per_token={"kv cache": rounds * c.layers * 2 * c.dim * size},
                      training_outside=readouts)


class GateSteps:
    """ExitSteps (loop_exit.py) of the LoopLM. An exited position's state is frozen, but its keys/values in layer
    l > 1 of a later step depend on what its layer l - 1 reads in that step: every layer but the last still runs
    at every position; the last layer's query and FFN, the head and the gate run at the active ones only."""

    def __init__(self, model: ExitGateLoop, tokens: torch.Tensor, state: ExitGateState | None):
        self.model, self.state, self.h = model, state, model.embed(tokens)  # h (batch, n, dim)

    def refine(self, t: int, select: Selection | None, active: torch.Tensor) -> None:
        caches = self.state.caches[t] if self.state is not None else None
        if select is None:
            self.h = self.model.cached_step(self.h, caches)
        else:
            self.h = scatter(self.h, select, stack_selected(self.model.layers, self.h, select, caches))

    def read(self, t: int, select: Selection | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if select is not None and not len(select.flat):
            return None, None
        h = self.h.flatten(0, 1)  # (batch n, dim)
        return self.model.readout(h if select is None else h.index_select(0, select.flat))


def check_threshold(threshold: float) -> None:
    if not threshold >= 0:
        raise ValueError(f"exit threshold q must be >= 0 (a cumulative exit probability; >= 1: never early), "
                         f"got {threshold}")
