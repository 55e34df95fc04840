"""`looped depth` and `looped lens`: a run's score at every test-time depth, and what each round contributes.

    looped depth RUN [--file F ...] [--max-factor 4] [--exit-threshold 0.01 ...] [--out depth.json]
    looped lens RUN [--file F ...] [--depth R] [--out lens.json]

Text runs are scored on their own held-out stream (or each --file, whole, as `looped eval --file` does);
reasoning runs on their task's test rows. Both write JSON (--out) and a plot beside it (.png); the library
functions are looped/eval/depth.py and looped/eval/lens.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..io import atomic_write_text

NO_DEPTH_KNOB = {"sequence": "its depth is fixed by construction (`looped lengths RUN` sweeps the test length "
                             "instead)"}


def load_run(run: str, which: str | None, command: str):
    """(model in eval mode, RunConfig, checkpoint folder) of a text or reasoning run; other kinds refused."""
    from ..train import load_model
    from ..train import reasoning as _registers_reasoning  # noqa: F401  (task kind "reasoning" for the config)
    from ..train.checkpoint import resolve_checkpoint

    folder = resolve_checkpoint(run, which)
    model, config = load_model(folder)
    kind = config.task.kind
    if kind not in ("lm", "reasoning"):
        reason = NO_DEPTH_KNOB.get(kind, "it is neither a text nor a reasoning run")
        raise ValueError(f"{run}: `looped {command}` has no depth to vary for a {config.model.arch} run "
                         f"(task.kind {kind}): {reason}")
    return model, config, folder


def reasoning_test(config, args) -> tuple:
    """(test rows of the run's task, a label naming them); --file and early exit do not apply to a core."""
    from ..train import reasoning as reasoning_task

    if args.file:
        raise ValueError("--file: a reasoning run is scored on its task's test rows, not on text files")
    if getattr(args, "exit_threshold", None):
        raise ValueError("--exit-threshold: early exit is a rule of the looped text rows; a reasoning core "
                         "is swept over its step budget only")
    _, train, val = reasoning_task.training_data(config.task)
    test = reasoning_task.test_rows(config.task, train, val)
    return test, {"task": config.task.name, "test_rows": "the run's test set (disjoint from training and validation)"}


def write_outputs(record: dict, out: str, plot) -> tuple[Path, Path]:
    """The JSON at `out` and the plot beside it (same name, .png), both written atomically."""
    path = Path(out)
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    figure = path.with_suffix(".png")
    plot(record, figure)
    return path, figure


# --- depth ------------------------------------------------------------------------------------------------
def cmd_depth(args) -> int:
    from ..eval.depth import (check_sweep_options, lm_depth_sweep, plot_depth_sweep, reasoning_depth_sweep,
                              trained_rounds)
    from ..train import reasoning as reasoning_task
    from .run import lm_sources

    check_sweep_options(args.max_factor, args.exit_threshold or ())
    model, config, folder = load_run(args.run, args.which, "depth")
    if config.task.kind == "reasoning":
        test, label = reasoning_test(config, args)
        record = reasoning_depth_sweep(model, test, trained_steps=reasoning_task.trained_steps_range(config),
                                       max_factor=args.max_factor, progress=not args.no_progress, label=label)
    else:
        trained_rounds(model)  # a fixed-depth model stops here, before any data is read
        record = lm_depth_sweep(model, lm_sources(config, args.file), max_factor=args.max_factor,
                                thresholds=args.exit_threshold or (), batch_size=args.batch_size,
                                max_batches=args.eval_batches, progress=not args.no_progress)
    record["checkpoint"] = str(folder)
    path, figure = write_outputs(record, args.out, plot_depth_sweep)
    print("\n".join(depth_lines(record)))
    print(f"wrote {path} and {figure}")
    return 0


def depth_lines(record: dict) -> list[str]:
    """The sweep as a table per source, then its best depth, slope past the trained depth and first worse depth."""
    from ..eval.depth import source_name

    score, trained, name = record["score"], record["trained_depth"], record["depth_name"]
    unit = score.replace("bits_per_", "bits/") if score != "accuracy" else "accuracy"
    lines = [f"{record['arch']} ({record['parameters']:,} parameters), trained at {trained} {name}"]
    if record.get("capped_at"):
        lines.append(f"(swept to {record['capped_at']} {name}: the largest budget the model accepts)")
    for entry in record["sources"]:
        lines.append(f"\n{source_name(entry)}")
        header = f"{name:>7}  {unit:>10}"
        for curve in entry["early_exit"]:
            header += f"  {'exit<' + format(curve['threshold'], 'g'):>12} {'rounds':>6}"
        if record["kind"] == "reasoning" and entry["fixed"]:
            header += "".join(f"  {'d=' + d:>6}" for d in entry["fixed"][0]["by_difficulty"])
        lines.append(header)
        for i, point in enumerate(entry["fixed"]):
            mark = "*" if point["depth"] == trained else " "
            row = f"{point['depth']:>6}{mark}  {point[score]:>10.4f}"
            for curve in entry["early_exit"]:
                exit_point = curve["points"][i]
                row += f"  {exit_point[score]:>12.4f} {exit_point['mean_rounds_used']:>6.2f}"
            if record["kind"] == "reasoning":
                row += "".join(f"  {value:>6.3f}" for value in point["by_difficulty"].values())
            lines.append(row)
        lines.extend(summary_lines(entry["summary"], unit, name, trained))
    return lines


def summary_lines(summary: dict, unit: str, name: str, trained: int) -> list[str]:
    at_trained = summary["score_at_trained_depth"]
    lines = [f"best depth: {summary['best_depth']} {name} ({unit} {summary['best_score']:.4f}; at the trained "
             f"depth {trained} (*): {at_trained:.4f})" if at_trained is not None else
             f"best depth: {summary['best_depth']} {name} ({unit} {summary['best_score']:.4f})"]
    if summary["slope_past_trained"] is None:
        lines.append(f"slope past the trained depth: - (fewer than two depths past {trained})")
    else:
        depths = summary["slope_depths"]
        lines.append(f"slope past the trained depth: {summary['slope_past_trained']:+.4f} {unit} per extra "
                     f"{name.rstrip('s')} (least squares over depths {depths[0]}-{depths[-1]})")
    worse = summary["first_worse_than_depth_1"]
    lines.append("first depth scoring worse than depth 1: " + ("none" if worse is None else str(worse)))
    return lines


# --- lens -------------------------------------------------------------------------------------------------
def cmd_lens(args) -> int:
    from ..eval.lens import lm_lens, plot_lens, reasoning_lens
    from ..train import reasoning as reasoning_task
    from .run import lm_sources

    if args.depth is not None and args.depth < 1:
        raise ValueError(f"--depth must be >= 1, got {args.depth}")
    model, config, folder = load_run(args.run, args.which, "lens")
    if config.task.kind == "reasoning":
        test, label = reasoning_test(config, args)
        steps = args.depth or reasoning_task.trained_steps_range(config)[1]
        record = reasoning_lens(model, test, steps=steps, label=label)
    else:
        if args.depth is not None:
            model.resolve_rounds(args.depth)  # a fixed-depth model refuses --depth in one line, before any work
        record = lm_lens(model, lm_sources(config, args.file), rounds=args.depth, batch_size=args.batch_size,
                         max_batches=args.eval_batches, progress=not args.no_progress)
    record["checkpoint"] = str(folder)
    path, figure = write_outputs(record, args.out, plot_lens)
    print("\n".join(lens_lines(record)))
    print(f"wrote {path} and {figure}")
    return 0


def lens_lines(record: dict) -> list[str]:
    """Per round: the readout's score, the state's movement and the model's statistics (first source)."""
    entry = record["sources"][0]
    score = "accuracy" if record["kind"] == "reasoning" else f"bits_per_{entry['unit']}"
    names = sorted({name for row in entry["rounds"] for name in row["stats"]})
    lines = [f"{record['arch']} ({record['parameters']:,} parameters), {record['depth']} {record['depth_name']}s",
             f"{record['depth_name']:>6}  {score.replace('_per_', '/'):>10}  {'movement':>8}"
             + "".join(f"  {name:>20}" for name in names)]
    for row in entry["rounds"]:
        moved = "-" if row["movement"] is None else f"{row['movement']:.4f}"
        stats = "".join(f"  {row['stats'].get(name, float('nan')):>20.4f}" for name in names)
        lines.append(f"{row['depth']:>6}  {row[score]:>10.4f}  {moved:>8}{stats}")
    return lines


# --- parser -----------------------------------------------------------------------------------------------
def add_common(p) -> None:
    p.add_argument("run", help="run folder or checkpoint folder")
    p.add_argument("--which", choices=["last", "best"], help="checkpoint of a run folder (default: train.select)")
    p.add_argument("--file", nargs="+", metavar="PATH",
                   help="text runs: score the whole of each file instead of the run's held-out stream")
    p.add_argument("--batch-size", type=int, default=16, help="text runs: blocks per forward (default 16)")
    p.add_argument("--eval-batches", type=int, default=0, help="text runs: batches per source, 0 = all")
    p.add_argument("--no-progress", action="store_true")


def add_commands(sub) -> None:
    """Add `depth` and `lens` to the `looped` sub-commands."""
    p = sub.add_parser("depth", help="score at every test-time depth 1 .. max-factor x trained (JSON + plot)")
    add_common(p)
    p.add_argument("--max-factor", type=float, default=4.0,
                   help="sweep depths 1 .. this x the trained depth (default 4)")
    p.add_argument("--exit-threshold", type=float, nargs="+", metavar="T",
                   help="looped text rows: also score with the early-exit rule at each threshold (TV distance)")
    p.add_argument("--out", default="depth.json", help="JSON path; the plot goes beside it (.png)")
    p.set_defaults(func=cmd_depth)

    p = sub.add_parser("lens", help="per-round readout score, state movement and gate / halting statistics")
    add_common(p)
    p.add_argument("--depth", type=int, help="rounds / steps to trace (default: the trained depth)")
    p.add_argument("--out", default="lens.json", help="JSON path; the plot goes beside it (.png)")
    p.set_defaults(func=cmd_lens)
