"""Depth-recurrent reasoning core of seed 002 (DRT): one shared encoder block unrolled for T steps.

    H = Dropout(LN(Embed(tokens) [+ source/target role vectors at the two query nodes]))   (n, L, d)
    for t = 0 .. T-1:
        H~ = block(H + E[t])                    shared weights; E = depth embedding, one row per step
        z  = sigmoid(W_z [H~ ; H] + b_z)        identity-biased gate, b_z = -2 at init (gate=False: H <- H~)
        H  = z * H~ + (1 - z) * H
    logit = Linear(d, 1)(Dropout(GELU(Linear(in, d)(LN(x)))))
            x = [H_source ; H_target] (graph, in = 2d) or H[CLS] at position 0 (sequence, in = d)

Two perception interfaces (`task_kind`), each fixing its block flavour:
  graph     node i at position i; attention restricted by the adjacency mask ([v, u] = edge u->v, plus
            self-loops), so one step moves information exactly one hop; ReLU FFN, no RoPE (the paper's
            "standard PyTorch encoder layer"); learned role vectors mark the query nodes.
  sequence  [CLS] + characters/words; bidirectional attention over real tokens (PAD keys masked out),
            RoPE (base 10000) on q/k, GELU FFN.
LayerScale (gamma init 1e-4 on both residual branches) is a config field: on for the paper's sequence
tasks, off for its graph task (see `TASK_SHAPES` / `for_task`). Attention and FFN projections carry biases.

Steps are a call argument, `model(batch, steps=T)`; training samples T ~ U{steps_range}. E has
`depth_rows` (T_max) rows; `beyond_table` decides what T > depth_rows means:
  "error"  refuse with a one-line ValueError (the paper evaluates only T <= T_max), the default;
  "clamp"  reuse the last row E[depth_rows - 1] for every later step (the paper's "clamping" diagnostic,
           which changed beyond-range accuracy by at most 0.5 points).

Dropout (p = `dropout`) acts on the front end, both residual branches, the FFN hidden layer and the
readout hidden layer. Attention probabilities are not dropped (PyTorch's encoder layer does; our
attention module has no such option).

SPEC §2 shapes give 205,441 (graph), 998,145 (nested boolean) and 1,007,617 (family) parameters:
graph = 3,456 tokens + 256 roles + 256 front LN + 2,560 depth + 132,480 block + 32,896 gate + 33,537 readout.

Also here, shared with reasoning_baselines.py: the family-"reasoning" protocol (`ReasoningModel`), the
common config fields (`ReasoningConfig`), perception, readout, encoder block and `reasoning_loss`.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..config import from_dict
from ..data.tasks.base import ReasoningBatch
from ..nn import LayerNorm, LayerScale, MultiHeadAttention
from .registry import register

ROLE_INIT_STD = 0.02  # source/target role vectors ~ N(0, 0.02^2)

# SPEC §2 table: the shapes every model of a task shares (keys named after the data task registry).
TASK_SHAPES: dict[str, dict[str, Any]] = {
    "graph": dict(task_kind="graph", vocab_size=27, max_length=20, dim=128, heads=4, ffn_dim=256),
    "boolean": dict(task_kind="sequence", vocab_size=9, max_length=128, dim=256, heads=8, ffn_dim=1024),
    "family": dict(task_kind="sequence", vocab_size=54, max_length=128, dim=256, heads=8, ffn_dim=1024),
}


# ============================================================================ configs


@dataclass
class ReasoningConfig:
    """Fields every reasoning model shares; defaults are the nested-boolean shapes of SPEC §2."""

    arch: str = ""
    task_kind: Literal["graph", "sequence"] = "sequence"
    vocab_size: int = 9
    max_length: int = 128  # positions (graph: node slots)
    dim: int = 256
    ffn_dim: int = 1024
    dropout: float = 0.1
    norm_eps: float = 1e-5

    # Per-task values beyond TASK_SHAPES (e.g. depth rows, layer counts), applied by `for_task`.
    per_task: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def for_task(cls, task: str, **overrides):
        """The paper's configuration of this model for data task `task` ("graph", "boolean", "family")."""
        if task not in TASK_SHAPES:
            raise ValueError(f"unknown reasoning task {task!r} (known: {', '.join(TASK_SHAPES)})")
        names = {f.name for f in dataclasses.fields(cls)}
        preset = {k: v for k, v in {**TASK_SHAPES[task], **cls.per_task.get(task, {})}.items() if k in names}
        return from_dict(cls, {**preset, **overrides}, "model")

    def validate(self) -> None:
        if self.task_kind not in ("graph", "sequence"):
            raise ValueError(f"model.task_kind must be 'graph' or 'sequence', got {self.task_kind!r}")
        for name in ("vocab_size", "max_length", "dim", "ffn_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")

    def check_heads(self, heads: int) -> None:
        """Attention models: heads divide the width, and RoPE (sequence tasks) needs an even head size."""
        if heads < 1:
            raise ValueError(f"model.heads must be >= 1, got {heads}")
        if self.dim % heads:
            raise ValueError(f"model.heads: width {self.dim} is not divisible by {heads} heads")
        if self.task_kind == "sequence" and (self.dim // heads) % 2:
            raise ValueError(f"model.heads: RoPE needs an even head size, got {self.dim} / {heads}")


@dataclass
class DepthRecurrentConfig(ReasoningConfig):
    arch: str = "drt"
    heads: int = 8
    depth_rows: int = 28  # T_max: rows of the depth embedding E
    steps_range: list[int] = field(default_factory=lambda: [4, 16])  # training T ~ U{lo..hi}, inclusive
    layer_scale: float | None = 1e-4  # LayerScale init on both residual branches; None: no LayerScale
    gate: bool = True  # False: H <- block(H + E[t]), the block's own residual update
    gate_bias_init: float = -2.0  # sigmoid(-2) = 0.12: keep 88 % of the previous state at init
    beyond_table: Literal["clamp", "error"] = "error"  # steps > depth_rows: reuse E[-1], or refuse

    per_task: ClassVar[dict[str, dict[str, Any]]] = {
        "graph": dict(depth_rows=20, steps_range=[5, 8], layer_scale=None),
        "boolean": dict(depth_rows=28, steps_range=[4, 16]),
        "family": dict(depth_rows=20, steps_range=[1, 12]),
    }

    def validate(self) -> None:
        super().validate()
        self.check_heads(self.heads)
        if self.depth_rows < 1:
            raise ValueError(f"model.depth_rows must be >= 1, got {self.depth_rows}")
        if len(self.steps_range) != 2 or not 1 <= self.steps_range[0] <= self.steps_range[1] <= self.depth_rows:
            raise ValueError(f"model.steps_range must be [lo, hi] with 1 <= lo <= hi <= depth_rows "
                             f"({self.depth_rows}), got {list(self.steps_range)}")
        if self.layer_scale is not None and self.layer_scale <= 0:
            raise ValueError(f"model.layer_scale must be > 0 or null, got {self.layer_scale}")
        if self.beyond_table not in ("clamp", "error"):
            raise ValueError(f"model.beyond_table must be 'clamp' or 'error', got {self.beyond_table!r}")


@dataclass
class TiedCoreConfig(DepthRecurrentConfig):
    """The stability ablation of Table 3: the same core with no LayerScale and no gate."""

    arch: str = "drt_tied"
    layer_scale: float | None = None
    gate: bool = False


# ============================================================================ loss


def reasoning_loss(logits: torch.Tensor, labels: torch.Tensor, alpha: float = 0.0) -> torch.Tensor:
    """(1 - alpha) BCE(final step) + alpha mean_t BCE(step t).

    logits (steps, n) from `return_all=True`, or (n,) for the final step only (then alpha must be 0).
    alpha = 0 is the paper's silent thinking; alpha > 0 adds intermediate supervision.
    """
    if logits.dim() == 1:
        if alpha:
            raise ValueError("intermediate supervision (alpha > 0) needs every step's logits: use return_all=True")
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    targets = labels.to(logits.dtype).expand_as(logits)  # (steps, n)
    per_step = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").mean(dim=1)  # (steps,)
    return (1 - alpha) * per_step[-1] + alpha * per_step.mean()


# ============================================================================ shared pieces


class Perception(nn.Module):
    """Token embedding (+ role vectors at the graph query's source and target) -> LayerNorm -> dropout."""

    def __init__(self, config: ReasoningConfig):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.roles = None
        if config.task_kind == "graph":
            self.roles = nn.Parameter(torch.empty(2, config.dim))  # row 0: source, row 1: target
            nn.init.normal_(self.roles, std=ROLE_INIT_STD)
        self.norm = LayerNorm(config.dim, config.norm_eps)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, batch: ReasoningBatch) -> torch.Tensor:
        x = self.embed(batch.tokens)  # (n, L, d)
        if self.roles is not None:
            # (n, 2, L) one-hot rows mark where the source and the target sit; move each role there
            at = F.one_hot(batch.extras["query"], x.shape[1]).to(x.dtype)
            x = x + at.transpose(1, 2) @ self.roles  # (n, L, 2) @ (2, d)
        return self.drop(self.norm(x))


class Readout(nn.Module):
    """LN -> Linear(in, d) -> GELU -> dropout -> Linear(d, 1) on [H_s ; H_r] (graph) or H[CLS] (sequence)."""

    def __init__(self, config: ReasoningConfig):
        super().__init__()
        self.pairwise = config.task_kind == "graph"
        width = 2 * config.dim if self.pairwise else config.dim
        self.norm = LayerNorm(width, config.norm_eps)
        self.hidden = nn.Linear(width, config.dim)
        self.drop = nn.Dropout(config.dropout)
        self.out = nn.Linear(config.dim, 1)

    def forward(self, h: torch.Tensor, batch: ReasoningBatch) -> torch.Tensor:
        # h (n, L, d) -> logits (n,)
        if self.pairwise:
            rows = torch.arange(h.shape[0], device=h.device)
            source, target = batch.extras["query"].unbind(dim=1)
            x = torch.cat((h[rows, source], h[rows, target]), dim=-1)  # (n, 2d)
        else:
            x = h[:, 0]  # [CLS]
        return self.out(self.drop(F.gelu(self.hidden(self.norm(x))))).squeeze(-1)


class FeedForward(nn.Module):
    """down(dropout(act(up(x)))): the encoder layer's FFN, dropout on the hidden layer as in PyTorch's."""

    def __init__(self, dim: int, hidden: int, activation: str, dropout: float):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.act = nn.ReLU() if activation == "relu" else nn.GELU()
        self.drop = nn.Dropout(dropout)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.drop(self.act(self.up(x))))


class EncoderBlock(nn.Module):
    """Pre-norm bidirectional encoder layer; `mask` carries the adjacency (graph) or the padding (sequence).

    x <- x + drop(LS1 * Attn(LN1 x));  x <- x + drop(LS2 * FFN(LN2 x))   (LS = 1 when layer_scale is None)
    """

    def __init__(self, config: ReasoningConfig, heads: int, layer_scale: float | None):
        super().__init__()
        graph = config.task_kind == "graph"
        self.norm1 = LayerNorm(config.dim, config.norm_eps)
        self.attn = MultiHeadAttention(config.dim, heads, bias=True, rope=not graph)
        self.norm2 = LayerNorm(config.dim, config.norm_eps)
        self.ffn = FeedForward(config.dim, config.ffn_dim, "relu" if graph else "gelu", config.dropout)
        self.scale1 = LayerScale(config.dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.scale2 = LayerScale(config.dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.scale1(self.attn(self.norm1(x), causal=False, mask=mask)))
        return x + self.drop(self.scale2(self.ffn(self.norm2(x))))


def attention_mask(task_kind: str, batch: ReasoningBatch) -> torch.Tensor:
    """Boolean mask, True = may attend, broadcast over heads.

    graph: (n, 1, L, L) adjacency, node v sees u iff edge u->v or u = v (one hop per attention step);
    sequence: (n, 1, 1, L), every position sees every real token, never PAD.
    """
    if task_kind == "graph":
        return batch.extras["adjacency"][:, None]
    return ~batch.padding[:, None, None, :]


def masked_mean(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Mean of x (n, L, ...) over the real positions of `real` (n, L) and every trailing element."""
    x = x.reshape(*real.shape, -1).mean(dim=-1)  # (n, L)
    weight = real.to(x.dtype)
    return (x * weight).sum() / weight.sum().clamp_min(1)


# ============================================================================ protocol


class ReasoningModel(nn.Module):
    """Protocol of family "reasoning" (seed 002):

        logits = model(batch, steps)                    # (n,) final-step logits of a ReasoningBatch
        logits = model(batch, steps, return_all=True)   # (steps, n): every step (fixed-depth models: (1, n))
        loss = model.loss(logits, batch.labels, alpha)  # reasoning_loss (+ any model-specific term)
        model.parameter_counts()                        # {"component": count, ..., "total": count}
    """

    arch_name: str = ""
    config: ReasoningConfig
    ignores_steps: bool = False  # fixed-depth models: `steps` changes nothing, one pass serves every budget

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, alpha: float = 0.0) -> torch.Tensor:
        return reasoning_loss(logits, labels, alpha)

    def check_batch(self, batch: ReasoningBatch) -> None:
        """One-line errors for inputs this model cannot read."""
        tokens, config = batch.tokens, self.config
        if tokens.dim() != 2 or tokens.dtype != torch.int64:
            raise ValueError(f"batch.tokens must be (n, length) int64, got {tuple(tokens.shape)} {tokens.dtype}")
        n, length = tokens.shape
        if n == 0:
            raise ValueError("empty batch: 0 rows (nothing to reason about)")
        if length > config.max_length:
            raise ValueError(f"sequence too long: {length} positions > model.max_length {config.max_length}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= config.vocab_size):
            raise ValueError(f"token id out of range [0, {config.vocab_size}): "
                             f"min {int(tokens.min())}, max {int(tokens.max())}")
        if config.task_kind == "graph":
            adjacency, query = batch.extras.get("adjacency"), batch.extras.get("query")
            if adjacency is None or query is None:
                raise ValueError("a graph model needs batch.extras 'adjacency' and 'query'")
            if tuple(adjacency.shape) != (n, length, length) or tuple(query.shape) != (n, 2):
                raise ValueError(f"graph extras must be adjacency {(n, length, length)} and query {(n, 2)}, "
                                 f"got {tuple(adjacency.shape)} and {tuple(query.shape)}")

    def parameter_counts(self) -> dict[str, int]:
        """Trainable parameters per top-level component plus 'total'."""
        counts = {name: sum(p.numel() for p in child.parameters()) for name, child in self.named_children()}
        counts |= {name: p.numel() for name, p in self.named_parameters(recurse=False)}
        counts = {name: count for name, count in counts.items() if count}
        counts["total"] = sum(p.numel() for p in self.parameters())
        return counts


# ============================================================================ the core

_TINY = dict(dim=32, heads=4, ffn_dim=64, depth_rows=6, steps_range=[1, 3])


@register("drt", DepthRecurrentConfig, family="reasoning", test_overrides=_TINY)
class DepthRecurrentCore(ReasoningModel):
    """One shared block unrolled `steps` times with depth embeddings and the identity-biased gate."""

    def __init__(self, config: DepthRecurrentConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.depth_embedding = nn.Embedding(config.depth_rows, config.dim)  # E, N(0, 1) init
        self.block = EncoderBlock(config, config.heads, config.layer_scale)
        self.gate = None
        if config.gate:
            self.gate = nn.Linear(2 * config.dim, config.dim)  # W_z: [H~ ; H] -> d
            nn.init.constant_(self.gate.bias, config.gate_bias_init)
        self.readout = Readout(config)
        self.last_gate_means: torch.Tensor | None = None  # (steps,) mean z over real positions, last call

    def forward(self, batch: ReasoningBatch, steps: int, *, return_all: bool = False) -> torch.Tensor:
        steps = self.check_steps(steps)
        self.check_batch(batch)
        h = self.perception(batch)  # (n, L, d)
        mask = attention_mask(self.config.task_kind, batch)
        real = ~batch.padding  # (n, L)
        logits, gate_means = [], []
        for t in range(steps):
            h, z = self.step(h, t, mask)
            if z is not None:
                gate_means.append(masked_mean(z.detach(), real))
            z = None  # drop the gate before the next step: inference memory stays flat in T
            if return_all or t == steps - 1:  # the readout of other steps is only needed for return_all
                logits.append(self.readout(h, batch))
        self.last_gate_means = torch.stack(gate_means) if gate_means else None
        return torch.stack(logits) if return_all else logits[-1]

    def step(self, h: torch.Tensor, t: int, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Recurrence step t (0-based): H (n, L, d) -> (new H, gate z (n, L, d) or None)."""
        h_block = self.block(h + self.depth_row(t), mask)  # H~ = block(H + E[t])
        if self.gate is None:
            return h_block, None
        z = torch.sigmoid(self.gate(torch.cat((h_block, h), dim=-1)))  # the gate sees H without E[t]
        return z * h_block + (1 - z) * h, z

    def depth_row(self, t: int) -> torch.Tensor:
        """E[t] (d,); past the table the last row (beyond_table='clamp'; 'error' stops in check_steps)."""
        return self.depth_embedding.weight[min(t, self.config.depth_rows - 1)]

    def check_steps(self, steps: int) -> int:
        steps = operator.index(steps)
        rows = self.config.depth_rows
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if steps > rows and self.config.beyond_table == "error":
            raise ValueError(f"steps {steps} > model.depth_rows {rows}: the depth embedding has no row for step "
                             f"{rows + 1} (set model.beyond_table='clamp' to reuse the last row)")
        return steps

    def sample_steps(self, generator: torch.Generator | None = None) -> int:
        """A training depth T ~ U{lo..hi} from config.steps_range (one per batch)."""
        lo, hi = self.config.steps_range
        return int(torch.randint(lo, hi + 1, (1,), generator=generator))


@register("drt_tied", TiedCoreConfig, family="reasoning", test_overrides=_TINY)
class TiedDepthRecurrentCore(DepthRecurrentCore):
    """The weight-tied ablation: H <- block(H + E[t]) with no LayerScale and no gate (TiedCoreConfig)."""
