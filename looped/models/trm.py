"""Tiny Recursive Model (TRM; Jolicoeur-Martineau 2025, "Less is More: Recursive Reasoning with Tiny Networks",
arXiv 2510.04871) as a family-"reasoning" row of seed 002.

One tiny network f (`layers` = 2 blocks) is applied recursively to three tensors of shape (n, L, d): the embedded
question x, the current answer y and a latent reasoning state z. With n = `latent_steps`, T = `recursions`:

    latent recursion:   z <- f(x + y + z)   n times          (reason: refine z given question, answer, z)
                        y <- f(y + z)                        (answer: x is left out, which tells f which task)
    deep recursion:     T - 1 latent recursions without gradient, then one with gradient
    supervision step:   (y, z) <- deep recursion(x, y, z);  answer logit = readout(y);  q = Q(y)
    deep supervision:   up to N_sup = `supervision_steps` supervision steps; (y, z) enter each one detached, so
                        no gradient crosses from one supervision step to the previous one
    halting head:       q is trained by BCE against "the current answer is correct" (the paper drops HRM's ACT
                        Q-learning continue loss, so no second forward pass); in training a row stops being
                        supervised after the first step where the head says it is right (paper: sigmoid(q) > 1/2)

Block of f (the paper's, after HRM): post-norm, h <- RMSNorm(h + mix(h)); h <- RMSNorm(h + SwiGLU(h)), no biases,
RMSNorm without a gain. `mixer` picks mix: "attention" (the paper's TRM-Att, 7M on Sudoku / Maze / ARC:
bidirectional self-attention; graph: the adjacency mask, so one block moves information one hop; tokens: RoPE,
padding masked) or "mlp" (TRM-MLP, 5M on Sudoku: a SwiGLU across the positions, channel by channel, for
fixed-length sequence inputs; it cannot read a graph's edges, which live only in the attention mask).

Test-time depth is `steps` = the number of supervision steps (default N_sup; any number >= 1 runs). The state
after step s does not depend on the budget, so the model is "per_step": one pass at the largest budget gives every
smaller budget's answer.

Shared with the other seed-002 rows (reasoning.py), so the rows differ only in how depth is spent: the perception
(token embedding, graph role vectors, LayerNorm, dropout) gives x, and the readout (graph: [y_source ; y_target],
tokens: y[CLS]) gives the answer logit; the paper's per-token output head and puzzle embedding have no role in
one-bit answers.

Choices where the paper leaves a detail open (tests/test_trm.py tests each):
  * training takes ONE optimizer update per batch on the mean over the supervision budget S of the per-step losses
    (answer BCE + `halt_loss_weight` x halting BCE, rows that have halted contributing nothing), with (y, z)
    detached between steps. The paper instead updates the weights after every supervision step. With the carry
    detached, step s's gradient here is exactly the gradient the paper's update at step s would take had the
    weights not moved since the batch began; the sum differs from the paper's sequence of updates at second order
    in the learning rate (and through Adam's normalisation). We keep the shared trainer's one update per batch
    (rows seen, schedule, resume); the cost is memory: the graphs of all S steps are held until backward;
  * halting at test time is off by default (`test_halting: false`): the authors' evaluation runs every
    supervision step and scores the last, halting only saving training time. `test_halting: true` stops a row at
    its first step with sigmoid(q) > halt_threshold and keeps that step's answer (the trace records the steps
    used, and evaluate_grid reports them by difficulty);
  * the halting head reads what the readout reads ([y_s ; y_r] or y[CLS]), Linear(in, 1): one logit, since the
    continue logit is dropped; its weight starts at zero;
  * one-bit answers: the paper halts at sigmoid(q) > 1/2 and starts the head's bias at -5 (the released code),
    which suits answers that are almost never right by chance (a whole Sudoku grid). A one-bit answer is right
    half the time at chance, and a calibrated head says "more likely right than wrong" about nearly every answer,
    so every row would stop after step 1 and later steps would never be supervised; the bias at -5 also starts
    the halting BCE at 5 nats on the half of the rows that are right. Defaults here: `halt_threshold` 0.9 and
    `halt_bias_init` 0 (BCE ln 2, no halting at init); `paper_sudoku` keeps 0.5 and -5. In short CPU probes
    (graph, 1-2 hops, d = 64, <= 100 updates; not a controlled comparison: T, N_sup and clipping differed) the
    paper's pair kept the answer at chance, and with these defaults its BCE fell from 0.69 to 0.42 in 60 updates;
  * halt_loss_weight = 1 (the paper's pseudo-code adds the halting BCE to the answer loss; the released code
    weights it 0.5);
  * initial y and z: fixed (not trained) vectors of width d, broadcast over positions, drawn from N(0, 1)
    truncated at +-2 (the released code's buffers); they only enter the no-gradient recursions when T >= 2;
  * x is zero at padding positions (and the MLP mixer pads the input to `max_length` positions), so tokens under
    PAD never reach an answer and a trimmed batch gives the same answers as an untrimmed one;
  * per_task: the seed-002 task's width (d, heads, d_ff as the SwiGLU width) with the paper's n = 6, T = 3,
    N_sup = 16; dropout 0 (the paper uses none); PyTorch's default initialisation elsewhere.

The paper's smallest configuration (TRM-MLP on Sudoku-Extreme, `TRMConfig.paper_sudoku("mlp")`): d = 512, 2 layers,
SwiGLU width 1,536 (expansion 4: 4 x 512 x 2/3 rounded up to a multiple of 256), the MLP mixing 97 positions
(81 cells + 16 puzzle-embedding slots) with width 512, vocabulary 11. The paper's model there has 5,029,378
parameters (5M in its table; the public checkpoint's 5,030,402 adds the two 512-value initial states); the
attention variant 6,828,546 (7M). tests/test_trm.py derives both from the components.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..config import from_dict
from ..data.tasks.base import ReasoningBatch
from ..nn import MultiHeadAttention, SwiGLU
from .reasoning import (PonderStats, Perception, Readout, ReasoningConfig, ReasoningModel, ReasoningTrace,
                        attention_mask)
from .reasoning_ledger import trm_ledger
from .registry import register
from .trace import RoundTrace

INIT_STATE_CUT = 2.0  # initial y, z ~ N(0, 1) truncated at +-2


def swiglu_width(width: int, expansion: float = 4.0, multiple: int = 256) -> int:
    """The released code's SwiGLU hidden width: expansion x width x 2/3, rounded up to a multiple of 256."""
    return multiple * math.ceil(expansion * width * 2 / 3 / multiple)


# ============================================================================ config


@dataclass
class TRMConfig(ReasoningConfig):
    arch: str = "trm"
    dropout: float = 0.0  # the paper uses no dropout
    heads: int = 8
    layers: int = 2  # blocks of the tiny network f
    mixer: Literal["attention", "mlp"] = "attention"  # TRM-Att or TRM-MLP
    mixer_dim: int | None = None  # mlp: SwiGLU width across positions; None: swiglu_width(max_length)
    latent_steps: int = 6  # n: z-updates per latent recursion
    recursions: int = 3  # T: latent recursions per supervision step (T - 1 without gradient)
    supervision_steps: int = 16  # N_sup: the training budget and the default test-time depth
    halt_loss_weight: float = 1.0  # weight of the halting BCE beside the answer BCE
    halt_threshold: float = 0.9  # a row halts once sigmoid(q) > this (the paper: 0.5, see the docstring)
    halt_bias_init: float = 0.0  # halting head bias at init (its weight starts at zero; the paper's code: -5)
    test_halting: bool = False  # eval: stop a row at its first step with sigmoid(q) > halt_threshold

    def trained_steps(self) -> tuple[int, int]:
        return self.supervision_steps, self.supervision_steps  # every batch is supervised N_sup times

    def validate(self) -> None:
        super().validate()
        if self.mixer not in ("attention", "mlp"):
            raise ValueError(f"model.mixer must be 'attention' or 'mlp', got {self.mixer!r}")
        if self.mixer == "mlp" and self.input_kind == "graph":
            raise ValueError("model.mixer: the MLP mixer cannot read a graph's edges (they live in the attention "
                             "mask); use mixer 'attention' for input_kind 'graph'")
        if self.mixer == "attention":
            self.check_heads(self.heads)
        for name in ("layers", "latent_steps", "recursions", "supervision_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.mixer_dim is not None and self.mixer_dim < 1:
            raise ValueError(f"model.mixer_dim must be >= 1 or null, got {self.mixer_dim}")
        if not 0 < self.halt_threshold < 1:
            raise ValueError(f"model.halt_threshold must be in (0, 1), got {self.halt_threshold}")
        if self.halt_loss_weight < 0:
            raise ValueError(f"model.halt_loss_weight must be >= 0, got {self.halt_loss_weight}")

    def mixer_width(self) -> int:
        return self.mixer_dim or swiglu_width(self.max_length)

    @classmethod
    def paper_sudoku(cls, mixer: str = "mlp", **overrides) -> TRMConfig:
        """The paper's Sudoku-Extreme shape (module docstring): TRM-MLP (5M) or TRM-Att (7M)."""
        shape = dict(input_kind="tokens", vocab_size=11, max_length=81 + 16, dim=512, heads=8,
                     ffn_dim=swiglu_width(512), mixer=mixer, mixer_dim=swiglu_width(81 + 16),
                     halt_threshold=0.5, halt_bias_init=-5.0)
        return from_dict(cls, {**shape, **overrides}, "model")


# ============================================================================ the tiny network


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a gain (the paper's blocks have no norm parameters)."""
    return F.rms_norm(x, (x.shape[-1],), eps=eps)


class AttentionMixer(nn.Module):
    """Bias-free bidirectional self-attention under the task's mask (adjacency or padding); RoPE on token inputs."""

    def __init__(self, config: TRMConfig):
        super().__init__()
        self.attn = MultiHeadAttention(config.dim, config.heads, bias=False, rope=config.input_kind == "tokens")

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.attn(h, causal=False, mask=mask)


class TokenMixer(nn.Module):
    """TRM-MLP's mixing: SwiGLU over the position axis, the same for every channel; input (n, max_length, d)."""

    def __init__(self, config: TRMConfig):
        super().__init__()
        self.mlp = SwiGLU(config.max_length, config.mixer_width())

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.mlp(h.transpose(1, 2)).transpose(1, 2)  # (n, d, L) mixes positions, back to (n, L, d)


class RecursiveBlock(nn.Module):
    """Post-norm: h <- RMSNorm(h + mix(h)); h <- RMSNorm(h + SwiGLU(h))."""

    def __init__(self, config: TRMConfig):
        super().__init__()
        self.mix = AttentionMixer(config) if config.mixer == "attention" else TokenMixer(config)
        self.mlp = SwiGLU(config.dim, config.ffn_dim)
        self.eps = config.norm_eps

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        h = rms_norm(h + self.mix(h, mask), self.eps)
        return rms_norm(h + self.mlp(h), self.eps)


class TinyNetwork(nn.Module):
    """f: `layers` recursive blocks; the only weights the recursion uses."""

    def __init__(self, config: TRMConfig):
        super().__init__()
        self.blocks = nn.ModuleList(RecursiveBlock(config) for _ in range(config.layers))

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for block in self.blocks:
            h = block(h, mask)
        return h


# ============================================================================ trace


@dataclass
class TRMTrace(ReasoningTrace):
    """ReasoningTrace plus the record deep supervision trains on (each (steps run, n); fewer rows than the budget
    when every row halted early)."""

    answer_logits: torch.Tensor | None = None  # each supervision step's answer logit (with grad in training)
    halt_logits: torch.Tensor | None = None  # the halting head's q at each step
    active: torch.Tensor | None = None  # bool: the row was still running at that step (its loss terms count)
    budget: int = 0  # supervision steps the call was given


@dataclass
class SupervisionStep:
    """What one supervision step produced; `output` is the answer so far (frozen for rows that halted)."""

    depth: int
    y: torch.Tensor  # (n, L, d)
    logits: torch.Tensor  # (n,) this step's answer logit
    q: torch.Tensor  # (n,) halting logit
    active: torch.Tensor  # (n,) bool, running at this step
    output: torch.Tensor  # (n,)


def answer_summary(h: torch.Tensor, batch: ReasoningBatch, pairwise: bool) -> torch.Tensor:
    """What the readout reads: [h_source ; h_target] (graph, (n, 2d)) or h[CLS] (tokens, (n, d))."""
    if not pairwise:
        return h[:, 0]
    rows = torch.arange(h.shape[0], device=h.device)
    source, target = batch.extras["query"].unbind(dim=1)
    return torch.cat((h[rows, source], h[rows, target]), dim=-1)


# ============================================================================ the model


@register("trm", TRMConfig, family="reasoning",
          test_overrides=dict(dim=32, heads=4, ffn_dim=64, latent_steps=2, recursions=2, supervision_steps=3))
class TinyRecursiveModel(ReasoningModel):
    """Perception -> x; deep supervision of the tiny network's latent and answer recursion; readout of y."""

    depth_mode = "per_step"  # supervision step s does not depend on how many follow it
    compiled_methods = ("latent_recursion",)
    intermediate_supervision = False  # deep supervision is the model's own: task.alpha does not apply
    ledger = trm_ledger  # FLOPs by part and supervision step (looped/models/reasoning_ledger.py)

    def __init__(self, config: TRMConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.perception = Perception(config)
        self.network = TinyNetwork(config)
        self.readout = Readout(config)
        width = 2 * config.dim if config.input_kind == "graph" else config.dim
        self.halting = nn.Linear(width, 1)  # Q head: one logit, "halt"
        nn.init.zeros_(self.halting.weight)
        nn.init.constant_(self.halting.bias, config.halt_bias_init)
        init = torch.empty(2, config.dim)
        nn.init.trunc_normal_(init, std=1.0, a=-INIT_STATE_CUT, b=INIT_STATE_CUT)
        self.register_buffer("y_init", init[0].clone())  # fixed, not trained
        self.register_buffer("z_init", init[1].clone())

    # --- the recursion -------------------------------------------------------------------------------
    def latent_recursion(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                         mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """n latent updates z <- f(x + y + z), then the answer update y <- f(y + z); all (n, L, d)."""
        for _ in range(self.config.latent_steps):
            z = self.network(x + y + z, mask)
        return self.network(y + z, mask), z

    def deep_recursion(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                       mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """T - 1 latent recursions without gradient, then one with: the gradient sees only the last."""
        with torch.no_grad():
            for _ in range(self.config.recursions - 1):
                y, z = self.latent_recursion(x, y, z, mask)
        return self.latent_recursion(x, y, z, mask)

    def perceive(self, batch: ReasoningBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (n, L, d), zero at padding (MLP mixer: padded to max_length), and the attention mask (or None)."""
        self.check_batch(batch)
        x = self.perception(batch) * (~batch.padding).unsqueeze(-1).to(self.y_init.dtype)
        if self.config.mixer == "mlp":
            return F.pad(x, (0, 0, 0, self.config.max_length - x.shape[1])), None
        return x, attention_mask(self.config.input_kind, batch)

    def supervise(self, batch: ReasoningBatch, budget: int, halting: bool):
        """Run up to `budget` supervision steps, yielding a SupervisionStep after each; with `halting`, a row stops
        after its first step with sigmoid(q) > halt_threshold; the loop ends once every row has stopped."""
        x, mask = self.perceive(batch)
        y, z = self.y_init.expand_as(x), self.z_init.expand_as(x)
        pairwise = self.config.input_kind == "graph"
        running = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        threshold = self.config.halt_threshold
        halt_logit = math.log(threshold / (1 - threshold))  # sigmoid(q) > threshold <=> q > halt_logit
        output = None
        for s in range(budget):
            # the carry enters detached: deep supervision never back-propagates into an earlier step
            y, z = self.deep_recursion(x, y.detach(), z.detach(), mask)
            logits = self.readout(y, batch)  # (n,)
            q = self.halting(answer_summary(y, batch, pairwise)).squeeze(-1)  # (n,)
            output = logits if output is None else torch.where(running, logits, output)
            yield SupervisionStep(s + 1, y, logits, q, running, output)
            if halting:
                running = running & (q <= halt_logit)
                if not bool(running.any()):  # a host sync, once per supervision step
                    return

    # --- protocol ----------------------------------------------------------------------------------------
    def forward(self, batch: ReasoningBatch, steps: int | None = None, *, return_all: bool = False,
                return_trace: bool = False):
        budget = self.check_steps(steps)
        halting = self.training or self.config.test_halting
        done = [(r.logits, r.q, r.active, r.output) for r in self.supervise(batch, budget, halting)]
        logits, q, active, outputs = (list(column) for column in zip(*done))
        outputs += [outputs[-1]] * (budget - len(outputs))  # every row halted: later budgets answer the same
        trace = TRMTrace(answer_logits=torch.stack(logits), halt_logits=torch.stack(q), active=torch.stack(active),
                         budget=budget)
        if halting:  # steps used per row, in ACT's per-position record (evaluate_grid reports it by difficulty)
            used = trace.active.sum(0).to(trace.answer_logits.dtype)[:, None].expand(batch.padding.shape)
            trace.ponder = PonderStats(used, torch.zeros_like(used), torch.ones_like(used), ~batch.padding)
        return self.output(torch.stack(outputs) if return_all else outputs[-1], trace, return_trace)

    def trace(self, batch: ReasoningBatch, steps: int | None = None):
        """Every supervision step (models/trace.py): the answer state y, the answer so far (= forward at that
        budget), and the halting probability sigmoid(q) of the row at every position."""
        budget = self.check_steps(steps)
        return self.traced_steps(batch, budget)

    def traced_steps(self, batch: ReasoningBatch, budget: int):
        halting = self.training or self.config.test_halting
        for record in self.supervise(batch, budget, halting):
            p = torch.sigmoid(record.q)[:, None].expand(batch.padding.shape)
            yield RoundTrace(record.depth, record.y, record.output, {"halting probability": p})

    def check_steps(self, steps: int | None) -> int:
        steps = self.config.supervision_steps if steps is None else operator.index(steps)
        if steps < 1:
            raise ValueError(f"steps (supervision steps) must be >= 1, got {steps}")
        return steps

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, alpha: float = 0.0,
             trace: ReasoningTrace | None = None) -> torch.Tensor:
        """Deep supervision (module docstring): mean over the budget's supervision steps of the rows' answer BCE
        plus halt_loss_weight x the halting BCE against "the answer is correct", halted rows left out. `alpha`
        does not apply (every step is supervised already; the reasoning trainer refuses task.alpha > 0)."""
        if not isinstance(trace, TRMTrace) or trace.answer_logits is None:
            raise ValueError("trm.loss needs the trace of its forward call: model(batch, steps, return_trace=True)")
        answers, halts = trace.answer_logits, trace.halt_logits  # (steps run, n)
        truth = labels.to(answers.dtype).expand_as(answers)
        answer_terms = F.binary_cross_entropy_with_logits(answers, truth, reduction="none")
        correct = ((answers.detach() > 0) == (truth > 0.5)).to(answers.dtype)  # the halting target, no gradient
        halt_terms = F.binary_cross_entropy_with_logits(halts, correct, reduction="none")
        terms = (answer_terms + self.config.halt_loss_weight * halt_terms) * trace.active.to(answers.dtype)
        return terms.sum() / (trace.budget * answers.shape[1])


__all__ = ["TRMConfig", "TRMTrace", "TinyNetwork", "TinyRecursiveModel", "swiglu_width"]
