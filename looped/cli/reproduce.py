"""`looped reproduce <study>`: one sub-command per registered study, its options derived from the study's axes.

    looped reproduce clw --scale cpu [--corpora ...] [--seeds ...] [--rows ...] [--budget small|medium]
    looped reproduce drt --scale cpu [--tasks ...] [--archs ...] [--alphas ...] [--shortcuts-only]
    looped reproduce rlt --scale cpu [--tasks ...] [--seeds ...] [--rows ...]
    looped reproduce <study> ... --status | --report | --write-recipes | --stop-after MINUTES | --finish-within MINUTES
                             | --set KEY=VALUE
    looped reproduce <study> ... --retrain-owed   # finished runs owing a backfill whose folders are gone
    looped reproduce <study> ... --retrain-owed --replace-differing   # a retrain that differs becomes the row
    looped reproduce <study> ... --merge-from OTHER/results/<study>_<scale> [...]   # runs other folders finished
    looped reproduce drt --only "graph / drt / 1.0 / 43" "logic_1.5x / drt / 0.0 / 44" --finish-within 150

Every axis of a study (looped.experiments.study.Axis) is one option taking several values; every Flag one more
option. A study registered by a plugin gets its sub-command the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments import study as engine
from ..experiments.results import RUNS_HELP
from .common import stop_after_minutes


def add_study_options(parser: argparse.ArgumentParser, spec: engine.StudySpec) -> None:
    """The options every study shares, then one per axis and one per flag of `spec`."""
    parser.add_argument("--scale", choices=list(spec.scales), default=spec.scales[0])
    parser.add_argument("--out", help=f"results folder (default results/{spec.name}_<scale> of the repository)")
    parser.add_argument("--runs", help=RUNS_HELP)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--status", action="store_true",
                        help="list the planned runs as done / failed / to do and exit (trains nothing)")
    parser.add_argument("--report", action="store_true",
                        help="rewrite the tables, plots and claims.md from the committed CSVs and exit "
                             "(trains nothing)")
    parser.add_argument("--write-recipes", action="store_true",
                        help=f"write the study's recipes under configs/{spec.name}/ of the repository and exit")
    parser.add_argument("--retrain-owed", action="store_true",
                        help="train again each finished run that owes a score added later (a backfill) and whose "
                             "run folder is gone, check it reproduces its results.csv row, then score it; trains "
                             "no other run (--status counts them)")
    parser.add_argument("--replace-differing", action="store_true",
                        help="with --retrain-owed: a retrain that does not reproduce its row replaces it (the row "
                             "and every score become the retrain's, trained by today's code; both figures stay in "
                             "retrains.csv); also a run retrained earlier that differed")
    parser.add_argument("--merge-from", nargs="+", metavar="FOLDER",
                        help="take the runs other results folders of this study finished (other machines or "
                             "checkouts), one folder after another: each run's rows and files, new runs and runs "
                             "retrained there; a run finished differently in both is named and left; then rewrite "
                             "the report and exit")
    parser.add_argument("--stop-after", type=stop_after_minutes, metavar="MINUTES",
                        help="start no new run after this many minutes (the run in progress finishes; 0: start "
                             "none)")
    parser.add_argument("--finish-within", type=stop_after_minutes, metavar="MINUTES",
                        help="start only runs expected (as --status estimates them: a median, so leave a margin) to "
                             "end within this many minutes; a longer one is skipped for a shorter one later")
    parser.add_argument("--only", nargs="+", metavar="RUN",
                        help="these runs only, in this order, each as --status lists it (e.g. "
                             f"'{' / '.join(axis.name for axis in spec.axes)}'); instead of the axis options")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value of every run, e.g. --set train.max_steps=100 (repeatable)")
    for axis in spec.axes:
        known = axis.known_values("cpu")
        default = " ".join(map(str, axis.defaults("cpu")))
        text = f"{' '.join(map(str, known))} " if known and len(known) <= 24 else ""
        parser.add_argument(f"--{axis.option}", nargs="+", metavar=axis.name.upper(),
                            help=f"{text}(default: {default}){'; ' + axis.help if axis.help else ''}")
    for flag in spec.flags:
        name = f"--{flag.name.replace('_', '-')}"
        if flag.choices:
            parser.add_argument(name, choices=list(flag.choices), default=flag.default, help=flag.help)
        else:
            parser.add_argument(name, action="store_true", help=flag.help)


def add_commands(sub) -> None:
    """Add `reproduce` with one sub-command per registered study."""
    names = engine.study_names()
    p = sub.add_parser("reproduce", help="run a paper's grid of runs (resumable) and write tables and plots")
    studies = p.add_subparsers(dest="paper", required=True, metavar="{" + ",".join(names) + "}")
    for name in names:
        spec = engine.get_study(name)
        parser = studies.add_parser(name, help=spec.help, description=spec.help)
        add_study_options(parser, spec)
        parser.set_defaults(func=lambda args, spec=spec: reproduce(spec, args))


def reproduce(spec: engine.StudySpec, args: argparse.Namespace) -> int:
    """Run the study (or list its status, rewrite its report, write its recipes); print its table."""
    from ..config import parse_overrides
    from ..experiments.results import repository_root, study_folders

    if args.replace_differing and not args.retrain_owed:
        raise ValueError("--replace-differing goes with --retrain-owed (it decides what a retrain that differs "
                         "from its row does)")
    if args.write_recipes:
        root = (repository_root() or Path.cwd()) / "configs" / spec.name
        print(f"wrote {len(engine.write_recipes(spec, root))} recipes under {root}")
        return 0
    select = engine.parse_select(spec, {axis.name: getattr(args, axis.option) for axis in spec.axes}, args.scale)
    if args.only and select:
        raise ValueError("--only names whole runs: give it without "
                         + ", ".join(f"--{axis.option}" for axis in spec.axes if axis.name in select))
    only = engine.parse_runs(spec, args.only or (), args.scale)
    flags = {flag.name: getattr(args, flag.name) for flag in spec.flags}
    out, runs = study_folders(args.out, args.runs, spec.folder_name(args.scale, flags))
    if args.status:
        print(engine.status(spec, out, runs, scale=args.scale, select=select, only=only,
                            overrides=parse_overrides(args.set), **flags), end="")
        return 0
    if args.merge_from:
        from ..experiments.merge import merge_study

        for folder in args.merge_from:
            merge_study(spec, out, runs, Path(folder), scale=args.scale, **flags)
        return 0
    if args.report:
        engine.write_report(spec, engine.build(spec, out, runs, scale=args.scale, **flags), args.scale)
        print((out / "claims.md").read_text() if (out / "claims.md").exists() else (out / "table.md").read_text())
        return 0
    if args.retrain_owed:
        from ..experiments.retrain import retrain_study

        retrain_study(spec, out, runs, scale=args.scale, select=select, only=only, overrides=parse_overrides(args.set),
                      progress=not args.no_progress, stop_after=args.stop_after, finish_within=args.finish_within,
                      replace_differing=args.replace_differing, **flags)
        print((out / "table.md").read_text())
        return 0
    engine.run_study(spec, out, runs, scale=args.scale, select=select, only=only, overrides=parse_overrides(args.set),
                     progress=not args.no_progress, stop_after=args.stop_after, finish_within=args.finish_within,
                     **flags)
    print((out / "table.md").read_text())
    return 0
