"""Parameter budgets: solve a row's FFN width so its total lands on a target count.

Every architecture here has a parameter count that is affine in `ffn_dim` (each FFN contributes
(2 * dim + 1) * ffn_dim + dim per block), so two counts on the meta device (no memory) give the slope
and intercept, and the nearest integer width follows.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from .registry import build_model, get_arch

# The in-place initialisers a model's constructor runs. On the meta device they write nothing, yet each is
# dispatched through Python reference decompositions (~2 ms apiece, most of a count's time): counting skips them.
_INITIALISERS = frozenset(f"{name}_" for name in (
    "normal", "uniform", "zero", "fill", "copy", "mul", "add", "sub", "div", "clamp", "erfinv", "exponential",
    "bernoulli", "fill_diagonal", "trunc_normal", "kaiming_uniform", "kaiming_normal", "xavier_uniform",
    "xavier_normal", "constant", "ones", "zeros", "orthogonal"))


class _NoInitialisers(TorchFunctionMode):
    """Skips in-place initialisers on meta tensors (they return their tensor, unchanged in shape and dtype)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes its tensor by keyword
        if getattr(func, "__name__", None) in _INITIALISERS and isinstance(target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


_COUNTS: dict[tuple[type, str], int] = {}  # solvers and tables ask for the same (arch, fields) again and again


def count_parameters(arch: str, **fields) -> int:
    """Total parameters of `arch` with these config fields, built on the meta device (allocates nothing)."""
    spec = get_arch(arch)
    key = (spec.model_cls, repr(sorted(fields.items())))
    if key not in _COUNTS:
        config = spec.config(**fields)
        with torch.device("meta"), _NoInitialisers():
            _COUNTS[key] = sum(p.numel() for p in build_model(config).parameters())
    return _COUNTS[key]


def solve_ffn(arch: str, target: int, **fields) -> tuple[int, int]:
    """(ffn_dim, total) with total closest to `target` (ties: the smaller width)."""
    fields = {k: v for k, v in fields.items() if k != "ffn_dim"}
    base = count_parameters(arch, ffn_dim=1, **fields)
    slope = count_parameters(arch, ffn_dim=2, **fields) - base
    if slope <= 0:
        raise ValueError(f"{arch}: the parameter count does not grow with ffn_dim")
    exact = 1 + (target - base) / slope
    candidates = [f for f in (int(exact), int(exact) + 1) if f >= 1] or [1]
    best = min(candidates, key=lambda f: (abs(base + (f - 1) * slope - target), f))
    total = base + (best - 1) * slope
    if count_parameters(arch, ffn_dim=best, **fields) != total:  # the affine assumption must hold
        raise RuntimeError(f"{arch}: parameter count is not affine in ffn_dim")
    return best, total


def match_rows(reference: str, reference_fields: dict, rows: dict[str, dict], target: int, max_difference: int,
               search: int = 64) -> dict[str, tuple[int, int]]:
    """FFN widths for a budget-matched table: {row: (ffn_dim, total)}.

    The reference row's width is the one closest to `target` among those for which every other row can be
    solved to within `max_difference` parameters of it (search +-`search` widths around the unconstrained
    optimum). Raises if no width satisfies every row.
    """
    best_f, _ = solve_ffn(reference, target, **reference_fields)  # also checks that the count is affine in ffn_dim
    base = count_parameters(reference, **{**reference_fields, "ffn_dim": 1})
    slope = count_parameters(reference, **{**reference_fields, "ffn_dim": 2}) - base

    def reference_total(f: int) -> int:  # affine: no model built per candidate width
        return base + (f - 1) * slope

    candidates = sorted(range(max(1, best_f - search), best_f + search + 1),
                        key=lambda f: (abs(reference_total(f) - target), f))
    for f in candidates:
        total = reference_total(f)
        table = {reference: (f, total)}
        for row, fields in rows.items():
            if row != reference:
                table[row] = solve_ffn(row, total, **fields)
        if all(abs(t - total) <= max_difference for _, t in table.values()):
            return table
    raise ValueError(f"no {reference} width within +-{search} of the optimum lets every row match within "
                     f"{max_difference} parameters")
