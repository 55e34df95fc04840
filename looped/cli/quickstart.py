"""`looped quickstart --task parity|s5|graph|logic`: train a family's small recipe, then print the table that
shows its point (looped.experiments.quickstart holds the recipes, tables and verdicts).

    looped quickstart --task parity        # RLT-1 and a Transformer; accuracy by string length
    looped quickstart --task graph         # the reasoning core; accuracy by hops x thinking steps

Running the same command again after Ctrl-C continues the row it stopped in (the Ctrl-C message says so),
then scores and prints the table; a finished quickstart only scores and prints again.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from ..experiments import quickstart as quick


def overrides(args) -> dict:
    """The config changes the user asked for: --set, then --seed (train.seed of every row)."""
    from ..config import merge, parse_overrides

    changes = parse_overrides(args.set)
    return changes if args.seed is None else merge(changes, {"train": {"seed": args.seed}})


def default_out(args) -> Path:
    """--out, else runs/quickstart[_TASK][_seedN]: another seed trains beside the default one, not over it."""
    if args.out:
        return Path(args.out)
    return Path("runs/quickstart" + (f"_{args.task}" if args.task else "")
                + (f"_seed{args.seed}" if args.seed is not None else ""))


def resume_command(args, out: Path) -> str:
    """The command that continues this quickstart: itself, with the same --out, --record, --seed and --set."""
    words = ["looped", "quickstart"] + (["--task", args.task] if args.task else []) + ["--out", str(out)]
    words += ["--record", args.record] if args.record else []
    words += ["--seed", str(args.seed)] if args.seed is not None else []
    for item in args.set:
        words += ["--set", item]
    return " ".join(shlex.quote(w) for w in words)


def train_rows(task: str, out: Path, overrides: dict, args) -> dict:
    """Train every row of the task's quickstart (each resumes where it stopped); {row: RunConfig}."""
    from ..config import from_dict
    from ..train import RunConfig, Trainer
    from ..train import checkpoint as ckpt
    from ..train import reasoning, sequence  # noqa: F401  (register the task kinds)

    configs = {}
    for row in quick.recipe(task).rows:
        config = from_dict(RunConfig, quick.row_config(task, row, overrides))
        folder = quick.row_folder(out, row)
        if not ckpt.run_finished(folder):
            print(f"--- {row} ({folder})")
            log = quick.MeasuredEta()
            log.trainer = Trainer(config, folder, resume="auto", progress=not args.no_progress, log=log,
                                  resume_command=resume_command(args, out))
            log.trainer.run()
        configs[row] = config
    return configs


def score_sequence(task: str, out: Path) -> tuple[str, bool, str, dict]:
    """Accuracy by length of every row: (table, shown, verdict, numbers for the JSON)."""
    from ..eval.lengths import evaluate_lengths, resolve_task
    from ..train import load_model
    from ..train.checkpoint import resolve_checkpoint

    spec = quick.recipe(task)
    records, trained = {}, None
    for row in spec.rows:
        model, config = load_model(resolve_checkpoint(str(quick.row_folder(out, row)), "last"))
        records[row] = evaluate_lengths(model, config.task.name, variant=config.task.variant,
                                        lengths=spec.columns, n=spec.test_rows, batch_size=64)
        trained = tuple(config.task.train_lengths)
        chance = resolve_task(config.task.name, config.task.variant).chance_accuracy
    table = quick.sequence_table(records, trained, chance)
    shown, verdict = quick.sequence_verdict(records, trained[1], chance)
    numbers = {row: {str(r["length"]): r["final_state_accuracy"] for r in rows} for row, rows in records.items()}
    return table, shown, verdict, {"accuracy_by_length": numbers, "trained_lengths": list(trained),
                                   "chance": chance, "rows_per_length": spec.test_rows}


def score_reasoning(task: str, out: Path) -> tuple[str, bool, str, dict]:
    """The core's accuracy grid (steps x difficulty): (table, shown, verdict, numbers for the JSON)."""
    from ..eval.reasoning import evaluate_grid
    from ..data.tasks.base import task_class
    from ..train import load_model
    from ..train import reasoning as rtask
    from ..train.checkpoint import resolve_checkpoint

    row = next(iter(quick.recipe(task).rows))
    model, config = load_model(resolve_checkpoint(str(quick.row_folder(out, row)), "last"))
    tc = config.task
    _, train, val = rtask.training_data(tc)
    test = rtask.test_rows(tc, train, val)
    grid = evaluate_grid(model, test, rtask.eval_steps(tc), batch_size=256)
    positive = float(test.labels.float().mean())
    chance = max(positive, 1.0 - positive)  # the majority label's share: what a constant answer scores
    trained = rtask.trained_difficulties(tc)
    table = quick.grid_table(grid, (min(trained), max(trained)), chance, task_class(task).difficulty_name)
    shown, verdict = quick.grid_verdict(grid, chance, max(trained))
    numbers = {str(steps): {str(d): float(a) for d, a in zip(grid.difficulties, grid.accuracy[i])}
               for i, steps in enumerate(grid.budgets)}
    return table, shown, verdict, {"accuracy_by_steps_and_difficulty": numbers, "chance": chance,
                                   "trained_difficulties": [min(trained), max(trained)],
                                   "rows_per_difficulty": [int(n) for n in grid.rows]}


MINUTES_FILE = "quickstart_minutes.json"  # RUN/<this>: the minutes every call so far spent, interrupted or not


def earlier_minutes(out: Path) -> dict:
    """Wall and CPU minutes the earlier calls of this quickstart spent ({"minutes_all_calls": ..,
    "cpu_minutes_all_calls": ..}), so a quickstart resumed after Ctrl-C, or run again to print its table, still
    records what the whole took. RUN/quickstart.json is written only by a call that got to its table, so the count lives in its own
    file, which every call adds to even when it stops early."""
    import json

    try:
        earlier = json.loads((out / MINUTES_FILE).read_text())
        return {key: float(earlier.get(key, 0.0)) for key in ("minutes_all_calls", "cpu_minutes_all_calls")}
    except (OSError, ValueError, AttributeError, TypeError):
        return {"minutes_all_calls": 0.0, "cpu_minutes_all_calls": 0.0}


def add_call_minutes(out: Path, minutes: float, cpu_minutes: float) -> dict:
    """Add this call's wall and CPU minutes to RUN/quickstart_minutes.json; the totals of every call so far."""
    import json

    from ..io import atomic_write_text

    earlier = earlier_minutes(out)
    total = {"minutes_all_calls": round(earlier["minutes_all_calls"] + minutes, 4),
             "cpu_minutes_all_calls": round(earlier["cpu_minutes_all_calls"] + cpu_minutes, 4)}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / MINUTES_FILE, json.dumps(total) + "\n")
    return total


def cmd_task_quickstart(args) -> int:
    task = args.task
    spec = quick.recipe(task)
    out = default_out(args)
    print(quick.task_eta_line(task, threads=1))
    if spec.caveat:
        print(f"note: {spec.caveat}")
    start, cpu_start, load_start = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    try:
        configs = train_rows(task, out, overrides(args), args)
        score = score_sequence if spec.family == "sequence" else score_reasoning
        table, shown, verdict, numbers = score(task, out)
    finally:  # a Ctrl-C (or any failure) still counts the minutes this call trained
        minutes = (time.perf_counter() - start) / 60
        all_calls = add_call_minutes(out, minutes, (time.process_time() - cpu_start) / 60)
    print(f"\n{table}")
    print(("shown: " if shown else "NOT shown in this run: ") + verdict)
    if spec.caveat and not shown:
        print(f"(expected at this budget: {spec.caveat})")
    print(f"{minutes:.1f} min this call, {all_calls['minutes_all_calls']:.1f} min in all calls of this quickstart "
          f"({all_calls['cpu_minutes_all_calls']:.1f} min of CPU time: about its time on idle cores)")
    # the CPU time of a one-thread run is about its wall time on an idle machine, whatever the load here
    extra = {**numbers, "minutes_this_call": round(minutes, 2),
             **{key: round(value, 2) for key, value in all_calls.items()},
             "load_average_this_call": [round(load_start, 1), round(os.getloadavg()[0], 1)],
             "overrides": list(args.set),
             "seed": {row: c.train.seed for row, c in configs.items()},
             "updates": {row: c.train.max_steps for row, c in configs.items()}}
    quick.write_result(out / "quickstart.json", task, table, shown, verdict, extra)
    if args.record:
        quick.write_result(Path(args.record), task, table, shown, verdict, extra)
    if not shown:
        print(f"looped: warning: the {task} quickstart did not show its point in this run: {verdict}", file=sys.stderr)
    return 0


__all__ = ["cmd_task_quickstart", "default_out", "overrides", "resume_command"]
