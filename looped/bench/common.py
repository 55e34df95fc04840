"""Helpers shared by the benchmarks: timing, run environment, model building, JSON output, tables.

Benchmarks report medians and the 10th/90th percentiles of many short samples rather than a mean:
on a shared machine a few samples are always hit by other jobs, and the median ignores them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ..io import write_json  # noqa: F401  (the benchmarks import it from here)
from ..models import build_model, get_arch


# --- timing ----------------------------------------------------------------------------------------


def time_once(fn: Callable[[], Any]) -> float:
    """Wall-clock seconds of one call of `fn` (CPU work is synchronous, so no device sync is needed)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation between the two nearest ranks."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(samples: Sequence[float]) -> dict:
    """{median_s, p10_s, p90_s, samples} of a list of durations in seconds."""
    samples = [float(s) for s in samples]
    return {
        "median_s": statistics.median(samples),
        "p10_s": percentile(samples, 10),
        "p90_s": percentile(samples, 90),
        "samples": samples,
    }


def measure(fn: Callable[[], Any], *, warmup: int, repeats: int) -> dict:
    """Call `fn` `warmup` times untimed (allocator, kernel selection), then time `repeats` calls."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    return summarize([time_once(fn) for _ in range(repeats)])


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run the block with `threads` intra-op threads (None: leave torch's setting), then restore it."""
    before = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


# --- environment -----------------------------------------------------------------------------------


def environment() -> dict:
    """What a reader needs to judge the numbers: software versions, threads, hardware, time of the run."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "device": "cpu",
        # Spinning OpenMP threads steal CPU from other jobs on a shared machine; record the policy used.
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
    }


def command_line() -> str | None:
    """The `looped bench ...` command running, as typed, so a record says what wrote it (None when a benchmark is
    called from Python: sys.argv is then another program's)."""
    words = sys.argv[1:]
    return shlex.join(["looped", *words]) if words[:1] == ["bench"] else None


# --- models ----------------------------------------------------------------------------------------


def build_lm(arch: str, **shape: Any) -> tuple[torch.nn.Module, dict]:
    """Build architecture `arch` with those of the `shape` fields its config has.

    Looped families do not all share the Transformer's fields (e.g. no `layers`), so fields the config
    lacks are skipped rather than rejected; the returned record says which were used and which skipped,
    so the JSON never hides a shape that did not apply.
    """
    spec = get_arch(arch)
    if spec.family != "lm":
        raise ValueError(f"architecture {arch!r} is family {spec.family!r}; the benchmarks need family 'lm'")
    known = {f.name for f in dataclasses.fields(spec.config_cls)}
    used = {k: v for k, v in shape.items() if k in known}
    config = spec.config(**used)
    model = build_model(config)
    record = {
        "arch": arch,
        "config": dataclasses.asdict(config),
        "skipped_fields": sorted(set(shape) - known),
    }
    return model, record


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --- output ----------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table; floats get 4 significant digits, large ones are shown whole."""

    def cell(value: Any) -> str:
        if not isinstance(value, float):
            return str(value)
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"

    text = [[cell(h) for h in headers]] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(line[i]) for line in text) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in text]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(headers, rows))
