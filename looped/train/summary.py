"""What `looped train` prints when it ends: the held-out score in words, beside the compressors, and a warning
when training went on past the best held-out score (over-fitting that a single final number would hide).

    lines, warning = summary_lines(run_dir, config)

The numbers come from the run's metrics.jsonl (every held-out evaluation the run made, including those before a
resume), so a resumed or already-finished run is summarised the same way as a fresh one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..io import atomic_write_text
from .run_folder import read_metrics

COMPRESSOR_CACHE = "compressors.json"  # in the run folder: xz -9e takes seconds per megabyte
# Compressors rate at most this many held-out bytes (~1.7 s per MB for the three on one core, so a 22 MB
# TinyStories validation file would add ~40 s); rates of text settle long before that.
COMPRESSOR_MAX_BYTES = 8_000_000


def heldout_curve(events: list[dict]) -> list[dict]:
    """The evaluation events (those with a val_loss), one per step (a re-evaluated step keeps its last)."""
    by_step = {e["step"]: e for e in events if isinstance(e.get("val_loss"), (int, float))}
    return [by_step[step] for step in sorted(by_step)]


ACCURACY_NAMES = {"final_state_accuracy": "final-state accuracy", "prefix_token_accuracy": "prefix-token accuracy",
                  "sequence_accuracy": "whole-sequence accuracy"}


def primary_metric(config) -> str | None:
    """The headline metric of a sequence task's run (addition: prefix-token accuracy, whose final "state" is the
    EOS and always right); None for other kinds."""
    if getattr(config.task, "kind", "lm") != "sequence":
        return None
    from .sequence import build_task

    return build_task(config.task).primary_metric


def headline(event: dict, primary: str | None = None) -> tuple[str, float]:
    """(name, value) of an evaluation's headline score: the task's `primary` metric when given and recorded, else
    bits per byte/symbol of a text run, else accuracy, else the loss."""
    if primary is not None and isinstance(event.get(f"val_{primary}"), (int, float)):
        return ACCURACY_NAMES.get(primary, primary), float(event[f"val_{primary}"])
    for key, name in (("val_bits_per_byte", "bits/byte"), ("val_bits_per_symbol", "bits/symbol"),
                      ("val_accuracy", "accuracy"), ("val_final_state_accuracy", "final-state accuracy")):
        if isinstance(event.get(key), (int, float)):
            return name, float(event[key])
    return "loss", float(event["val_loss"])


def loss_score(event: dict) -> tuple[str, float]:
    """(name, value) of the held-out loss in the run's own unit: what the best checkpoint is chosen by."""
    for key, name in (("val_bits_per_byte", "bits/byte"), ("val_bits_per_symbol", "bits/symbol")):
        if isinstance(event.get(key), (int, float)):
            return name, float(event[key])
    return "loss (nats/target)", float(event["val_loss"])


def worse_than_best(curve: list[dict]) -> tuple[dict, dict] | None:
    """(final, best) evaluations when the final held-out loss is above the lowest earlier one, else None."""
    if len(curve) < 2:
        return None
    final, best = curve[-1], min(curve[:-1], key=lambda e: e["val_loss"])
    return (final, best) if final["val_loss"] > best["val_loss"] else None


def cached_compressor_rates(run_dir: Path, data: bytes) -> dict[str, float]:
    """gzip / bzip2 / xz bits per byte of `data`, cached in the run folder under the data's SHA-256 (a resume
    or a second summary of the same held-out text costs nothing)."""
    from ..eval.compressors import compressor_bits_per_byte

    digest = hashlib.sha256(data).hexdigest()
    cache = Path(run_dir) / COMPRESSOR_CACHE
    try:
        cached = json.loads(cache.read_text())
        if cached.get("sha256") == digest:
            return cached["bits_per_byte"]
    except (OSError, ValueError, AttributeError, KeyError):
        pass  # missing or damaged: compute again
    rates = compressor_bits_per_byte(data)
    atomic_write_text(cache, json.dumps({"sha256": digest, "bytes": len(data), "bits_per_byte": rates}, indent=2))
    return rates


def heldout_bytes(config) -> bytes | None:
    """The held-out text of a byte-level text run (None for synthetic tasks and WikiText's symbol streams, where
    a compressor's bits/byte is not the model's unit)."""
    if getattr(config.task, "kind", "lm") != "lm":
        return None
    from ..data import load_streams

    streams = load_streams(config.data)
    return streams.heldout.astype("uint8").tobytes() if streams.unit == "byte" and len(streams.heldout) else None


def summary_lines(run_dir: Path, config, compressors: bool = True) -> tuple[list[str], str | None]:
    """(lines to print, a warning or None) for a run folder whose training just ended."""
    run_dir = Path(run_dir)
    curve = heldout_curve(read_metrics(run_dir / "metrics.jsonl")) if (run_dir / "metrics.jsonl").exists() else []
    if not curve:
        return [f"{run_dir}: trained; no held-out evaluation was recorded"], None
    final = curve[-1]
    name, value = headline(final, primary_metric(config))
    lines = [f"{run_dir}: held-out {name} {value:.4f} at update {final['step']:,}{part_scored(config)} "
             f"({len(curve)} evaluation{'s' if len(curve) > 1 else ''}; best {best_text(curve)})"]
    data = heldout_bytes(config) if compressors and name == "bits/byte" else None
    if data is not None:
        from ..eval.compressors import format_rates

        rated = data[:COMPRESSOR_MAX_BYTES]
        size = f"{len(data):,} bytes" if len(rated) == len(data) else f"its first {len(rated):,} of {len(data):,} bytes"
        lines.append(f"the held-out text ({size}) compressed: "
                     f"{format_rates(cached_compressor_rates(run_dir, rated))} bits/byte")
    return lines, overfit_warning(run_dir, curve, config)


def part_scored(config) -> str:
    """Which share of the held-out set the evaluations scored (train.eval_batches > 0 scores its start)."""
    tc = config.train
    return f" on the first {tc.eval_batches * tc.eval_batch_size:,} held-out sequences" if tc.eval_batches else ""


def best_text(curve: list[dict]) -> str:
    best = min(curve, key=lambda e: e["val_loss"])
    name, value = loss_score(best)
    return f"{name} {value:.4f} at update {best['step']:,}"


def overfit_warning(run_dir: Path, curve: list[dict], config) -> str | None:
    pair = worse_than_best(curve)
    if pair is None:
        return None
    (final, best), name = pair, loss_score(pair[0])[0]
    if config.train.select == "best":
        advice = f"{run_dir}/checkpoints/best keeps update {best['step']:,} (train.select: best)"
    elif getattr(config.task, "kind", "lm") == "lm":
        advice = f"score it with `looped eval {run_dir} --which best`, or set train.select: best"
    else:
        advice = f"it is {run_dir}/checkpoints/best"
    return (f"the final held-out {name} ({loss_score(final)[1]:.4f} at update {final['step']:,}) is worse than the "
            f"best earlier one ({loss_score(best)[1]:.4f} at update {best['step']:,}): the model over-fits or the "
            f"learning rate is too high; {advice}")

