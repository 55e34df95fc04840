"""Summaries over seeds: mean and sample standard deviation (n - 1 in the denominator, seed 003 eq. 39) and the
text the result tables show for them. One definition for every study and evaluation."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation; the SD is None for a single value (it is undefined)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def format_mean_sd(values: Sequence[float], digits: int = 4) -> str:
    """'mean ± sd (n=k)', without the SD for a single value."""
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "") + f" (n={len(values)})"


__all__ = ["format_mean_sd", "mean_sd"]
