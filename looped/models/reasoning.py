"""Family "reasoning" (seed 002): the protocol every reasoning model follows, and the pieces they share.

    logits = model(batch, steps)                          # (n,) final-step logits of a ReasoningBatch
    logits = model(batch, steps, return_all=True)         # (steps, n): every step (fixed-depth models: (1, n))
    logits, trace = model(batch, steps, return_trace=True)   # + ReasoningTrace: gate means, ACT ponder record
    for entry in model.trace(batch, steps): ...           # optional: per-step states and readouts (trace.py)
    loss = model.loss(logits, batch.labels, alpha, trace)  # reasoning_loss (+ any model-specific term)
    model.parameter_counts()                              # {"component": count, ..., "total": count}

What a model can do is declared, not sniffed:
    depth_mode          "per_step"  the state after step t does not depend on the budget T (the core): one pass
                                    with return_all=True gives every smaller budget's logits;
                        "halting"   the budget changes the whole computation (ACT): one pass per budget;
                        "fixed"     the model ignores T (fixed-depth Transformer, GNN): one pass serves all.
    config.trained_steps()          the T range training samples from ((1, 1) for fixed-depth models).

Shared pieces: the config fields (`ReasoningConfig`), perception (embedding, role vectors, LN, dropout), the
encoder block in its two flavours, the readout, the attention mask, and `reasoning_loss`.
A new reasoning architecture is one file: a config subclass, a `ReasoningModel` subclass that declares its
depth_mode, and `@register(name, Config, family="reasoning")` (examples/looped_encoder.py).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ConfigError, from_dict
from ..data.tasks.base import ReasoningBatch
from ..data.tasks.reasoning import reasoning_task_class
from ..nn import LayerNorm, LayerScale, MultiHeadAttention
from .trace import no_trace

ROLE_INIT_STD = 0.02  # source/target role vectors ~ N(0, 0.02^2)


# ============================================================================ configs


@dataclass
class ReasoningConfig:
    """Fields every reasoning model shares; defaults are the nested-boolean shapes of seed 002."""

    arch: str = ""
    input_kind: Literal["graph", "tokens"] = "tokens"
    vocab_size: int = 9
    max_length: int = 128  # positions (graph: node slots)
    dim: int = 256
    ffn_dim: int = 1024
    dropout: float = 0.1
    norm_eps: float = 1e-5

    # Per-task values of this model beyond the task's own shape (`ReasoningTask.task_shape`: e.g. depth rows,
    # layer counts), keyed by registered task name and applied by `for_task`; a task without an entry gets the
    # field defaults.
    per_task: ClassVar[dict[str, dict[str, Any]]] = {}
    # The perception interfaces the model can read (the shared drivers run it on each).
    input_kinds: ClassVar[tuple[str, ...]] = ("graph", "tokens")

    @classmethod
    def read_old_spelling(cls, data: dict, where: str) -> dict:
        """Configs saved before the rename name the input layout `task_kind`, its token value 'sequence' (the
        word the `sequence` training kind also uses): read them as `input_kind` / 'tokens', with a warning."""
        if "task_kind" not in data:
            return data
        if "input_kind" in data:
            raise ConfigError(f"{where}.task_kind: the old name of input_kind; give input_kind alone")
        data = {("input_kind" if key == "task_kind" else key): value for key, value in data.items()}
        data["input_kind"] = "tokens" if data["input_kind"] == "sequence" else data["input_kind"]
        warnings.warn(f"{where}.task_kind is now {where}.input_kind (value 'sequence' is now 'tokens'); "
                      "the old spelling still loads", FutureWarning, stacklevel=2)
        return data

    @classmethod
    def for_task(cls, task: str, **overrides):
        """The paper's configuration of this model for reasoning task `task` (a registered name or alias)."""
        spec = reasoning_task_class(task)
        names = {f.name for f in dataclasses.fields(cls)}
        preset = {k: v for k, v in {**spec.task_shape(), **cls.per_task.get(spec.name, {})}.items() if k in names}
        return from_dict(cls, {**preset, **overrides}, "model")

    def validate(self) -> None:
        if self.input_kind not in ("graph", "tokens"):
            raise ValueError(f"model.input_kind must be 'graph' or 'tokens', got {self.input_kind!r}")
        if self.input_kind not in self.input_kinds:
            kinds = " or ".join(self.input_kinds)
            raise ValueError(f"model.input_kind: {self.arch or type(self).__name__} reads {kinds} inputs only, "
                             f"got {self.input_kind!r}")
        for name in ("vocab_size", "max_length", "dim", "ffn_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")

    def trained_steps(self) -> tuple[int, int]:
        """The range training draws the step budget T from; (1, 1) for models that ignore T."""
        return 1, 1

    def check_heads(self, heads: int) -> None:
        """Attention models: heads divide the width, and RoPE (token inputs) needs an even head size."""
        if heads < 1:
            raise ValueError(f"model.heads must be >= 1, got {heads}")
        if self.dim % heads:
            raise ValueError(f"model.heads: width {self.dim} is not divisible by {heads} heads")
        if self.input_kind == "tokens" and (self.dim // heads) % 2:
            raise ValueError(f"model.heads: RoPE needs an even head size, got {self.dim} / {heads}")


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
        if config.input_kind == "graph":
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
    """LN -> Linear(in, d) -> GELU -> dropout -> Linear(d, 1) on [H_s ; H_r] (graph) or H[CLS] (tokens)."""

    def __init__(self, config: ReasoningConfig):
        super().__init__()
        self.pairwise = config.input_kind == "graph"
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
    """Pre-norm bidirectional encoder layer; `mask` carries the adjacency (graph) or the padding (tokens).

    x <- x + drop(LS1 * Attn(LN1 x));  x <- x + drop(LS2 * FFN(LN2 x))   (LS = 1 when layer_scale is None)
    """

    def __init__(self, config: ReasoningConfig, heads: int, layer_scale: float | None):
        super().__init__()
        graph = config.input_kind == "graph"
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


def attention_mask(input_kind: str, batch: ReasoningBatch) -> torch.Tensor:
    """Boolean mask, True = may attend, broadcast over heads.

    graph: (n, 1, L, L) adjacency, node v sees u iff edge u->v or u = v (one hop per attention step);
    tokens: (n, 1, 1, L), every position sees every real token, never PAD.
    """
    if input_kind == "graph":
        return batch.extras["adjacency"][:, None]
    return ~batch.padding[:, None, None, :]


def masked_mean(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Mean of x (n, L, ...) over the real positions of `real` (n, L) and every trailing element."""
    x = x.reshape(*real.shape, -1).mean(dim=-1)  # (n, L)
    weight = real.to(x.dtype)
    return (x * weight).sum() / weight.sum().clamp_min(1)



# ============================================================================ trace


@dataclass
class PonderStats:
    """Per-position ACT record of one forward call, each (n, L)."""

    steps: torch.Tensor  # N: block applications the position's output used
    remainders: torch.Tensor  # R = 1 - (halting mass before the halting step)
    weight_sum: torch.Tensor  # sum of the output weights (1 for every position: remainder trick)
    real: torch.Tensor  # bool, non-PAD positions

    def mean_steps(self) -> float:
        return float(masked_mean(self.steps, self.real))


@dataclass
class ReasoningTrace:
    """What one forward call observed besides its logits (returned with return_trace=True, never stored)."""

    gate_means: torch.Tensor | None = None  # (steps,) mean gate z over real positions (gated core)
    ponder: PonderStats | None = None  # ACT: per-position steps and remainders
    ponder_cost: torch.Tensor | None = None  # ACT: scalar mean(N + R) over real positions, with grad


# ============================================================================ protocol


class ReasoningModel(nn.Module):
    """Protocol of family "reasoning" (see the module docstring). Subclasses declare `depth_mode`."""

    arch_name: str = ""
    config: ReasoningConfig
    depth_mode: ClassVar[Literal["per_step", "halting", "fixed"]]
    # Pure-tensor methods `train.compile` compiles (looped/models/compile.py): no batch validation, no loop
    # over a number of steps that changes between calls.
    compiled_methods: tuple[str, ...] = ()
    # Whether the intermediate-supervision mix L(alpha) (`reasoning_loss`, task.alpha) applies; False for a model
    # whose loss already supervises its own steps (trm's deep supervision): the trainer refuses alpha > 0 then.
    intermediate_supervision: ClassVar[bool] = True

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, alpha: float = 0.0,
             trace: ReasoningTrace | None = None) -> torch.Tensor:
        return reasoning_loss(logits, labels, alpha)

    @staticmethod
    def output(logits: torch.Tensor, trace: ReasoningTrace, return_trace: bool):
        """What forward returns: the logits, or (logits, trace) when the caller asked for the trace."""
        return (logits, trace) if return_trace else logits

    def trace(self, batch: ReasoningBatch, steps: int | None = None):
        """Per-step (or per-layer) states and readouts, an iterator of RoundTrace (models/trace.py)."""
        raise no_trace(self)

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
        if config.input_kind == "graph":
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


__all__ = ["PonderStats", "ROLE_INIT_STD", "ReasoningConfig", "ReasoningModel", "ReasoningTrace",
           "EncoderBlock", "FeedForward", "Perception", "Readout", "attention_mask", "masked_mean", "reasoning_loss"]
