"""The stable-injection looped LM of Prairie et al. 2026 ("Parcae: Scaling Laws For Stable Looped Language Models",
arXiv 2604.12946): registry name `stable_loop`.

A prelude P, a recurrent block R looped T times on a state h, a coda D. The paper reads the loop as a dynamical
system over the residual stream and constrains its linear part so that the state transition has spectral norm
below 1 whatever the weights:

    e       = N_e(P(x))                          prelude blocks, then an RMSNorm on their output (the paper's
                                                 prelude normalisation, against late loss spikes)
    h_0     ~ TN(0, sigma^2) (training) | 0 (eval)
    h_{t+1} = A_bar h_t + B_bar e + R_bar(h_t, e)   t = 0 .. T-1
            = R(A_bar h_t + B_bar e)             R: the core blocks (pre-norm residual), R(u) = u + R_bar
    A_bar   = exp(Delta A),  A = Diag(-exp(log A)),  B_bar = Delta B,  Delta = softplus(delta) > 0 per channel
    p       = softmax(W_E^T N_f(D(C h_T)))       C: a d x d readout of the final state; coda blocks; final
                                                 RMSNorm; the head tied to the embedding

A_bar is diagonal with entries exp(-Delta_i exp(log A_i)) in (0, 1): its spectral norm rho(A_bar) = max_i A_bar_i
is below 1 for every finite value of the parameters (zero-order-hold discretisation of a negative diagonal A; the
input gain B_bar = Delta B is the Euler one). In floating point an entry rounds to exactly 1 when
Delta_i exp(log A_i) falls below the format's epsilon (~6e-8 in fp32); it never exceeds 1. Prior injections are
the cases the constraint rules out: addition (A_bar = I, rho = 1, the state drifts linearly with depth) and
concatenation with a learned adapter (Huginn, `prelude_coda`: rho unconstrained).

Why the state stays bounded at any depth: every residual branch of a pre-norm block reads an RMS-normalised
input, so |R_bar| <= K with K fixed by the weights, and |h_t|_inf <= rho^t |h_0|_inf + (|B_bar e|_inf + K) /
(1 - rho). tests/test_stable_loop.py runs the loop 64 rounds (8x the trained mean) with random and large
parameters: the norms stay bounded, while the same model with A_bar forced to I grows.

Blocks (the released nanochat-based backbone, parcae-small-140m config.json): pre-norm, x + Attn(N1 x), then
+ MLP(N2 x); attention with RoPE (base 50,000) and QK-norm, no biases; a squared-ReLU MLP (W2 ReLU(W1 x)^2). Value
embeddings (`value_embeddings`, on by default): on every other unique layer, counting back from the last one, a
per-layer token table V_l adds to the attention values, v += 2 sigmoid(W_g N1(x)[:32]) V_l[x] (one gate per head;
the first min(32, d) channels). A core layer with one uses it at every round.

Training (`rounds` not given, train mode): each sequence of the batch draws its own depth T_b = max(1,
Poisson(mu_rec)) (`rounds` = mu_rec) and back-propagates through its last k_b = min(T_b, mu_bwd) rounds
(`backprop_rounds` = mu_bwd): the paper's per-sequence depth sampling. The batch runs max_b (T_b - k_b) rounds
without gradients, each sequence updating for its first T_b - k_b of them, then max_b k_b rounds with gradients,
each sequence updating for its first k_b (a finished sequence's state is carried unchanged). At eval, and whenever
`rounds` is passed, every sequence runs that depth (default mu_rec): the test-time depth.

Sources and choices. The equations above are the paper's, as its abstract and published summaries of its method
state them (h_{t+1} = A_bar h_t + B_bar e + R_bar, A_bar = exp(Delta A), B_bar = Delta B, A = Diag(-exp(log A)),
the prelude norm, per-sequence sampling); its full text was not found here. Details from the released
configuration (SandyResearch parcae-small-140m: Poisson depth with mean 8 truncated at 1, backprop depth 4, per
sequence; tied embeddings; value embeddings; initialisation) carry over as facts. Our choices (tested in
tests/test_stable_loop.py where they change what the model computes):
  * B_bar e = Delta * (B e): Delta scales B's output channels (the diagonal Delta of B_bar = Delta B);
  * initialisation: log A = 0 (A = -1), Delta such that A_bar = `init_decay` = sqrt(1/5), B = I (released);
    C = I (its released initialisation was not found); token and value tables N(0, 2 / (5 d)) unscaled, the
    value gates zero (gate 1); every other weight keeps PyTorch's default; B and C are not weight-decayed
    (released: no decay on the injection and C);
  * h_0: truncated-normal noise (sigma = `state_std`, default the embedding's sqrt(2 / (5 d)), as the released
    "like-init") in training only; zero in eval mode, so evaluation and decoding are deterministic and incremental
    decoding equals the full forward exactly;
  * QK-norm with a learned gain, before RoPE (the released one is parameter-free, after RoPE: the same map up to
    the gains, since RMS is rotation invariant): 2 d / heads parameters per layer more;
  * no convergence exit and no saved decode state.

The paper's smallest released configuration (parcae-small-140m: d 768, 6 heads, ReLU^2 width 3,072, vocabulary
32,768, 2 / 2 / 2 layers, tied head, value embeddings on 3 of the 6 layers) is 144,324,672 parameters by these
equations; the paper calls it 140M (test_stable_loop.py builds it on the meta device). The three value tables are
75.5M of it: without them the model is 68.8M. (The paper's comparison with Huginn-style models also trains a
100M Parcae, whose dimensions were not found here.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import KVCache, MultiHeadAttention, RMSNorm, make_mlp
from .base import CausalLM, LMConfig
from .depth_schedule import per_sequence_schedule, sample_depths  # the per-sequence samplers (depth_schedule.py)
from .ledger import Ledger, add_parts, block_flops, item_bytes, linear_flops
from .prelude_coda import PreludeCodaState
from .registry import register
from .trace import RoundTrace

GATE_CHANNELS = 32  # the value gate reads the first 32 channels of the normalised block input (nanochat)


@dataclass
class StableLoopConfig(LMConfig):
    arch: str = "stable_loop"
    dim: int = 256  # width d of the embedding, the blocks and the looped state h
    heads: int = 4  # attention heads
    ffn_dim: int = 1024  # hidden width of the squared-ReLU MLP
    prelude_layers: int = 2  # blocks of the prelude P (run once)
    core_layers: int = 2  # blocks of the recurrent block R (run every round)
    coda_layers: int = 2  # blocks of the coda (run once, on C h_T)
    rounds: int = 8  # mu_rec: the mean training depth (Poisson) and the default depth at eval
    backprop_rounds: int = 4  # mu_bwd: training back-propagates through each sequence's last min(T_b, mu_bwd) rounds
    sample_rounds: bool = True  # training draws each sequence's depth (False: every sequence runs mu_rec)
    init_decay: float = math.sqrt(0.2)  # A_bar at initialisation, every channel (released: sqrt(1/5))
    value_embeddings: bool = True  # per-layer token tables added to the attention values (released backbone)
    state_std: float | None = None  # sigma of h_0 in training; None = the embedding's sqrt(2 / (5 dim))
    tie_embeddings: bool = True
    rope_base: float = 50000.0
    norm_eps: float = 1e-5

    def validate(self) -> None:
        super().validate()
        self.require_positive("dim", "heads", "ffn_dim", "prelude_layers", "core_layers", "coda_layers", "rounds",
                              "backprop_rounds")
        self.require_rope_heads()
        if not 0 < self.init_decay < 1:
            raise ValueError(f"model.init_decay must be in (0, 1) (a stable A_bar), got {self.init_decay}")
        if self.state_std is not None and self.state_std < 0:
            raise ValueError(f"model.state_std must be >= 0, got {self.state_std}")
        if not self.rope_base > 0:
            raise ValueError(f"model.rope_base must be > 0, got {self.rope_base}")

    def embedding_std(self) -> float:
        return math.sqrt(2 / (5 * self.dim))

    def value_layers(self) -> list[int]:
        """Unique layers (prelude 0.., core, coda) with a value table: every other one, the last included."""
        n = self.prelude_layers + self.core_layers + self.coda_layers
        return [i for i in range(n) if i % 2 == (n - 1) % 2] if self.value_embeddings else []


class StableInjection(nn.Module):
    """u = A_bar h + B_bar e with A_bar = exp(Delta A), A = -exp(log A), B_bar = Delta B (module docstring).
    Shapes: h, e (batch, length, dim); the parameters are per channel, B is dim x dim."""

    def __init__(self, dim: int, init_decay: float):
        super().__init__()
        self.log_a = nn.Parameter(torch.zeros(dim))  # log(-A): A = -1 at initialisation
        step = -math.log(init_decay)  # Delta with exp(-Delta) = init_decay
        self.delta = nn.Parameter(torch.full((dim,), step + math.log(-math.expm1(-step))))  # softplus^-1(step)
        self.B = nn.Linear(dim, dim, bias=False)
        with torch.no_grad():
            self.B.weight.copy_(torch.eye(dim))
        self.B.weight.no_weight_decay = True  # the trainer leaves it undecayed (decay would pull B from I to 0)

    def step_size(self) -> torch.Tensor:
        """Delta = softplus(delta) > 0, (dim,)."""
        return F.softplus(self.delta)

    def transition(self) -> torch.Tensor:
        """The diagonal of A_bar = exp(Delta A) = exp(-Delta exp(log A)), (dim,): each entry in (0, 1]."""
        return torch.exp(-self.step_size() * self.log_a.exp())

    def spectral_norm(self) -> torch.Tensor:
        """rho(A_bar) = ||A_bar||_2 = the largest diagonal entry (A_bar is diagonal and positive)."""
        return self.transition().max()

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return self.transition() * h + self.step_size() * self.B(e)


class StableBlock(nn.Module):
    """x + Attn(N1 x), then + MLP(N2 x): RoPE, QK-norm, squared-ReLU MLP, no biases; with a value table, the
    attention values get 2 sigmoid(W_g N1(x)[:32]) V_l[x] added, one gate per head (module docstring)."""

    def __init__(self, c: StableLoopConfig, value_embedding: bool):
        super().__init__()
        self.heads = c.heads
        self.norm1, self.norm2 = RMSNorm(c.dim, c.norm_eps), RMSNorm(c.dim, c.norm_eps)
        self.attn = MultiHeadAttention(c.dim, c.heads, bias=False, rope=True, rope_base=c.rope_base, qk_norm=True,
                                       norm_eps=c.norm_eps)
        self.mlp = make_mlp("relu2", c.dim, c.ffn_dim, bias=False)
        self.value_gate = nn.Linear(min(GATE_CHANNELS, c.dim), c.heads, bias=False) if value_embedding else None
        if self.value_gate is not None:
            nn.init.zeros_(self.value_gate.weight)  # gate 1 at initialisation

    def forward(self, x: torch.Tensor, value: torch.Tensor | None = None,
                cache: KVCache | None = None) -> torch.Tensor:
        h = self.norm1(x)
        values = None
        if self.value_gate is not None:
            gate = 2 * torch.sigmoid(self.value_gate(h[..., :self.value_gate.in_features]))  # (batch, length, heads)
            values = (gate.unsqueeze(-1) * value.unflatten(-1, (self.heads, -1))).flatten(-2)  # (batch, length, dim)
        x = x + self.attn(h, cache=cache, values=values)
        return x + self.mlp(self.norm2(x))


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, values: list, caches: list[KVCache] | None) -> torch.Tensor:
    for j, block in enumerate(blocks):
        x = block(x, values[j], caches[j] if caches is not None else None)
    return x


@register("stable_loop", StableLoopConfig,
          # state_std 0: the compile driver compares two train-mode models, whose h_0 noise would differ
          test_overrides=dict(dim=16, heads=2, ffn_dim=24, prelude_layers=1, core_layers=2, coda_layers=1, rounds=3,
                              backprop_rounds=2, context_length=40, state_std=0.0),
          test_depths=(1, 3, 5))
class StableLoopLM(CausalLM):
    """Prelude -> T rounds of the stable injection and the core on h -> C -> coda (module docstring)."""

    compiled_methods = ("core_iteration",)  # one round of the full forward: every depth reuses its graph

    def __init__(self, config: StableLoopConfig):
        super().__init__()
        self.config = c = config
        self.embed = self.table(c)
        with_values = set(c.value_layers())
        self.prelude = nn.ModuleList(StableBlock(c, i in with_values) for i in range(c.prelude_layers))
        self.prelude_norm = RMSNorm(c.dim, c.norm_eps)  # N_e on e = P(x)
        self.injection = StableInjection(c.dim, c.init_decay)
        first = c.prelude_layers
        self.core = nn.ModuleList(StableBlock(c, first + i in with_values) for i in range(c.core_layers))
        self.readout_proj = nn.Linear(c.dim, c.dim, bias=False)  # C
        with torch.no_grad():
            self.readout_proj.weight.copy_(torch.eye(c.dim))
        self.readout_proj.weight.no_weight_decay = True
        first += c.core_layers
        self.coda = nn.ModuleList(StableBlock(c, first + i in with_values) for i in range(c.coda_layers))
        self.final_norm = RMSNorm(c.dim, c.norm_eps)
        self.value_embeds = nn.ModuleDict({str(i): self.table(c) for i in sorted(with_values)})
        # tied: the head reads the embedding matrix itself (no second tensor: safetensors refuses shared storage)
        self.head = None if c.tie_embeddings else nn.Linear(c.dim, c.vocab_size, bias=False)

    @staticmethod
    def table(c: StableLoopConfig) -> nn.Embedding:
        table = nn.Embedding(c.vocab_size, c.dim)
        nn.init.normal_(table.weight, 0.0, c.embedding_std())
        return table

    @property
    def default_rounds(self) -> int:
        return self.config.rounds

    def parameter_components(self) -> dict[str, list[str]]:
        names = ["embed", "value_embeds", "prelude", "prelude_norm", "injection", "core", "readout_proj", "coda",
                 "final_norm"] + ([] if self.head is None else ["head"])
        return {name: [name] for name in names}

    # pieces ------------------------------------------------------------------------------------------------
    def layer_values(self, tokens: torch.Tensor) -> tuple[list, list, list]:
        """The value-table rows of every unique layer (None without a table), split prelude / core / coda."""
        n_prelude, n_core = self.config.prelude_layers, self.config.core_layers
        n = n_prelude + n_core + self.config.coda_layers
        values = [self.value_embeds[str(i)](tokens) if str(i) in self.value_embeds else None for i in range(n)]
        return values[:n_prelude], values[n_prelude:n_prelude + n_core], values[n_prelude + n_core:]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.head is None else self.head.weight
        return F.linear(self.final_norm(h), weight)

    def prelude_output(self, tokens: torch.Tensor, values: list, caches: list[KVCache] | None) -> torch.Tensor:
        """e = N_e(P(x)), (batch, length, dim)."""
        return self.prelude_norm(run_blocks(self.prelude, self.embed(tokens), values, caches))

    def core_step(self, e: torch.Tensor, h: torch.Tensor, values: list, caches: list[KVCache] | None) -> torch.Tensor:
        """h_{t+1} = R(A_bar h_t + B_bar e), writing the core's keys/values into `caches` when decoding."""
        return run_blocks(self.core, self.injection(h, e), values, caches)

    def core_iteration(self, e: torch.Tensor, h: torch.Tensor, values: list) -> torch.Tensor:
        """One round of the full forward (no caches): what `train.compile` compiles."""
        return self.core_step(e, h, values, None)

    def readout(self, h: torch.Tensor, values: list, caches: list[KVCache] | None) -> torch.Tensor:
        """Logits from a state: C h, the coda blocks, the final norm, the head."""
        return self.logits(run_blocks(self.coda, self.readout_proj(h), values, caches))

    def initial_state(self, e: torch.Tensor) -> torch.Tensor:
        """h_0: truncated-normal noise in training, its mean (zero) in eval mode (module docstring)."""
        c = self.config
        std = c.state_std if c.state_std is not None else c.embedding_std()
        if not self.training or std == 0:
            return torch.zeros_like(e)
        return nn.init.trunc_normal_(torch.empty_like(e), 0.0, std, -3 * std, 3 * std)

    def plan(self, batch: int, rounds: int | None) -> tuple[int, int, torch.Tensor | None]:
        """(rounds, first round with gradients, per-sequence updates or None when every sequence runs them all)."""
        c = self.config
        if rounds is None and self.training and c.sample_rounds:
            return per_sequence_schedule(*sample_depths(batch, c.rounds, c.backprop_rounds))
        rounds = self.resolve_rounds(rounds)
        return rounds, (max(0, rounds - c.backprop_rounds) if self.training else 0), None

    # protocol ----------------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        self.check_tokens(tokens)
        rounds, first_with_grad, updates = self.plan(tokens.shape[0], rounds)
        return self.run(tokens, rounds, None, first_with_grad, updates)

    def run(self, tokens: torch.Tensor, rounds: int, state: PreludeCodaState | None, first_with_grad: int = 0,
            updates: torch.Tensor | None = None) -> torch.Tensor:
        """`rounds` rounds, gradients from round `first_with_grad` on; with `updates` (rounds, batch), sequence b
        takes round i only where updates[i, b] (else its state is carried)."""
        prelude_values, core_values, coda_values = self.layer_values(tokens)
        e = self.prelude_output(tokens, prelude_values, state.prelude if state is not None else None)
        h = self.initial_state(e)
        grad = torch.is_grad_enabled()
        for i in range(rounds):
            with torch.set_grad_enabled(grad and i >= first_with_grad):  # truncated backprop: the last rounds only
                refined = (self.core_iteration(e, h, core_values) if state is None
                           else self.core_step(e, h, core_values, state.core[i]))
                h = refined if updates is None else torch.where(updates[i, :, None, None].to(h.device), refined, h)
        return self.readout(h, coda_values, state.coda[0] if state is not None else None)

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        """Every round's state h_t and the readout of it: entry t is the forward at depth t."""
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.traced(tokens, rounds)

    def traced(self, tokens: torch.Tensor, rounds: int) -> Iterator[RoundTrace]:
        prelude_values, core_values, coda_values = self.layer_values(tokens)
        e = self.prelude_output(tokens, prelude_values, None)
        h = self.initial_state(e)
        for i in range(rounds):
            h = self.core_iteration(e, h, core_values)
            yield RoundTrace(i + 1, h, self.readout(h, coda_values, None))

    def init_state(self, batch: int, *, rounds: int | None = None) -> PreludeCodaState:
        """KV caches of the prelude, of the core at every round, and of the coda (the prelude_coda layout, one
        readout, no exit)."""
        rounds = self.resolve_rounds(rounds)
        capacity = self.config.context_length

        def caches(blocks: nn.ModuleList) -> list[KVCache]:
            return [block.attn.new_cache(batch, capacity) for block in blocks]

        return PreludeCodaState(batch=batch, rounds=rounds, prelude=caches(self.prelude),
                                core=[caches(self.core) for _ in range(rounds)], coda=[caches(self.coda)])

    def decode(self, tokens: torch.Tensor, state: PreludeCodaState) -> torch.Tensor:
        return self.decode_at_depth(tokens, state, self.run, None)  # no exit: state.exit_threshold stays None

    # compute ledger (looped/models/ledger.py) --------------------------------------------------------------
    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """Per-token FLOPs at `depth` rounds (default mu_rec): the prelude and coda blocks, C and the head once; B
        and the core blocks every round; the value gates where a layer has a table. The injection's A_bar h and
        Delta scaling are elementwise (uncounted, ledger conventions). KV caches of every block application."""
        c, rounds = self.config, self.resolve_rounds(depth)
        with_values = set(c.value_layers())
        gate = linear_flops(min(GATE_CHANNELS, c.dim), c.heads)

        def blocks(name: str, first: int, n: int) -> dict[str, float]:
            total: dict[str, float] = {}
            for i in range(first, first + n):
                add_parts(total, block_flops(c.dim, c.ffn_dim, context, mlp="relu2"))
                if i in with_values:
                    add_parts(total, {"value gate": gate})
            return {f"{name} {part}": flops for part, flops in total.items()}

        outside = blocks("prelude", 0, c.prelude_layers)
        outside |= blocks("coda", c.prelude_layers + c.core_layers, c.coda_layers)
        outside |= {"readout C": linear_flops(c.dim, c.dim), "head": linear_flops(c.dim, c.vocab_size)}
        per_round = {"injection B": linear_flops(c.dim, c.dim), **blocks("core", c.prelude_layers, c.core_layers)}
        applications = c.prelude_layers + rounds * c.core_layers + c.coda_layers
        # training: per-sequence depths (the batch runs its longest), or mu_rec, gradients through the last mu_bwd
        sampled = (c.rounds, c.backprop_rounds) if c.sample_rounds else None
        fixed = None if c.sample_rounds else (float(c.rounds), float(min(c.rounds, c.backprop_rounds)))
        return Ledger(self.arch_name, context, rounds, outside, [dict(per_round) for _ in range(rounds)],
                      state_per_token={"kv cache": applications * 2 * c.dim * item_bytes(self)},
                      training_rounds=fixed, per_sequence_depth=sampled)
