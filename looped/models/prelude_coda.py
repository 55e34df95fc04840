"""The recurrent-depth LM of Geiping et al. 2025 ("Huginn", arXiv 2502.05171): prelude, recurrent core, coda.

    e   = P(x)                                     prelude: embedding, then `prelude_layers` blocks
    s_0 ~ TN(0, sigma^2)  (training) | 0  (eval)  the initial latent state (see "initial state" below)
    s_i = R(A [s_{i-1}; e])      i = 1 .. r       core: adapter A (2d -> d, no bias), then `core_layers` blocks,
                                                  the same weights every iteration
    p   = softmax(W_E^T N(C(s_r)))                coda: `coda_layers` blocks, a final RMSNorm, the head (tied to
                                                  the embedding by default)

Every block is the paper's "sandwich" block (four RMSNorms): x' = N2(x + Attn(N1 x)); y = N4(x' + MLP(N3 x')),
causal attention with RoPE (base 50,000), a SwiGLU MLP, no biases.

Training (the model in train mode, `rounds` not given): each forward draws its iterations r from the paper's
log-normal Poisson, tau ~ N(log(r_bar) - sigma_r^2 / 2, sigma_r^2), r = Poisson(e^tau) + 1 (sigma_r =
`rounds_sigma` = 0.5; one r per forward, shared by the batch), and back-propagates through the last
`backprop_rounds` (k) iterations only: the earlier ones run without gradients. The prelude still learns through
the input injection e of the last k iterations. At eval, and whenever `rounds` is passed, r = that depth
(default r_bar = `rounds`). `sample_rounds: false` trains at the fixed depth r_bar.

Choices where the paper leaves a detail open (each tested in tests/test_prelude_coda.py):
  * initial state: the paper draws s_0 ~ N(0, sigma^2) truncated at +-3 sigma; we do so in training only
    (sigma = `state_std`, default sqrt(2 / (5 d)), the paper's initialisation scale) and start from s_0 = 0, the
    noise's mean, in eval mode, so evaluation, decoding and the shared drivers are deterministic and
    incremental decoding equals the full forward exactly;
  * the embedding is drawn from N(0, 2 / (5 d)) and scaled by sqrt(d) on input, as in the released config
    (embed_scale, std): the tied head then starts with logits of standard deviation ~0.6 (PyTorch's N(0, 1)
    embedding would start the loss near 25 nats); every other weight keeps PyTorch's default initialisation;
  * no q/k biases (the released config has them: 2 d per layer);
  * convergence exit (`forward_early_exit`, `init_state(exit_threshold=T)`): after every iteration i >= 2 a
    position whose output distribution moved by KL(p_i || p_{i-1}) < T stops iterating. As in the seed-000
    early exit (loop.py), its state is frozen and its output is the distribution at its exit iteration; for
    the iterations it skips it still offers keys/values to later positions, computed from the core input its
    frozen state produces, so decisions depend on positions <= i only and incremental decoding equals the
    full forward. The distribution p_i is the coda read at iteration i over every position's iteration-i
    state (frozen ones included): with an exit threshold the decode state keeps one set of coda caches per
    iteration. In a batch the iterations run in lockstep (loop_exit.py): an exited position skips the query and
    MLP of the last core block and of the last coda block, and the head (tests/test_exit_families.py).

The paper's model: d = 5,280, 55 heads of 96, 2 / 4 / 2 layers, SwiGLU width 17,920, vocabulary 65,536,
r_bar = 32, k = 8 (the released config.json of huginn-0125). The paper states 3.5B parameters and no exact
count; these equations give 3,564,892,320 (test_prelude_coda.py builds it on the meta device).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import KVCache
from ..nn.attention import MultiHeadAttention
from ..nn.block import SelectedPositions
from ..nn.mlp import make_mlp
from ..nn.norm import RMSNorm
from .base import CausalLM, DecodeState, LMConfig
from .depth_schedule import lognormal_poisson_depth, sample_rounds  # the paper's log-normal Poisson
from .ledger import Ledger, add_parts, block_flops, item_bytes, linear_flops
from .loop_exit import KLConvergence, Selection, run_lockstep, scatter, stack_selected
from .registry import register
from .trace import RoundTrace


@dataclass
class PreludeCodaConfig(LMConfig):
    arch: str = "prelude_coda"
    dim: int = 256
    heads: int = 8
    ffn_dim: int = 768  # SwiGLU hidden width
    prelude_layers: int = 2  # blocks of the prelude P (run once)
    core_layers: int = 4  # blocks of the recurrent core R (run every iteration)
    coda_layers: int = 2  # blocks of the coda C (run once, on the last state)
    rounds: int = 32  # r_bar: the mean Poisson rate in training (the depths drawn average r_bar + 1) and the eval depth
    backprop_rounds: int = 8  # k: training back-propagates through the last k iterations
    sample_rounds: bool = True  # training draws r from the log-normal Poisson (False: r = r_bar)
    rounds_sigma: float = 0.5  # sigma_r of the log-normal
    state_std: float | None = None  # sigma of s_0 in training; None = sqrt(2 / (5 dim))
    tie_embeddings: bool = True
    rope_base: float = 50000.0
    norm_eps: float = 1e-6

    def validate(self) -> None:
        super().validate()
        self.require_positive("dim", "heads", "ffn_dim", "prelude_layers", "core_layers", "coda_layers", "rounds",
                              "backprop_rounds")
        self.require_rope_heads()
        if self.rounds_sigma < 0 or (self.state_std is not None and self.state_std < 0):
            raise ValueError("model.rounds_sigma and model.state_std must be >= 0")

    def initial_std(self) -> float:
        return self.state_std if self.state_std is not None else math.sqrt(2 / (5 * self.dim))


@dataclass
class PreludeCodaState(DecodeState):
    prelude: list[KVCache] = field(default_factory=list)  # one per prelude layer
    core: list[list[KVCache]] = field(default_factory=list)  # [iteration][core layer]
    coda: list[list[KVCache]] = field(default_factory=list)  # [readout][coda layer]: 1 readout, or 1 per iteration
    exit_threshold: float | None = None
    rounds_used: list[torch.Tensor] = field(default_factory=list)  # (batch, n) per decode call, with an exit
    cached_fields = ("rounds_used",)  # a record, not state the next token reads


class SandwichBlock(SelectedPositions, nn.Module):
    """x' = N2(x + Attn(N1 x)); y = N4(x' + MLP(N3 x')): the paper's block, normalised on both sides of each
    residual branch so that iterating it keeps the state's scale bounded."""

    def __init__(self, c: PreludeCodaConfig):
        super().__init__()
        self.attn_in, self.attn_out = RMSNorm(c.dim, c.norm_eps), RMSNorm(c.dim, c.norm_eps)
        self.attn = MultiHeadAttention(c.dim, c.heads, bias=False, rope=True, rope_base=c.rope_base)
        self.mlp_in, self.mlp_out = RMSNorm(c.dim, c.norm_eps), RMSNorm(c.dim, c.norm_eps)
        self.mlp = make_mlp("swiglu", c.dim, c.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.feed_forward(self.attention_residual(x, self.attn(self.attention_input(x), cache=cache)))

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn_in(x)

    def attention_residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        return self.attn_out(x + attended)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp_out(x + self.mlp(self.mlp_in(x)))


def run_layers(layers: nn.ModuleList, x: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
    for j, layer in enumerate(layers):
        x = layer(x, caches[j] if caches is not None else None)
    return x


@register("prelude_coda", PreludeCodaConfig,
          # state_std 0: the compile driver compares two train-mode models, whose s_0 noise would differ
          test_overrides=dict(dim=16, heads=2, ffn_dim=24, prelude_layers=1, core_layers=2, coda_layers=1, rounds=3,
                              context_length=40, state_std=0.0),
          test_depths=(1, 3, 5))
class PreludeCodaLM(CausalLM):
    """Prelude -> r iterations of the core on the latent state s -> coda (module docstring)."""

    compiled_methods = ("core_iteration",)  # one iteration of the full forward: every depth reuses its graph

    def __init__(self, config: PreludeCodaConfig):
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.dim)
        nn.init.normal_(self.embed.weight, 0.0, math.sqrt(2 / (5 * c.dim)))
        self.embed_scale = math.sqrt(c.dim)
        self.prelude = nn.ModuleList(SandwichBlock(c) for _ in range(c.prelude_layers))
        self.adapter = nn.Linear(2 * c.dim, c.dim, bias=False)  # A [s; e]
        self.core = nn.ModuleList(SandwichBlock(c) for _ in range(c.core_layers))
        self.coda = nn.ModuleList(SandwichBlock(c) for _ in range(c.coda_layers))
        self.final_norm = RMSNorm(c.dim, c.norm_eps)
        # tied: the head reads the embedding matrix itself (no second tensor: safetensors refuses shared storage)
        self.head = None if c.tie_embeddings else nn.Linear(c.dim, c.vocab_size, bias=False)

    @property
    def default_rounds(self) -> int:
        return self.config.rounds

    def parameter_components(self) -> dict[str, list[str]]:
        names = ["embed", "prelude", "adapter", "core", "coda", "final_norm"] + ([] if self.head is None else ["head"])
        return {name: [name] for name in names}

    # pieces ------------------------------------------------------------------------------------------------
    def logits(self, h: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.head is None else self.head.weight
        return F.linear(self.final_norm(h), weight)

    def prelude_output(self, tokens: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
        """e = P(x): the scaled embedding through the prelude blocks."""
        return run_layers(self.prelude, self.embed(tokens) * self.embed_scale, caches)

    def readout(self, s: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
        return self.logits(run_layers(self.coda, s, caches))

    def core_step(self, e: torch.Tensor, s: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
        """s_i = R(A [s_{i-1}; e]), writing the core's keys/values into `caches` when decoding."""
        return run_layers(self.core, self.adapter(torch.cat((s, e), dim=-1)), caches)

    def core_iteration(self, e: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """One iteration of the full forward (no caches): what `train.compile` compiles."""
        return self.core_step(e, s, None)

    def initial_state(self, e: torch.Tensor) -> torch.Tensor:
        """s_0: truncated-normal noise in training, the noise's mean (zero) in eval mode (module docstring)."""
        std = self.config.initial_std()
        if not self.training or std == 0:
            return torch.zeros_like(e)
        return nn.init.trunc_normal_(torch.empty_like(e), 0.0, std, -3 * std, 3 * std)

    def plan(self, rounds: int | None) -> tuple[int, int]:
        """(iterations, the first iteration that keeps gradients): sampled and truncated in training."""
        if rounds is None and self.training and self.config.sample_rounds:
            rounds = sample_rounds(self.config.rounds, self.config.rounds_sigma)
        else:
            rounds = self.resolve_rounds(rounds)
        first_with_grad = max(0, rounds - self.config.backprop_rounds) if self.training else 0
        return rounds, first_with_grad

    # protocol ----------------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        self.check_tokens(tokens)
        rounds, first_with_grad = self.plan(rounds)
        return self.run(tokens, rounds, None, first_with_grad)

    def run(self, tokens: torch.Tensor, rounds: int, state: PreludeCodaState | None,
            first_with_grad: int = 0) -> torch.Tensor:
        e = self.prelude_output(tokens, state.prelude if state is not None else None)
        s = self.initial_state(e)
        grad = torch.is_grad_enabled()
        for i in range(rounds):
            with torch.set_grad_enabled(grad and i >= first_with_grad):  # truncated backprop: the last k only
                s = self.core_iteration(e, s) if state is None else self.core_step(e, s, state.core[i])
        return self.readout(s, state.coda[0] if state is not None else None)

    def run_early_exit(self, tokens: torch.Tensor, rounds: int, state: PreludeCodaState | None,
                       threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Iterations with the per-position convergence exit (module docstring); logits and iterations used.
        Exited positions compute only what later queries read from them (CodaSteps, loop_exit.py)."""
        return run_lockstep(CodaSteps(self, tokens, state), KLConvergence(threshold), rounds, tokens.shape,
                            tokens.device, decoding=state is not None)

    def forward_early_exit(self, tokens: torch.Tensor, threshold: float, *,
                           rounds: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, iterations used per position) under the convergence exit; threshold 0 = never exit."""
        if threshold < 0:
            raise ValueError(f"exit threshold must be >= 0, got {threshold}")
        self.check_tokens(tokens)
        return self.run_early_exit(tokens, self.resolve_rounds(rounds), None, threshold)

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        """Every iteration's state s_i and the coda's reading of it: entry i is the forward at depth i."""
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.traced(tokens, rounds)

    def traced(self, tokens: torch.Tensor, rounds: int) -> Iterator[RoundTrace]:
        e = self.prelude_output(tokens, None)
        s = self.initial_state(e)
        for i in range(rounds):
            s = self.core_iteration(e, s)
            yield RoundTrace(i + 1, s, self.readout(s, None))

    def init_state(self, batch: int, *, rounds: int | None = None,
                   exit_threshold: float | None = None) -> PreludeCodaState:
        rounds = self.resolve_rounds(rounds)
        capacity = self.config.context_length

        def caches(layers: nn.ModuleList) -> list[KVCache]:
            return [layer.attn.new_cache(batch, capacity) for layer in layers]

        readouts = rounds if exit_threshold is not None else 1
        return PreludeCodaState(batch=batch, rounds=rounds, prelude=caches(self.prelude),
                                core=[caches(self.core) for _ in range(rounds)],
                                coda=[caches(self.coda) for _ in range(readouts)], exit_threshold=exit_threshold)

    def decode(self, tokens: torch.Tensor, state: PreludeCodaState) -> torch.Tensor:
        return self.decode_at_depth(tokens, state, self.run, self.run_early_exit)

    # compute ledger (looped/models/ledger.py) --------------------------------------------------------------
    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """Per-token FLOPs at `depth` iterations (default r_bar): the prelude and coda blocks and the head once,
        the adapter and the core blocks every iteration; the KV caches of every block application."""
        c, rounds = self.config, self.resolve_rounds(depth)

        def blocks(n: int) -> dict[str, float]:
            total: dict[str, float] = {}
            for _ in range(n):
                add_parts(total, block_flops(c.dim, c.ffn_dim, context, mlp="swiglu"))
            return total

        outside = {f"prelude {k}": v for k, v in blocks(c.prelude_layers).items()}
        outside |= {f"coda {k}": v for k, v in blocks(c.coda_layers).items()}
        outside["head"] = linear_flops(c.dim, c.vocab_size)
        core = {f"core {k}": v for k, v in blocks(c.core_layers).items()}
        per_round = {"adapter": linear_flops(2 * c.dim, c.dim), **core}
        applications = c.prelude_layers + rounds * c.core_layers + c.coda_layers
        notes = ["decoding with a convergence exit keeps the coda's caches once per iteration (not counted here)"]
        return Ledger(self.arch_name, context, rounds, outside, [dict(per_round) for _ in range(rounds)],
                      state_per_token={"kv cache": applications * 2 * c.dim * item_bytes(self)}, notes=notes,
                      training_rounds=self.training_depth())

    def training_depth(self) -> tuple[float, float]:
        """(E[iterations run], E[iterations back-propagated]) of a training forward: r ~ the log-normal Poisson
        (or r_bar), gradients through the last min(r, k)."""
        c = self.config
        if c.sample_rounds:
            return lognormal_poisson_depth(c.rounds, c.rounds_sigma, c.backprop_rounds)
        return float(c.rounds), float(min(c.rounds, c.backprop_rounds))


class CodaSteps:
    """ExitSteps (loop_exit.py) of the recurrent-depth model. An exited position's state is frozen, yet in every
    later iteration the core and the coda still read it: its keys/values of a block past the first depend on what
    the block before attends to in that iteration, so every core and coda block but the last still runs at every
    position; the last block's query and MLP, and the head, run at the active positions only."""

    def __init__(self, model: PreludeCodaLM, tokens: torch.Tensor, state: PreludeCodaState | None):
        self.model, self.state = model, state
        self.e = model.prelude_output(tokens, state.prelude if state is not None else None)  # (batch, n, dim)
        self.s = model.initial_state(self.e)

    def refine(self, i: int, select: Selection | None, active: torch.Tensor) -> None:
        caches = self.state.core[i] if self.state is not None else None
        if select is None:
            self.s = self.model.core_step(self.e, self.s, caches)
        else:  # the core input A [s; e] of every position, the exited ones' from their frozen state
            x = self.model.adapter(torch.cat((self.s, self.e), dim=-1))
            self.s = scatter(self.s, select, stack_selected(self.model.core, x, select, caches))

    def read(self, i: int, select: Selection | None) -> tuple[torch.Tensor | None, None]:
        caches = self.state.coda[i] if self.state is not None else None
        if select is None:
            return self.model.readout(self.s, caches).flatten(0, 1), None
        out = stack_selected(self.model.coda, self.s, select, caches)  # writes the coda caches even when s = 0
        return (self.model.logits(out) if len(select.flat) else None), None
