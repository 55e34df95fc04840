"""Mixture-of-Recursions (Bae et al. 2025, "Mixture-of-Recursions: Learning Dynamic Recursive Depths for Adaptive
Token-Level Computation", arXiv 2507.10524), token-choice routing: registry name `mixture_of_recursions`.

A Llama decoder (pre-norm RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases, head tied to the embedding)
with the paper's Middle-Cycle sharing: a unique first layer Phi_0, a recursion block Phi' of K layers applied up to
N_r times, a unique last layer Phi_{L-1}. One router, read once after the first layer, gives every token its
recursion depth (token choice, section 2.2.1, Eq. 2.2):

    H^1   = Phi_0(E x)                                         (B, L, d)
    g_t   = softmax(theta^T H^1_t),  i_t = argmax_j g_t^j       theta: d x N_r, no bias; expert j = j recursions
    H^{r+1}_t = f(H^r_t; Phi')                   r < i_t        f: the K shared layers
    out_t = H^1_t + g_t^{i_t} f(H^{i_t}_t; Phi')                the exit, gated by the chosen expert's score
    logits = E^T RMSNorm(Phi_{L-1}(out))

Recursion-wise KV caching (section 2.2.2), the paper's rule: recursion r runs only on the tokens still active
(i_t >= r), and its attention is restricted to them -- a query attends to the keys of positions <= its own that
are active at r, and only active tokens write keys/values at r. The forward gathers each row's active tokens
(padded to the longest row, padding masked), so compute shrinks with depth as in the paper; the decode state keeps,
per recursion and shared layer, exactly the active tokens' entries, so the cache shrinks too. Routing is a function
of H^1_t, which depends on positions <= t only: every decision is causal, and incremental decoding equals the full
forward exactly (tests/lm_drivers.py).

Why token choice: expert choice (each recursion keeps its top-k tokens of the sequence) lets later tokens decide
whether an earlier one continues, the "causality violation" the paper patches at inference with an auxiliary
router or loss that only approximates the top-k selection; token choice has no such leakage, so causality and
incremental == forward hold exactly. (The paper finds expert choice more accurate: Table 3, 42.6 % vs 40.0 %
few-shot at N_r = 3.)

Training (`objective`, reached through LMTrainTask.loss): next-token cross-entropy plus the paper's balancing loss
alpha sum_i f_i P_i, f_i = N_r / T sum_t 1(i_t = i), P_i = 1 / T sum_t g_t^i (alpha = `balance_weight` 0.1), plus the
router z-loss 1 / T sum_t (log sum_j exp x_tj)^2 of the router logits x (`z_weight` 1e-3): Table 14's final token-
choice design (softmax, linear router, balancing loss 0.1, z-loss added back at 1e-3). The argmax passes no
gradient; the router learns through the gate on the exit and through those two losses.

Test-time depth (`rounds` R; default N_r): a token runs min(i_t, R) recursions, except that tokens routed to the
deepest expert (i_t = N_r) run R -- R < N_r caps every token (the paper's test-time scaling over the maximum
recursion depth, Figure 5c), R > N_r lets the deepest expert recurse further. Which tokens recursion r processes
does not depend on R, so trace entry r is the forward at depth r.

Choices where the paper leaves a detail open (each tested in tests/test_mor.py):
  * Eq. 2.2 writes g^r_t on both branches; we gate only the exit step, with the chosen expert's score g^{i_t}_t
    (the mixture-of-experts reading: expert i is i applications of f, scaled by its gate and added to its input
    H^1); the intermediate steps are f(H^r) ungated;
  * f(H; Phi') is the K layers as maps h -> f(h; Phi) (section 2.1), residual connections included;
  * the router is linear without bias (Table 14's chosen row; the text of section 4.2 says MLP) and reads H^1
    unnormalised; its expert scores are softmax (alpha = 1);
  * the test-time depth rule above;
  * the balancing statistics run over every token of the micro-batch (the paper writes them per sequence);
  * weights start from N(0, 0.02) (the SmolLM / Llama initializer range; the paper does not say), RMSNorm
    epsilon 1e-5 and RoPE base 10,000 (SmolLM-135M's config).

The paper's smallest MoR (Table 9, the 135M base: d 576, 9 heads with 3 key/value heads of 64, SwiGLU 1,536,
vocabulary 49,152, 1 + 10 + 1 layers, N_r = 3) has "42M" non-embedding parameters; these equations give 42,483,456
(the router's 1,728 included) plus the tied embedding's 28,311,552 (tests/test_mor.py, meta device).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import RMSNorm
from .base import CausalLM, DecodeState, LMConfig
from .ledger import Ledger, attention_flops, item_bytes, linear_flops
from .mor_attention import LlamaLayer, RowCache, compact, put_back, take
from .registry import register
from .trace import RoundTrace


@dataclass
class MoRConfig(LMConfig):
    arch: str = "mixture_of_recursions"
    dim: int = 192
    heads: int = 6
    kv_heads: int = 2  # key/value heads, shared by groups of heads / kv_heads query heads (GQA)
    ffn_dim: int = 512  # SwiGLU hidden width
    shared_layers: int = 2  # K: layers of the recursion block (between the unique first and last layer)
    recursions: int = 3  # N_r: the router's experts (expert j = j recursions), the trained and default depth
    balance_weight: float = 0.1  # alpha of the balancing loss sum_i f_i P_i
    z_weight: float = 1.0e-3  # weight of the router z-loss
    init_std: float = 0.02  # standard deviation of every weight matrix and the embedding at initialisation
    rope_base: float = 10000.0
    norm_eps: float = 1.0e-5

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "kv_heads", "ffn_dim", "shared_layers", "recursions"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise ValueError(f"model.dim: width {self.dim} over {self.heads} heads must give an even head width "
                             f"(RoPE)")
        if self.heads % self.kv_heads:
            raise ValueError(f"model.kv_heads: {self.heads} heads do not split into groups of {self.kv_heads} "
                             f"key/value heads")
        for name in ("balance_weight", "z_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"model.{name} must be >= 0, got {getattr(self, name)}")
        if not self.init_std > 0 or not self.rope_base > 0:
            raise ValueError("model.init_std and model.rope_base must be > 0")


@dataclass
class MoRState(DecodeState):
    first: RowCache | None = None  # the first layer's keys/values: every position
    recursions: list[list[RowCache]] = field(default_factory=list)  # [recursion][shared layer]: active tokens only
    last: RowCache | None = None  # the last layer's: every position


@dataclass
class RoutedLogits:
    """One forward with its routing: what the training objective needs."""

    logits: torch.Tensor  # (B, L, vocab)
    router_logits: torch.Tensor  # x = theta^T H^1, (B, L, N_r)
    choice: torch.Tensor  # the chosen expert, 0-based (depth i_t - 1), (B, L)


def effective_depth(depth: torch.Tensor, experts: int, rounds: int) -> torch.Tensor:
    """Recursions each token runs at depth budget `rounds` (module docstring): min(i, R), and R for i = N_r."""
    return torch.where(depth == experts, rounds, depth.clamp(max=rounds))


@register("mixture_of_recursions", MoRConfig,
          test_overrides=dict(dim=32, heads=4, kv_heads=2, ffn_dim=48, shared_layers=2, recursions=3,
                              context_length=40),
          test_depths=(1, 2, 3, 5))
class MixtureOfRecursions(CausalLM):
    """Middle-Cycle recursive Llama with a token-choice router and recursion-wise KV caching (module docstring)."""

    compiled_methods = ("recursion_block",)  # the shared block on one recursion's gathered tokens
    has_objective = True  # trained by `objective` (cross-entropy + balancing + z-loss) on forward(with_exits=True)
    saves_state = True

    def __init__(self, config: MoRConfig):
        super().__init__()
        self.config = c = config

        def layer() -> LlamaLayer:
            return LlamaLayer(c.dim, c.heads, c.kv_heads, c.ffn_dim, c.rope_base, c.norm_eps)

        self.embed = nn.Embedding(c.vocab_size, c.dim)  # also the head (tied)
        self.first = layer()
        self.router = nn.Linear(c.dim, c.recursions, bias=False)
        self.block = nn.ModuleList(layer() for _ in range(c.shared_layers))
        self.last = layer()
        self.final_norm = RMSNorm(c.dim, c.norm_eps)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, c.init_std)

    @property
    def default_rounds(self) -> int:
        return self.config.recursions

    def parameter_components(self) -> dict[str, list[str]]:
        return {name: [name] for name in ("embed", "first", "router", "block", "last", "final_norm")}

    # pieces --------------------------------------------------------------------------------------------
    def front(self, tokens: torch.Tensor, state: MoRState | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions (B, n), H^1 (B, n, d)): the embedding through the unique first layer."""
        batch, n = tokens.shape
        start = state.position if state is not None else 0
        positions = torch.arange(start, start + n, device=tokens.device).expand(batch, n)
        everyone = torch.ones(batch, n, dtype=torch.bool, device=tokens.device)
        return positions, self.first(self.embed(tokens), positions, everyone, state.first if state else None)

    def route(self, h1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(router logits (B, n, N_r), chosen expert (B, n), its score g^i (B, n, 1)): top-1 token choice."""
        logits = self.router(h1)
        scores = logits.softmax(-1)
        choice = scores.argmax(-1)
        return logits, choice, scores.gather(-1, choice[..., None])

    def recursion_block(self, x: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """f(x; Phi') on one recursion's gathered tokens without a cache: the region `train.compile` compiles."""
        for layer in self.block:
            x = layer(x, positions, valid)
        return x

    def cached_block(self, x: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor,
                     caches: list[RowCache]) -> torch.Tensor:
        for layer, cache in zip(self.block, caches):
            x = layer(x, positions, valid, cache)
        return x

    def recurse(self, h1: torch.Tensor, positions: torch.Tensor, depth: torch.Tensor, rounds: int,
                state: MoRState | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """After each recursion r = 1 .. rounds: (s, processed) -- s (B, n, d) holds every token's latest block
        output (H^1 before its first), processed (B, n) the tokens recursion r ran on (depth >= r)."""
        s = h1
        for r in range(1, rounds + 1):
            processed = depth >= r
            if bool(processed.any()):
                index, valid = compact(processed)
                x, p = take(s, index), take(positions, index)
                y = (self.recursion_block(x, p, valid) if state is None
                     else self.cached_block(x, p, valid, state.recursions[r - 1]))
                s = put_back(s, index, y, processed)
            yield s, processed

    def readout(self, out: torch.Tensor, positions: torch.Tensor, cache: RowCache | None) -> torch.Tensor:
        everyone = torch.ones(positions.shape, dtype=torch.bool, device=positions.device)
        return F.linear(self.final_norm(self.last(out, positions, everyone, cache)), self.embed.weight)

    def run(self, tokens: torch.Tensor, rounds: int, state: MoRState | None) -> RoutedLogits:
        positions, h1 = self.front(tokens, state)
        router_logits, choice, gate = self.route(h1)
        depth = effective_depth(choice + 1, self.config.recursions, rounds)
        s = h1
        for s, _ in self.recurse(h1, positions, depth, rounds, state):
            pass  # s: every token's last block output, f(H^{i_t}_t)
        logits = self.readout(h1 + gate * s, positions, state.last if state is not None else None)
        return RoutedLogits(logits, router_logits, choice)

    # protocol ------------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None, with_exits: bool = False):
        """Logits (B, L, vocab); with_exits=True: RoutedLogits (logits and the routing) for the objective."""
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        out = self.run(tokens, rounds, None)
        return out if with_exits else out.logits

    def objective(self, out: RoutedLogits, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy averaged over positions, plus the router's balancing and z-losses (task kind "lm")."""
        return self.position_objective(out, targets).mean()

    def position_objective(self, out: RoutedLogits, targets: torch.Tensor) -> torch.Tensor:
        """Per position (B, L), in float32: the cross-entropy plus the router losses of the whole micro-batch
        (one number, added to every position, so any average over positions adds it once)."""
        loss = F.cross_entropy(out.logits.float().transpose(1, 2), targets, reduction="none")
        return loss + self.router_loss(out.router_logits, out.choice)

    def router_loss(self, router_logits: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
        """balance_weight x sum_i f_i P_i + z_weight x mean_t (logsumexp_j x_tj)^2 over the micro-batch's tokens."""
        c = self.config
        x = router_logits.float().flatten(0, -2)  # (T, N_r)
        f = c.recursions * F.one_hot(choice.flatten(), c.recursions).float().mean(0)  # N_r x fraction routed to i
        p = x.softmax(-1).mean(0)  # P_i: the mean score of expert i
        return c.balance_weight * (f * p).sum() + c.z_weight * torch.logsumexp(x, -1).square().mean()

    def trace(self, tokens: torch.Tensor, *, rounds: int | None = None) -> Iterator[RoundTrace]:
        rounds = self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.traced(tokens, rounds)

    def traced(self, tokens: torch.Tensor, rounds: int) -> Iterator[RoundTrace]:
        """Entry r: the exit state H^1 + g s_r read out as if the depth budget were r (= the forward at depth r);
        stats: the router's depth choice i_t and whether recursion r ran on the token."""
        positions, h1 = self.front(tokens, None)
        _, choice, gate = self.route(h1)
        depth = effective_depth(choice + 1, self.config.recursions, rounds)
        for r, (s, processed) in enumerate(self.recurse(h1, positions, depth, rounds, None), 1):
            out = h1 + gate * s
            yield RoundTrace(r, out, self.readout(out, positions, None),
                             {"routed depth": (choice + 1).to(out.dtype), "active": processed.to(out.dtype)})

    def init_state(self, batch: int, *, rounds: int | None = None) -> MoRState:
        rounds = self.resolve_rounds(rounds)
        c, w = self.config, self.embed.weight

        def cache() -> RowCache:
            return RowCache.empty(batch, c.kv_heads, c.dim // c.heads, w.dtype, w.device)

        return MoRState(batch=batch, rounds=rounds, first=cache(),
                        recursions=[[cache() for _ in self.block] for _ in range(rounds)], last=cache())

    def decode(self, tokens: torch.Tensor, state: MoRState) -> torch.Tensor:
        self.check_tokens(tokens, start=state.position)
        logits = self.run(tokens, state.rounds, state).logits
        state.position += tokens.shape[1]
        return logits

    # decode state to tensors and back (`looped continue`) ------------------------------------------------
    STATE_FIELDS = ("arch", "vocab_size", "dim", "heads", "kv_heads", "ffn_dim", "shared_layers", "recursions",
                    "rope_base", "norm_eps")

    @staticmethod
    def named_caches(state: MoRState) -> Iterator[tuple[str, RowCache]]:
        yield "first", state.first
        for r, caches in enumerate(state.recursions, 1):
            for j, cache in enumerate(caches):
                yield f"recursion.{r}.{j}", cache
        yield "last", state.last

    def state_to_tensors(self, state: MoRState) -> tuple[dict[str, torch.Tensor], dict]:
        """Every row's cached keys and values (safetensors-ready) and JSON-ready metadata."""
        tensors = {}
        for name, cache in self.named_caches(state):
            for b in range(state.batch):
                tensors[f"{name}.{b}.keys"] = cache.keys[b].detach().contiguous()
                tensors[f"{name}.{b}.values"] = cache.values[b].detach().contiguous()
        meta = {name: getattr(self.config, name) for name in self.STATE_FIELDS}
        return tensors, meta | dict(batch=state.batch, position=state.position, rounds=state.rounds)

    def state_from_tensors(self, tensors: dict[str, torch.Tensor], meta: dict) -> MoRState:
        """The state state_to_tensors saved; refuses one saved by another configuration, naming the field."""
        self.check_state_fits(meta)
        state = self.init_state(int(meta["batch"]), rounds=int(meta["rounds"]))
        state.position, w = int(meta["position"]), self.embed.weight
        for name, cache in self.named_caches(state):
            cache.keys = [tensors[f"{name}.{b}.keys"].to(w) for b in range(state.batch)]
            cache.values = [tensors[f"{name}.{b}.values"].to(w) for b in range(state.batch)]
        return state

    # compute ledger (looped/models/ledger.py) ------------------------------------------------------------
    def ledger(self, context: int, depth: int | None = None) -> Ledger:
        """Per-token FLOPs and state at `depth` recursions under perfectly balanced routing, the paper's own
        accounting for token choice: recursion r runs on (N_r - min(r, N_r) + 1) / N_r of the tokens."""
        rounds, n = self.resolve_rounds(depth), self.config.recursions
        shares = [n - min(r, n) + 1 for r in range(1, rounds + 1)]  # in N_r-ths of the tokens
        note = ("routing assumed perfectly balanced (1 / N_r of the tokens per expert); `routed_ledger(tokens)` "
                "counts what a given input's routing executes")
        return self.ledger_of(context, rounds, [context * k / n for k in shares], sum(shares) / n, note)

    def routed_ledger(self, tokens: torch.Tensor, depth: int | None = None) -> Ledger:
        """The ledger of `model(tokens, rounds=depth)` under the routing these tokens get: recursion r computes
        on the longest row's active count (rows are padded to it), and a decode state holds the active
        entries of every row (the ledger's state is their mean per sequence)."""
        rounds = self.resolve_rounds(depth)
        self.check_tokens(tokens)
        with torch.no_grad():
            _, choice, _ = self.route(self.front(tokens, None)[1])
        depths = effective_depth(choice + 1, self.config.recursions, rounds)
        counts = [(depths >= r).sum(1) for r in range(1, rounds + 1)]  # (B,) active tokens per row
        cached = sum(int(k.sum()) for k in counts) / tokens.numel()  # entries per position, over recursions
        return self.ledger_of(tokens.shape[1], rounds, [int(k.max()) for k in counts], cached,
                              "routing: the given tokens'")

    def ledger_of(self, context: int, rounds: int, widths: list[float], cached: float, note: str) -> Ledger:
        """widths[r]: positions per sequence recursion r computes on; cached: entries the recursions cache per
        position (summed over recursions, averaged over positions)."""
        c, size = self.config, item_bytes(self)
        kv = 2 * c.kv_heads * (c.dim // c.heads)  # key + value width

        def layer(tokens: float) -> dict[str, float]:  # per token of the sequence: a layer run on `tokens` of them
            share = tokens / context
            return {"attention projections": share * (2 * linear_flops(c.dim, c.dim) + linear_flops(c.dim, kv)),
                    "attention scores+values": share * attention_flops(tokens, c.dim),
                    "mlp": share * 3 * linear_flops(c.dim, c.ffn_dim)}

        full = layer(context)
        outside = {f"{where} layer {part}": flops for where in ("first", "last") for part, flops in full.items()}
        outside |= {"router": linear_flops(c.dim, c.recursions), "head": linear_flops(c.dim, c.vocab_size)}
        per_round = [{part: c.shared_layers * flops for part, flops in layer(w).items()} for w in widths]
        state = {"kv cache (first and last layer)": 2 * kv * size,
                 "kv cache (recursions)": c.shared_layers * kv * size * cached}
        notes = [note, "training adds the router's balancing and z-losses (elementwise, not counted)"]
        return Ledger(self.arch_name, context, rounds, outside, per_round, round_name="recursion",
                      state_per_token=state, notes=notes)
