"""Training depth: the schedules of the looped LM rows (issue 30 §2.2) and the depth samplers every recurrent-depth
row shares (prelude_coda, stable_loop).

A looped row (models/loop.py) trains at depth `rounds` unless its config's `depth_schedule` says otherwise. The
schedule acts in training mode, on calls that do not pass `rounds`; evaluation, decoding, tracing and every call
that passes a depth run that depth, so the equivalences the shared drivers check (incremental == forward, ...)
hold whatever the schedule. At update u, each training forward runs R rounds:

  fixed              R = rounds (the default: no draw, torch's generator untouched)
  uniform            R ~ U{min_rounds, ..., max_rounds}; max_rounds defaults to 2 rounds - min_rounds (E[R] = rounds)
  poisson_lognormal  the heavy-tailed draw of recurrent-depth pretraining (Geiping et al. 2025, arXiv 2502.05171):
                     tau ~ N(log(rounds - 1) - sigma^2 / 2, sigma^2), R = Poisson(e^tau) + 1, so E[R] = rounds.
                     (The paper's rate mean is r_bar itself, giving E[R] = r_bar + 1; prelude_coda keeps that. Here
                     the rate mean is rounds - 1, so the configured depth is the mean depth, as for uniform.)
  progressive        R = min(rounds, min_rounds + floor((rounds - min_rounds) u / ramp_updates)): the depth grows
                     linearly from min_rounds at update 0 to rounds at update ramp_updates, then stays there

With `backprop_rounds` = k, every kind back-propagates through the last min(R, k) rounds only (truncated backprop
through depth): the first R - k rounds run without gradients and their state enters the rest as a constant.

One depth per forward call, shared by the batch (as prelude_coda); an update in micro-batches draws once per
micro-batch. Draws come from torch's global (CPU) generator, which the trainer seeds with `train.seed` and saves
in every checkpoint, so a resumed run draws the same depths; the progressive depth reads the update the trainer
sets on the model before each one (`training_update`), which resume restores.

Compute: a training forward at depth R with k back-propagated rounds costs R forward rounds plus min(R, k) backward
ones at about twice a forward round (models/ledger.py). `expected` gives E[R] and E[min(R, k)] exactly: uniform
and progressive by summation, the log-normal Poisson by Gauss-Hermite quadrature over tau of the Poisson tail,
E[min(R, k)] = sum_{j=1..k} P(R >= j).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

QUADRATURE_NODES = 80  # Gauss-Hermite nodes over tau: the tail sums below are smooth in tau, so this is exact to ~1e-12


# --- samplers (torch's global generator: `train.seed` and resume reproduce them) --------------------------------
def sample_rounds(rate_mean: float, sigma: float) -> int:
    """The heavy-tailed depth of recurrent-depth pretraining: tau ~ N(log(rate_mean) - sigma^2 / 2, sigma^2),
    R = Poisson(e^tau) + 1, so E[e^tau] = rate_mean and E[R] = rate_mean + 1."""
    tau = torch.randn(()) * sigma + (math.log(rate_mean) - sigma ** 2 / 2)
    return int(torch.poisson(tau.exp())) + 1


def sample_depths(batch: int, mean: int, backprop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence depths (stable_loop): T_b = max(1, Poisson(mean)); (T_b - k_b rounds without gradients, k_b =
    min(T_b, backprop) with), two (batch,) int64 tensors."""
    total = torch.poisson(torch.full((batch,), float(mean))).clamp(min=1).long()
    with_grad = total.clamp(max=backprop)
    return total - with_grad, with_grad


def per_sequence_schedule(no_grad: torch.Tensor, with_grad: torch.Tensor) -> tuple[int, int, torch.Tensor]:
    """(rounds, first round with gradients, updates (rounds, batch) bool) running every sequence's no-grad rounds
    in one phase of max(no_grad) rounds and its gradient rounds in a second of max(with_grad) (stable_loop)."""
    n, k = int(no_grad.max()), int(with_grad.max())
    step = torch.arange(n + k)[:, None]
    updates = (step < no_grad) | ((step >= n) & (step - n < with_grad))
    return n + k, n, updates


def poisson_tail_means(rate_mean: float, sigma: float, m: int) -> list[float]:
    """[E P(N >= j) for j = 1 .. m], N ~ Poisson(e^tau), tau ~ N(log(rate_mean) - sigma^2 / 2, sigma^2): Gauss-Hermite
    quadrature over tau of 1 - sum_{i<j} e^-lam lam^i / i!."""
    x, w = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)  # weight e^(-x^2 / 2)
    lam = np.exp(math.log(rate_mean) - sigma ** 2 / 2 + sigma * x)  # (nodes,)
    w = w / math.sqrt(2 * math.pi)
    term, cdf, tails = np.exp(-lam), np.zeros_like(lam), []
    for j in range(1, m + 1):  # cdf = P(N <= j - 1), term = P(N = j - 1)
        cdf = cdf + term
        term = term * lam / j
        tails.append(float((w * (1.0 - cdf)).sum()))
    return tails


def lognormal_poisson_depth(rate_mean: float, sigma: float, k: int) -> tuple[float, float]:
    """(E[R], E[min(R, k)]) of R = sample_rounds(rate_mean, sigma): E[R] = rate_mean + 1 and
    E[min(R, k)] = sum_{j=1..k} P(R >= j) = 1 + sum_{j=1..k-1} P(N >= j), R = N + 1."""
    return rate_mean + 1.0, 1.0 + sum(poisson_tail_means(rate_mean, sigma, k - 1))


def per_sequence_depth(batch: int, mean: int, backprop: int) -> tuple[float, float]:
    """(E[rounds run], E[rounds with gradients]) of a batch scheduled by per_sequence_schedule(*sample_depths(batch,
    mean, backprop)): E[max_b (T_b - k_b)] + E[max_b k_b] and E[max_b k_b]. With T = max(1, N), N ~ Poisson(mean),
    P(T < j) = P(N <= j - 1) for j >= 2 (0 for j = 1), so E[max_b k_b] = sum_{j=1..backprop} (1 - P(T < j)^batch)
    and E[max_b (T_b - k_b)] = sum_{j>=1} (1 - P(T < backprop + j)^batch), summed until the terms vanish."""
    def below(j: int) -> float:  # P(T < j)
        return 0.0 if j <= 1 else float(torch.special.gammaincc(torch.tensor(float(j), dtype=torch.float64),
                                                                    torch.tensor(float(mean), dtype=torch.float64)))

    with_grad = sum(1.0 - below(j) ** batch for j in range(1, backprop + 1))
    without, j = 0.0, 1
    while (term := 1.0 - below(backprop + j) ** batch) > 1e-15:
        without, j = without + term, j + 1
    return without + with_grad, with_grad


# --- the schedule: the config section `model.depth_schedule` of the looped rows ----------------------------------
KINDS = ("fixed", "uniform", "poisson_lognormal", "progressive")


@dataclass
class DepthSchedule:
    # fixed: every training forward runs model.rounds; uniform, poisson_lognormal: draw each forward's depth (mean
    # model.rounds); progressive: grow it to model.rounds. Eval and decoding always run model.rounds
    kind: Literal["fixed", "uniform", "poisson_lognormal", "progressive"] = "fixed"
    min_rounds: int = 1  # uniform: the smallest depth drawn; progressive: the depth at update 0
    # uniform: the largest depth drawn (null: 2 x model.rounds - min_rounds, so the mean depth is model.rounds)
    max_rounds: int | None = None
    sigma: float = 0.5  # poisson_lognormal: standard deviation of the log-rate tau (larger: heavier tail)
    ramp_updates: int = 1000  # progressive: the update at which the depth reaches model.rounds
    backprop_rounds: int | None = None  # k: back-propagate through the last k rounds of a training forward (null: all)

    def validate(self) -> None:
        key = "model.depth_schedule"
        if self.min_rounds < 1:
            raise ValueError(f"{key}.min_rounds must be >= 1, got {self.min_rounds}")
        if self.max_rounds is not None and self.kind != "uniform":
            raise ValueError(f"{key}.max_rounds applies to kind uniform only (kind is {self.kind})")
        if self.max_rounds is not None and self.max_rounds < self.min_rounds:
            raise ValueError(f"{key}.max_rounds {self.max_rounds} is below min_rounds {self.min_rounds}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"{key}.sigma must be a finite number >= 0, got {self.sigma}")
        if self.ramp_updates < 1:
            raise ValueError(f"{key}.ramp_updates must be >= 1, got {self.ramp_updates}")
        if self.backprop_rounds is not None and self.backprop_rounds < 1:
            raise ValueError(f"{key}.backprop_rounds must be >= 1 (null: every round), got {self.backprop_rounds}")

    def check(self, rounds: int) -> None:
        """One-line errors where the schedule does not fit the model's depth `rounds`."""
        key = "model.depth_schedule"
        if self.kind == "poisson_lognormal" and rounds < 2:
            raise ValueError(f"{key}: poisson_lognormal needs model.rounds >= 2 (its mean depth is rounds = "
                             f"1 + E[Poisson]), got {rounds}")
        if self.kind in ("uniform", "progressive") and self.max_rounds is None and self.min_rounds > rounds:
            raise ValueError(f"{key}.min_rounds {self.min_rounds} is above model.rounds {rounds}")

    # --- the depth of one training forward ----------------------------------------------------------------------
    def uniform_range(self, rounds: int) -> tuple[int, int]:
        return self.min_rounds, (2 * rounds - self.min_rounds if self.max_rounds is None else self.max_rounds)

    def progressive_depth(self, rounds: int, update: int) -> int:
        return min(rounds, self.min_rounds + (rounds - self.min_rounds) * update // self.ramp_updates)

    def draw(self, rounds: int, update: int) -> tuple[int, int]:
        """(R, the first round with gradients) of one training forward at update `update` (0-based)."""
        if self.kind == "uniform":
            low, high = self.uniform_range(rounds)
            depth = int(torch.randint(low, high + 1, ()))
        elif self.kind == "poisson_lognormal":
            depth = sample_rounds(rounds - 1, self.sigma)
        elif self.kind == "progressive":
            depth = self.progressive_depth(rounds, update)
        else:
            depth = rounds
        return depth, (0 if self.backprop_rounds is None else max(0, depth - self.backprop_rounds))

    # --- what training computes, for the compute ledger ---------------------------------------------------------
    def settled_update(self) -> int:
        """The first update from which the distribution of R no longer changes."""
        return self.ramp_updates if self.kind == "progressive" else 0

    def expected(self, rounds: int, update: int | None = None) -> tuple[float, float] | None:
        """(E[R], E[min(R, k)]) of a training forward at `update` (None: once settled); None where training runs
        `rounds` rounds and back-propagates through all of them (fixed, no k)."""
        k = self.backprop_rounds
        if self.kind == "fixed" and k is None:
            return None
        if self.kind in ("fixed", "progressive"):
            depth = rounds if self.kind == "fixed" else self.progressive_depth(
                rounds, self.settled_update() if update is None else update)
            return float(depth), float(depth if k is None else min(depth, k))
        if self.kind == "uniform":
            low, high = self.uniform_range(rounds)
            depths = range(low, high + 1)
            return (low + high) / 2, sum(d if k is None else min(d, k) for d in depths) / len(depths)
        if k is None:
            return float(rounds), float(rounds)
        return lognormal_poisson_depth(rounds - 1, self.sigma, k)
