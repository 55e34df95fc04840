"""`looped compare`: does looping pay on my data? (looped.experiments.compare)

    looped compare                                               # the embedded KJV, 4 rows x 3 seeds, < 30 minutes
    looped compare --data notes.txt                              # one file: its last 5 % is held out
    looped compare --data train.txt --heldout valid.txt --archs transformer workspace --seeds 2 --minutes 10
    looped compare --data DATA.yaml                              # a config's data section
    looped compare ... --status                                  # which runs are done; trains nothing

The data is checked first (looped.data.checks): each mismatch between the training and held-out text is a
`looped: warning:` line before anything trains, and `--strict` refuses to train on them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .common import fail, stop_after_minutes


def data_section(data: list[str] | None, heldout: list[str] | None) -> dict:
    """The comparison's data section: the KJV by default, a config's data section (DATA.yaml), one file (its
    tail held out) or training files with --heldout files."""
    from ..config import read_yaml

    if heldout and not data:
        raise ValueError("--heldout: give the training text too (--data FILE ...)")
    if not data:
        return {"corpus": "kjv"}
    if len(data) == 1 and data[0].endswith((".yaml", ".yml")) and not heldout:
        loaded = read_yaml(data[0])
        section = loaded.get("data", loaded) if isinstance(loaded, dict) else None
        if not isinstance(section, dict) or not section:
            raise ValueError(f"--data {data[0]}: no data section in it")
        return section
    missing = [path for path in [*data, *(heldout or [])] if not Path(path).expanduser().is_file()]
    if missing:
        what = "a folder, not a file" if Path(missing[0]).expanduser().is_dir() else "no such file"
        raise ValueError(f"--data / --heldout: {what}: {missing[0]}")
    if heldout:
        return {"corpus": "raw", "train_paths": list(data), "heldout_paths": list(heldout)}
    if len(data) > 1:
        raise ValueError("--data: several training files need --heldout FILE ... (one file alone: its last 5 % "
                         "is held out)")
    return {"corpus": "raw", "path": data[0], "heldout_fraction": 0.05}


def check_data(section: dict, strict: bool) -> None:
    """Print each train / held-out mismatch as a warning before anything trains; --strict refuses them."""
    from ..config import from_dict
    from ..data import DataConfig, load_streams
    from .data import split_findings

    config = from_dict(DataConfig, dict(section), "data")
    streams = load_streams(config)
    if streams.unit != "byte":
        return
    findings = split_findings(config, streams)
    for finding in findings:
        print(f"looped: warning: {finding['message']}", file=sys.stderr)
    if findings and strict:
        raise ValueError(f"--strict: the data checks found {len(findings)} mismatch(es) between the training and "
                         f"held-out text ({findings[0]['message']})")
    if not findings:
        print("data checks: the training and held-out text match in line endings, byte-order mark, byte "
              "frequencies and overlap", file=sys.stderr)


def options_from(args):
    from ..experiments.compare_plan import CompareOptions, parse_count

    options = CompareOptions(archs=list(args.archs), params=parse_count(args.params), match=list(args.match),
                             seeds=args.seeds, minutes=args.minutes, steps=args.steps, context=args.context,
                             batch_size=args.batch_size, rounds=args.rounds, heldout_bytes=args.heldout_bytes,
                             data_seed=args.data_seed, data=data_section(args.data, args.heldout),
                             threads=args.threads)
    options.validate()
    return options


def cmd_compare(args) -> int:
    from ..experiments.compare import CompareStudy, run_compare
    from ..experiments.compare_plan import load_or_make_plan
    from ..experiments.compare_report import read_csv, write_report
    from ..experiments.results import study_folders
    from ..experiments.schedule import status_report

    log = lambda message: print(message, file=sys.stderr)  # noqa: E731  (stdout keeps the verdicts)
    options = options_from(args)
    out, runs = study_folders(args.out, args.runs, "compare", log)
    if args.status:
        if not (out / "plan.json").exists():
            return fail(f"{out}: no comparison there yet (no plan.json)")
        plan = load_or_make_plan(out, options, log)
        study = CompareStudy(out, runs, plan, log)
        print(status_report(study.results, study.plan_runs(), "looped compare"), end="")
        return 0
    check_data(options.data, args.strict)
    plan = load_or_make_plan(out, options, log)
    log(describe_plan(plan))
    run_compare(out, runs, plan, progress=not args.no_progress, stop_after=args.stop_after,
                finish_within=args.finish_within, log=log)
    lines = write_report(out, plan)
    failed = [r for r in read_csv(out / "results.csv") if r.get("status", "ok") != "ok"]
    print(f"table: {out / 'table.md'} (plots: curves.png, depth.png, pareto.png)")
    for line in lines:
        print(line)
    if failed:
        log(f"looped: warning: {len(failed)} run(s) failed (their rows say why): {out / 'results.csv'}")
    return 0


def describe_plan(plan: dict) -> str:
    from ..experiments.compare_plan import FLOPS_ROW, PLAIN, CompareOptions, row_steps

    options = CompareOptions(**plan["options"])
    widths = ", ".join(f"{a} {w['parameters']:,} (dim {w['dim']}, ffn {w['ffn_dim']})"
                       for a, w in plan["widths"].items())
    text = (f"compare: {len(options.rows)} rows x {options.seeds} seed(s), {plan['steps']} updates of "
            f"{options.batch_size} x {options.context} bytes per run; parameters: {widths}")
    if FLOPS_ROW in options.rows:
        text += (f"; {FLOPS_ROW}: {row_steps(plan, FLOPS_ROW)} updates ({plan['flops_target']:.3g} training FLOPs, "
                 f"those of the most expensive looped row; {PLAIN}: {plan['steps'] * plan['update_flops'][PLAIN]:.3g})")
    if plan.get("predicted_seconds"):
        total = options.seeds * sum(plan["predicted_seconds"].values())
        text += f"; predicted ~{total / 60:.0f} minutes here"
    return text


def add_commands(sub) -> None:
    from ..experiments.compare_plan import ARCHS, DEFAULT_ARCHS, DEFAULT_STEPS
    from ..experiments.results import RUNS_HELP

    p = sub.add_parser("compare", help="does looping pay on my data? rows at equal parameters and equal FLOPs, "
                                       "over seeds: a table, verdicts and plots (resumable)")
    p.add_argument("--data", nargs="+", metavar="FILE", help="training text (one file: its last 5 %% held out), or "
                   "DATA.yaml (a config's data section); default the embedded KJV")
    p.add_argument("--heldout", nargs="+", metavar="FILE", help="held-out text files (with --data FILE ...)")
    p.add_argument("--archs", nargs="+", default=list(DEFAULT_ARCHS), metavar="ARCH",
                   help=f"rows to compare, {PLAIN_HELP} (known: {', '.join(ARCHS)})")
    p.add_argument("--params", default="1M", help="parameters of every row (e.g. 1M, 250k; default 1M)")
    p.add_argument("--match", nargs="+", default=["params", "flops"], metavar="{params,flops}",
                   help="params: equal parameters and updates; flops: also a plain row given the looped rows' "
                        "training FLOPs (default both)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per row (default 3)")
    p.add_argument("--steps", type=int, help=f"updates per run (default {DEFAULT_STEPS}: the default comparison "
                                             f"then fits 30 minutes on 2 idle cores)")
    p.add_argument("--minutes", type=float, help="instead of --steps: time a few updates of each row here and size "
                                                 "the updates per run so the whole comparison takes about this long")
    p.add_argument("--context", type=int, default=128, help="bytes of context (default 128)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per update (default 16)")
    p.add_argument("--rounds", type=int, default=4, help="trained rounds of the looped rows (MoR: recursions) = "
                                                         "layers of the plain row and of RLT-1 (default 4)")
    p.add_argument("--heldout-bytes", type=int, default=16_384,
                   help="held-out bytes scored at every evaluation (the start of the held-out text; default 16384)")
    p.add_argument("--data-seed", type=int, default=0, help="the data order every run shares (default 0)")
    p.add_argument("--threads", type=int, help="torch threads per run (default torch's)")
    p.add_argument("--strict", action="store_true", help="refuse to train when the data checks find a mismatch")
    p.add_argument("--out", help="results folder (default results/compare of the repository)")
    p.add_argument("--runs", help=RUNS_HELP)
    p.add_argument("--stop-after", type=stop_after_minutes, metavar="MINUTES",
                   help="start no new run after this many minutes (0: start none)")
    p.add_argument("--finish-within", type=stop_after_minutes, metavar="MINUTES",
                   help="start only runs expected (as --status estimates them) to end within this many minutes")
    p.add_argument("--status", action="store_true", help="list the runs as done / failed / to do; trains nothing")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_compare)


PLAIN_HELP = "the plain 'transformer' among them"
